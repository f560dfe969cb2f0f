"""The on-card knob model: what a card's measured rows say of the candidates it has not measured yet.

A Gaussian model of the residual of -log(time) after the search's blended order, over a pool's
knob values. Its covariance between two candidates has three parts:

- a free constant (this card's speed against the order's scale);
- an additive part, KNOB_SPREAD squared per knob value the two share: each value's own effect
  (Bayesian linear regression on one-hot knob values, `knob_design`);
- an interaction part, amplitude squared times exp(-decay x the knobs where they differ): a
  candidate one knob away from a fast measured one inherits more of its residual than the
  additive part says (a Hamming-distance kernel, as Bayesian optimisation over categorical
  spaces uses).

The interaction's amplitude and decay are not tuned constants. They are read, per pool, from the
configurations other cards measured (the transfer column: their mean log(best/time)), as a
variogram: the variance left after an additive fit of the column is amplitude squared plus the
noise, and the semivariance between candidates one knob apart is noise plus amplitude squared
times (1 - exp(-decay)) (`interaction`). A kernel whose knobs act one by one has little left; a
matrix product whose tile sizes work together has much. Where no other card measured the pool
there is nothing to read it from, and the model is additive.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from emmy_core.prior.transfer_features import FAILED_RATIO

FAILED_LOG = float(np.log(FAILED_RATIO)) + 1e-9  # a transfer value at or below this is failures only
MIN_ROWS = 30  # configurations other cards measured before the pool's interaction is read from them
INTERACTION_ROWS = 64  # the most measured rows the interaction conditions on (module docstring of `posterior`)
DECAY_RANGE = (0.05, 3.0)  # the decay read from a variogram is held within these (per knob that differs)


@dataclass(frozen=True)
class Interaction:
    """How much of -log(time) the knobs decide together, not one by one (`amplitude`, in -log(time)), and how
    fast two candidates' shares of it part as their knobs differ (`decay`, per knob)."""

    amplitude: float = 0.0
    decay: float = 1.0

    def kernel(self, codes: np.ndarray, at: np.ndarray) -> np.ndarray:
        """The interaction covariance of every candidate (rows of `codes`) with the candidates `at` (indices)."""
        differ = (codes[:, None, :] != codes[at][None, :, :]).sum(axis=-1)
        return self.amplitude ** 2 * np.exp(-self.decay * differ)


ADDITIVE = Interaction()


def knob_design(knobs: Sequence[Mapping[str, object]]) -> np.ndarray:
    """An intercept column, then one 0/1 column per value of every knob that takes more than one value in the pool."""
    cols = [np.ones(len(knobs))]
    for name in sorted({k for kn in knobs for k in kn}):
        values = np.array([repr(kn.get(name)) for kn in knobs])
        distinct = np.unique(values)
        if len(distinct) > 1:
            cols += [(values == v).astype(np.float64) for v in distinct]
    return np.column_stack(cols)


def knob_codes(knobs: Sequence[Mapping[str, object]]) -> np.ndarray:
    """One integer column per knob that takes more than one value in the pool: the value's index among them."""
    cols = []
    for name in sorted({k for kn in knobs for k in kn}):
        values = [repr(kn.get(name)) for kn in knobs]
        index = {v: i for i, v in enumerate(sorted(set(values)))}
        if len(index) > 1:
            cols.append([index[v] for v in values])
    return np.array(cols, dtype=np.int64).T if cols else np.zeros((len(knobs), 0), dtype=np.int64)


