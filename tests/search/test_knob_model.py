"""The on-card knob model: the knobs' interaction read from other cards' rows, and what it does to the search."""

from __future__ import annotations

import itertools
from dataclasses import replace

import numpy as np
import pytest

from emmy_core.prior.transfer_features import FAILED_RATIO
from emmy_core.search import SearchPool, Trial
from emmy_core.search.knob_model import (
    ADDITIVE,
    MIN_ROWS,
    Interaction,
    interaction,
    knob_codes,
    knob_design,
    posterior,
)
from emmy_core.search.strategy import NOISE, PriorStrategy

GRID = tuple({"a": a, "b": b, "c": c} for a, b, c in itertools.product(range(5), range(5), range(4)))


def model(knobs: tuple[dict[str, int], ...]) -> tuple[np.ndarray, np.ndarray]:
    return knob_design(knobs), knob_codes(knobs)


def test_a_column_whose_knobs_act_one_by_one_reads_as_additive() -> None:
    rng = np.random.default_rng(0)
    fa, fb, fc = rng.normal(size=5), rng.normal(size=5), rng.normal(size=4)
    y = np.array([fa[k["a"]] + fb[k["b"]] + fc[k["c"]] for k in GRID]) + rng.normal(0, NOISE / 2, len(GRID))
    assert interaction(*model(GRID), y, NOISE) == ADDITIVE


def test_a_column_whose_knobs_work_together_reads_its_amplitude_and_decay() -> None:
    """y = T[a, b]: what a and b decide together, c nothing. The amplitude is what an additive fit leaves (T centred
    on its rows and columns) beyond the noise. Of the 235 pairs one knob apart, the 75 apart in c share it all;
    the 160 apart in a or b share none, and their semivariance is 5/4 of the variance (T's rows and columns
    are centred over five values), so 200/235 of it is not shared one knob apart: exp(-decay) is the rest."""
    rng = np.random.default_rng(1)
    table = rng.normal(0, 0.5, (5, 5))
    y = np.array([table[k["a"], k["b"]] for k in GRID])
    inter = interaction(*model(GRID), y, NOISE)
    pure = table - table.mean(1, keepdims=True) - table.mean(0, keepdims=True) + table.mean()
    left = pure.var() - NOISE ** 2
    assert inter.amplitude == pytest.approx(np.sqrt(left), rel=1e-6)
    assert np.exp(-inter.decay) == pytest.approx(1 - (200 / 235 * pure.var() - NOISE ** 2) / left, rel=1e-6)


def test_the_interaction_reads_only_the_configurations_other_cards_measured() -> None:
    rng = np.random.default_rng(2)
    table = rng.normal(0, 0.5, (5, 5))
    y = np.array([table[k["a"], k["b"]] for k in GRID])
    design, codes = model(GRID)
    some = y.copy()
    some[::3] = np.nan
    kept = np.isfinite(some)
    sub = tuple(k for k, keep in zip(GRID, kept, strict=True) if keep)
    a, b = interaction(design, codes, some, NOISE), interaction(*model(sub), y[kept], NOISE)
    assert a.amplitude == pytest.approx(b.amplitude) and a.decay == pytest.approx(b.decay)
    failed = some.copy()
    failed[~kept] = np.log(FAILED_RATIO)  # failed on every card that ran them: no time to read
    c = interaction(design, codes, failed, NOISE)
    assert c.amplitude == pytest.approx(a.amplitude) and c.decay == pytest.approx(a.decay)
    too_few = np.full(len(GRID), np.nan)
    too_few[: MIN_ROWS - 1] = y[: MIN_ROWS - 1]
    assert interaction(design, codes, too_few, NOISE) == ADDITIVE
    assert interaction(design, codes, None, NOISE) == ADDITIVE


def test_a_vanishing_interaction_gives_the_additive_posterior() -> None:
    design, codes = model(GRID)
    at = np.array([0, 7, 23, 42, 61, 88])
    resid = np.array([0.3, -0.1, 0.05, 0.2, -0.25, 0.0])
    m0, s0 = posterior(design, codes, at, resid, 0.1, NOISE)
    m1, s1 = posterior(design, codes, at, resid, 0.1, NOISE, Interaction(1e-5, 1.0))
    np.testing.assert_allclose(m1, m0, atol=1e-6)
    np.testing.assert_allclose(s1, s0, atol=1e-6)


