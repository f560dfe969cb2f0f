"""Dedupe by measurement identity: one unit of work per identical kernel; measured-ok variants are skipped."""

from __future__ import annotations

import pytest

from emmy_core.bench.harness import BenchConfig, Unit, bench, dedupe
from emmy_core.exchange.recorders import StoreRecorder
from emmy_core.ir.builders import elementwise
from emmy_core.store import MemoryStore
from tests.bench import planted
from tests.bench.conftest import tiny_kernel
from tests.bench.probes import quiet

CONFIG = BenchConfig(setting="rank", timeout_s=10, spread_limit=50.0)


def test_a_kernel_contained_n_times_is_one_unit_of_work() -> None:
    k = tiny_kernel()
    twin = elementwise("a+b", dtype="f32", batch_hint=64, cols=16)  # another expected size: same identity
    plan = [(Unit(k, {"B": 4}, label=f"layer {i}"), [{"unroll": 1}, {"unroll": 2}]) for i in range(5)]
    plan.append((Unit(twin, {"B": 4}), [{"unroll": 2}, {"unroll": 3}]))
    plan.append((Unit(k, {"B": 8}), [{"unroll": 1}]))  # other sizes: another measurement identity
    [first, other] = dedupe(plan)
    assert first.count == 6 and first.variants == [{"unroll": 1}, {"unroll": 2}, {"unroll": 3}]
    assert other.count == 1 and other.unit.sizes_text == "B=8"


def test_a_model_containing_the_same_kernel_n_times_benches_it_once_and_measured_ok_variants_are_skipped(
        cpu_card) -> None:
    store = MemoryStore()
    unit = Unit(tiny_kernel(), {"B": 4})
    variants = [{"unroll": planted.CORRECT}, {"unroll": planted.BUILD_ERROR}]
    layers = [(Unit(unit.program, {"B": 4}, label=f"layer {i}"), variants) for i in range(4)]
    first = bench(layers, cpu_card, planted.SPEC, StoreRecorder(store), CONFIG, probe=quiet())
    assert [p.count for p in first.planned] == [4]
    assert len(first.outcomes) == 2  # one run per variant, not four
    assert (first.count("ok"), first.count("failed"), first.rows_recorded) == (1, 1, 2)
    again = bench([(unit, variants)], cpu_card, planted.SPEC, StoreRecorder(store), CONFIG, probe=quiet())
    assert again.skipped_known == 1  # the ok variant is skipped; the failed one is tried again
    assert [o.knobs for o in again.outcomes] == [{"unroll": planted.BUILD_ERROR}]
    assert len(store.measurements()) == 2  # the retried failure kept its one row


def test_a_tune_plan_samples_a_budget_that_always_keeps_the_first_option(cpu_card) -> None:
    from emmy_core.bench.plan import tune_plan
    from emmy_core.ir.builders import rmsnorm
    from emmy_core.knobs import candidates

    norm = rmsnorm(hidden=256, dtype="f16", batch_hint=8)
    units = [Unit(norm, {"B": 8}), Unit(norm, {"B": 8}), Unit(tiny_kernel(), {"B": 4})]
    plan = tune_plan(units, cpu_card, budget=2, seed=5)
    assert len(plan) == 3  # every instance kept, so the bench can count them
    [norm_plan, tiny_plan] = dedupe(plan)
    assert tiny_plan.count == 1 and tiny_plan.variants
    assert norm_plan.count == 2 and len(norm_plan.variants) == min(2, len(candidates(norm, cpu_card)))
    assert norm_plan.variants[0] == candidates(norm, cpu_card)[0]
    full = tune_plan(units[:1], cpu_card)
    assert full[0][1] == [dict(k) for k in candidates(norm, cpu_card)]


def test_a_bench_interrupted_mid_kernel_records_the_rows_that_kernel_finished_and_a_rerun_skips_them(
        cpu_card) -> None:
    """Ctrl-C during a kernel keeps its finished measurements (a long `--budget all` kernel loses none of them)."""
    from emmy_core.bench.harness import BenchInterrupted

    store = MemoryStore()
    unit = Unit(tiny_kernel(), {"B": 4})
    variants = [{"unroll": planted.CORRECT}, {"unroll": planted.BUILD_ERROR}, {"unroll": 2}]
    seen: list[object] = []

    def stop_after_two(out: object) -> None:
        seen.append(out)
        if len(seen) == 2:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt) as stop:  # caught as what Ctrl-C raises, so a failure stops no session
        bench([(unit, variants)], cpu_card, planted.SPEC, StoreRecorder(store), CONFIG, probe=quiet(),
              on_outcome=stop_after_two)
    assert isinstance(stop.value, BenchInterrupted)
    assert stop.value.report.rows_recorded == 2 and len(stop.value.report.outcomes) == 2
    assert sorted(m.status for m in store.measurements()) == ["failed", "ok"]
    again = bench([(unit, variants)], cpu_card, planted.SPEC, StoreRecorder(store), CONFIG, probe=quiet())
    assert again.skipped_known == 1  # the finished ok row is not measured again
    assert [o.knobs for o in again.outcomes] == [{"unroll": planted.BUILD_ERROR}, {"unroll": 2}]
