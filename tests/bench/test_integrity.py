"""Integrity checks flag a result that must not be trusted; a flagged row is never recorded."""

from __future__ import annotations

import dataclasses

from emmy_core.bench.harness import BenchConfig, Unit, bench
from emmy_core.bench.integrity import Stats, summarize, timing_flags
from emmy_core.exchange.recorders import StoreRecorder
from emmy_core.knobs.vocab import schedule_id
from emmy_core.store import MemoryStore
from tests.bench import planted
from tests.bench.conftest import tiny_kernel
from tests.bench.probes import quiet


def _outcome(report, plant):  # type: ignore[no-untyped-def]
    return next(o for o in report.outcomes if o.knobs == {"unroll": plant})


def _recorded(store, plant) -> bool:  # type: ignore[no-untyped-def]
    return any(m.schedule_id == schedule_id({"unroll": plant}) for m in store.measurements())


def test_a_wrong_result_is_flagged_and_not_recorded(planted_run) -> None:
    report, store = planted_run
    out = _outcome(report, planted.WRONG)
    assert out.status == "flagged" and out.flags == ("wrong_result",)
    assert "differ from the reference" in out.message
    assert not _recorded(store, planted.WRONG)
    assert report.flag_reasons["wrong_result"] == 2  # the wrong one and the unwritten one


def test_an_unwritten_output_element_is_caught_by_the_nan_poison(planted_run) -> None:
    report, store = planted_run
    out = _outcome(report, planted.UNWRITTEN)
    assert out.status == "flagged" and out.flags == ("wrong_result",)
    assert "1 left unwritten" in out.message
    assert not _recorded(store, planted.UNWRITTEN)


def test_a_nondeterministic_output_is_flagged_and_not_recorded(planted_run) -> None:
    report, store = planted_run
    out = _outcome(report, planted.NONDETERMINISTIC)
    assert out.status == "flagged" and out.flags == ("nondeterministic",)
    assert not _recorded(store, planted.NONDETERMINISTIC)


def test_runs_may_differ_only_where_the_backend_declares_the_order_free(planted_run) -> None:
    report, store = planted_run
    out = _outcome(report, planted.DECLARED_FREE)
    assert out.status == "ok"  # checked against the reference after timing instead of bit for bit
    assert _recorded(store, planted.DECLARED_FREE)


def test_a_time_below_the_cards_physical_floor_is_flagged_and_not_recorded(cpu_card) -> None:
    # a card that could move a byte per hour: every honest run is "faster than physics allows"
    slow = dataclasses.replace(cpu_card, freq_mhz=1e-12, cores=1)
    store = MemoryStore()
    report = bench([(Unit(tiny_kernel(), {"B": 4}), [{"unroll": planted.CORRECT}])], slow, planted.SPEC,
                   StoreRecorder(store), BenchConfig(setting="rank", timeout_s=10, spread_limit=50.0), probe=quiet())
    [out] = report.outcomes
    assert out.status == "flagged" and out.flags == ("below_floor",)
    assert "below the card's floor" in out.message
    assert store.measurements() == []


def test_a_spread_of_repeats_too_wide_is_flagged() -> None:
    """Pure check on the samples; the harness applies it exactly as it applies the floor (tested end to end)."""
    steady = summarize([10.0, 10.1, 9.9, 10.0, 10.05])
    noisy = summarize([10.0, 30.0, 5.0, 11.0, 40.0])
    assert timing_flags(steady, floor_us=0.0, spread_limit=0.5) == []
    assert noisy.spread > 0.5
    assert timing_flags(noisy, floor_us=0.0, spread_limit=0.5) == ["spread"]
    assert timing_flags(Stats(1.0, 1.0, 1.0, 3), floor_us=2.0) == ["below_floor"]
