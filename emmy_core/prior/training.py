"""Training groups, the CatBoost ranker and what it is scored on: the pieces `fit_prior` assembles.

Groups (one per fork: kernel, sizes, card, setting):
- golden pools: the golden member above a seeded sample of the fork's other candidates
  (unmeasured, so not known to be slow; seed 08): relevance 1 for the golden, 0 for the rest;
- measured pools: the fork's measured members, with a per-fork relative target, so that
  every fork teaches the same scale whatever its kernel's absolute time: relevance
  `(best / time) ** sharpness` of the fork (1 for the fastest), and 0 for a failed row
  (ranked last);
- both: the measured pool where the fork has one, else its golden pool.

A measured pool larger than `max_group` members (Kernel Tuner caches hold up to 18k) is cut
into seeded random chunks of at most that many, each its own group: every group still holds
members of one fork only, and the listwise loss's cost grows with the group's size squared.
A pool larger than `max_members` (0: no limit) first keeps its fastest quarter of that many
working members and a seeded sample of the rest: the top of the order, where the pick is made,
is taught in full, and a fit's cost stops growing with the largest caches.

The ranker is CatBoost's QuerySoftMax (a query-level loss: a softmax over each group's
scores fitted to its relevance, which puts the weight on the top of the order, where the
pick is made; YetiRank is the alternative `loss`) on float features with NaN as missing
(`nan_mode` Min); its JSON model is what the artifact keeps. The defaults were chosen by
leaving one card out on the peer data (bench/prior.py): QuerySoftMax with relevance
sharpened to the 4th power picked better on unseen cards than YetiRank, than a linear
relevance and than shallower trees, and fits in a third of YetiRank's time. With the transfer
features, training on at most MAX_MEMBERS members of a pool (its fastest quarter in full) keeps a
fit on every peer cache within minutes on two cores; averaging rankers of several seeds
(`ensemble`) did not pick better on held-out cards, so the fit trains one. Fitting the trees as a
correction over the transfer order (`residual` 1: CatBoost's baseline, the shipped blend at weight
0.5) picked far worse on the peer data's held-out cards (top-1 2.43 against the transfer order's
1.36): with one card left per kernel in a fold, the training rows of most kernels have no other
card to transfer from, so the trees learn to undo the baseline where it exists. It stays off.
"""

from __future__ import annotations

import json
import math
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from emmy_core.prior import metrics
from emmy_core.prior.dataset import DatasetFork

POOL_KINDS = ("golden", "measured", "both")
DEFAULT_POOLS = "both"  # what every fit learns from unless told: the installed prior's recipe, so a chain fit
# on the committed freeze reproduces the shipped artifact (the evaluation gate compares the two)
GOLDEN_SAMPLE = 31  # other candidates drawn below a golden
MIN_MEASURED = 2  # measured members a fork needs to teach an order
MAX_GROUP = 256  # members of one training group at most (a larger measured pool is cut into chunks)
MAX_MEMBERS = 2048  # measured members of one fork trained on at most (the fastest quarter, then a sample)
MAX_ITERATIONS = 100_000  # trees of one ranker at most (a larger number is a typo, not a recipe)
MAX_DEPTH = 16  # CatBoost's deepest oblivious tree


@dataclass(frozen=True)
class Params:
    """What a fit is made of; all of it goes into the artifact's provenance and the MLflow run."""

    loss: str = "QuerySoftMax"
    iterations: int = 300
    depth: int = 6
    learning_rate: float = 0.1
    l2_leaf_reg: float = 3.0
    thread_count: int = 2  # fixed, so the same seed gives the same trees on any machine
    golden_sample: int = GOLDEN_SAMPLE
    max_group: int = MAX_GROUP
    max_members: int = MAX_MEMBERS  # measured members of one fork a fit trains on at most (0: all)
    balance: float = 0.0  # group weights: see `design`
    ensemble: int = 1  # rankers averaged into one model: see `train`
    sharpness: float = 4.0  # exponent of the measured relevance: see `relevance`
    residual: float = 0.0  # weight of the transfer score in each group's starting score: see `design`
    extra: dict[str, Any] = field(default_factory=dict)

    def sized(self, iterations: int | None = None, depth: int | None = None) -> Params:
        """This recipe with another number of trees or tree depth where given (a quicker fit for a trial or a
        test; the artifact's provenance records what was used). ValueError naming the field when out of range."""
        if iterations is not None and not 1 <= iterations <= MAX_ITERATIONS:
            raise ValueError(f"iterations must be in 1..{MAX_ITERATIONS}, not {iterations}")
        if depth is not None and not 1 <= depth <= MAX_DEPTH:
            raise ValueError(f"depth must be in 1..{MAX_DEPTH}, not {depth}")
        return replace(self, iterations=self.iterations if iterations is None else iterations,
                       depth=self.depth if depth is None else depth)

    def catboost(self, seed: int) -> dict[str, Any]:
        return {"loss_function": self.loss, "iterations": self.iterations, "depth": self.depth,
                "learning_rate": self.learning_rate, "l2_leaf_reg": self.l2_leaf_reg, "random_seed": seed,
                "thread_count": self.thread_count, "nan_mode": "Min", "verbose": False,
                "allow_writing_files": False, **self.extra}

    def to_json(self) -> dict[str, Any]:
        return {"loss": self.loss, "iterations": self.iterations, "depth": self.depth,
                "learning_rate": self.learning_rate, "l2_leaf_reg": self.l2_leaf_reg,
                "thread_count": self.thread_count, "golden_sample": self.golden_sample, "max_group": self.max_group,
                "max_members": self.max_members,
                "balance": self.balance, "ensemble": self.ensemble,
                "sharpness": self.sharpness, **({"residual": self.residual} if self.residual else {}), **self.extra}


