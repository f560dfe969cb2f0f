"""Super-linear work, measured by comparing sizes with sizes: an input `factor` times larger must cost less
than `limit` times more (linear work: about `factor`; quadratic: its square).

The cost is counted, not timed: every Python line executed and every Python call made while the work runs
(`sys.settrace`). The count is the same on an idle laptop and on a loaded 2-core CI runner, so the guard
cannot flake; what it cannot see is work done inside C (a quadratic loop in Python code, ours or a
library's, is what it catches)."""

from __future__ import annotations

import sys
from collections.abc import Callable
from types import FrameType
from typing import Any

FACTOR = 8
LIMIT = 24.0  # a linear cost gives about 8; a quadratic one 64


def work(fn: Callable[[], Any]) -> int:
    """How many Python lines and calls `fn()` executes, in this thread."""
    count = 0

    def trace(frame: FrameType, event: str, arg: Any) -> Callable[..., Any]:
        nonlocal count
        count += 1
        return trace

    previous = sys.gettrace()
    sys.settrace(trace)
    try:
        fn()
    finally:
        sys.settrace(previous)
    return count


def growth(make: Callable[[int], Any], run: Callable[[Any], Any], n: int, factor: int = FACTOR) -> float:
    """How many times more work `run` does on `make(n * factor)` than on `make(n)`."""
    small, large = make(n), make(n * factor)
    run(small), run(large)  # warm: one-time costs (lazy imports, first-call caches) belong to neither size
    return work(lambda: run(large)) / max(work(lambda: run(small)), 1)
