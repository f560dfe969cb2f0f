"""Benching: build, verify against the f64 reference, time, integrity checks, watchdog, tune loop.

`bench(plan, card, ...)` is the one harness behind `emmy tune` and `emmy run --bench`;
every variant runs in a worker process under a watchdog (`watchdog.py`, `worker.py`).
"""

from emmy_core.bench.harness import (
    BACKENDS,
    PLACEHOLDER_US,
    BenchConfig,
    BenchError,
    BenchInterrupted,
    BenchReport,
    Outcome,
    Planned,
    Recorder,
    Unit,
    bench,
    dedupe,
)
from emmy_core.bench.integrity import FLAGS, Stats, summarize, timing_flags

__all__ = [
    "BACKENDS", "FLAGS", "PLACEHOLDER_US", "BenchConfig", "BenchError", "BenchInterrupted", "BenchReport", "Outcome",
    "Planned", "Recorder", "Stats", "Unit", "bench", "dedupe", "summarize", "timing_flags",
]
