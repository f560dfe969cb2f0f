"""Timing: samples are microseconds per call, one per repeat, after warm-up; short calls are batched."""

from __future__ import annotations

import time

from emmy_core.bench.timing import time_cpu


def test_samples_are_one_per_repeat_in_microseconds_per_call() -> None:
    calls = [0]

    def sleepy() -> None:
        calls[0] += 1
        time.sleep(0.002)

    samples = time_cpu(sleepy, warmup=2, repeats=3)
    assert len(samples) == 3 and calls[0] == 5  # 2 warm-up calls, then 3 samples of one call each
    assert all(1900 <= s < 50_000 for s in samples)


def test_short_calls_are_batched_inside_a_sample() -> None:
    calls = [0]

    def quick() -> None:
        calls[0] += 1

    samples = time_cpu(quick, warmup=1, repeats=4)
    assert len(samples) == 4 and calls[0] > 1 + 4  # each sample ran the call many times
    assert all(0 < s < 200 for s in samples)
