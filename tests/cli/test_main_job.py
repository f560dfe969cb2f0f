"""`emmy main` (what `make run` runs) works on a fresh machine and walks the whole chain that exists."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app

ROOT = Path(__file__).resolve().parents[2]


def test_main_job_runs_on_a_fresh_machine(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["main", "--freezes", str(ROOT / "freezes"), "--data", str(tmp_path)])
    assert result.exit_code == 0, result.output
    out = result.output
    assert "12 kernels, 9 distinct" in out
    assert "emmy db check: ok" in out
    assert (tmp_path / "dataset" / "manifest.json").is_file()
    assert "== 4. evidence" in out and "forks by tier:" in out


def test_main_job_without_a_freeze_or_a_tuning_database_falls_past_the_measured_tiers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("EMMY_TUNING_DB", str(tmp_path / "no-tuning.db"))
    empty = tmp_path / "no-freeze"
    empty.mkdir()
    result = CliRunner().invoke(app, ["main", "--freezes", str(empty), "--data", str(tmp_path / "d"),
                                      "--model", "mlp"])
    assert result.exit_code == 0, result.output
    assert "forks by tier: golden 0, local 0, " in result.output and "6 fork(s) fell past" in result.output
