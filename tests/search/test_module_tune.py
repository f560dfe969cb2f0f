"""Tuning a user's torch module: the kernels the emmy backend makes of it, measured here, answer its next compile."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from typer.testing import CliRunner

import emmy_core
from emmy_core.bench.harness import BenchConfig
from emmy_core.cli.main import app
from emmy_core.knobs.route import library_knobs
from emmy_core.knobs.vocab import schedule_id
from emmy_core.search.module_tune import module_units, tune_module
from emmy_core.store import open_store

runner = CliRunner()
LENIENT = BenchConfig(setting="rank", source="tune", spread_limit=1000.0, timeout_s=20.0, max_busy=1.0)  # shared box
LENIENT_FLAGS = ["--setting", "rank", "--spread-limit", "1000", "--timeout", "20", "--max-busy", "1"]


class CumsumBetween(nn.Module):
    """Two projections with an op Emmy does not lower between them (a running sum, left to torch)."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 32, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(F.relu(self.up(x)).cumsum(1))


def test_a_users_module_tuned_through_the_backend_answers_its_forks_from_the_local_tier(tmp_path: Path) -> None:
    module, x, db = CumsumBetween().eval(), (torch.randn(2, 5, 32),), tmp_path / "t.db"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        units = module_units(module, x, setting="rank")
        report = tune_module(module, x, budget=2, strategy="first", tuning_db=db, config=LENIENT)
    # the kernels are the backend's groups at the sizes they ran: the two projections, the cumsum left to torch
    assert len(units) == 2 and all(u.program.name.startswith("matmul_f32") for u in units), units
    assert all(u.label.startswith("CumsumBetween:graph") for u in units)
    assert {dict(u.sizes).get("T") for u in units} == {10}  # B*S rows, from the size Dynamo handed over
    assert report.rows_recorded >= 2 and not report.unit_errors
    with open_store(db, "r") as store:
        rows = store.measurements()
    assert {r.kernel_id for r in rows} == {u.kernel_id for u in units}
    library = schedule_id(library_knobs())  # torch's own kernel, measured beside the budget's candidates
    assert all(len([r for r in rows if r.kernel_id == u.kernel_id and r.schedule_id != library]) <= 2
               for u in units)  # the budget held
    assert all(any(r.kernel_id == u.kernel_id and r.schedule_id == library for r in rows) for u in units)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = emmy_core.compile(module, x, setting="rank", tuning_db=db, prior=False)
        with torch.no_grad():
            torch.testing.assert_close(compiled(*x), module(*x))
    schedules = [r for rec in compiled.records() for r in rec.resolutions if r.rule == "schedule" and r.applied]
    assert schedules and all(r.tier == "local" for r in schedules), [(r.kernel, r.tier) for r in schedules]


def test_tune_module_refuses_an_unknown_strategy_and_a_budget_below_one(tmp_path: Path) -> None:
    module, x = CumsumBetween().eval(), (torch.randn(1, 3, 32),)
    with pytest.raises(ValueError, match="known: first, random, prior, explore"):
        tune_module(module, x, strategy="genius", tuning_db=tmp_path / "t.db")
    with pytest.raises(ValueError, match="positive number"):
        tune_module(module, x, budget=0, tuning_db=tmp_path / "t.db")
    assert not (tmp_path / "t.db").exists()  # refused before anything was written


def test_emmy_tune_and_suggest_take_a_users_module_by_path(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    model = ["--model", "tests.compile.test_equals_torch:UserBlock", "--input", "B,S,48", "--shape", "B=1,S=4",
             "--dtype", "f32"]
    result = runner.invoke(app, ["tune", *model, "--strategy", "first", "--budget", "1", "--db", str(db),
                                 "--no-progress", *LENIENT_FLAGS])
    assert result.exit_code == 0, result.output
    with open_store(db, "r") as store:
        tuned = {r.kernel_id for r in store.measurements()}
    assert len(tuned) >= 3  # the norm, the gated projection, the mix and the softmax's kernels
    shown = runner.invoke(app, ["suggest", *model, "--setting", "rank", "--db", str(db), "--json"])
    assert shown.exit_code == 0, shown.output
    assert '"forks"' in shown.output
    refused = runner.invoke(app, ["tune", "--model", "tests.compile.test_equals_torch:UserBlock", "--shape",
                                  "B=1,S=4", "--db", str(db)])
    assert refused.exit_code != 0 and "give one --input per model input" in refused.output