def test_where_the_knobs_work_together_an_unmeasured_candidate_keeps_the_doubt_of_their_interaction() -> None:
    """The upper confidence bound's doubt: where other cards' rows show the knobs working together, a candidate
    keeps most of the interaction's variance beyond the additive model's, less of it one knob from a measured
    row than far from all of them."""
    design, codes = model(GRID)
    index = {(k["a"], k["b"], k["c"]): i for i, k in enumerate(GRID)}
    at = np.array([index[0, 0, 0], index[1, 1, 1], index[2, 2, 2], index[3, 3, 3], index[4, 4, 0]])
    resid = np.array([0.5, 0.0, 0.0, 0.0, 0.0])
    inter = Interaction(0.3, 1.0)
    _, additive = posterior(design, codes, at, resid, 0.1, NOISE)
    _, together = posterior(design, codes, at, resid, 0.1, NOISE, inter)
    extra = together ** 2 - additive ** 2
    near, far = index[0, 0, 1], index[3, 4, 2]
    assert 0.5 * inter.amplitude ** 2 < extra[near] < extra[far] <= inter.amplitude ** 2
    assert (together[at] < together[near]).all()


def test_the_knob_model_is_additive_where_no_other_card_measured_the_pool() -> None:
    """The prior strategy reads the interaction from the pool's transfer column; without one (a pool no other
    card measured, as on a new CPU) its expectations are the additive model's to the last bit."""
    rng = np.random.default_rng(3)
    table = rng.normal(0, 0.5, (5, 5))
    transfer = np.array([table[k["a"], k["b"]] for k in GRID])
    scores = transfer + rng.normal(0, 0.3, len(GRID))
    informed = SearchPool(GRID, tuple(range(len(GRID))), 0, scores, transfer, "informed")
    alone = replace(informed, transfer=None, label="alone")
    times = np.exp(-transfer - rng.normal(0, 0.2, len(GRID)))
    trials = [Trial(i, float(times[i])) for i in (0, 17, 33, 58, 71)]
    with_, without = PriorStrategy(), PriorStrategy(interactions=False)
    assert not np.allclose(with_.expected(informed, trials)[0], without.expected(informed, trials)[0])
    for got, want in zip(PriorStrategy().expected(alone, trials), without.expected(alone, trials), strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("rows", [None, 4])
def test_the_posterior_mean_is_the_joint_gaussians_conditional_mean(monkeypatch: pytest.MonkeyPatch,
                                                                    rows: int | None) -> None:
    """Checked against the model written out whole: every candidate's value is the knob values' effects (the
    intercept nearly free) plus the interaction; a measured row adds noise. With `rows`, the interaction
    conditions on that many rows, those that beat the expectation most, and the others carry its variance as
    noise of their own."""
    from emmy_core.search import knob_model

    if rows is not None:
        monkeypatch.setattr(knob_model, "INTERACTION_ROWS", rows)
    design, codes = model(GRID)
    rng = np.random.default_rng(4)
    at = rng.choice(len(GRID), 7, replace=False)
    resid = rng.normal(0, 0.3, 7)
    inter = Interaction(0.25, 0.7)
    got, _ = posterior(design, codes, at, resid, 0.1, NOISE, inter)

    prior_var = np.full(design.shape[1], 0.1 ** 2)
    prior_var[0] = 1e6
    near = np.argsort(-resid, kind="stable")[: rows or len(at)]
    keep = np.isin(np.arange(len(at)), near)
    interact = np.exp(-inter.decay * (codes[:, None, :] != codes[None, :, :]).sum(-1)) * inter.amplitude ** 2
    cross = design @ np.diag(prior_var) @ design[at].T + interact[:, at] * keep[None, :]
    among = design[at] @ np.diag(prior_var) @ design[at].T + interact[np.ix_(at, at)] * np.outer(keep, keep)
    among += np.diag(np.where(keep, NOISE ** 2, NOISE ** 2 + inter.amplitude ** 2))
    want = cross @ np.linalg.solve(among, resid)
    np.testing.assert_allclose(got, want, atol=1e-6)
