"""The `emmy` command: one typer app, one module per command group (thin: parse, call, print)."""

from __future__ import annotations

import inspect
import re
from typing import Any

import typer

from emmy_core.cli import (
    compile_cmd,
    db_cmd,
    db_files_cmd,
    eval_cmd,
    explain_cmd,
    fit_cmd,
    gate_cmd,
    graph_cmd,
    ir_cmd,
    main_job,
    prior_cmd,
    run_cmd,
    suggest_cmd,
    tune_cmd,
)

app = typer.Typer(
    name="emmy",
    help="Emmy: a small ML compiler and the data system around its autotuning.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(ir_cmd.app, name="ir")
app.add_typer(db_cmd.app, name="db")
db_files_cmd.register(db_cmd.app)
app.add_typer(graph_cmd.app, name="graph")
app.command("main")(main_job.main_job)
app.command("tune")(tune_cmd.tune)
app.command("suggest")(suggest_cmd.suggest_command)
app.command("run")(run_cmd.run)
app.command("fit")(fit_cmd.fit)
app.add_typer(prior_cmd.app, name="prior")
app.command("explain")(explain_cmd.explain_command)
app.command("compile")(compile_cmd.compile_command)
app.command("gate")(gate_cmd.gate_command)
app.add_typer(eval_cmd.app, name="eval")


RICH_HELP_MIN_WIDTH = 100
"""Below this many columns help is click's plain layout: rich's option boxes left `emmy tune --help` 120 lines
at 80 columns, its defaults cut."""


def reflowed(doc: str) -> str:
    """A docstring as help text: each paragraph's lines joined into one, so that the help wraps at the
    terminal's width, not at the source's (rich keeps a docstring's line breaks: `fit`'s summary broke
    before its last word)."""
    paragraphs = re.split(r"\n\s*\n", inspect.cleandoc(doc))
    return "\n\n".join(" ".join(line.strip() for line in p.splitlines()) for p in paragraphs if p.strip())


def terminal_width() -> int:
    from emmy_core.evidence.render import terminal_width as width

    return width()


def command() -> Any:
    """The click command typer builds, with flags shown as flags (typer labels every bool `<bool>`,
    which reads as if `--json` took a value) and help reflowed (`reflowed`)."""
    root = typer.main.get_command(app)

    def as_flag(param: Any) -> Any:
        if getattr(param, "is_flag", False) and hasattr(param, "display_type_rich"):
            param.display_type_rich = lambda ctx: None
        return param

    narrow = terminal_width() < RICH_HELP_MIN_WIDTH

    def walk(cmd: Any) -> None:
        if cmd.help:
            cmd.help = reflowed(cmd.help)
        if narrow:  # click's plain help: each option's text below it at full width, not in a third of a box
            cmd.rich_markup_mode = None
        for param in cmd.params:
            as_flag(param)
        help_option = cmd.get_help_option
        cmd.get_help_option = lambda ctx, made=help_option: as_flag(made(ctx))
        for sub in getattr(cmd, "commands", {}).values():
            walk(sub)

    walk(root)
    return root


def main() -> None:
    command()(prog_name="emmy")


if __name__ == "__main__":
    main()
