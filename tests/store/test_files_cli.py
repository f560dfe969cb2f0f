"""The `emmy db freeze | import | export | refresh-freeze` commands: help, a round trip, clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.store import open_store
from tests.store.test_files_freeze import populate, stats_of

COMMANDS = ("freeze", "import", "export", "refresh-freeze")


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "src.db"
    with open_store(path, "w") as s:
        populate(s)
    return path


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    result = CliRunner().invoke(app, ["db", command, "--help"])
    assert result.exit_code == 0 and "Usage" in result.output


def test_freeze_export_import_refresh_through_the_command_line(db: Path, tmp_path: Path) -> None:
    run = CliRunner().invoke
    out = run(app, ["db", "freeze", "--db", str(db), "--out", str(tmp_path / "fz")])
    assert out.exit_code == 0, out.output
    assert sorted(p.name for p in (tmp_path / "fz").iterdir()) == [
        "amd-epyc-avx-512-x2.json", "nvidia-h100-80gb-hbm3.json", "nvidia-h200.json"]
    out = run(app, ["db", "export", "--db", str(db), str(tmp_path / "ex")])
    assert out.exit_code == 0 and "digest" in out.output, out.output
    out = run(app, ["db", "import", "--db", str(tmp_path / "back.db"), "--fresh", str(tmp_path / "ex")])
    assert out.exit_code == 0 and "(export)" in out.output, out.output
    assert stats_of(tmp_path / "back.db") == stats_of(db)
    out = run(app, ["db", "refresh-freeze", "--freeze-dir", str(tmp_path / "fz")])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output.strip().splitlines()[-1])["folded"] == []


def test_errors_are_one_line_without_a_trace(tmp_path: Path) -> None:
    run = CliRunner().invoke
    out = run(app, ["db", "freeze", "--db", str(tmp_path / "missing.db"), "--out", str(tmp_path / "fz")])
    assert out.exit_code == 2 and "emmy: error:" in out.output and "Traceback" not in out.output
    out = run(app, ["db", "import", "--db", str(tmp_path / "x.db"), str(tmp_path / "nothing.json")])
    assert out.exit_code == 2 and "no such file" in out.output and "Traceback" not in out.output
