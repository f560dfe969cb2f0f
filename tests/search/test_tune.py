"""`emmy tune --strategy`: a real CPU tune of a small model into a temporary database, guided by the prior."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from typer.testing import CliRunner

from emmy_core.bench.plan import model_units
from emmy_core.cli.main import app
from emmy_core.knobs import candidates
from emmy_core.knobs.parallel import suited
from emmy_core.knobs.route import with_library
from emmy_core.knobs.vocab import schedule_id
from emmy_core.prior import load_installed_prior
from emmy_core.store import open_store
from emmy_core.targets import local_card

runner = CliRunner()
LENIENT = ["--setting", "rank", "--spread-limit", "1000", "--timeout", "20", "--max-busy", "1"]  # the machine is shared


def test_tune_strategy_prior_budget_4_measures_the_first_option_the_priors_top_3_and_torchs_kernel(
        tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    result = runner.invoke(app, ["tune", "--model", "mlp", "--shape", "B=1,S=8", "--strategy", "prior", "--budget",
                                 "4", "--db", str(db), "--no-progress", *LENIENT])
    assert result.exit_code == 0, result.output
    assert "chosen by strategy prior" in result.output
    card, prior = local_card(), load_installed_prior()
    units = {u.key: u for u in model_units("mlp", {"B": 1, "S": 8})}
    with open_store(db, "r") as store:
        rows = store.measurements()
    assert {r.kernel_id for r in rows} == {k for k, _ in units}
    for key, unit in units.items():
        pool = [dict(k) for k in candidates(unit.program, card)]
        scores = prior.score(unit.program, dict(unit.sizes), card, "rank", pool)
        fit = set(suited(unit.program, unit.sizes, pool))  # what suits the sizes first (at 8 rows: streaming)
        order = [int(i) for i in np.argsort(-scores, kind="stable") if i != 0]
        top3 = ([i for i in order if i in fit] + [i for i in order if i not in fit])[:3]
        expected = {schedule_id(pool[i]) for i in (0, *top3)}  # a pool with no rows: no failure re-ranks it
        expected |= {schedule_id(k) for k in with_library(unit.program, [])}  # torch's kernel, off the budget
        assert {r.schedule_id for r in rows if r.kernel_id == key[0]} == expected
    assert "search prior: " in result.output and "first option" in result.output  # best so far against the first
    assert "torch's kernel" in result.output  # and against torch's


def test_tune_refuses_an_unknown_strategy(tmp_path: Path) -> None:
    result = runner.invoke(app, ["tune", "--model", "mlp", "--shape", "B=1,S=8", "--strategy", "genius",
                                 "--db", str(tmp_path / "t.db"), "--no-progress", *LENIENT])
    assert result.exit_code != 0 and "known strategies: first, random, prior, explore" in result.output
