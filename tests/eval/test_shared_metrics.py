"""The per-pool metrics the evaluation added to the ones a fit shares: minimum sizes, golden figures,
distributions, and which figures aggregate as slowdowns."""

from __future__ import annotations

from emmy_core.prior import metrics as m


def test_a_pool_of_one_offers_no_pick_so_it_neither_fails_nor_counts() -> None:
    assert m.pool_metrics([1.0], [float("nan")], [False])["pick_failed"] is None
    assert m.pool_metrics([2.0, 1.0], [float("nan"), 1.0], [False, True])["pick_failed"] == 1.0


def test_a_golden_rank_needs_two_candidates_and_a_compile_picks_the_first_of_equal_scores() -> None:
    assert m.golden_figures([1.0], 0)["golden_rank"] is None
    assert m.golden_figures([1.0, 1.0, 0.0], 0)["golden_picked"] == 1.0  # first of the plateau: picked
    assert m.golden_figures([1.0, 1.0, 0.0], 1)["golden_picked"] == 0.0
    assert m.random_golden_rank(5) == 2.0 and m.random_golden_rank(1) is None


def test_every_slowdown_aggregates_by_geometric_mean_and_the_rest_by_mean() -> None:
    assert all(m.is_slowdown(n) for n in ("top1", "top10", "transfer_top1", "first_slowdown"))
    assert not any(m.is_slowdown(n) for n in ("tau", "pick_failed", "golden_rank_ties", "golden_plateau"))
    summary = m.summarize([{"transfer_top1": 2.0, "golden_plateau": 1.0}, {"transfer_top1": 8.0, "golden_plateau": 3.0}])
    assert summary["transfer_top1"] == 4.0 and summary["golden_plateau"] == 2.0


def test_a_distribution_reports_median_90th_percentile_and_maximum_of_the_pools_that_have_the_figure() -> None:
    assert m.spread([None, *range(1, 11)]) == {"p50": 5.5, "p90": 9.0, "max": 10.0}
    assert m.spread([None]) == {"p50": None, "p90": None, "max": None}


def test_the_minimum_sizes_are_stated_for_every_figure() -> None:
    sizes = m.minimum_sizes((1, 5, 10))
    assert sizes["top1"] == "2 working members" and sizes["top10"] == "11 working members"
    assert set(sizes) == {"top1", "top5", "top10", "tau", "pick_failed", "golden_rank"}
