"""The cuda target through the same harness: Triton kernels are verified under the interpreter here,
never timed (interpreter timings are never recorded); on a GPU the same path times with do_bench."""

from __future__ import annotations

import os

import pytest

from emmy_core.bench.harness import BenchConfig, BenchError, Unit, bench
from emmy_core.ir.builders import Dim, matmul, rmsnorm
from emmy_core.knobs import candidates
from emmy_core.targets import resolve_card


def _plan(card):  # type: ignore[no-untyped-def]
    units = [Unit(rmsnorm(hidden=64, dtype="f16", batch_hint=4), {"B": 4}),
             Unit(matmul(Dim("T", 16), 32, 32, dtype="f16", epilogue=("bias", "gelu")), {"T": 16})]
    return [(u, list(candidates(u.program, card))[:2]) for u in units]


def test_triton_kernels_are_verified_under_the_interpreter_and_interpreter_timings_are_refused() -> None:
    card = resolve_card("NVIDIA H200")
    report = bench(_plan(card), card, None, None, BenchConfig(time=False, timeout_s=120))
    assert [o.status for o in report.outcomes] == ["verified"] * 4, [o.message for o in report.outcomes]
    with pytest.raises(BenchError, match="interpreter timings are never recorded"):
        bench(_plan(card), card, None, None, BenchConfig(time=True, timeout_s=120))


@pytest.mark.gpu
def test_triton_kernels_are_timed_with_do_bench_on_the_gpu() -> None:
    card = resolve_card("local")
    real = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # the worker compiles for the GPU
    report = bench(_plan(card), card, None, None, BenchConfig(setting="rank", timeout_s=300, spread_limit=10.0),
                   worker_env=real)
    assert {o.status for o in report.outcomes} <= {"ok", "flagged"}
    assert any(o.status == "ok" and o.stats is not None and o.stats.median_us > 0 for o in report.outcomes)
