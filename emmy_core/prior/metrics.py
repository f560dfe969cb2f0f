"""Per-pool metrics of a ranking, shared by the fit's `metrics.json` and the evaluation report.

Every function takes one pool (the candidates of one fork) as arrays in the order the
candidates were emitted: `scores` (higher is better), `times` (measured median, µs) and
`ok` (the candidate was measured and worked). They compute each figure once, so that a
fit and an evaluation agree on what a figure means:

- the pick is the first candidate of the descending order of scores; equal scores keep
  the emitted order (a compile takes the first of equal scores);
- a pick that failed on the card is a failed pick, and the next working candidate in the
  order stands in for it, as a compile blocks the option and resolves again;
- top-k slowdown: the best time among the first k working candidates of the order, over
  the fastest working time of the pool (1.00 = the best);
- Kendall's tau (tau-b, ties accounted) between the scores and the negated times of the
  working candidates;
- golden rank: how many candidates scored strictly better than the golden, and how many
  better or equal (ties counted against the golden: the width of the plateau is the gap);
  whether a compile would pick the golden (it is first of the order);
- baselines as choices: the rule's first option (`index_slowdown`, failed ones substituted
  along the rule's order), a random pick's expectation (`random_slowdown`,
  `random_golden_rank`); a baseline that ranks (another card's order) is a score vector
  and goes through the same functions as the prior's scores.

A pool too small for a figure gives None for it and is excluded, never averaged in
(MINIMUM_SIZES states the sizes): a slowdown needs MIN_SLOWDOWN working members, a top-k
figure more than k, a correlation MIN_TAU, a pick (and so a failed pick) MIN_PICK members,
a golden rank MIN_RANK candidates. Aggregates are geometric means of slowdowns and
arithmetic means of the rest, each with the count of pools behind it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

MIN_SLOWDOWN = 2  # working members a slowdown needs (top-k needs k + 1: a first k that is not the whole pool)
MIN_TAU = 3  # working members a rank correlation needs
MIN_PICK = 2  # members a pick needs (a pool of one offers no choice, so it neither fails nor succeeds)
MIN_RANK = 2  # candidates a golden rank needs


def minimum_sizes(ks: Iterable[int] = (1, 5)) -> dict[str, str]:
    """The smallest pool each figure is computed on, as a person reads it (the report states them)."""
    out = {f"top{k}": f"{max(MIN_SLOWDOWN, k + 1)} working members" for k in ks}
    out.update({"tau": f"{MIN_TAU} working members", "pick_failed": f"{MIN_PICK} members",
                "golden_rank": f"{MIN_RANK} candidates"})
    return out


def order(scores: Sequence[float] | np.ndarray) -> np.ndarray:
    """Candidate indices from the best score down; equal scores keep their emitted order."""
    s = np.asarray(scores, dtype=np.float64)
    return np.argsort(-s, kind="stable")


def working_order(scores: Sequence[float] | np.ndarray, ok: Sequence[bool] | np.ndarray) -> np.ndarray:
    """The order with failed candidates skipped: what a compile that blocks each failure resolves to."""
    o = order(scores)
    return o[np.asarray(ok, dtype=bool)[o]]


def pick_failed(scores: Sequence[float] | np.ndarray, ok: Sequence[bool] | np.ndarray) -> bool:
    """Whether the prior's top pick failed on the card."""
    return not bool(np.asarray(ok, dtype=bool)[order(scores)[0]])


def top_k_slowdown(scores: Sequence[float] | np.ndarray, times: Sequence[float] | np.ndarray,
                   ok: Sequence[bool] | np.ndarray, k: int = 1) -> float | None:
    """Best time among the first k working candidates of the order over the pool's best (None: too small)."""
    okb = np.asarray(ok, dtype=bool)
    n_ok = int(okb.sum())
    if n_ok < max(MIN_SLOWDOWN, k + 1):
        return None
    t = np.asarray(times, dtype=np.float64)
    best = float(t[okb].min())
    picked = working_order(scores, okb)[:k]
    return float(t[picked].min()) / best


