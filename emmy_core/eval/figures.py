"""What one fork says of a prior's scores, in the golden view and the measured view, beside the baselines.

Every figure is one of `emmy_core.prior.metrics` (the functions a fit's `metrics.json` uses), so
a figure means the same in a fit and in an evaluation:

- golden view, over the fork's whole pool (every candidate the rule emits for the golden's card,
  and any measured schedule it does not): the golden's rank counted strictly and with ties
  against it, the plateau between them, whether a compile would pick it; beside it the rank the
  rule's first option gives the golden (its position in the rule's order), a random order's
  expectation, and the ranks given by the most similar other card's measured order and by the
  transfer baseline;
- measured view, over the fork's measured members (a pool of configurations all actually
  measured): Kendall's tau, the top-1, top-5 and top-10 slowdowns (a failed pick counted and
  replaced by the next working one), whether the pick failed; beside them on the same members
  the rule's first option (for an extern kernel, the first configuration of its cache file's
  own order, when that order was given), a random pick, the most similar card's best and the
  transfer baseline: each a ranker of `emmy_core.ranking`, looped over (`ranking.figures`).

A figure a pool is too small for is None and counted nowhere (`metrics.minimum_sizes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from emmy_core.ir import Extern
from emmy_core.prior import metrics
from emmy_core.prior.dataset import DatasetFork
from emmy_core.ranking import FirstOption, RankContext
from emmy_core.ranking.figures import golden_baselines, measured_baselines

KS = (1, 5, 10)
GOLDEN = ("golden_rank", "golden_rank_ties", "golden_plateau", "golden_picked")
GOLDEN_BASELINES = ("first_golden_rank", "random_golden_rank", "similar_golden_rank", "similar_golden_rank_ties",
                    "transfer_golden_rank", "transfer_golden_rank_ties")
MEASURED = ("tau", *(f"top{k}" for k in KS), "pick_failed")
MEASURED_BASELINES = ("first_slowdown", "random_slowdown", "similar_slowdown", "transfer_top1", "transfer_top5",
                      "reach_top1", "reach_top5")
Figures = dict[str, float | None]


def rule_order(fork: DatasetFork, order: Mapping[str, int] | None) -> np.ndarray | None:
    """Scores that rank the whole pool in the rule's order (higher first), the first option on top: the
    `FirstOption` ranker's (an extern kernel: its cache file's order `order`, schedule_id -> position).
    None where the rule has no order (an extern kernel without one)."""
    return FirstOption().rank(RankContext(fork, (), order), np.arange(len(fork.schedule_ids)))


def golden_view(fork: DatasetFork, scores: np.ndarray, others: Sequence[DatasetFork], order: Mapping[str, int] | None) -> Figures:
    """The golden-view figures of a fork with a golden (`scores`: the prior's, over the whole pool)."""
    assert fork.golden is not None
    g = fork.golden
    out: Figures = dict(metrics.golden_figures(scores, g))
    if out["golden_rank"] is None:
        return out
    out.update(golden_baselines(RankContext(fork, others, order)))
    return out


def measured_view(fork: DatasetFork, scores: np.ndarray, others: Sequence[DatasetFork], order: Mapping[str, int] | None) -> Figures:
    """The measured-view figures of a fork (`scores`: the prior's, over its measured members only)."""
    m = np.flatnonzero(fork.measured)
    times, ok = fork.times[m], fork.ok[m]
    out: Figures = dict(metrics.pool_metrics(scores, times, ok, KS))
    out.update(measured_baselines(RankContext(fork, others, order)))
    if isinstance(fork.kernel, Extern):
        out.setdefault("first_slowdown", None)  # an extern kernel without its cache file's order has no first option
    return out
