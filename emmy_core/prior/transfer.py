"""Leave one card out: fit on every other card's forks, score the held-out card's, beside the baselines.

What a new card gets from the prior. For each fork of the held-out card (its measured members):
the prior's top-1 and top-5 slowdown, Kendall's tau and whether its pick failed; beside them on
the same members the rule's first option (where the fork knows one), a random pick's expected
slowdown, the most similar other card's order and the transfer baseline (`baselines`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from emmy_core.prior import baselines, metrics
from emmy_core.prior.dataset import Fork
from emmy_core.prior.training import Params, design, groups_of, train

Progress = Callable[[str], None]


def fork_baselines(fork: Fork, others: Sequence[Fork]) -> dict[str, float | None]:
    """The baselines' figures on one fork's measured members, from the other cards' forks of its kernel."""
    m = np.flatnonzero(fork.measured)
    times, ok = fork.times[m], fork.ok[m]
    out: dict[str, float | None] = {"random_slowdown": metrics.random_slowdown(times, ok)}
    if fork.first is not None and fork.measured[fork.first]:
        out["first_slowdown"] = metrics.index_slowdown(int(np.flatnonzero(m == fork.first)[0]), times, ok)
    elsewhere = baselines.same_kernel_elsewhere(fork, others)
    if elsewhere:
        transfer = baselines.transfer_scores(fork, elsewhere)[m]
        out["transfer_top1"] = metrics.top_k_slowdown(transfer, times, ok, 1)
        out["transfer_top5"] = metrics.top_k_slowdown(transfer, times, ok, 5)
        similar = baselines.most_similar_scores(fork, elsewhere)
        if similar is not None:
            out["similar_slowdown"] = metrics.top_k_slowdown(similar[m], times, ok, 1)
    return out


def leave_one_card_out(forks: Sequence[Fork], names: Sequence[str], card: str, params: Params, seed: int,
                       pools: str = "measured", progress: Progress | None = None) -> list[dict[str, Any]]:
    """Per fork of `card`: the prior's figures (fitted without `card`) and the baselines'. Forks carry features."""
    train_forks = [f for f in forks if f.card_name != card]
    held = [f for f in forks if f.card_name == card]
    groups = groups_of(train_forks, pools, seed, params)
    if progress is not None:
        progress(f"without {card}: training on {len(groups)} groups of {len(train_forks)} forks")
    model = train(design(train_forks, groups, names, params.balance), params, seed)
    out = []
    for fork in held:
        m = np.flatnonzero(fork.measured)
        scores = np.asarray(model.predict(fork.features.matrix(names)), dtype=np.float64)[m]
        figures: dict[str, Any] = {"card": fork.card_name, "kernel": getattr(fork.kernel, "name", fork.kernel_id),
                                   "members": len(m)}
        figures.update(metrics.pool_metrics(scores, fork.times[m], fork.ok[m]))
        figures.update(fork_baselines(fork, train_forks))
        out.append(figures)
    return out
