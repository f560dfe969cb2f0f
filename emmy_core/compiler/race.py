"""The group route: a partition of the backend runs on whichever of its ways is measured fastest at a size.

A matrix product's route is a schedule option measured like any other (`emmy_core.knobs.route`); a group's
other kernels (its norms, elementwise chains, softmax) have none, and a group of several kernels can lose to
the torch ops it replaces through its fixed cost alone. Where no measurement settles a product, its first
option is torch's kernel, and Emmy's own kernels (ranked by the prior) are not tried at all, though on a card
where the library is weak they are the faster. So when a group is first run at a size, after the check
against torch, the backend races its contenders on the same fresh inputs: Emmy's group as the evidence
settled it, the same group on Emmy's kernels only (where the first had a product on torch's kernel), and
torch's ops; in turn, each round in the other direction: at least RACE_ROUNDS[0] rounds, then more until
RACE_SECONDS have passed, at most RACE_ROUNDS[1], and no more once the rounds are apart (the fastest's slowest
round faster than every other's fastest, by RACE_MARGIN: more rounds would not change the winner, and a new size
bucket's races are most of its first call). The fastest by the median keeps the size, the earlier
contender on a tie; but an Emmy contender takes it from torch's ops only when faster by more than RACE_MARGIN:
within it, a few rounds cannot tell them apart, and a tie goes to torch, the baseline a compiled model must
never fall below (a bf16 decoder's MLP group won its race by 1% and ran 2-4% slower than torch's ops after). The verdict is taken at the first size of each size bucket (`ir.sizes.size_bucket`: a
server's prompt of 33 to 64 tokens) and serves the bucket's other sizes, each still built and checked; it is
said per size in the graph's report, and decided on the machine at hand, never by a rule about one machine.

The race is not written to the store: a group is no kernel identity there (its kernels are, and `emmy tune`
measures them and the library route beside them); at the next compile it is run again.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

RACE_ROUNDS = (3, 15)
RACE_SECONDS = 0.02
RACE_MARGIN = 0.03  # how much faster than torch's ops an Emmy contender must be, by the median


TORCH = "torch"  # the contender that runs the group's torch ops


@dataclass(frozen=True)
class Race:
    """Every contender's times (seconds) at one size, round by round, in the order they were entered."""

    times: Mapping[str, tuple[float, ...]]

    def __post_init__(self) -> None:
        counts = {len(t) for t in self.times.values()}
        if len(self.times) < 2 or len(counts) != 1 or 0 in counts:
            raise ValueError("a race needs two contenders or more with as many rounds each, at least one; got "
                             + ", ".join(f"{k}: {len(t)}" for k, t in self.times.items()))

    def median(self, name: str) -> float:
        return statistics.median(self.times[name])

    @property
    def rounds(self) -> int:
        return len(next(iter(self.times.values())))

    @property
    def winner(self) -> str:
        """The fastest contender by the median, the earlier one on a tie; torch's ops where the fastest of the
        others is not faster than them by more than RACE_MARGIN."""
        names = list(self.times)
        best = min(names, key=lambda k: (self.median(k), names.index(k)))
        if best != TORCH and TORCH in self.times and self.median(TORCH) <= self.median(best) * (1 + RACE_MARGIN):
            return TORCH
        return best

    def verdict(self, at: str) -> str:
        """Why the winner runs this size: its median beside every other contender's."""
        win = self.winner
        others = ", ".join(f"{k} {self.median(k) * 1e6:.0f} us" for k in self.times if k != win)
        who = "torch's ops" if win == TORCH else f"Emmy's group ({win})"
        return f"{who} measured fastest at {at}: {self.median(win) * 1e6:.0f} us against {others} " \
               f"(median of {self.rounds} rounds)"


def race(sides: Mapping[str, Callable[[], object]], rounds: Sequence[int] = RACE_ROUNDS,
         seconds: float = RACE_SECONDS, warm: bool = True) -> Race:
    """Times the contenders in turn after one warm call of each (first launches pay for page faults and cold
    caches; `warm=False` where each has just run at these sizes, as a group's check runs them), every other
    round in the reverse order, so none always runs on the caches another left."""
    if len(sides) < 2:
        raise ValueError(f"a race needs two contenders or more, got {len(sides)}")
    if warm:
        for fn in sides.values():
            fn()
    low, high = rounds
    names = list(sides)
    times: dict[str, list[float]] = {k: [] for k in names}
    done = 0
    deadline = time.perf_counter() + seconds
    while done < high and (done < low or (time.perf_counter() < deadline and not apart(times))):
        for name in (names if done % 2 == 0 else names[::-1]):
            t0 = time.perf_counter()
            sides[name]()
            times[name].append(time.perf_counter() - t0)
        done += 1
    return Race({k: tuple(v) for k, v in times.items()})


def apart(times: Mapping[str, Sequence[float]]) -> bool:
    """Whether the rounds so far decide the race: the fastest contender by the median was faster in its slowest
    round than every other contender in its fastest, by RACE_MARGIN."""
    if any(not t for t in times.values()):
        return False
    best = min(times, key=lambda k: statistics.median(times[k]))
    slowest = max(times[best]) * (1 + RACE_MARGIN)
    return all(slowest < min(t) for k, t in times.items() if k != best)
