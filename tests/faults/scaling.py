"""Super-linear time, measured by comparing sizes rather than wall clocks against constants: an input
`factor` times larger must take less than `limit` times longer (linear work: about `factor`; quadratic:
its square). Best of a few runs, so a busy machine inflates both sizes alike."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

FACTOR = 8
LIMIT = 24.0  # a linear cost gives about 8; a quadratic one 64


def best_time(fn: Callable[[], Any], repeats: int = 3) -> float:
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def growth(make: Callable[[int], Any], run: Callable[[Any], Any], n: int, factor: int = FACTOR) -> float:
    """How many times longer `run` takes on `make(n * factor)` than on `make(n)`."""
    small, large = make(n), make(n * factor)
    return best_time(lambda: run(large)) / max(best_time(lambda: run(small)), 1e-6)
