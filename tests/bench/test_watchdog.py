"""A hang or a crash costs one variant: it becomes one failed row with the placeholder time, the bench goes on."""

from __future__ import annotations

from emmy_core.bench.harness import BenchConfig, Unit, bench
from emmy_core.store import PLACEHOLDER_US, MemoryStore
from tests.bench import planted
from tests.bench.conftest import PLANTS, TIMEOUT_S, tiny_kernel
from tests.bench.probes import quiet


def _outcome(report, plant):  # type: ignore[no-untyped-def]
    return next(o for o in report.outcomes if o.knobs == {"unroll": plant})


def _stored(store, plant):  # type: ignore[no-untyped-def]
    from emmy_core.knobs.vocab import schedule_id

    return [m for m in store.measurements() if m.schedule_id == schedule_id({"unroll": plant})]


def test_a_hanging_variant_becomes_one_failed_row_after_the_timeout(planted_run) -> None:
    report, store = planted_run
    out = _outcome(report, planted.HANG)
    assert (out.status, out.failure) == ("failed", "timeout")
    assert f"within {TIMEOUT_S:g} s" in out.message
    [row] = _stored(store, planted.HANG)
    assert (row.status, row.failure, row.median_us, row.source) == ("failed", "timeout", PLACEHOLDER_US, "tune")


def test_a_crashing_variant_becomes_one_failed_row(planted_run) -> None:
    report, store = planted_run
    for plant, signal in ((planted.ABORT, "SIGABRT"), (planted.SEGFAULT, "SIGSEGV")):
        out = _outcome(report, plant)
        assert (out.status, out.failure) == ("failed", "crash")
        assert signal in out.message
        [row] = _stored(store, plant)
        assert (row.status, row.failure, row.median_us) == ("failed", "crash", PLACEHOLDER_US)


def test_the_tune_finishes_the_rest_after_a_hang_or_a_crash(planted_run) -> None:
    report, store = planted_run
    assert len(report.outcomes) == len(PLANTS)  # every variant has an outcome, in order
    assert [o.knobs["unroll"] for o in report.outcomes] == list(PLANTS)
    # the variants after the hang and the crashes ran in fresh workers (first, and one per kill)
    assert report.worker_starts == 4
    [ok] = _stored(store, planted.CORRECT)
    assert ok.status == "ok" and 0 < ok.median_us < PLACEHOLDER_US and ok.samples >= 1


def test_what_a_kernel_prints_cannot_corrupt_the_workers_answers(planted_run) -> None:
    report, store = planted_run
    assert _outcome(report, planted.NOISY).status == "ok"
    assert [m.status for m in _stored(store, planted.NOISY)] == ["ok"]


def test_build_and_launch_errors_are_failed_rows(planted_run) -> None:
    report, store = planted_run
    for plant, kind in ((planted.BUILD_ERROR, "build_error"), (planted.LAUNCH_ERROR, "launch_error")):
        out = _outcome(report, plant)
        assert (out.status, out.failure) == ("failed", kind)
        assert "planted" in out.message
        [row] = _stored(store, plant)
        assert (row.failure, row.median_us) == (kind, PLACEHOLDER_US)


def test_a_hang_while_preparing_is_reported_and_the_next_kernel_still_runs(cpu_card) -> None:
    """A reference that cannot be prepared in time skips that kernel's variants, nothing else."""
    big = tiny_kernel()
    store = MemoryStore()
    from emmy_core.exchange.recorders import StoreRecorder

    config = BenchConfig(setting="rank", timeout_s=TIMEOUT_S, prepare_timeout_s=0.001, spread_limit=50.0)
    report = bench([(Unit(big, {"B": 4}), [{"unroll": 1}])], cpu_card, planted.SPEC, StoreRecorder(store), config,
                   probe=quiet())
    assert len(report.unit_errors) == 1 and not report.outcomes
    assert store.measurements() == []


def test_the_watchdogs_placeholder_time_is_the_stores() -> None:
    from emmy_core.bench import PLACEHOLDER_US as BENCH_PLACEHOLDER

    assert BENCH_PLACEHOLDER == PLACEHOLDER_US
