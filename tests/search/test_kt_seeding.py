"""The search bench's Kernel Tuner runs repeat under their seed (needs the bench extra; skips without it)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("kernel_tuner")


def _bench_search():  # type: ignore[no-untyped-def]
    path = Path(__file__).resolve().parents[2] / "bench" / "search.py"
    spec = importlib.util.spec_from_file_location("bench_search_under_test", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _first_sample() -> np.ndarray:
    from kernel_tuner.strategies import bayes_opt

    return bayes_opt.LatinHypercube(d=3).integers(l_bounds=[0, 0, 0], u_bounds=[8, 8, 8], n=6)


def test_bayesian_optimisations_first_sample_repeats_under_one_seed_and_differs_under_another() -> None:
    from kernel_tuner.strategies import bayes_opt

    bench = _bench_search()
    unseeded = bayes_opt.LatinHypercube
    with bench.seeded_run(0):
        a = _first_sample()
    with bench.seeded_run(0):
        b = _first_sample()
    with bench.seeded_run(1):
        c = _first_sample()
    assert np.array_equal(a, b)
    assert not np.array_equal(a, c)
    assert bayes_opt.LatinHypercube is unseeded  # the patch lasts one run
