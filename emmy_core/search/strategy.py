"""Search strategies: given a pool and what was measured of it so far, the next candidates to measure.

The seam where the search sits beside the cost model (as TVM MetaSchedule keeps a
`SearchStrategy` beside its cost model). A strategy sees a `SearchPool` (the candidates in
the rule's order, the prior's scores, other cards' evidence) and the `Trial`s measured so far
(the time of what was chosen, None for a failure); it never sees a time it did not choose
(`emmy_core.search.replay` holds the times and checks it). Strategies:

- `first`: the rule's order;
- `random`: the seeded sample a tune has always taken (the first option, then a seeded sample
  of the rest, in pool order; `emmy_core.knobs.sample_candidates`);
- `prior`: the prior's order, re-ranked after each measurement: candidates sharing a failed
  candidate's tile shape are dropped, and once WARMUP candidates are measured (the first option
  and the prior's top 3), the candidates nearest the best measured so far (knob values in
  common) are lifted, so the card's own rows act as evidence;
- `explore`: `prior`, with one measurement in EXPLORE_EVERY spent where the prior is least
  sure: the candidate other cards' measurements (the transfer evidence) rank highest among
  those the prior ranks low; without such evidence, the candidate with the most knob values no
  measurement has tried yet, among the prior's top half (seed 09, limitation 8: a fork no
  bench ever took is silence that reads as health).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

STRATEGIES = ("first", "random", "prior", "explore")
SHAPE_KNOBS = frozenset({"block_m", "block_n", "block_k", "block", "tile_m", "tile_n", "tile_k"})
_EXTERN_SHAPE = re.compile(r"extern\.(block_size|tile_size|block|tile)", re.IGNORECASE)
NEIGHBOUR_WEIGHT = 0.5  # how much sharing the best measured candidate's knob values lifts a candidate
WARMUP = 4  # measurements (the first option and the prior's top 3) before the card's own rows re-rank the rest
EXPLORE_EVERY = 4  # explore: every 4th measurement (after the first two) goes where the prior is unsure


@dataclass(frozen=True)
class SearchPool:
    """What a strategy may know of a pool: its candidates, never their times.

    `order`: candidate indices in the rule's order (`order[0]` the first option, when `first` is set);
    `scores`: the prior's score per candidate (higher better), None without a prior;
    `transfer`: other cards' evidence per candidate (higher better, NaN where none measured it), or None.
    """

    knobs: tuple[Mapping[str, object], ...]
    order: tuple[int, ...]
    first: int | None = None
    scores: np.ndarray | None = None
    transfer: np.ndarray | None = None
    label: str = ""

    def __len__(self) -> int:
        return len(self.knobs)


@dataclass(frozen=True)
class Trial:
    """One measurement a strategy chose: the candidate's index and its time in µs (None: it failed)."""

    index: int
    time_us: float | None

    @property
    def ok(self) -> bool:
        return self.time_us is not None


@runtime_checkable
class SearchStrategy(Protocol):
    """One method: the next at most `n` candidates (pool indices, none measured yet) to measure."""

    name: str

    def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
        """Up to `n` unmeasured candidate indices, best first; `budget` is the run's total (failures count)."""
        ...


def shape_key(knobs: Mapping[str, object]) -> tuple[tuple[str, object], ...]:
    """The tile shape of a candidate: its block/tile sizes (empty when it has none)."""
    return tuple(sorted((k, v) for k, v in knobs.items() if k in SHAPE_KNOBS or _EXTERN_SHAPE.match(k)))


def _unmeasured(pool: SearchPool, trials: Sequence[Trial], ranked: Sequence[int]) -> list[int]:
    done = {t.index for t in trials}
    return [int(i) for i in ranked if int(i) not in done]


class FirstStrategy:
    """The rule's order: what a tune without a prior or a sample would measure."""

    name = "first"

    def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
        return _unmeasured(pool, trials, pool.order)[:n]


class RandomStrategy:
    """Today's seeded sample (`sample_candidates`): the first option, then `budget - 1` others in pool order."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
        head = [pool.first] if pool.first is not None else []
        rest = [i for i in pool.order if i != pool.first]
        k = max(0, min(len(rest), budget - len(head)))
        picked = sorted(random.Random(self.seed).sample(range(len(rest)), k))
        return _unmeasured(pool, trials, [*head, *(rest[j] for j in picked)])[:n]


def _similarity(pool: SearchPool, anchor: int, cache: dict[int, np.ndarray]) -> np.ndarray:
    """Per candidate, the share of `anchor`'s knob values it has (1 for the anchor itself)."""
    if anchor not in cache:
        ref = pool.knobs[anchor]
        names = list(ref)
        cache[anchor] = np.array([sum(k.get(n) == ref[n] for n in names) / max(1, len(names))
                                  for k in pool.knobs])
    return cache[anchor]


