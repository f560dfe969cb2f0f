"""`emmy db stats`: rows per table, per card and per setting, failures, goldens."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.store import GoldenRow, MeasurementRow, open_store
from tests.store.conftest import ADD, ADD_ID, CARDS, H100, H200, KNOBS_A, KNOBS_B

runner = CliRunner()


def _store(path: Path) -> Path:
    with open_store(path, "w") as s:
        s.record([MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H200, "deploy", 4.0),
                  MeasurementRow.failed(ADD_ID, "B=8", KNOBS_B, H200, "deploy", "crash"),
                  MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H100, "rank", 5.0)],
                 kernels=[ADD], cards=CARDS,
                 goldens=[GoldenRow(ADD_ID, "B=8", H200, "deploy", knobs=KNOBS_A)])
    return path


def test_stats_counts_rows_per_table_card_setting_failures_and_goldens(tmp_path: Path) -> None:
    path = _store(tmp_path / "s.db")
    result = runner.invoke(app, ["db", "stats", "--db", str(path), "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.output)
    assert out["tables"]["measurements"] == 3 and out["tables"]["kernels"] == 1 and out["tables"]["cards"] == 3
    assert {c["card"]: (c["ok"], c["failed"]) for c in out["per_card"]} == {H100: (1, 0), H200: (1, 1)}
    assert {s["setting"]: s["measurements"] for s in out["per_setting"]} == {"deploy": 2, "rank": 1}
    assert out["failures"] == {"total": 1, "by_kind": {"crash": 1}}
    assert out["goldens"] == {"total": 1, "schedules": 1, "decisions": 0}
    text = runner.invoke(app, ["db", "stats", "--db", str(path)])
    assert text.exit_code == 0 and "failures: 1 (crash 1)" in text.output


def test_stats_refuses_a_file_of_another_version_naming_both(tmp_path: Path) -> None:
    path = _store(tmp_path / "s.db")
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET value = '0' WHERE key = 'schema_version'")
    con.close()
    result = runner.invoke(app, ["db", "stats", "--db", str(path)])
    assert result.exit_code == 2
    assert "schema version 0" in result.output and "Traceback" not in result.output


def test_db_commands_have_help() -> None:
    result = runner.invoke(app, ["db", "--help"])
    assert result.exit_code == 0 and "check" in result.output and "stats" in result.output
    for command in ("check", "stats"):
        result = runner.invoke(app, ["db", command, "--help"])
        assert result.exit_code == 0 and "--db" in result.output and "--json" in result.output
