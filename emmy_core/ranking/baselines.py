"""Baselines a prior must beat on a card it has never seen, as scores over the held-out fork's members.

Each baseline ranks the members of a fork on one card from what OTHER cards measured of the
same kernel at the same sizes and setting (no model), so the per-pool metrics
(`emmy_core.prior.metrics`) read it exactly as they read the prior's scores:

- transfer: per configuration, the geometric mean of best/time over the other cards that
  measured it (a failure there counts as FAILED_RATIO); the highest is picked. A member no
  other card measured ranks last;
- most similar card: the other card whose hardware description is nearest
  (`emmy_core.targets.similarity`: the numbers, and the vendor) ranks by its own measured times;
- the rule's first option and the random pick are in `metrics` (`index_slowdown`, `random_slowdown`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from emmy_core.prior.dataset import DatasetFork
from emmy_core.prior.transfer_features import FAILED_RATIO
from emmy_core.targets.card import Card
from emmy_core.targets.similarity import hardware_distance

UNSEEN = -1e300  # score of a member no other card measured: after every measured one, in emitted order


def same_kernel_elsewhere(fork: DatasetFork, forks: Sequence[DatasetFork]) -> list[DatasetFork]:
    """The forks of the same kernel, sizes and setting on other cards."""
    return [f for f in forks if f.kernel_id == fork.kernel_id and f.sizes == fork.sizes
            and f.setting == fork.setting and f.card_name != fork.card_name]


def _ratios(other: DatasetFork) -> dict[str, float]:
    best = float(np.nanmin(other.times)) if other.ok.any() else math.nan
    out = {}
    for sid, measured, ok, t in zip(other.schedule_ids, other.measured, other.ok, other.times, strict=True):
        if measured:
            out[sid] = best / float(t) if ok else FAILED_RATIO
    return out


def transfer_scores(fork: DatasetFork, others: Sequence[DatasetFork]) -> np.ndarray:
    """Per member: mean log(best/time) over the other cards that measured it (UNSEEN where none did)."""
    total = np.zeros(len(fork.schedule_ids))
    count = np.zeros(len(fork.schedule_ids))
    index = {sid: i for i, sid in enumerate(fork.schedule_ids)}
    for other in others:
        for sid, ratio in _ratios(other).items():
            i = index.get(sid)
            if i is not None and ratio > 0:
                total[i] += math.log(ratio)
                count[i] += 1
    return np.where(count > 0, total / np.maximum(count, 1), UNSEEN)


def card_distance(a: Card | None, b: Card | None) -> float:
    """The hardware distance of two cards (`emmy_core.targets.similarity`); inf when either is undescribed."""
    if a is None or b is None:
        return math.inf
    return hardware_distance(a.numeric(), b.numeric())


def most_similar_scores(fork: DatasetFork, others: Sequence[DatasetFork]) -> np.ndarray | None:
    """The nearest other card's own order (by its measured times) over this fork's members; None: no other card."""
    if not others:
        return None
    nearest = min(others, key=lambda o: (card_distance(fork.card, o.card), o.card_name))
    ratios = _ratios(nearest)
    return np.array([math.log(ratios[s]) if s in ratios else UNSEEN for s in fork.schedule_ids])


def lookup_reach(fork: DatasetFork, others: Sequence[DatasetFork], k: int) -> float | None:
    """The best a lookup of other cards' own picks does on `fork` with `k` of them: the fork's best time over
    that of the fastest of its members among every other card's own `k` fastest configurations, as a slowdown
    (>= 1). Not a ranker: it reads the fork's own times, as an oracle choosing among the other cards' own picks
    would. Going lower takes a configuration no other card ranked that high (with one other card, the
    transfer order's top `k` are its picks). None where no other card's top `k` worked on this fork."""
    if k < 1:
        raise ValueError(f"k={k}: a lookup picks one configuration at least")
    if not fork.ok.any():
        return None
    index = {sid: i for i, sid in enumerate(fork.schedule_ids)}
    best = float(np.min(fork.times[fork.ok]))
    reached = math.inf
    for other in same_kernel_elsewhere(fork, others):
        ok = np.flatnonzero(other.ok)
        for j in ok[np.argsort(other.times[ok], kind="stable")][:k]:
            i = index.get(other.schedule_ids[j])
            if i is not None and fork.ok[i]:
                reached = min(reached, float(fork.times[i]))
    return None if math.isinf(reached) else reached / best
