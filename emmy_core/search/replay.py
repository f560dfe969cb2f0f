"""Running a strategy under a budget: the session a tune drives live, and its replay over a frozen pool.

A `Session` asks its strategy for the next candidates, checks every answer (indices in the
pool, distinct, not measured yet, no more than asked) and takes the measurements back; the
rule's first option, where the pool has one, is always measured first. Every measurement
costs one unit of budget, a failed one too. `replay` is Kernel Tuner's simulation mode for
Emmy's strategies: the pool's times are frozen, held here, and a strategy learns only the
time of what it chose. `check_blind` proves a strategy keeps to that: it replays the strategy
twice, the second time with every candidate it did not choose given other times; a strategy
that looked at anything it did not choose takes another path and is refused.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from emmy_core.search.strategy import SearchPool, SearchStrategy, Trial


class ReplayError(RuntimeError):
    """A strategy broke the rules of a search (an index outside the pool, measured twice, more than asked,
    or a path that depends on times it never chose); the message names the strategy and the pool."""


class Session:
    """One strategy searching one pool within `budget` measurements (None: the whole pool)."""

    def __init__(self, strategy: SearchStrategy, pool: SearchPool, budget: int | None,
                 first_always: bool = True) -> None:
        if budget is not None and budget < 1:
            raise ValueError(f"a search budget must be a positive number of measurements, not {budget}")
        self.strategy = strategy
        self.pool = pool
        self.budget = len(pool) if budget is None else min(budget, len(pool))
        self.first_always = first_always
        self.trials: list[Trial] = []
        self._pending: list[int] = []

    @property
    def left(self) -> int:
        return self.budget - len(self.trials) - len(self._pending)

    def _refuse(self, why: str) -> ReplayError:
        return ReplayError(f"strategy {self.strategy.name!r} on pool {self.pool.label or '?'}: {why}")

    def next(self, n: int = 1) -> list[int]:
        """The next at most `n` candidates to measure (fewer when the budget ends; [] when the search is done)."""
        want = min(n, self.left)
        if want <= 0:
            return []
        first = self.pool.first
        if self.first_always and first is not None and not self.trials and not self._pending:
            self._pending = [first]
            return [first]
        asked = self.strategy.propose(self.pool, tuple(self.trials), want, self.budget)
        picks = [int(i) for i in asked]
        done = {t.index for t in self.trials}
        if len(picks) > want:
            raise self._refuse(f"proposed {len(picks)} candidates where {want} were asked")
        if len(set(picks)) != len(picks):
            raise self._refuse("proposed one candidate twice")
        for i in picks:
            if not 0 <= i < len(self.pool):
                raise self._refuse(f"proposed index {i} outside the pool of {len(self.pool)}")
            if i in done:
                raise self._refuse(f"proposed candidate {i} again (already measured)")
        self._pending = picks
        return picks

    def tell(self, index: int, time_us: float | None) -> None:
        """The measurement of a candidate `next` gave (None: it failed; it costs its budget all the same)."""
        if index not in self._pending:
            raise self._refuse(f"a measurement of candidate {index}, which was not proposed")
        self._pending.remove(index)
        self.trials.append(Trial(index, None if time_us is None or not np.isfinite(time_us) else float(time_us)))

    @property
    def best(self) -> Trial | None:
        ok = [t for t in self.trials if t.ok]
        return min(ok, key=lambda t: t.time_us or 0.0) if ok else None


@dataclass(frozen=True)
class FrozenPool:
    """A fully measured pool: what a strategy may see, and the times it may not (NaN: failed)."""

    pool: SearchPool
    times: np.ndarray

    @property
    def best_us(self) -> float:
        return float(np.nanmin(self.times)) if np.isfinite(self.times).any() else float("nan")


def replay(strategy: SearchStrategy, frozen: FrozenPool, budget: int, batch: int = 1,
           first_always: bool = True) -> list[Trial]:
    """The trials `strategy` makes on a frozen pool within `budget` measurements, `batch` at a time."""
    session = Session(strategy, frozen.pool, budget, first_always)
    while True:
        picks = session.next(batch)
        if not picks:
            break
        for i in picks:
            t = frozen.times[i]
            session.tell(i, float(t) if np.isfinite(t) else None)
    return session.trials


def best_so_far(trials: Sequence[Trial], pool_best: float) -> np.ndarray:
    """After each trial, the best time found over the pool's best (inf until a candidate works)."""
    out = np.empty(len(trials))
    best = np.inf
    for k, t in enumerate(trials):
        if t.time_us is not None:
            best = min(best, t.time_us)
        out[k] = best / pool_best
    return out


def check_blind(make: Callable[[], SearchStrategy], frozen: FrozenPool, budget: int, seed: int = 0) -> list[Trial]:
    """Replays a fresh strategy twice, the second time with every unchosen candidate's time redrawn (and
    failures moved); raises ReplayError when the two paths differ: the strategy saw what it did not choose."""
    trials = replay(make(), frozen, budget)
    chosen = np.zeros(len(frozen.times), dtype=bool)
    chosen[[t.index for t in trials]] = True
    rng = np.random.default_rng(seed)
    other = frozen.times.copy()
    hidden = np.flatnonzero(~chosen)
    seen = frozen.times[chosen & np.isfinite(frozen.times)]
    low, high = (float(seen.min()) / 100, float(seen.max()) * 100) if len(seen) else (1e-3, 1e6)
    redrawn = np.exp(rng.uniform(np.log(low), np.log(high), len(hidden)))  # many beat, many lose to what it saw
    other[hidden] = np.where(rng.random(len(hidden)) < 0.2, np.nan, redrawn)
    again = replay(make(), FrozenPool(frozen.pool, other), budget)
    if [t.index for t in again] != [t.index for t in trials]:
        name = make().name
        raise ReplayError(f"strategy {name!r} on pool {frozen.pool.label or '?'} chose differently when only "
                          f"times it never chose changed: it saw times it was not given")
    return trials
