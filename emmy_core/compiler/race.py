"""The group route: a partition of the backend runs as torch ran it wherever torch's ops are measured faster.

A matrix product's route is a schedule option measured like any other (`emmy_core.knobs.route`); a group's
other kernels (its norms, elementwise chains, softmax) have none, and a group of several kernels can lose to
the torch ops it replaces through its fixed cost alone. So when a group is first run at a size, after the
check against torch, the backend races the two on the same fresh inputs, alternating which goes first: at
least RACE_ROUNDS[0] rounds, then more until RACE_SECONDS have passed, at most RACE_ROUNDS[1]. Emmy's group
keeps the size unless torch's ops are faster by the median. The verdict is per size and
said in the graph's report; it is decided on the machine at hand, never by a rule about one machine.

The race is not written to the store: a group is no kernel identity there (its kernels are, and `emmy tune`
measures them and the library route beside them); at the next compile it is run again.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

RACE_ROUNDS = (3, 15)
RACE_SECONDS = 0.02


@dataclass(frozen=True)
class Race:
    """Both sides' times (seconds) at one size, round by round."""

    emmy: tuple[float, ...]
    torch: tuple[float, ...]

    @property
    def emmy_median(self) -> float:
        return statistics.median(self.emmy)

    @property
    def torch_median(self) -> float:
        return statistics.median(self.torch)

    def verdict(self, at: str) -> str | None:
        """Why torch's ops run this size (None: Emmy's group is at least as fast by the median)."""
        if not self.emmy or len(self.emmy) != len(self.torch):
            raise ValueError(f"a race needs as many rounds of each side, at least one; got {len(self.emmy)} "
                             f"and {len(self.torch)}")
        e, t = self.emmy_median, self.torch_median
        if e <= t:
            return None
        return (f"torch's ops measured faster at {at}: {t * 1e6:.0f} us against Emmy's {e * 1e6:.0f} us "
                f"(median of {len(self.emmy)} rounds)")


def race(emmy: Callable[[], object], torch_ops: Callable[[], object],
         rounds: Sequence[int] = RACE_ROUNDS, seconds: float = RACE_SECONDS) -> Race:
    """Times `emmy` and `torch_ops` alternately after one warm call of each (first launches pay for page
    faults and cold caches), each round starting with the side the last one ended with."""
    emmy()
    torch_ops()
    low, high = rounds
    e: list[float] = []
    t: list[float] = []
    deadline = time.perf_counter() + seconds
    while len(e) < high and (len(e) < low or time.perf_counter() < deadline):
        sides = ((emmy, e), (torch_ops, t)) if len(e) % 2 == 0 else ((torch_ops, t), (emmy, e))
        for fn, times in sides:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return Race(tuple(e), tuple(t))
