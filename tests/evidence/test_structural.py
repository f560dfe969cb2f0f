"""Structural forks priced from pieces, recorded decisions, blocked options, stale recordings."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from emmy_core.compiler import compile as emmy_compile
from emmy_core.compiler import explain
from emmy_core.evidence.context import open_sources
from emmy_core.evidence.resolve import resolve
from emmy_core.graph.forks import ForkKey, ScheduleOption, StructuralOption, schedule_fork, structural_forks
from emmy_core.ir import parse, render
from tests.evidence.conftest import CARD, Setup, kernels_of, write_db, write_freeze


def _split(lowered, label: str):  # type: ignore[no-untyped-def]
    (fork,) = structural_forks(kernels_of(lowered)[0])
    return next(o.decision for o in fork.options if o.label == label)


def _first(program):  # type: ignore[no-untyped-def]
    return schedule_fork(program, CARD).options[0].knobs


def _priced(lowered, parent_us: float = 100.0) -> Setup:  # type: ignore[no-untyped-def]
    """The parent measured at 100 us; split:K=2 priced 40 + 30 = 70 us; split:K=4 priced 20 + 15 = 35 us."""
    k = kernels_of(lowered)[0]
    s2, s4 = _split(lowered, "split:K=2"), _split(lowered, "split:K=4")
    setup = Setup().row(k, _first(k), parent_us)
    for piece, us in zip((*s2.pieces, *s4.pieces), (40.0, 30.0, 20.0, 15.0), strict=True):
        setup.row(piece, _first(piece), us)
    setup.decisions.extend((s2, s4))  # their routing goes in with the rows
    return setup


def _resolutions(compiled, rule: str):  # type: ignore[no-untyped-def]
    return [r for r in compiled.record.resolutions if r.rule == rule]


def test_without_a_recording_the_cheaper_priced_sum_wins(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    module, example, lowered = proj
    write_db(tmp_path / "tune.db", _priced(lowered))
    compiled = explain(module, example, card=CARD, freezes=tmp_path, tuning_db=tmp_path / "tune.db", prior=False)
    (split,) = _resolutions(compiled, "split")
    assert split.tier == "local" and split.label == "split:K=4" and split.time_us == pytest.approx(35.0)
    assert [m.median_us for m in split.measurements] == [20.0, 15.0]
    assert split.runner_up == "keep whole" or split.runner_up == "split:K=2"
    assert split.runner_up == "split:K=2" and split.margin == pytest.approx(70 / 35 - 1)
    pieces = _split(lowered, "split:K=4").pieces
    scheds = _resolutions(compiled, "schedule")
    assert [r.kernel for r in scheds] == [p.name for p in pieces]  # the parent does not run; its pieces do
    assert all(r.tier == "local" for r in scheds)


def test_a_recorded_split_outranks_a_cheaper_priced_sum(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    module, example, lowered = proj
    setup = _priced(lowered).golden(kernels_of(lowered)[0], decision=_split(lowered, "split:K=2"))
    write_db(tmp_path / "tune.db", setup)
    compiled = explain(module, example, card=CARD, freezes=tmp_path, tuning_db=tmp_path / "tune.db", prior=False)
    (split,) = _resolutions(compiled, "split")
    assert split.tier == "local" and split.label == "split:K=2"
    assert "recorded decision split:K=2" in split.evidence and split.time_us == pytest.approx(70.0)
    assert split.runner_up == "split:K=4"  # cheaper, and not taken
    assert "outranks" in split.note


def test_a_recorded_decision_in_the_freeze_outranks_local_prices(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    module, example, lowered = proj
    k = kernels_of(lowered)[0]
    write_freeze(tmp_path / "freezes", Setup().golden(k, decision=_split(lowered, "split:K=2")))
    write_db(tmp_path / "tune.db", _priced(lowered))
    compiled = explain(module, example, card=CARD, freezes=tmp_path / "freezes", tuning_db=tmp_path / "tune.db",
                       prior=False)
    (split,) = _resolutions(compiled, "split")
    assert (split.tier, split.label, split.time_us) == ("golden", "split:K=2", None)


def test_a_split_taken_on_evidence_runs_and_equals_torch(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    module, example, lowered = proj
    write_db(tmp_path / "tune.db", _priced(lowered))
    compiled = emmy_compile(module, example, card=CARD, freezes=tmp_path, tuning_db=tmp_path / "tune.db", prior=False,
                            torch_ops="refuse")
    assert [r.label for r in _resolutions(compiled, "split")] == ["split:K=4"]
    x = torch.randn(3, 5, 1024)  # another size: resolved again (no rows there: keep whole) and built
    with torch.no_grad():
        torch.testing.assert_close(compiled(*example), module(*example), rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(compiled(x), module(x), rtol=1e-4, atol=1e-4)


def test_a_split_runs_at_other_sizes_of_its_bucket_over_the_same_scratch(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A runner made for a split's bucket (`Runner.sized`): the pieces' intermediates are scratch of the bucket's
    largest sizes, seen at each size's shape, and every piece launches at that size."""
    from emmy_core.compiler.runner import Runner
    from emmy_core.ir.sizes import size_bucket

    module, example, lowered = proj
    write_db(tmp_path / "tune.db", _priced(lowered))
    compiled = emmy_compile(module, example, card=CARD, freezes=tmp_path, tuning_db=tmp_path / "tune.db", prior=False,
                            torch_ops="refuse").one_graph
    first = {"B": 2, "S": 8}
    layout = compiled.layout(first, build=True)
    scratch = [n for n in layout.pool if n not in dict(compiled.lowered.graph.sizes) and ":" in n]
    assert scratch and layout.resizable
    base = Runner(layout, compiled._weights_on_device(), compiled.device, compiled._launcher,
                  capacity=dict(size_bucket(first)))
    with torch.no_grad():
        for s in (5, 6, 8):
            x = torch.randn(2, s, 1024)
            torch.testing.assert_close(base.sized({"B": 2, "S": s}).run([x])[0], module(x), rtol=1e-4, atol=1e-4)