def index_slowdown(index: int, times: Sequence[float] | np.ndarray, ok: Sequence[bool] | np.ndarray,
                   emitted_order: Sequence[int] | None = None) -> float | None:
    """Slowdown of a fixed choice (a baseline's pick, e.g. the rule's first option), with failed-pick
    substitution along `emitted_order` (default: the emitted order)."""
    okb = np.asarray(ok, dtype=bool)
    if int(okb.sum()) < MIN_SLOWDOWN:
        return None
    t = np.asarray(times, dtype=np.float64)
    rest = [i for i in (emitted_order if emitted_order is not None else range(len(t))) if i != index]
    for i in (index, *rest):
        if okb[i]:
            return float(t[i]) / float(t[okb].min())
    return None


def random_slowdown(times: Sequence[float] | np.ndarray, ok: Sequence[bool] | np.ndarray) -> float | None:
    """Expected slowdown of a random pick (a failed draw is redrawn): the mean of time/best over working ones."""
    okb = np.asarray(ok, dtype=bool)
    if int(okb.sum()) < MIN_SLOWDOWN:
        return None
    t = np.asarray(times, dtype=np.float64)[okb]
    return float(np.mean(t / t.min()))


def random_top_k(times: Sequence[float] | np.ndarray, ok: Sequence[bool] | np.ndarray, k: int = 1) -> float | None:
    """Expected `top_k_slowdown` of an order nobody chose (the pool's in a store): the best of k working
    candidates drawn at random without replacement, over the pool's best (None where `top_k_slowdown` is).
    The i-th fastest of n is the best of the k with probability C(n-1-i, k-1) / C(n, k)."""
    okb = np.asarray(ok, dtype=bool)
    n = int(okb.sum())
    if n < max(MIN_SLOWDOWN, k + 1):
        return None
    t = np.sort(np.asarray(times, dtype=np.float64)[okb])
    i = np.arange(n - k, dtype=np.float64)
    ratio = (n - i - k) / (n - i - 1)  # C(n-2-i, k-1) / C(n-1-i, k-1)
    p = (k / n) * np.concatenate(([1.0], np.cumprod(ratio)))
    return float(p @ t[: n - k + 1]) / float(t[0])


def kendall_tau(scores: Sequence[float] | np.ndarray, times: Sequence[float] | np.ndarray,
                ok: Sequence[bool] | np.ndarray) -> float | None:
    """Kendall's tau-b between the scores and the negated times of the working candidates."""
    okb = np.asarray(ok, dtype=bool)
    if int(okb.sum()) < MIN_TAU:
        return None
    s = np.asarray(scores, dtype=np.float64)[okb]
    t = np.asarray(times, dtype=np.float64)[okb]
    if np.all(s == s[0]) or np.all(t == t[0]):
        return 0.0
    if np.isnan(s).any() or np.isnan(t).any():
        return None
    return tau_b(s, -t)


PAIRWISE_MAX = 256  # pools up to this size count their pairs directly; larger ones use scipy's O(n log n) count


def tau_b(x: np.ndarray, y: np.ndarray) -> float:
    """Kendall's tau-b of two NaN-free vectors with neither constant, as scipy's variant b computes it:
    (concordant - discordant) / sqrt(pairs untied in x) / sqrt(pairs untied in y), clipped to [-1, 1].

    The fit computes it for every pool of every fold, thousands of calls, most pools small. For those,
    scipy's `kendalltau` spent most of its time on a p-value (exact below 34 candidates) that nothing
    reads, so a small pool's pairs are counted here in exact integers (the same value, 10x faster);
    a large pool goes to scipy with the cheap asymptotic p-value.
    """
    n = len(x)
    if n > PAIRWISE_MAX or not (np.isfinite(x).all() and np.isfinite(y).all()):
        from scipy.stats import kendalltau  # the fit and the evaluation have scipy; scoring never calls this

        return float(kendalltau(x, y, method="asymptotic").statistic)
    sx = np.sign(x[:, None] - x[None, :]).astype(np.int64)
    sy = np.sign(y[:, None] - y[None, :]).astype(np.int64)
    # every pair is counted twice, once from each end: halved to the counts of pairs
    both, untied_x, untied_y = int(np.sum(sx * sy)) // 2, np.count_nonzero(sx) // 2, np.count_nonzero(sy) // 2
    tau = both / np.sqrt(untied_x) / np.sqrt(untied_y)
    return float(min(1.0, max(-1.0, tau)))


