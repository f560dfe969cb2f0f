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
  transfer baseline (`emmy_core.prior.transfer.fork_baselines`).

A figure a pool is too small for is None and counted nowhere (`metrics.minimum_sizes`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from emmy_core.ir import Extern
from emmy_core.prior import baselines, metrics
from emmy_core.prior.dataset import DatasetFork
from emmy_core.prior.transfer import fork_baselines

KS = (1, 5, 10)
GOLDEN = ("golden_rank", "golden_rank_ties", "golden_plateau", "golden_picked")
GOLDEN_BASELINES = ("first_golden_rank", "random_golden_rank", "similar_golden_rank", "similar_golden_rank_ties",
                    "transfer_golden_rank", "transfer_golden_rank_ties")
MEASURED = ("tau", *(f"top{k}" for k in KS), "pick_failed")
MEASURED_BASELINES = ("first_slowdown", "random_slowdown", "similar_slowdown", "transfer_top1", "transfer_top5")
Figures = dict[str, float | None]


def rule_order(fork: DatasetFork, order: Mapping[str, int] | None) -> np.ndarray | None:
    """Scores that rank the pool in the rule's order (higher first): for an Emmy kernel the pool's own
    order (the rule's options by rank, then schedules it does not emit); for an extern kernel its cache
    file's order (`order`, schedule_id -> position; a member the file lacks after every listed one).
    None for an extern kernel without an order."""
    n = len(fork.schedule_ids)
    if not isinstance(fork.kernel, Extern):
        return -np.arange(n, dtype=np.float64) if fork.first is not None else None
    if order is None:
        return None
    return -np.array([order.get(sid, n + i) for i, sid in enumerate(fork.schedule_ids)], dtype=np.float64)


def golden_view(fork: DatasetFork, scores: np.ndarray, others: Sequence[DatasetFork], order: Mapping[str, int] | None) -> Figures:
    """The golden-view figures of a fork with a golden (`scores`: the prior's, over the whole pool)."""
    assert fork.golden is not None
    g = fork.golden
    out: Figures = dict(metrics.golden_figures(scores, g))
    if out["golden_rank"] is None:
        return out
    rule = rule_order(fork, order)
    out["first_golden_rank"] = None if rule is None else float(metrics.golden_rank(rule, g)[0])
    out["random_golden_rank"] = metrics.random_golden_rank(len(scores))
    elsewhere = baselines.same_kernel_elsewhere(fork, others)
    if elsewhere:
        for name, s in (("transfer", baselines.transfer_scores(fork, elsewhere)),
                        ("similar", baselines.most_similar_scores(fork, elsewhere))):
            if s is not None:
                strict, ties = metrics.golden_rank(s, g)
                out[f"{name}_golden_rank"], out[f"{name}_golden_rank_ties"] = float(strict), float(ties)
    return out


def measured_view(fork: DatasetFork, scores: np.ndarray, others: Sequence[DatasetFork], order: Mapping[str, int] | None) -> Figures:
    """The measured-view figures of a fork (`scores`: the prior's, over its measured members only)."""
    m = np.flatnonzero(fork.measured)
    times, ok = fork.times[m], fork.ok[m]
    out: Figures = dict(metrics.pool_metrics(scores, times, ok, KS))
    out.update(fork_baselines(fork, others))
    if isinstance(fork.kernel, Extern):
        rule = rule_order(fork, order)
        out["first_slowdown"] = None
        if rule is not None:
            along = [int(i) for i in metrics.order(rule[m])]  # the file's order over the measured members
            out["first_slowdown"] = metrics.index_slowdown(along[0], times, ok, along)
    return out
