"""The prior tier: it answers where no measurement does; a missing or refused prior warns once per compile."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from emmy_core.compiler import PriorUnavailableWarning, StrictEvidenceError, explain
from emmy_core.compiler import compile as emmy_compile
from emmy_core.evidence.sources import sizes_of
from emmy_core.graph.forks import ScheduleOption, schedule_fork, structural_forks
from emmy_core.ir import kernel_id
from emmy_core.knobs.parallel import fit_rows, keep_busy
from emmy_core.prior import FEATURE_VERSION, installed_prior_path, load_installed_prior
from tests.evidence.conftest import CARD, Setup, kernels_of, write_db


def test_the_prior_answers_with_neither_a_golden_nor_a_local_row(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Among Emmy's kernels (library=False): torch's own is settled by measurement (test_library_route); among
    those that keep every thread busy at the size, with micro-kernels no taller than its rows
    (`knobs.parallel`, test_parallel_blocks)."""
    module, example, lowered = proj
    compiled = explain(module, example, card=CARD, freezes=tmp_path, tuning_db=tmp_path / "none.db", library=False)
    top = kernels_of(lowered)[0]
    (split,) = [r for r in compiled.record.resolutions if r.rule == "split"]
    assert split.tier == "prior" and split.time_us is not None and "by the prior" in split.evidence  # priced, summed
    # the kernels whose schedule forks the compile resolved: the model's, or the pieces of the split it took
    programs = {kernel_id(k): k for k in kernels_of(lowered)}
    for option in structural_forks(top)[0].options:
        if option.decision is not None:
            programs.update({kernel_id(p): p for p in option.decision.pieces})
    scheds = [r for r in compiled.record.resolutions if r.rule == "schedule" and r.applied]
    assert scheds and {r.tier for r in scheds} == {"prior"}
    prior = load_installed_prior()
    for sched in scheds:
        program = programs[sched.key.kernel_id]
        options = schedule_fork(program, CARD, library=False).options
        sizes = dict(sizes_of(sched.key))  # the options ranked: those that keep every thread busy there
        options = tuple(options[i] for i in keep_busy(program, sizes, [o.knobs for o in options]))
        options = tuple(options[i] for i in fit_rows(program, sizes, [o.knobs for o in options]))
        scores = prior.score(program, sched.key.sizes, CARD, "deploy", [dict(o.knobs) for o in options])
        best = max(range(len(options)), key=lambda i: (scores[i], -i))  # ties: the first emitted
        assert sched.choice == options[best] and sched.score == pytest.approx(float(scores[best]))
        assert sched.evidence.startswith("prior score") and sched.runner_up is not None and sched.margin >= 0  # type: ignore[operator]
        assert sched.source == str(installed_prior_path())
        assert [t for t, _ in sched.tried] == ["golden", "local"]


def test_where_nothing_measured_prices_a_piece_the_prior_does(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The kernel itself is unmeasured (the local tier cannot answer); the prior prices it, measured pieces count."""
    module, example, lowered = proj
    (fork,) = structural_forks(kernels_of(lowered)[0])
    k2 = next(o.decision for o in fork.options if o.label == "split:K=2")
    setup = Setup()
    for piece in k2.pieces:
        setup.row(piece, schedule_fork(piece, CARD).options[0].knobs, 0.5)
    setup.decisions.append(k2)
    write_db(tmp_path / "tune.db", setup)
    compiled = explain(module, example, card=CARD, freezes=tmp_path, tuning_db=tmp_path / "tune.db", library=False)
    (split,) = [r for r in compiled.record.resolutions if r.rule == "split"]
    assert dict(split.tried)["local"] == "the kernel itself is not measured here"
    assert split.tier == "prior"
    if split.label == "split:K=2":  # its two pieces measured at 0.5 us each: priced from the rows
        assert "0 kernel(s) by the prior, 2 measured" in split.evidence and split.time_us == pytest.approx(1.0)


def test_a_refused_prior_gives_exactly_one_warning_and_the_record_shows_the_fall_through(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    module, example, _ = proj
    doc = json.loads(installed_prior_path().read_text())
    doc["feature_version"] = FEATURE_VERSION + 1
    stale = tmp_path / "old-prior.json"
    stale.write_text(json.dumps(doc))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = emmy_compile(module, example, card=CARD, freezes=tmp_path, tuning_db=tmp_path / "none.db",
                                prior=stale, torch_ops="refuse")
        compiled(*example)
        compiled.resolve({"B": 5, "S": 3})  # more sizes, more forks: still the one warning
    mine = [w for w in caught if issubclass(w.category, PriorUnavailableWarning)]
    assert len(mine) == 1
    text = str(mine[0].message)
    assert "old-prior.json" in text and f"feature version {FEATURE_VERSION + 1}" in text
    assert f"feature version {FEATURE_VERSION} " in text
    for r in compiled.record.resolutions:
        assert r.tier == "first" and "refused" in dict(r.tried)["prior"]
    assert any("refused" in n for n in compiled.record.notes)


def test_strict_evidence_fails_when_the_prior_answers(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    module, example, _ = proj
    with pytest.raises(StrictEvidenceError) as info:
        emmy_compile(module, example, card=CARD, freezes=tmp_path, tuning_db=tmp_path / "none.db",
                     strict_evidence=True, torch_ops="refuse", library=False)
    settled = explain(module, example, card=CARD, freezes=tmp_path, tuning_db=tmp_path / "none.db",
                      library=False).record
    fell = [r for r in settled.resolutions if r.applied and not r.measured]
    assert {r.tier for r in info.value.forks} == {"prior"} and len(info.value.forks) == len(fell) >= 2


def test_a_measured_row_outranks_the_prior(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    module, example, lowered = proj
    k = kernels_of(lowered)[0]
    knobs = schedule_fork(k, CARD).options[-1].knobs
    write_db(tmp_path / "tune.db", Setup().row(k, knobs, 3.0))
    compiled = explain(module, example, card=CARD, freezes=tmp_path, tuning_db=tmp_path / "tune.db", library=False)
    (sched,) = [r for r in compiled.record.resolutions if r.rule == "schedule"]
    assert sched.tier == "local" and sched.choice == ScheduleOption.of(knobs)
