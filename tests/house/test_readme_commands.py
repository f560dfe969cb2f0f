"""Every `emmy`, `dagster` and `mlflow` command the README shows works as written (issue 46): each `emmy` line
parses against the CLI (its command exists, its options and values are accepted); each `dagster` line names a
job or selection the Definitions have, and the per-card tune runs as documented, failing in one line for a card
that is not here; the `mlflow ui` line parses. Placeholders (`PATH`, `<card>`, `[optional]`) are filled in."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
from pathlib import Path

import click
import pytest
import typer

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FILL = {"PATH": "x.db", "FILE": "x.json", "DIR": "out", "DATASET": "_data/dataset", "HUB": "hub", "RUN_A": "a",
        "RUN_B": "b", "SOURCE...": "freezes/", "OUT.json": "out.json", '{"dagster/partition": "<card>"}':
        '{"dagster/partition": "NVIDIA H200"}'}
ABSENT = "NVIDIA H200"  # the card the tune line is run with: one of the matrix's, not on this machine


def readme_commands(tool: str) -> list[str]:
    """The README's shell lines that run `tool` (bare or from .venv/bin), comments and `[optional]` parts cut."""
    out, block = [], False
    for line in README.read_text(encoding="utf-8").splitlines():
        if line.startswith("```"):
            block = line.strip() in ("```sh", "```bash", "```console")
            continue
        if not block:
            continue
        text = re.sub(r"\s+#.*$", "", line).strip()
        text = re.sub(r"^(DAGSTER_HOME=\S+\s+)", "", text)
        text = re.sub(r"^\.venv/bin/", "", text)
        if not text.startswith(tool + " "):
            continue
        while re.search(r"\[[^\[\]]*\]", text):  # optional parts, innermost first
            text = re.sub(r"\s*\[[^\[\]]*\]", "", text)
        text = re.sub(r"\s+<\s+\S+$", "", text)  # an input redirection (`< kernel.emmy`)
        out.append(text)
    return out


def filled(line: str) -> list[str]:
    return [FILL.get(w, w) for w in shlex.split(line)]


def parses(cli: click.Command, argv: list[str]) -> None:
    """Parses `argv` down the click tree (nothing runs); a UsageError names what the README got wrong."""
    ctx = cli.make_context(cli.name or "cli", list(argv), resilient_parsing=False)
    while isinstance(ctx.command, click.Group) and ctx.protected_args + ctx.args:
        args = [*ctx.protected_args, *ctx.args]
        name, cmd, rest = ctx.command.resolve_command(ctx, args)
        assert cmd is not None, f"no command {name!r}"
        ctx = cmd.make_context(name, rest, parent=ctx, resilient_parsing=False)


EMMY = readme_commands("emmy")


def test_the_readme_shows_commands_of_each_tool() -> None:
    assert len(EMMY) >= 30
    assert readme_commands("dagster") and readme_commands("mlflow")


@pytest.mark.parametrize("line", EMMY)
def test_each_emmy_command_of_the_readme_parses(line: str) -> None:
    from emmy_core.cli.main import app

    try:
        parses(typer.main.get_command(app), filled(line)[1:])
    except click.ClickException as exc:
        pytest.fail(f"README: `{line}`: {exc.format_message()}")


def test_each_mlflow_command_of_the_readme_parses() -> None:
    from mlflow.cli import cli

    for line in readme_commands("mlflow"):
        parses(cli, filled(line)[1:])


def test_each_dagster_command_of_the_readme_names_what_the_definitions_have() -> None:
    from dagster._cli import create_dagster_cli

    from pipelines.definitions import defs

    jobs = set(defs.get_repository_def().job_names)
    for line in readme_commands("dagster"):
        argv = filled(line)
        parses(create_dagster_cli(), argv[1:])
        assert argv[argv.index("-m") + 1] == "pipelines.definitions", line
        if "-j" in argv:
            assert argv[argv.index("-j") + 1] in jobs, line


def test_the_documented_tune_of_a_card_not_here_fails_in_one_line_without_an_execution_block(
        tmp_path: Path) -> None:
    from emmy_core.targets import local_card

    (line,) = [c for c in readme_commands("dagster") if "tune_card" in c]
    absent = ABSENT
    if local_card().name == absent:
        pytest.skip(f"this machine is the {absent}")
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "DAGSTER_HOME": str(home)}
    done = subprocess.run([str(ROOT / ".venv" / "bin" / "dagster"), *filled(line)[1:]], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=240)
    out = done.stdout + done.stderr
    assert done.returncode == 1, out[-2000:]
    assert f"card '{absent}' is not on this machine" in out and local_card().name in out
    assert "Traceback" not in out and "Stack Trace" not in out and "DagsterInvalidConfigError" not in out
