"""`emmy suggest`: per fork the candidates most worth measuring next and why, and the forks nothing covers."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from emmy_core.bench.plan import model_units
from emmy_core.cli.main import app
from emmy_core.knobs import candidates
from emmy_core.store import open_store
from emmy_core.store.rows import CardRow, MeasurementRow
from emmy_core.targets import local_card

runner = CliRunner()


def test_suggest_lists_a_fork_with_no_measurement_as_uncovered(tmp_path: Path) -> None:
    card = local_card()
    units = list({u.key: u for u in model_units("mlp", {"B": 1, "S": 8})}.values())
    measured, bare = units[0], units[1:]
    pool = [dict(k) for k in candidates(measured.program, card)]
    db = tmp_path / "t.db"
    with open_store(db, "w") as store:  # two rows of one fork: its first option ok, another failed
        store.record([MeasurementRow(measured.kernel_id, measured.sizes_text, pool[0], card.name, "deploy", "ok", 50.0,
                                     0.01, 5),
                      MeasurementRow(measured.kernel_id, measured.sizes_text, pool[1], card.name, "deploy", "failed",
                                     1e9, None, 0, failure="build_error")],
                     kernels=[measured.program], cards=[CardRow.from_card(card)], origin="test")
    result = runner.invoke(app, ["suggest", "--model", "mlp", "--shape", "B=1,S=8", "--db", str(db), "--top", "3",
                                 "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.output[result.output.index("{"):])
    assert sorted(doc["uncovered"]) == sorted(f"{u.program.name} {u.sizes_text}" for u in bare)
    forks = {f["kernel_id"]: f for f in doc["forks"]}
    covered = forks[measured.kernel_id]
    assert not covered["uncovered"] and covered["rows"] == 2 and covered["best_us"] == 50.0
    shown = [s["knobs"] for s in covered["suggestions"]]
    assert len(shown) == 3 and pool[0] not in shown and pool[1] not in shown  # nothing measured is suggested again
    assert all("no row yet" in s["why"] for s in covered["suggestions"])
    for u in bare:  # an uncovered fork: its first option comes first, since a tune measures it first
        first = forks[u.kernel_id]["suggestions"][0]
        assert first["knobs"] == dict(candidates(u.program, card)[0]) and forks[u.kernel_id]["rows"] == 0
        assert any("first option" in w for w in first["why"])
        assert not any("explore" in w for w in first["why"])  # a tune measures it anyway: it is not explored
    text = runner.invoke(app, ["suggest", "--model", "mlp", "--shape", "B=1,S=8", "--db", str(db)])
    assert text.exit_code == 0 and f"forks no measurement covers: {len(bare)} of {len(units)}" in text.output
    for u in bare:
        assert f"uncovered: {u.program.name} {u.sizes_text}" in text.output


def test_suggest_ranks_a_fork_from_the_pool_a_tune_searches_with_the_priors_transfer_column() -> None:
    """Where other cards of the prior's table measured a kernel, `suggest` reads their rows as a tune does: the
    pool carries the transfer column, and the explore pick says it is other cards' rows that disagree."""
    import numpy as np

    from emmy_core.prior import load_installed_prior
    from emmy_core.search.strategy import ExploreStrategy, PriorStrategy
    from emmy_core.search.suggest import fork_suggestions
    from emmy_core.search.tune import card_pool

    card, prior = local_card(), load_installed_prior()
    units = {u.key: u for u in model_units("llama_block", {"B": 1, "S": 8})}.values()
    informed = [u for u in units
                if (cols := prior.transfer(u.program, dict(u.sizes), card, "deploy",
                                           [dict(k) for k in candidates(u.program, card)])) is not None
                and np.isfinite(cols[:, 0]).any()]
    assert informed, "the installed prior's table measured none of the Llama block's kernels on another card"
    u = informed[0]
    knobs = [dict(k) for k in candidates(u.program, card)]
    pool = card_pool(prior, u.program, u.sizes, card, "deploy", knobs, 0, "")
    np.testing.assert_array_equal(pool.transfer, prior.transfer(u.program, dict(u.sizes), card, "deploy", knobs)[:, 0])
    got = fork_suggestions(u.program, u.sizes, u.sizes_text, u.kernel_id, card, "deploy", prior, [], 5)
    explore = ExploreStrategy().uncertain(pool, [], PriorStrategy().ranking(pool, []))
    picked = [s for s in got.suggestions if s.knobs == knobs[explore]]
    assert picked and any("other cards' rows" in w for w in picked[0].why)


def test_suggest_refuses_a_database_path_that_does_not_exist_or_is_a_folder(tmp_path: Path) -> None:
    """A mistyped --db must not read as 'nothing measured yet' (every fork uncovered, exit 0)."""
    missing = runner.invoke(app, ["suggest", "--model", "mlp", "--shape", "B=1,S=8", "--db", str(tmp_path / "typo.db")])
    assert missing.exit_code == 2 and "no tuning database at" in missing.output and "uncovered" not in missing.output
    assert not (tmp_path / "typo.db").exists()
    folder = runner.invoke(app, ["suggest", "--model", "mlp", "--shape", "B=1,S=8", "--db", str(tmp_path)])
    assert folder.exit_code == 2 and "it is a folder" in folder.output
    assert folder.output.count(str(tmp_path)) == 1  # the path is named once
