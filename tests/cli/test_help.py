"""`emmy --help` tells the truth: a group's summary names its commands, and a flag does not look like it takes a value."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def emmy_help(*argv: str, columns: int = 120) -> str:
    env = {**os.environ, "COLUMNS": str(columns), "NO_COLOR": "1"}
    done = subprocess.run([sys.executable, "-m", "emmy_core.cli.main", *argv, "--help"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_flags_are_shown_without_a_value_type() -> None:
    for argv in ((), ("tune",), ("eval", "prior")):
        text = emmy_help(*argv)
        assert "--help" in text and "<bool>" not in text


def test_the_db_group_summary_names_every_db_command() -> None:
    from emmy_core.cli.main import app as root  # registers the file commands on the db group

    app = next(g.typer_instance for g in root.registered_groups if g.name == "db")

    summary = app.info.help or ""
    names = [c.name or (c.callback.__name__ if c.callback else "") for c in app.registered_commands]
    assert len(names) >= 7
    assert all(name in summary for name in names)


def test_help_wraps_at_the_terminal_not_at_the_docstrings_line_breaks() -> None:
    from emmy_core.cli.main import reflowed

    assert reflowed("Fit the prior and track the run in\n    MLflow.\n\n    Second\n    paragraph.\n") == (
        "Fit the prior and track the run in MLflow.\n\nSecond paragraph.")
    wide = [line.strip(" │") for line in emmy_help(columns=200).splitlines()]
    fit = next(line for line in wide if line.startswith("fit "))
    assert fit.endswith("and track the run in MLflow.")  # one line where the terminal is wide enough


def test_tune_help_is_readable_at_80_columns() -> None:
    """Issue 46: rich's boxes made `emmy tune --help` 120 lines at 80 columns, its default paths cut."""
    text = emmy_help("tune", columns=80)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80 and len(lines) < 80
    assert "[default: local]" in text and "…" not in text
