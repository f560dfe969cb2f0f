"""The ranking interface and its five rankers: the prior, transfer, the most similar card, the first option, random.

`candidates` are indices into the fork's pool (`DatasetFork.knobs`, `DatasetFork.schedule_ids`); a score array has one
entry per candidate. `RankContext` is what a ranker may read: the fork (kernel, sizes, card, setting and
its pool), the same kernel at the same sizes and setting on other cards, and an extern kernel's cache-file
order. No ranker reads the fork's own measurements: that is what the figures judge.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import numpy as np

from emmy_core.prior.dataset import DatasetFork
from emmy_core.ranking import baselines


@dataclass(frozen=True)
class RankContext:
    """The pool being ranked and what other cards measured of its kernel (the evidence a baseline may use)."""

    fork: DatasetFork
    others: Sequence[DatasetFork] = ()
    order: Mapping[str, int] | None = None  # an extern kernel's cache-file order: schedule_id -> position
    elsewhere: list[DatasetFork] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "elsewhere", baselines.same_kernel_elsewhere(self.fork, self.others))


class Ranker(Protocol):
    """Orders a fork's candidates. `expected`: the ranker has no preference, and its figures are the
    expectation over every order (a random pick), not one draw."""

    name: str
    expected: bool

    def rank(self, context: RankContext, candidates: np.ndarray) -> np.ndarray | None: ...


@dataclass(frozen=True)
class PriorRanker:
    """A prior artifact's scores (`Prior.score`) for the fork's card, kernel, sizes and setting."""

    prior: Any
    name: str = "prior"
    expected: bool = False

    def rank(self, context: RankContext, candidates: np.ndarray) -> np.ndarray | None:
        f = context.fork
        return np.asarray(self.prior.score(f.kernel, f.sizes, f.card, f.setting, [f.knobs[i] for i in candidates],
                                           ordered=f.first is not None),
                          dtype=np.float64)


class Transfer:
    """Per candidate, the mean log(best/time) over the other cards that measured it (`baselines.transfer_scores`)."""

    name: ClassVar[str] = "transfer"
    expected: ClassVar[bool] = False

    def rank(self, context: RankContext, candidates: np.ndarray) -> np.ndarray | None:
        if not context.elsewhere:
            return None
        return baselines.transfer_scores(context.fork, context.elsewhere)[candidates]


class SimilarCard:
    """The nearest other card's own measured order (`baselines.most_similar_scores`)."""

    name: ClassVar[str] = "similar"
    expected: ClassVar[bool] = False

    def rank(self, context: RankContext, candidates: np.ndarray) -> np.ndarray | None:
        s = baselines.most_similar_scores(context.fork, context.elsewhere) if context.elsewhere else None
        return None if s is None else s[candidates]


class FirstOption:
    """The rule's order: for an Emmy kernel the pool's own (the rule's options by rank), which has no opinion
    when the first option is not a candidate; for an extern kernel its cache file's order, when given."""

    name: ClassVar[str] = "first"
    expected: ClassVar[bool] = False

    def rank(self, context: RankContext, candidates: np.ndarray) -> np.ndarray | None:
        from emmy_core.ir import Extern

        f = context.fork
        n = len(f.schedule_ids)
        if isinstance(f.kernel, Extern):
            if context.order is None:
                return None
            return -np.array([context.order.get(f.schedule_ids[i], n + int(i)) for i in candidates], dtype=np.float64)
        if f.first is None or f.first not in {int(i) for i in candidates}:
            return None
        scores = -np.asarray(candidates, dtype=np.float64)  # the emitted order, the first option on top
        scores[np.asarray(candidates) == f.first] = 1.0
        return scores


class RandomPick:
    """No preference: every order equally likely; its figures are the expectation (`metrics.random_*`)."""

    name: ClassVar[str] = "random"
    expected: ClassVar[bool] = True

    def rank(self, context: RankContext, candidates: np.ndarray) -> np.ndarray | None:
        return np.zeros(len(candidates))


BASELINES: tuple[Ranker, ...] = (FirstOption(), RandomPick(), SimilarCard(), Transfer())
"""The rankers a prior is judged beside, in the order the figures name them."""