def golden_rank(scores: Sequence[float] | np.ndarray, golden: int) -> tuple[int, int]:
    """(candidates scored strictly better than the golden, better or equal: ties counted against it)."""
    s = np.asarray(scores, dtype=np.float64)
    g = s[golden]
    return int((s > g).sum()), int((s >= g).sum()) - 1


def pool_metrics(scores: Sequence[float] | np.ndarray, times: Sequence[float] | np.ndarray,
                 ok: Sequence[bool] | np.ndarray, ks: Iterable[int] = (1, 5)) -> dict[str, float | None]:
    """The measured-pool figures of one pool: `top{k}` slowdowns, `tau`, `pick_failed` (0/1; None for a
    pool of fewer than MIN_PICK members, which offers no choice)."""
    out: dict[str, float | None] = {f"top{k}": top_k_slowdown(scores, times, ok, k) for k in ks}
    out["tau"] = kendall_tau(scores, times, ok)
    out["pick_failed"] = (1.0 if pick_failed(scores, ok) else 0.0) if len(np.asarray(ok)) >= MIN_PICK else None
    return out


def golden_figures(scores: Sequence[float] | np.ndarray, golden: int) -> dict[str, float | None]:
    """The golden-view figures of one pool (None for a pool of fewer than MIN_RANK candidates):
    `golden_rank` (strictly better), `golden_rank_ties` (ties counted against), `golden_plateau`
    (their gap: the width of the plateau the golden sits in) and `golden_picked` (1 when a compile,
    taking the first of equal scores, would pick the golden)."""
    s = np.asarray(scores, dtype=np.float64)
    if len(s) < MIN_RANK:
        return {"golden_rank": None, "golden_rank_ties": None, "golden_plateau": None, "golden_picked": None}
    strict, ties = golden_rank(s, golden)
    return {"golden_rank": float(strict), "golden_rank_ties": float(ties), "golden_plateau": float(ties - strict),
            "golden_picked": 1.0 if int(order(s)[0]) == golden else 0.0}


def random_golden_rank(members: int) -> float | None:
    """Expected number of candidates ranked above the golden by a random order: (n - 1) / 2."""
    return (members - 1) / 2 if members >= MIN_RANK else None


def geomean(values: Iterable[float]) -> float | None:
    v = [x for x in values if x is not None]
    return math.exp(sum(math.log(x) for x in v) / len(v)) if v else None


def spread(values: Iterable[float | None]) -> dict[str, float | None]:
    """The distribution of a per-pool figure beside its mean: median, 90th percentile (nearest rank), maximum."""
    v = sorted(float(x) for x in values if x is not None)
    if not v:
        return {"p50": None, "p90": None, "max": None}
    return {"p50": float(np.median(v)), "p90": v[max(0, math.ceil(0.9 * len(v)) - 1)], "max": v[-1]}


def is_slowdown(name: str) -> bool:
    """Whether a figure is a slowdown (`top1`, `transfer_top5`, `first_slowdown`): aggregated by geometric mean."""
    return name.startswith("top") or "_top" in name or name.endswith("slowdown")


def summarize(pools: Sequence[Mapping[str, float | None]]) -> dict[str, float | int | None]:
    """Aggregate per-pool figures: slowdowns (`is_slowdown`) by geometric mean, others by mean;
    `<name>_pools` is the count of pools behind each."""
    names = sorted({k for p in pools for k in p})
    out: dict[str, float | int | None] = {}
    for name in names:
        values = [float(p[name]) for p in pools if p.get(name) is not None]  # type: ignore[arg-type]
        if is_slowdown(name):
            out[name] = geomean(values)
        else:
            out[name] = sum(values) / len(values) if values else None
        out[f"{name}_pools"] = len(values)
    return out