def percentile_ranks(scores: np.ndarray) -> np.ndarray:
    """Scores as their rank in the pool, 0 (worst) to 1 (best); ties share the lower rank."""
    if len(scores) < 2:
        return np.ones(len(scores))
    ranks = np.argsort(np.argsort(scores, kind="stable"), kind="stable")
    return ranks / (len(scores) - 1)


class PriorStrategy:
    """The prior's order, re-ranked after each measurement with what this card measured (module docstring)."""

    name = "prior"

    def __init__(self, neighbour_weight: float = NEIGHBOUR_WEIGHT, warmup: int = WARMUP) -> None:
        self.neighbour_weight = neighbour_weight
        self.warmup = warmup
        self._sims: dict[int, np.ndarray] = {}
        self._pool: SearchPool | None = None
        self._base: np.ndarray | None = None

    def _start(self, pool: SearchPool) -> np.ndarray:
        if self._pool is not pool:
            self._pool, self._sims = pool, {}
            if pool.scores is not None:
                base = percentile_ranks(np.asarray(pool.scores, dtype=np.float64))
            else:  # no prior: the rule's order
                base = np.zeros(len(pool))
                base[list(pool.order)] = np.linspace(1.0, 0.0, len(pool.order)) if len(pool.order) > 1 else 1.0
            self._base = base
        assert self._base is not None
        return self._base

    def ranking(self, pool: SearchPool, trials: Sequence[Trial]) -> np.ndarray:
        """Every candidate's re-ranked value (higher first); -inf for the measured and the excluded."""
        value = self._start(pool).copy()
        ok = [t for t in trials if t.ok]
        if ok and self.neighbour_weight and len(trials) >= self.warmup:
            best = min(ok, key=lambda t: t.time_us or 0.0)
            value = value + self.neighbour_weight * _similarity(pool, best.index, self._sims)
        failed_shapes = {shape_key(pool.knobs[t.index]) for t in trials if not t.ok}
        failed_shapes.discard(())
        if failed_shapes:
            drop = np.array([shape_key(k) in failed_shapes for k in pool.knobs])
            if not drop.all():
                value = np.where(drop, -np.inf, value)
        value[[t.index for t in trials]] = -np.inf
        return value

    def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
        value = self.ranking(pool, trials)
        ranked = np.argsort(-value, kind="stable")
        out = [int(i) for i in ranked if np.isfinite(value[i])][:n]
        if len(out) < n:  # only excluded candidates left: measure them after all, in the prior's order
            out += [i for i in _unmeasured(pool, trials, np.argsort(-self._start(pool), kind="stable"))
                    if i not in out][: n - len(out)]
        return out


class ExploreStrategy(PriorStrategy):
    """`prior`, with every EXPLORE_EVERY-th measurement where the prior is least sure (module docstring)."""

    name = "explore"

    def __init__(self, every: int = EXPLORE_EVERY, neighbour_weight: float = NEIGHBOUR_WEIGHT) -> None:
        super().__init__(neighbour_weight)
        self.every = every

    def uncertain(self, pool: SearchPool, trials: Sequence[Trial], value: np.ndarray) -> int | None:
        open_ = np.isfinite(value)
        if not open_.any():
            return None
        base = self._start(pool)
        if pool.transfer is not None and np.isfinite(pool.transfer).any():
            t = np.asarray(pool.transfer, dtype=np.float64)
            seen = np.isfinite(t)
            gap = np.where(seen & open_, percentile_ranks(np.where(seen, t, -np.inf)) - base, -np.inf)
            if np.isfinite(gap).any() and gap.max() > 0:
                return int(np.argmax(gap))
        tried: dict[str, set[object]] = {}
        for tr in trials:
            for k, v in pool.knobs[tr.index].items():
                tried.setdefault(k, set()).add(v)
        novelty = np.array([sum(v not in tried.get(k, ()) for k, v in kn.items()) for kn in pool.knobs], dtype=float)
        top_half = base >= np.median(base)
        pick = np.where(open_ & top_half, novelty + base, -np.inf)
        return int(np.argmax(pick)) if np.isfinite(pick).any() else None

    def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
        out: list[int] = []
        seen = list(trials)
        while len(out) < n:
            step = len(seen)
            value = self.ranking(pool, seen)
            pick: int | None = None
            if step >= 2 and (step - 2) % self.every == self.every - 1:
                pick = self.uncertain(pool, seen, value)
            if pick is None:
                more = PriorStrategy.propose(self, pool, seen, 1, budget)
                if not more:
                    break
                pick = more[0]
            out.append(pick)
            seen.append(Trial(pick, float("inf")))  # a placeholder, never the best: one batch's picks differ
        return out


def make_strategy(name: str, seed: int = 0) -> SearchStrategy:
    """The strategy called `name` (one of STRATEGIES); ValueError naming the known ones."""
    if name == "first":
        return FirstStrategy()
    if name == "random":
        return RandomStrategy(seed)
    if name == "prior":
        return PriorStrategy()
    if name == "explore":
        return ExploreStrategy()
    raise ValueError(f"unknown search strategy {name!r}; known: {', '.join(STRATEGIES)}")
