"""The `emmy` command: one typer app, one module per command group (thin: parse, call, print)."""

from __future__ import annotations

import atexit
import gc
import inspect
import os
import re
import sys
import threading
from typing import Any, NoReturn

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


QUICK_COMMANDS = frozenset({"explain"})
"""Commands that only read and end within seconds, run as `quick` runs them: `emmy explain` is meant to be
used interactively (under 3 s for one model at one shape), and of its 3.3 s (one core of a 2-core Xeon)
about 0.45 s went to the cyclic garbage collector walking torch's, Dynamo's and sympy's objects as they were
imported, and 0.6 s to the interpreter's teardown freeing them one by one after the output was printed."""


def quick_command(argv: list[str]) -> bool:
    """Whether `argv` (without the program's name) runs one of `QUICK_COMMANDS`: its first word."""
    return bool(argv) and argv[0] in QUICK_COMMANDS


def exit_now(code: Any) -> NoReturn:
    """Ends the process as `sys.exit(code)` would, less the interpreter's teardown: the exit handlers run
    (`atexit`, which also removes temporary folders and stops multiprocessing's children) and stdout and
    stderr are flushed, but the modules' objects are not freed one by one. Where another thread that is not
    a daemon is alive, or the output cannot be flushed (a closed pipe), it exits the ordinary way, which
    waits for the thread and reports the pipe."""
    if any(t is not threading.main_thread() and t.is_alive() and not t.daemon for t in threading.enumerate()):
        sys.exit(code)
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        sys.exit(code)
    atexit._run_exitfuncs()
    status = 0 if code is None else code if isinstance(code, int) else 1
    try:
        if not isinstance(code, int | None):  # sys.exit("text") prints the text and exits 1
            print(code, file=sys.stderr)
        sys.stdout.flush()  # and what an exit handler printed
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(status)


def main() -> None:
    """The `emmy` program (the console script and `python -m emmy_core.cli.main`; typer's test runner calls
    `app`, not this). A command of `QUICK_COMMANDS` runs with the cyclic garbage collector off (what it
    allocates is freed at the exit) and ends by `exit_now`; every other command runs and exits as usual."""
    quick = quick_command(sys.argv[1:])
    if quick:
        gc.disable()
    try:
        command()(prog_name="emmy")
    except SystemExit as done:
        if quick:
            exit_now(done.code)
        raise


if __name__ == "__main__":
    main()
