"""`emmy eval search`: strategies replayed on an export's measured pools, scored per budget, per card and overall."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.search.curves import PoolTruth, best_curve, methodology_score, slowdowns

runner = CliRunner()


def test_eval_search_replays_each_strategy_and_writes_the_curves(caches_export: Callable, tile_prior: Path,
                                                                  tmp_path: Path) -> None:
    # file order: tile 2 first (2 ms), then tile 1 (4 ms), tile 3 (1 ms, the best); the prior ranks tile 3 first
    export, files = caches_export({"k": [(2, 2.0), (1, 4.0), (3, 1.0)]})
    out, plots = tmp_path / "curves.json", tmp_path / "plots"
    result = runner.invoke(app, ["eval", "search", str(export), "--strategies", "first,prior,random", "--budgets",
                                 "1,2,3", "--offline-file", str(tile_prior), "--extern-order", str(files[0]),
                                 "--json", str(out), "--plots", str(plots)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())
    curves = doc["curves"]
    assert curves["first"] == {"1": {"slowdown": 2.0, "pools": 1}, "2": {"slowdown": 2.0, "pools": 1},
                               "3": {"slowdown": 1.0, "pools": 1}}
    assert curves["prior"]["1"]["slowdown"] == 2.0 and curves["prior"]["2"]["slowdown"] == 1.0  # first, then its top
    assert curves["random"]["3"] == {"slowdown": 1.0, "pools": 1}
    assert doc["per_card"]["NVIDIA RTX A4000"]["prior"]["2"] == {"slowdown": 1.0, "pools": 1}
    assert set(doc["methodology_score"]) == {"first", "prior", "random"}  # None: 3 members, random finds the best
    assert sorted(p.name for p in plots.iterdir()) == ["search-NVIDIA_RTX_A4000.png", "search-all_pools.png"]
    foreign = tmp_path / "notes.json"
    foreign.write_text('{"mine": 1}')
    again = runner.invoke(app, ["eval", "search", str(export), "--strategies", "first", "--budgets", "1",
                                "--offline-file", str(tile_prior), "--json", str(foreign)])
    assert again.exit_code != 0 and "not search curves" in again.output and foreign.read_text() == '{"mine": 1}'


def test_eval_search_refuses_an_unknown_strategy_a_bad_budget_and_no_strategy_or_seed(caches_export: Callable, tile_prior: Path) -> None:
    export, _ = caches_export({"k": [(2, 2.0), (1, 4.0)]})
    bad = runner.invoke(app, ["eval", "search", str(export), "--strategies", "oracle", "--offline-file",
                              str(tile_prior)])
    assert bad.exit_code != 0 and "unknown strategies oracle" in bad.output
    zero = runner.invoke(app, ["eval", "search", str(export), "--budgets", "0,4", "--offline-file", str(tile_prior)])
    assert zero.exit_code != 0 and "budgets must be positive" in zero.output
    none = runner.invoke(app, ["eval", "search", str(export), "--strategies", "", "--offline-file", str(tile_prior)])
    assert none.exit_code != 0 and "no search strategy given" in none.output  # was an empty table
    seedless = runner.invoke(app, ["eval", "search", str(export), "--seeds", ",", "--offline-file", str(tile_prior)])
    assert seedless.exit_code != 0 and "give at least one whole number" in seedless.output  # was every curve empty


@pytest.mark.parametrize("draws", [1, 5])
def test_the_methodology_score_is_one_for_the_optimum_at_once_and_below_zero_for_the_worst(draws: int) -> None:
    pytest.importorskip("autotuning_methodology")
    working = np.sort(np.random.default_rng(0).uniform(1.0, 9.0, 200))
    truth = {"p": PoolTruth("p", "c", working)}
    best = methodology_score({"p": [[float(working[0])] * 8] * draws}, truth, 8)
    worst = methodology_score({"p": [[float(working[-1])] * 8] * draws}, truth, 8)
    assert best == pytest.approx(1.0) and worst is not None and worst < 0


def test_the_best_curve_is_the_best_found_within_every_budget_and_holds_past_the_run() -> None:
    truth = PoolTruth("p", "c", np.array([1.0, 2.0, 3.0, 9.0]))
    run = [None, 3.0, float("nan"), 2.0, 3.0]  # a failure, a time, a placeholder, a better time, a worse one
    curve = best_curve(run, 8, truth)
    assert curve.tolist() == [9.0, 3.0, 3.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    # the curve the score reads is the slowdown each budget's figure reads, times the pool's best
    assert [slowdowns({"p": [run]}, {"p": truth}, k)["p"] for k in range(1, 9)] == pytest.approx(curve.tolist())
    assert best_curve([], 3, truth).tolist() == [9.0, 9.0, 9.0]  # nothing measured: the pool's worst
    assert best_curve(run, 2, truth).tolist() == [9.0, 3.0]


def test_a_budget_past_every_pool_is_scored_as_the_pools_and_costs_no_more() -> None:
    pytest.importorskip("autotuning_methodology")
    working = np.sort(np.random.default_rng(1).uniform(1.0, 9.0, 50))
    truth = {"p": PoolTruth("p", "c", working)}
    runs = {"p": [list(np.random.default_rng(2).permutation(working)[:30])]}
    # the random baseline has found the best by the pool's size, so evaluations past it are left out
    assert methodology_score(runs, truth, 10**12) == methodology_score(runs, truth, len(working))


def test_eval_search_plots_replace_only_their_own_pngs_and_write_none_when_one_name_is_taken(
        caches_export: Callable, tile_prior: Path, tmp_path: Path) -> None:
    export, _ = caches_export({"k": [(2, 2.0), (1, 4.0), (3, 1.0)]})

    def run(plots: Path) -> str:
        result = runner.invoke(app, ["eval", "search", str(export), "--strategies", "prior", "--budgets", "1,2",
                                     "--offline-file", str(tile_prior), "--plots", str(plots)])
        assert result.exit_code != 0
        return result.output

    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "search-NVIDIA_RTX_A4000.png").write_text("my notes")  # a card's plot name holds a user's file
    assert "not a search-curve plot" in run(taken)
    assert sorted(p.name for p in taken.iterdir()) == ["search-NVIDIA_RTX_A4000.png"]  # the overall one neither
    assert (taken / "search-NVIDIA_RTX_A4000.png").read_text() == "my notes"
    (tmp_path / "overall").mkdir()
    (tmp_path / "overall" / "search-all_pools.png").write_text("mine")  # refused before the replay
    assert "not a search-curve plot" in run(tmp_path / "overall")
    assert (tmp_path / "overall" / "search-all_pools.png").read_text() == "mine"
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    assert "not a folder" in run(a_file) and a_file.read_text() == "x"
    fresh = tmp_path / "fresh"
    ok = runner.invoke(app, ["eval", "search", str(export), "--strategies", "prior", "--budgets", "1,2",
                             "--offline-file", str(tile_prior), "--plots", str(fresh)])
    assert ok.exit_code == 0, ok.output
    again = runner.invoke(app, ["eval", "search", str(export), "--strategies", "prior", "--budgets", "1,2",
                                "--offline-file", str(tile_prior), "--plots", str(fresh)])
    assert again.exit_code == 0, again.output  # its own plots it replaces
    assert sorted(p.name for p in fresh.iterdir()) == ["search-NVIDIA_RTX_A4000.png", "search-all_pools.png"]
