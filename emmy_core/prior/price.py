"""The price: a latency stand-in (µs) from a score, through an exponential curve calibrated per target.

A ranker's score orders one fork's candidates; it says nothing of how long a kernel takes,
and its offset between forks is arbitrary. A structural choice sums prices of several
kernels, so the price puts the absolute scale back:

    price_us = exp(a + b * score + c * scale)

`scale` is the kernel's size: log2 of the bytes it moves (an Emmy kernel) or of its problem
size (an extern kernel). The curve is calibrated per target (`cuda`, `cpu`, `cuda:extern`,
and `any` for a card described nowhere) on the measured working rows of the fit's dataset,
in two steps: `b` from the variation inside each fork alone (log time against score, both
centred per fork, pooled), so that it says how much one unit of score is worth within a
fork and never absorbs differences between kernels; then `a` and `c` by least squares of
what `b` leaves (log time minus b * score) against the scale, across forks. `b` is held at
or below 0 (higher score, lower price); where the scores do not order the times at all it
is 0 and the price follows the kernel's scale alone. The absolute error does not cancel
across kernels (seed 08, "What it cannot know"): a measured row always outranks a price.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

MIN_ROWS = 3
SCALE_FEATURES = ("st.log2_bytes", "st.log2_parallel")  # the first present in a row is its scale


@dataclass(frozen=True)
class Curve:
    a: float
    b: float
    c: float
    rows: int

    def to_json(self) -> dict[str, float | int]:
        return {"a": self.a, "b": self.b, "c": self.c, "rows": self.rows}


def curve_key(target: str | None, extern: bool) -> str:
    """The calibration a row belongs to: its card's target, `:extern` for a kernel defined outside Emmy."""
    if target is None:
        return "any"
    return f"{target}:extern" if extern else target


def scale_of(rows: np.ndarray, names: Sequence[str]) -> np.ndarray:
    """Each row's scale: the first of SCALE_FEATURES it has (NaN when none)."""
    index = {n: i for i, n in enumerate(names)}
    out = np.full(rows.shape[0], np.nan)
    for name in reversed(SCALE_FEATURES):
        if name in index:
            col = rows[:, index[name]]
            out = np.where(np.isnan(col), out, col)
    return out


def fit_curve(scores: np.ndarray, log_times: np.ndarray, scales: np.ndarray, groups: np.ndarray) -> Curve | None:
    """Calibrates one curve on working rows (see the module's docstring); None with fewer than MIN_ROWS."""
    keep = np.isfinite(scores) & np.isfinite(log_times) & np.isfinite(scales)
    s, t, x, g = scores[keep], log_times[keep], scales[keep], groups[keep]
    if len(s) < MIN_ROWS:
        return None
    _, inverse = np.unique(g, return_inverse=True)
    counts = np.bincount(inverse)
    ds = s - (np.bincount(inverse, s) / counts)[inverse]
    dt = t - (np.bincount(inverse, t) / counts)[inverse]
    denom = float(ds @ ds)
    b = min(0.0, float(ds @ dt) / denom) if denom > 0 else 0.0
    rest = t - b * s
    design = np.column_stack([np.ones(len(s)), x])
    if np.ptp(x) == 0:
        a, c = float(rest.mean()), 0.0
    else:
        (a, c), *_ = np.linalg.lstsq(design, rest, rcond=None)
    return Curve(float(a), b, float(c), len(s))


def read_curves(doc: object, where: str) -> dict[str, Curve]:
    """Curves from an artifact's `calibration` object; ValueError naming `where` and the field."""
    if not isinstance(doc, Mapping):
        raise ValueError(f"{where}: must be an object")
    out: dict[str, Curve] = {}
    for key, c in doc.items():
        if not isinstance(c, Mapping) or set(c) != {"a", "b", "c", "rows"}:
            raise ValueError(f"{where}.{str(key)[:40]}: must hold a, b, c and rows")
        vals = [c[k] for k in ("a", "b", "c")]
        if any(isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) for v in vals):
            raise ValueError(f"{where}.{str(key)[:40]}: a, b and c must be finite numbers")
        if vals[1] > 0:
            raise ValueError(f"{where}.{str(key)[:40]}: b must be <= 0 (a higher score is never a higher price)")
        rows = c["rows"]
        if isinstance(rows, bool) or not isinstance(rows, int) or rows < MIN_ROWS:
            raise ValueError(f"{where}.{str(key)[:40]}: rows must be an integer >= {MIN_ROWS}")
        out[str(key)] = Curve(float(vals[0]), float(vals[1]), float(vals[2]), rows)
    return out


def price(curves: Mapping[str, Curve], key: str, scores: np.ndarray, scales: np.ndarray) -> np.ndarray:
    """Prices in µs for one fork's scores: its target's curve, else the `any` curve, else exp(-score)."""
    curve = curves.get(key) or curves.get("any")
    if curve is None:
        return np.exp(-scores)
    scale = np.where(np.isnan(scales), 0.0, scales)
    return np.exp(curve.a + curve.b * scores + curve.c * scale)
