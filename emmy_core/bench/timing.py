"""Timing a built kernel: median of repeats after warm-up, per the compile setting.

CPU: a monotonic clock (`time.perf_counter_ns`) around calls; a call shorter than
`MIN_SAMPLE_US` is repeated inside one sample (the sample is the mean over that batch)
so that the clock's resolution and the call overhead do not dominate. GPU:
`triton.testing.do_bench` (its own warm-up, cache flush and CUDA events), every sample
kept. Returned times are microseconds per launch, one per sample.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable

MIN_SAMPLE_US = 200.0
MAX_BATCH = 4096


def time_cpu(fn: Callable[[], None], warmup: int, repeats: int) -> list[float]:
    """`repeats` samples of `fn` in microseconds per call, after `warmup` calls (at least one)."""
    call_us = math.inf
    for _ in range(max(1, warmup)):  # the fastest warm-up call sizes the batch (a first call pays page faults)
        t0 = time.perf_counter_ns()
        fn()
        call_us = min(call_us, (time.perf_counter_ns() - t0) / 1e3)
    batch = 1 if call_us >= MIN_SAMPLE_US else min(MAX_BATCH, math.ceil(MIN_SAMPLE_US / max(call_us, 0.05)))
    samples: list[float] = []
    for _ in range(repeats):
        t0 = time.perf_counter_ns()
        for _ in range(batch):
            fn()
        samples.append((time.perf_counter_ns() - t0) / 1e3 / batch)
    return samples


def time_cuda(fn: Callable[[], None], warmup: int, repeats: int) -> list[float]:
    """Samples from `triton.testing.do_bench` (ms -> us); warm-up and repetition scaled from the setting."""
    from triton.testing import do_bench

    times_ms = do_bench(fn, warmup=max(5, 5 * warmup), rep=max(20, 5 * repeats), return_mode="all")
    return [float(t) * 1e3 for t in times_ms]