def interaction(design: np.ndarray, codes: np.ndarray, values: np.ndarray | None, noise: float) -> Interaction:
    """The pool's interaction read from `values` (other cards' mean log(best/time) per candidate, NaN where none
    measured it; log(FAILED_RATIO), a configuration that failed on every card that ran it, is left out: it has
    no time; module docstring). ADDITIVE when fewer than MIN_ROWS are known, no knob varies, or nothing is left
    beyond `noise` after the additive fit."""
    if values is None or codes.shape[1] == 0:
        return ADDITIVE
    y = np.asarray(values, dtype=np.float64)
    known = np.isfinite(y) & (y > FAILED_LOG)  # a configuration that failed on every card that ran it has no time
    if int(known.sum()) < MIN_ROWS:
        return ADDITIVE
    x, y, c = design[known], y[known], codes[known]
    coef = np.linalg.lstsq(x, y, rcond=None)[0]
    resid = y - x @ coef
    left = float(resid.var()) - noise ** 2
    if left <= 0:
        return ADDITIVE
    semivar, pairs = 0.0, 0
    for j in range(c.shape[1]):  # candidates alike but for knob j: their spread is the semivariance one knob apart
        _, group = np.unique(np.delete(c, j, axis=1), axis=0, return_inverse=True)
        group = group.ravel()
        count = np.bincount(group)
        total, squares = np.bincount(group, resid), np.bincount(group, resid * resid)
        many = count >= 2
        semivar += float((squares[many] - total[many] ** 2 / count[many]).sum())
        pairs += int((count[many] - 1).sum())
    if pairs == 0:
        return Interaction(float(np.sqrt(left)), 1.0)
    share = (semivar / pairs - noise ** 2) / left  # of the interaction, the part one knob apart does not share
    decay = -np.log1p(-min(max(share, 1 - np.exp(-DECAY_RANGE[0])), 1 - np.exp(-DECAY_RANGE[1])))
    return Interaction(float(np.sqrt(left)), float(decay))


def posterior(design: np.ndarray, codes: np.ndarray, at: np.ndarray, resid: np.ndarray, knob_spread: float,
              noise: float, inter: Interaction = ADDITIVE) -> tuple[np.ndarray, np.ndarray]:
    """Per candidate, the expected residual and its standard deviation given the `resid` measured at `at`
    (module docstring). The knob values' effects are integrated out with the interaction as correlated noise
    (Rasmussen and Williams, section 2.7); the constant's doubt, alike for every candidate, is left out of
    the deviation. The interaction conditions on at most INTERACTION_ROWS rows, those that beat the
    expectation most: the others still inform the knob values, with the interaction's variance as noise
    of their own, so a long search costs the same per step and its memory stays bounded."""
    x_at = design[at]
    precision = np.full(design.shape[1], 1.0 / knob_spread ** 2)
    precision[0] = 1e-6  # the intercept (this card's speed) is free
    if inter.amplitude <= 0:
        cov = np.linalg.inv(x_at.T @ x_at / noise ** 2 + np.diag(precision))
        coef = cov @ x_at.T @ resid / noise ** 2
        var = np.einsum("ij,jk,ik->i", design[:, 1:], cov[1:, 1:], design[:, 1:])
        return design @ coef, np.sqrt(np.maximum(var, 0.0))
    near = np.argsort(-resid, kind="stable")[:INTERACTION_ROWS]
    far = np.setdiff1d(np.arange(len(at)), near)
    cross = inter.kernel(codes, at[near])  # every candidate against the rows the interaction conditions on
    p = design.shape[1]
    solved = np.linalg.solve(cross[at[near]] + noise ** 2 * np.eye(len(near)),
                             np.column_stack([x_at[near], resid[near], cross.T]))
    kx, ky = np.empty_like(x_at), np.empty(len(at))
    kx[near], ky[near], kc = solved[:, :p], solved[:, p], solved[:, p + 1:]
    alone = noise ** 2 + inter.amplitude ** 2
    kx[far], ky[far] = x_at[far] / alone, resid[far] / alone
    cov = np.linalg.inv(x_at.T @ kx + np.diag(precision))
    coef = cov @ x_at.T @ ky
    lead = design - cross @ kx[near]  # what the knob values say beyond the interaction's share of the measured
    var = np.einsum("ij,jk,ik->i", lead[:, 1:], cov[1:, 1:], lead[:, 1:]) + inter.amplitude ** 2 - np.einsum(
        "ij,ji->i", cross, kc)
    return cross @ ky[near] + lead @ coef, np.sqrt(np.maximum(var, 0.0))
