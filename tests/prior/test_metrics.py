"""The per-pool metrics the fit and the evaluation share: ties, failed picks, small pools, golden ranks."""

from __future__ import annotations

import numpy as np
import pytest

from emmy_core.prior import metrics as m


def test_equal_scores_pick_the_first_emitted_candidate() -> None:
    assert list(m.order([1.0, 3.0, 3.0, 2.0])) == [1, 2, 3, 0]
    times, ok = [4.0, 2.0, 1.0, 3.0], [True] * 4
    assert m.top_k_slowdown([1.0, 3.0, 3.0, 2.0], times, ok, 1) == 2.0


def test_a_failed_pick_is_counted_and_the_next_working_candidate_stands_in() -> None:
    scores, times, ok = [5.0, 4.0, 3.0], [np.nan, 3.0, 1.5], [False, True, True]
    assert m.pick_failed(scores, ok)
    assert m.top_k_slowdown(scores, times, ok, 1) == 2.0
    figures = m.pool_metrics(scores, times, ok, ks=(1,))
    assert figures["pick_failed"] == 1.0 and figures["top1"] == 2.0


def test_a_pool_too_small_for_a_figure_gives_none_and_is_not_averaged_in() -> None:
    assert m.top_k_slowdown([1.0], [2.0], [True], 1) is None
    assert m.top_k_slowdown([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], [True] * 3, 5) is None
    assert m.kendall_tau([1.0, 2.0], [2.0, 1.0], [True, True]) is None
    summary = m.summarize([{"top1": 2.0, "tau": None}, {"top1": 8.0, "tau": 0.5}])
    assert summary["top1"] == 4.0 and summary["top1_pools"] == 2
    assert summary["tau"] == 0.5 and summary["tau_pools"] == 1


def test_kendall_tau_orders_scores_against_times() -> None:
    times = [1.0, 2.0, 3.0, 4.0]
    assert m.kendall_tau([4.0, 3.0, 2.0, 1.0], times, [True] * 4) == 1.0
    assert m.kendall_tau([1.0, 2.0, 3.0, 4.0], times, [True] * 4) == -1.0


def test_the_pairwise_tau_equals_scipys_tau_b_with_ties_on_both_sides_of_the_cutoff() -> None:
    from scipy.stats import kendalltau

    rng = np.random.default_rng(7)
    for n in (3, 9, 33, 34, 120, m.PAIRWISE_MAX, m.PAIRWISE_MAX + 1, 400):
        for ties in (False, True):
            x = rng.integers(0, 6, n).astype(float) if ties else rng.normal(size=n)
            y = rng.normal(size=n).round(1)
            assert m.tau_b(x, y) == kendalltau(x, y).statistic, (n, ties)
    assert m.kendall_tau([1.0, np.nan, 3.0, 4.0], [1.0, 2.0, 3.0, 4.0], [True] * 4) is None


def test_golden_rank_strict_and_with_ties_counted_against() -> None:
    assert m.golden_rank([1.0, 1.0, 1.0, 0.5], 0) == (0, 2)  # a plateau of three
    assert m.golden_rank([2.0, 1.0, 3.0], 1) == (2, 2)


def test_baselines_first_option_and_random() -> None:
    times, ok = [3.0, 1.0, 2.0], [True, True, True]
    assert m.index_slowdown(0, times, ok) == 3.0
    assert m.index_slowdown(0, [np.nan, 1.0, 2.0], [False, True, True]) == 1.0  # substituted in emitted order
    assert m.random_slowdown(times, ok) == 2.0


def test_random_top_k_is_the_expected_best_of_k_random_working_picks() -> None:
    import itertools

    times = np.array([3.0, 1.0, 2.0, 5.0, 4.0, 7.0, 2.5])
    ok = np.array([True, True, True, True, False, True, True])
    working = times[ok]
    for k in (1, 2, 3, 5):
        every = [min(c) for c in itertools.combinations(working, k)]  # each draw of k equally likely
        assert m.random_top_k(times, ok, k) == pytest.approx(np.mean(every) / working.min())
    assert m.random_top_k(times, ok, 1) == pytest.approx(m.random_slowdown(times, ok))
    assert m.random_top_k(times, ok, 6) is None  # as top_k_slowdown: k must leave a member out
    assert m.top_k_slowdown(np.arange(7.0), times, ok, 6) is None
