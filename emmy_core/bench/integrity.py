"""Integrity checks on a timed variant: a flagged result is reported and never recorded.

Four checks (DESIGN section 6): the output differs from the reference (`wrong_result`,
decided in the worker against the f64 reference, poisoned outputs included); two runs
of the same build differ bit for bit (`nondeterministic`, also in the worker); the
spread of repeats is too wide to trust the median (`spread`: (p90 - p10) / median above
a limit); the median is below the card's physical floor (`below_floor`: faster than
bytes / bandwidth or flops / peak allows). The last two are pure functions of the
samples and the card, decided here.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass

FLAGS = ("wrong_result", "nondeterministic", "spread", "below_floor")
DEFAULT_SPREAD_LIMIT = 0.5


@dataclass(frozen=True)
class Stats:
    """Summary of timing samples, microseconds."""

    median_us: float
    p10_us: float
    p90_us: float
    samples: int

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: the relative width of the middle 80% of the samples."""
        return (self.p90_us - self.p10_us) / self.median_us if self.median_us > 0 else float("inf")


def _quantile(sorted_xs: list[float], q: float) -> float:
    """Linear-interpolated quantile of sorted samples (q in [0, 1])."""
    pos = q * (len(sorted_xs) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(sorted_xs) - 1)
    return sorted_xs[lo] + (sorted_xs[hi] - sorted_xs[lo]) * (pos - lo)


def summarize(samples_us: list[float]) -> Stats:
    if not samples_us:
        raise ValueError("no timing samples to summarize")
    xs = sorted(float(x) for x in samples_us)
    return Stats(statistics.median(xs), _quantile(xs, 0.1), _quantile(xs, 0.9), len(xs))


def timing_flags(stats: Stats, floor_us: float, spread_limit: float = DEFAULT_SPREAD_LIMIT) -> list[str]:
    """The timing checks a result fails: `spread` and `below_floor` (empty when it can be trusted)."""
    flags: list[str] = []
    if stats.spread > spread_limit:
        flags.append("spread")
    if stats.median_us < floor_us:
        flags.append("below_floor")
    return flags
