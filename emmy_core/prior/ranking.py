"""The one ranking a prior computes: its ranker's scores blended with the transfer score of the pool.

A fit compares, on the split that holds out whole cards, the ranker alone (weight 0), the transfer
order alone (weight 1) and blends between them, and ships the weight that picked best (never a
ranking worse than the lookup it could have been). `Prior.score` computes exactly this:

    score = (1 - w) * ranker + w * TRANSFER_SCALE * transfer

`transfer` is the pool's `tr.score` column (log of the geometric mean of best/time on the other
cards); a candidate no other card measured takes the pool's lowest transfer score (it ranks with
the worst known, and the ranker decides among them), and a pool nobody else measured is ranked by
the ranker alone whatever the weight. At weight 1 the ranker still breaks ties (1e-9 of it).
TRANSFER_SCALE puts log(best/time) on the ranker's scale: the ranker is fitted to a softmax of
(best/time) ** sharpness, sharpness 4.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

TRANSFER_SCALE = 4.0
WEIGHTS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)  # the blends a fit compares
TIE_BREAK = 1e-9


def mode_of(weight: float) -> str:
    """`ranker` (0), `transfer` (1) or `blend` (between)."""
    return "ranker" if weight <= 0 else "transfer" if weight >= 1 else "blend"


def combine(ranker: np.ndarray, transfer: np.ndarray, weight: float) -> np.ndarray:
    """The shipped score of one pool's candidates (see the module's docstring)."""
    r = np.asarray(ranker, dtype=np.float64)
    t = np.asarray(transfer, dtype=np.float64)
    known = ~np.isnan(t)
    if weight <= 0 or not known.any():
        return r
    filled = np.where(known, t, t[known].min())
    if weight >= 1:
        return TRANSFER_SCALE * filled + TIE_BREAK * r
    return (1.0 - weight) * r + weight * TRANSFER_SCALE * filled


def select(top1_of: Sequence[tuple[float, float | None, float | None]]) -> float:
    """The weight with the lowest (top-1, top-5) among (weight, top1, top5); equal figures keep the lower
    weight (the order of `WEIGHTS`), so a selection is a function of its figures alone."""
    known = [(t1, t5 if t5 is not None else np.inf, w) for w, t1, t5 in top1_of if t1 is not None]
    if not known:
        return 0.0
    return min(known, key=lambda x: (round(x[0], 12), round(x[1], 12), x[2]))[2]
