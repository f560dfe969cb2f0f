"""The route fork: torch's own kernel is a candidate of every matrix product, settled like any fork.

Rules, one per test: the library route is a product's first option (and no other kernel's); where nothing
measured answers, the product runs as torch runs it; the prior ranks torch's kernel only on a card its fit measured
it on (tests/prior/test_library_prior.py), elsewhere Emmy's kernels only;
a measured library row competes with Emmy's rows and the faster wins (local and golden alike); a row measured
with another torch release does not speak for this one; `library=False` offers Emmy's kernels only.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from emmy_core.compiler import StrictEvidenceError
from emmy_core.graph.decisions import split_k
from emmy_core.graph.forks import ScheduleOption, emmy_options, schedule_fork
from emmy_core.ir.builders import Dim, layernorm, matmul
from emmy_core.knobs import view
from emmy_core.knobs.route import is_library, library_knobs, library_problem
from emmy_core.knobs.validity import fit_problem
from tests.evidence.conftest import CARD, Setup, explain_with, kernels_of, schedule_of

OLD = {"library": "torch", "library_version": "1.13.1"}


def _emmy(proj, i: int) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return dict(emmy_options(schedule_fork(kernels_of(proj[2])[0], CARD))[i].knobs)


def test_the_library_route_is_the_first_option_of_a_matrix_products_schedule_fork(proj) -> None:  # type: ignore[no-untyped-def]
    k = kernels_of(proj[2])[0]
    fork = schedule_fork(k, CARD)
    assert dict(fork.options[0].knobs) == library_knobs() and isinstance(fork.default, ScheduleOption)
    assert dict(schedule_fork(k, CARD, lazy=True).default.knobs) == library_knobs()  # lazy: the same first
    assert not any(is_library(o.knobs) for o in fork.options[1:])  # Emmy's own pool follows, unchanged
    assert len(fork.options) == len(emmy_options(fork)) + 1


def test_only_whole_matrix_products_have_a_library_route() -> None:
    norm = layernorm(64, dtype="f32")
    assert not any(is_library(o.knobs) for o in schedule_fork(norm, CARD).options)
    partial = split_k(matmul(Dim("T", 8), 24, 64, dtype="f32"), 2).pieces[0]
    assert not any(is_library(o.knobs) for o in schedule_fork(partial, CARD).options)
    assert fit_problem(view(norm), CARD, library_knobs()) == "a row kernel has no library route (only whole " \
        "matrix products have one)"


def test_where_no_measurement_answers_a_product_runs_as_torch_runs_it(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = schedule_of(explain_with(proj, tmp_path))
    assert r.tier == "first" and dict(r.choice.knobs) == library_knobs()  # type: ignore[union-attr]


def test_the_prior_never_settles_the_route_on_a_card_it_never_saw_torchs_kernel_measured_on(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    compiled = explain_with(proj, tmp_path, prior=None)
    r = schedule_of(compiled)
    assert r.tier == "first" and dict(r.choice.knobs) == library_knobs()  # type: ignore[union-attr]
    assert any(t == "prior" and "settled by measurement" in why for t, why in r.tried)
    (split,) = [x for x in compiled.record.resolutions if x.rule == "split"]  # nor splits it away from torch
    assert split.tier == "first" and split.label == "keep whole" and "only on measurement" in dict(split.tried)["prior"]


def test_a_local_row_of_emmys_kernel_faster_than_torchs_takes_emmys_kernel(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    k = kernels_of(proj[2])[0]
    db = Setup().row(k, library_knobs(), 20.0).row(k, _emmy(proj, 2), 12.0).row(k, _emmy(proj, 3), 30.0)
    r = schedule_of(explain_with(proj, tmp_path, db=db))
    assert r.tier == "local" and dict(r.choice.knobs) == _emmy(proj, 2)  # type: ignore[union-attr]
    assert r.runner_up == ScheduleOption.of(library_knobs()).label and r.margin == pytest.approx(20 / 12 - 1)


def test_a_local_row_of_torchs_kernel_faster_than_emmys_keeps_torchs_kernel(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    k = kernels_of(proj[2])[0]
    db = Setup().row(k, library_knobs(), 9.0).row(k, _emmy(proj, 2), 12.0)
    r = schedule_of(explain_with(proj, tmp_path, db=db))
    assert r.tier == "local" and dict(r.choice.knobs) == library_knobs() and r.time_us == 9.0  # type: ignore[union-attr]


def test_a_golden_of_the_library_route_answers_over_a_faster_local_row(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    k = kernels_of(proj[2])[0]
    freeze = Setup().row(k, library_knobs(), 50.0).row(k, _emmy(proj, 1), 60.0).golden(k, library_knobs())
    db = Setup().row(k, _emmy(proj, 2), 10.0)
    r = schedule_of(explain_with(proj, tmp_path, freeze, db))
    assert r.tier == "golden" and dict(r.choice.knobs) == library_knobs()  # type: ignore[union-attr]


def test_a_row_measured_with_another_torch_release_does_not_speak_for_this_one(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    k = kernels_of(proj[2])[0]
    assert "changes with its release" in str(library_problem(view(k), OLD))
    db = Setup().row(k, OLD, 1.0).row(k, _emmy(proj, 2), 12.0)
    r = schedule_of(explain_with(proj, tmp_path, db=db))
    # the old release's 1 us is not taken, and without this release's torch measured beside it, Emmy's 12 us has not
    # shown it wins: the product runs as torch runs it
    assert r.tier == "first" and dict(r.choice.knobs) == library_knobs()  # type: ignore[union-attr]
    assert "not measured beside" in dict(r.tried)["local"]


def test_emmys_kernel_measured_without_torchs_beside_it_does_not_take_a_product(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A golden or a local row of Emmy's kernel alone is no evidence that it beats torch's on this card."""
    k = kernels_of(proj[2])[0]
    freeze = Setup().row(k, _emmy(proj, 1), 5.0).golden(k, _emmy(proj, 1))
    db = Setup().row(k, _emmy(proj, 2), 4.0)
    r = schedule_of(explain_with(proj, tmp_path, freeze, db))
    assert r.tier == "first" and dict(r.choice.knobs) == library_knobs()  # type: ignore[union-attr]
    tried = dict(r.tried)
    assert "not measured beside" in tried["golden"] and "not measured beside" in tried["local"]


