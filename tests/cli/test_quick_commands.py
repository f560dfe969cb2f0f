"""`emmy explain` as a program (`main`: the garbage collector off, the exit without the interpreter's teardown)
prints what the command prints in process and exits with its status."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from emmy_core.cli.main import app, quick_command

ROOT = Path(__file__).resolve().parents[2]


def emmy(*argv: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "120", "NO_COLOR": "1"}
    return subprocess.run([sys.executable, "-m", "emmy_core.cli.main", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)


def test_only_explain_is_a_quick_command() -> None:
    assert quick_command(["explain", "--model", "mlp"])
    assert not quick_command([]) and not quick_command(["compile", "--model", "mlp"])
    assert not quick_command(["--help"]) and not quick_command(["db", "explain"])


def test_explain_as_a_program_prints_the_whole_record_and_keeps_its_exit_status(tmp_path: Path) -> None:
    args = ["explain", "--model", "mlp", "--shape", "B=1,S=4", "--db", str(tmp_path / "none.db"), "--no-prior"]
    done = emmy(*args)
    assert done.returncode == 0, done.stderr
    in_process = CliRunner().invoke(app, args, env={"COLUMNS": "120", "NO_COLOR": "1"})
    assert in_process.exit_code == 0, in_process.output
    # flushed whole, the coverage's last line included (Dynamo numbers graphs per process: graph0 here)
    assert done.stdout == re.sub(r"\bgraph\d+ ", "graph0 ", in_process.stdout)
    assert "coverage" in done.stdout
    strict = emmy(*args, "--strict-evidence")
    assert strict.returncode == 1 and strict.stdout == done.stdout
    refused = emmy("explain", "--model", "no_such_model")
    assert refused.returncode == 2 and "unknown model 'no_such_model'" in refused.stderr