def test_a_top_pick_beyond_the_cards_limits_is_blocked_and_the_next_option_answers(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    module, example, lowered = proj
    k = kernels_of(lowered)[0]
    pool = [o.knobs for o in schedule_fork(k, CARD).options]
    too_many = {**pool[1], "threads": 64}  # in the vocabulary, but the card has 2 cores
    write_db(tmp_path / "tune.db", Setup().row(k, too_many, 5.0).row(k, pool[2], 9.0))
    compiled = emmy_compile(module, example, card=CARD, freezes=tmp_path, tuning_db=tmp_path / "tune.db",
                            prior=False, torch_ops="refuse", library=False)
    (r,) = _resolutions(compiled, "schedule")
    assert r.tier == "local" and dict(r.choice.knobs) == pool[2]  # type: ignore[union-attr]
    ((option, why),) = r.blocked
    assert option == ScheduleOption.of(too_many).label and "threads=64 exceed the 2 usable cores" in why
    with torch.no_grad():
        torch.testing.assert_close(compiled(*example), module(*example), rtol=1e-4, atol=1e-4)


def test_an_option_that_fails_to_build_is_blocked_and_the_fork_resolved_again(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    _, _, lowered = proj
    k = kernels_of(lowered)[0]
    pool = [o.knobs for o in schedule_fork(k, CARD, library=False).options]
    write_freeze(tmp_path / "freezes", Setup().row(k, pool[3], 8.0).golden(k, pool[3]))
    write_db(tmp_path / "tune.db", Setup().row(k, pool[3], 8.0).row(k, pool[4], 11.0))
    sources = open_sources(CARD, "deploy", freezes=tmp_path / "freezes", tuning_db=tmp_path / "tune.db", prior=False,
                           library=False)
    fork = schedule_fork(k, CARD, library=False)
    key = ForkKey.of(k, {"T": 16}, CARD.name, "deploy")
    refused = ScheduleOption.of(pool[3]).schedule_id

    def check(f, option):  # type: ignore[no-untyped-def]
        return "does not build: error: tile too large" if option.schedule_id == refused else None

    r = resolve(fork, key, sources, check)
    sources.close()
    assert r.tier == "local" and dict(r.choice.knobs) == pool[4]  # type: ignore[union-attr]
    assert r.blocked == ((ScheduleOption.of(pool[3]).label, "golden: does not build: error: tile too large"),)
    assert dict(r.tried)["golden"] == f"its golden {refused[:12]} is blocked"


def test_a_recording_whose_kernel_no_longer_exists_is_named_in_the_record(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    module, example, lowered = proj
    k = kernels_of(lowered)[0]
    old_text = render(k).replace("mul(a[i, k], b[j, k])", "mul(b[j, k], a[i, k])")  # what an older compiler made
    old = parse(old_text)
    assert old.name == k.name and old != k
    write_freeze(tmp_path / "freezes", Setup().row(old, _first(k), 7.0).golden(old, _first(k)))
    compiled = explain(module, example, card=CARD, freezes=tmp_path / "freezes", tuning_db=tmp_path / "none.db",
                       prior=False)
    (stale,) = compiled.record.stale
    assert stale.kernel == k.name and stale.sizes == "T=16" and "no longer made" in stale.why
    assert stale.source.endswith("test-cpu-x2.json")
    (r,) = _resolutions(compiled, "schedule")
    assert r.tier == "first"  # the recording is not evidence for the kernel made now
    assert "stale recording" in compiled.explain()


def test_structural_options_keep_their_decision(proj) -> None:  # type: ignore[no-untyped-def]
    (fork,) = structural_forks(kernels_of(proj[2])[0])
    assert fork.default == StructuralOption.keep("keep whole") and fork.default.keeps
    assert [o.label for o in fork.options] == ["keep whole", "split:K=2", "split:K=4"]