def test_a_golden_of_emmys_kernel_slower_than_torchs_measured_kernel_gives_torchs(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    k = kernels_of(proj[2])[0]
    freeze = Setup().row(k, library_knobs(), 7.0).row(k, _emmy(proj, 1), 9.0).golden(k, _emmy(proj, 1))
    r = schedule_of(explain_with(proj, tmp_path, freeze))
    assert r.tier == "golden" and dict(r.choice.knobs) == library_knobs() and r.time_us == 7.0  # type: ignore[union-attr]
    assert "torch's kernel measured faster" in r.evidence


def test_a_product_torch_would_run_unmeasured_is_not_split_on_its_pieces_prices(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Priced sums compare like with like: the kernel kept whole is priced at what it would run, torch's kernel,
    so without that row the split is not priced against it."""
    k = kernels_of(proj[2])[0]
    db = Setup().row(k, _emmy(proj, 2), 40.0)
    compiled = explain_with(proj, tmp_path, db=db)
    (split,) = [x for x in compiled.record.resolutions if x.rule == "split"]
    assert split.tier == "first" and split.label == "keep whole"


def test_library_off_offers_emmys_kernels_only(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    k = kernels_of(proj[2])[0]
    assert not any(is_library(o.knobs) for o in schedule_fork(k, CARD, library=False).options)
    r = schedule_of(explain_with(proj, tmp_path, library=False))
    assert r.tier == "first" and not is_library(r.choice.knobs)  # type: ignore[union-attr]
    with pytest.raises(TypeError, match="library= must be True"):
        explain_with(proj, tmp_path, library="no")


def test_strict_evidence_treats_the_route_like_any_fork(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Without a measurement, the library route is the rule's first option: strict evidence refuses it too."""
    import emmy_core

    module, example, _ = proj
    with pytest.raises(StrictEvidenceError):
        emmy_core.compile(module, example, card=CARD, freezes=tmp_path, tuning_db=tmp_path / "none.db",
                          prior=False, torch_ops="refuse", strict_evidence=True)
