"""The price: an exponential curve of the score calibrated per target, lower for a higher score, summable."""

from __future__ import annotations

import numpy as np
import pytest

from emmy_core.prior.price import Curve, fit_curve, price, read_curves


def test_the_curve_recovers_how_score_and_scale_set_the_time() -> None:
    rng = np.random.default_rng(0)
    forks, size = 40, 16
    group = np.repeat(np.arange(forks), size)
    scale = np.repeat(rng.uniform(10, 30, forks), size)
    score = rng.normal(size=forks * size) + np.repeat(rng.normal(size=forks) * 5, size)  # arbitrary per-fork offset
    log_t = 1.5 - 0.7 * score + 0.69 * scale + rng.normal(scale=0.01, size=forks * size)
    curve = fit_curve(score, log_t, scale, group)
    assert curve is not None and curve.b == pytest.approx(-0.7, abs=0.01)
    assert curve.c == pytest.approx(0.69, abs=0.05) and curve.rows == forks * size


def test_a_higher_score_is_never_a_higher_price_and_a_flat_curve_follows_the_scale() -> None:
    group = np.repeat(np.arange(5), 4)
    score = np.tile([0.0, 1.0, 2.0, 3.0], 5)
    log_t = np.tile([0.0, 1.0, 2.0, 3.0], 5)  # scores ordered the wrong way round
    curve = fit_curve(score, log_t, np.arange(20.0) // 4, group)
    assert curve is not None and curve.b == 0.0
    prices = price({"cpu": curve}, "cpu", np.array([0.0, 5.0]), np.array([2.0, 2.0]))
    assert prices[0] == prices[1]
    with pytest.raises(ValueError, match="b must be <= 0"):
        read_curves({"cpu": {"a": 0.0, "b": 0.5, "c": 0.0, "rows": 5}}, "$.calibration")


def test_a_target_without_a_curve_uses_the_any_curve() -> None:
    curves = {"any": Curve(0.0, -1.0, 0.0, 10)}
    assert price(curves, "cuda", np.array([1.0]), np.array([np.nan]))[0] == pytest.approx(np.exp(-1.0))
    assert price({}, "cuda", np.array([2.0]), np.array([1.0]))[0] == pytest.approx(np.exp(-2.0))
