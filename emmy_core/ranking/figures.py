"""The baselines' figures on one fork: every ranker of `BASELINES` asked for its order, then read by the same
per-pool metrics (`emmy_core.prior.metrics`) as the prior's scores, in both views.

Golden view (the whole pool): the rank each baseline gives the golden (`<name>_golden_rank`, and with ties
against it `<name>_golden_rank_ties`; the first option's order has no ties). Measured view (the measured
members): the first option's slowdown (a failed pick replaced along its order), the most similar card's
top-1 and the transfer baseline's top-1 and top-5. A ranker with no preference (random) is its expectation.
Beside them, the lookup's reach (`baselines.lookup_reach`, `reach_top1` and `reach_top5`): the best of the other
cards' own best (top 5) read on this card, an oracle's figure: below it, a pick no other card ranked that high.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from emmy_core.prior import metrics
from emmy_core.ranking.baselines import lookup_reach
from emmy_core.ranking.rankers import BASELINES, RankContext

Figures = dict[str, float | None]


def golden_baselines(context: RankContext) -> Figures:
    """Where each baseline ranks the fork's golden among its whole pool."""
    fork = context.fork
    assert fork.golden is not None
    pool = np.arange(len(fork.schedule_ids))
    out: Figures = {}
    for ranker in BASELINES:
        scores = ranker.rank(context, pool)
        if ranker.expected:
            out[f"{ranker.name}_golden_rank"] = metrics.random_golden_rank(len(pool))
        elif ranker.name == "first":
            out["first_golden_rank"] = None if scores is None else float(metrics.golden_rank(scores, fork.golden)[0])
        elif scores is not None:
            strict, ties = metrics.golden_rank(scores, fork.golden)
            out[f"{ranker.name}_golden_rank"], out[f"{ranker.name}_golden_rank_ties"] = float(strict), float(ties)
    return out


def _first(scores: np.ndarray, times: np.ndarray, ok: np.ndarray) -> Figures:
    along = [int(i) for i in metrics.order(scores)]
    return {"first_slowdown": metrics.index_slowdown(along[0], times, ok, along)}


MEASURED: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], Figures]] = {
    "first": _first,
    "similar": lambda s, t, ok: {"similar_slowdown": metrics.top_k_slowdown(s, t, ok, 1)},
    "transfer": lambda s, t, ok: {"transfer_top1": metrics.top_k_slowdown(s, t, ok, 1),
                                  "transfer_top5": metrics.top_k_slowdown(s, t, ok, 5)},
}
"""How each ordering baseline is read in the measured view (the figure names reports and fits use)."""


def measured_baselines(context: RankContext) -> Figures:
    """What each baseline's pick costs on the fork's measured members."""
    fork = context.fork
    m = np.flatnonzero(fork.measured)
    times, ok = fork.times[m], fork.ok[m]
    out: Figures = {}
    for ranker in BASELINES:
        if ranker.expected:
            out[f"{ranker.name}_slowdown"] = metrics.random_slowdown(times, ok)
            continue
        scores = ranker.rank(context, m)
        if scores is not None:
            out.update(MEASURED[ranker.name](scores, times, ok))
    for k in (1, 5):  # the lookup's reach: what no ranking of the other cards' measurements goes below
        out[f"reach_top{k}"] = lookup_reach(fork, context.elsewhere, k)
    return out