@dataclass(frozen=True)
class Group:
    """One training group: a fork, the members it ranks and their relevance."""

    fork: int  # index into the forks
    members: np.ndarray
    relevance: np.ndarray


def relevance(fork: DatasetFork, sharpness: float = 1.0) -> np.ndarray:
    """The measured order as relevance: (best/time)**sharpness of the fork for a working row, 0 for a failed
    one. A sharper target spends the model on the top of the order, where the pick is made."""
    best = np.nanmin(fork.times) if fork.ok.any() else math.nan
    return np.where(fork.ok, (best / np.where(fork.ok, fork.times, 1.0)) ** sharpness, 0.0)


def _golden_group(i: int, fork: DatasetFork, rng: np.random.Generator, sample: int) -> Group | None:
    if fork.golden is None or len(fork.knobs) < 2:
        return None
    others = np.array([j for j in range(len(fork.knobs)) if j != fork.golden])
    picked = np.sort(rng.choice(others, size=min(sample, len(others)), replace=False))
    members = np.concatenate([[fork.golden], picked])
    rel = np.zeros(len(members))
    rel[0] = 1.0
    return Group(i, members, rel)


def _top_heavy(fork: DatasetFork, members: np.ndarray, rng: np.random.Generator, limit: int) -> np.ndarray:
    """At most `limit` of `members`: the fastest quarter of the limit, then a seeded sample of the rest."""
    if not limit or len(members) <= limit:
        return members
    times = np.where(fork.ok[members], fork.times[members], np.inf)
    ranked = members[np.argsort(times, kind="stable")]
    top = ranked[: limit // 4]
    rest = rng.choice(ranked[limit // 4:], size=limit - len(top), replace=False)
    return np.sort(np.concatenate([top, rest]))


def _measured_groups(i: int, fork: DatasetFork, rng: np.random.Generator, max_group: int,
                     sharpness: float, max_members: int = 0) -> list[Group]:
    members = np.flatnonzero(fork.measured)
    if len(members) < MIN_MEASURED or not fork.ok[members].any():
        return []
    members = _top_heavy(fork, members, rng, max_members)
    rel = relevance(fork, sharpness)
    if np.all(rel[members] == rel[members[0]]):
        return []
    if len(members) <= max_group:
        return [Group(i, members, rel[members])]
    shuffled = rng.permutation(members)
    parts = -(-len(members) // max_group)
    chunks = [np.sort(c) for c in np.array_split(shuffled, parts)]
    return [Group(i, c, rel[c]) for c in chunks if len(c) >= MIN_MEASURED and not np.all(rel[c] == rel[c[0]])]


def check_pools(pools: str) -> None:
    """Refuses an unknown pool kind (before any work is done)."""
    if pools not in POOL_KINDS:
        raise ValueError(f"pools must be one of {', '.join(POOL_KINDS)}, not {str(pools)[:20]!r}")


def training_groups(forks: Sequence[DatasetFork], pools: str, seed: int, sample: int = GOLDEN_SAMPLE,
                    max_group: int = MAX_GROUP, sharpness: float = 1.0, max_members: int = 0) -> list[Group]:
    """The groups a fit trains on (see the module's docstring); samples and chunks are drawn with `seed`."""
    check_pools(pools)
    rng = np.random.default_rng(seed)
    out: list[Group] = []
    for i, fork in enumerate(forks):
        groups: list[Group] = []
        if pools in ("measured", "both"):
            groups = _measured_groups(i, fork, rng, max_group, sharpness, max_members)
        if not groups and pools in ("golden", "both"):
            golden = _golden_group(i, fork, rng, sample)
            groups = [golden] if golden is not None else []
        out.extend(groups)
    return out


@dataclass(frozen=True)
class Rows:
    """What CatBoost trains on: features, relevance, group ids (rows contiguous per group), group weights."""

    x: np.ndarray
    y: np.ndarray
    group_ids: np.ndarray
    weights: np.ndarray | None = None
    baseline: np.ndarray | None = None  # each row's starting score (the trees fit what it leaves)


def groups_of(forks: Sequence[DatasetFork], pools: str, seed: int, params: Params) -> list[Group]:
    """`training_groups` with the sample size, chunk size and sharpness of `params`."""
    return training_groups(forks, pools, seed, params.golden_sample, params.max_group, params.sharpness,
                           params.max_members)


def transfer_baseline(fork: DatasetFork, residual: float) -> np.ndarray:
    """Every member's starting score in a residual fit: `residual` times the shipped transfer order's score
    (`ranking.combine` at weight 1 without the ranker: TRANSFER_SCALE * tr.score, a member no other card
    measured at the pool's lowest; 0 for a pool nobody else measured)."""
    from emmy_core.prior.ranking import TRANSFER_SCALE

    t = fork.features.values[:, fork.features.names.index("tr.score")]
    known = ~np.isnan(t)
    if not residual or not known.any():
        return np.zeros(len(t))
    return residual * TRANSFER_SCALE * np.where(known, t, t[known].min())


def design(forks: Sequence[DatasetFork], groups: Sequence[Group], names: Sequence[str], balance: float = 0.0,
           residual: float = 0.0) -> Rows:
    """The rows of `groups`; with `balance` b each group of a fork cut into k chunks weighs k**-b
    (0: every group alike; 1: every fork alike, however many chunks its pool made). With `residual` r the
    trees start from r times the transfer order's score (`transfer_baseline`) and fit what it leaves: the
    shipped blend at weight r / (1 + r) is then exactly that sum (weight 0.5 for r = 1)."""
    xs = [forks[g.fork].features.matrix(names)[g.members] for g in groups]
    if not xs:
        raise ValueError("no fork can be trained on: none has a golden member (--pools golden) or a measured order "
                         "(--pools measured)")
    ys = [g.relevance for g in groups]
    ids = [np.full(len(g.members), k, dtype=np.int64) for k, g in enumerate(groups)]
    weights = None
    if balance:
        chunks: dict[int, int] = {}
        for g in groups:
            chunks[g.fork] = chunks.get(g.fork, 0) + 1
        weights = np.concatenate([np.full(len(g.members), chunks[g.fork] ** -balance) for g in groups])
    baseline = None
    if residual:
        starts = {i: transfer_baseline(forks[i], residual) for i in {g.fork for g in groups}}
        baseline = np.concatenate([starts[g.fork][g.members] for g in groups])
    return Rows(np.vstack(xs), np.concatenate(ys), np.concatenate(ids), weights, baseline)


def train(rows: Rows, params: Params, seed: int) -> Any:
    """A fitted CatBoost ranker; with `params.ensemble` k > 1, k rankers of seeds seed..seed+k-1 summed into
    one model whose score is their mean (a steadier top pick than any one of them)."""
    from catboost import CatBoostRanker, Pool

    pool = Pool(rows.x, rows.y, group_id=rows.group_ids, group_weight=rows.weights, baseline=rows.baseline)
    models = [CatBoostRanker(**params.catboost(seed + i)).fit(pool) for i in range(params.ensemble)]
    if len(models) == 1:
        return models[0]
    from catboost import sum_models

    return sum_models(models, weights=[1.0 / len(models)] * len(models))  # one model: the mean of their scores


def model_json(model: Any) -> dict[str, Any]:
    """The trees in CatBoost's own JSON format, without its build and run details (`model_info` keeps
    only the training parameters), so that the same fit writes the same bytes."""
    fd, tmp = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    from catboost import CatBoostError

    from emmy_core.fileio.safefile import FileWriteError, why

    try:
        model.save_model(tmp, format="json")
        with open(tmp, encoding="utf-8") as fh:
            doc = json.load(fh)
    except (OSError, ValueError, CatBoostError) as exc:  # a full disk or a file-size limit cuts the file short
        reason = why(exc) if isinstance(exc, OSError) else "the file came back incomplete (a full disk or a " \
                                                            "file-size limit?)"
        raise FileWriteError(f"cannot pass the fitted model through a temporary file in {tempfile.gettempdir()}: "
                             f"{reason}; no artifact was written (an old one stands as it was)") from None
    finally:
        os.unlink(tmp)
    return {"features_info": doc["features_info"], "oblivious_trees": doc["oblivious_trees"],
            "scale_and_bias": doc.get("scale_and_bias", [1.0, [0.0]])}


def fork_figures(fork: DatasetFork, scores: np.ndarray) -> dict[str, float | None]:
    """What one fork says of a ranking of its whole pool: the measured figures over its measured
    members, the golden's ranks, and the baselines (first option, random) on the same members."""
    out: dict[str, float | None] = {}
    m = np.flatnonzero(fork.measured)
    if len(m):
        out.update(metrics.pool_metrics(scores[m], fork.times[m], fork.ok[m]))
        out["random_slowdown"] = metrics.random_slowdown(fork.times[m], fork.ok[m])
        if fork.first is not None and fork.measured[fork.first]:
            first = int(np.flatnonzero(m == fork.first)[0])
            out["first_slowdown"] = metrics.index_slowdown(first, fork.times[m], fork.ok[m])
    if fork.golden is not None:
        out.update(metrics.golden_figures(scores, fork.golden))
    return out
