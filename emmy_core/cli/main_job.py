"""`emmy main`: what the chain left, for a person to read.

`make run` runs `python -m pipelines`, which materializes the whole chain through Dagster and
then prints this report; `emmy main` prints it again from the files the chain left under
`_data/` (the library never imports the orchestration). Three parts: the evaluation table
(the candidate prior beside the installed one), the model's forks with the evidence that
answers each on this machine's card, and the three ways to look further.
"""

from __future__ import annotations

import datetime as _dt
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from emmy_core.cli.common import fail
from emmy_core.cli.options import SettingOpt, ShapeOpt, shape_of
from emmy_core.evidence.render import terminal_width

if TYPE_CHECKING:
    from emmy_core.chain.paths import ChainPaths

def width() -> int:
    """Columns the report fits (the terminal's when it is printed, else 120): long lines wrap between words,
    and a word wider than the line (a path) is printed whole, never cut."""
    return terminal_width()

DEFAULT_MODEL = "llama_block"
DEFAULT_SHAPE = "B=1,S=128"


def main_job(
    model: Annotated[str, typer.Option("--model", help="reference model of the serving matrix")] = DEFAULT_MODEL,
    shape: ShapeOpt = DEFAULT_SHAPE,
    data: Annotated[Path, typer.Option("--data", help="folder the chain wrote (tuning database, dataset, "
                                                      "evaluation)")] = Path("_data"),
    setting: SettingOpt = "deploy",
) -> None:
    """Print what the chain left: the evaluation, the model's forks and their evidence, where to look further."""
    from emmy_core.cli.options import model_and_inputs
    from emmy_core.codegen.backend import SETTINGS

    if setting not in SETTINGS:  # refused before half a report is printed
        fail(f"--setting {setting!r}: known settings: {', '.join(SETTINGS)}")
    dims = shape_of(shape)
    model_and_inputs(model, "f16", None)
    report(model, dims, data, setting)


def say(text: str, indent: str = "  ") -> None:
    """Prints `text` wrapped to the report's width, every line indented by `indent` (a pasteable command is
    printed whole: wrapping would break it)."""
    import textwrap

    for line in text.splitlines() or [""]:
        if len(indent + line) <= width() or line.lstrip().startswith((".venv/", "DAGSTER_HOME=")):
            typer.echo(indent + line if line else "")
        else:
            typer.echo(textwrap.fill(line, width(), initial_indent=indent, subsequent_indent=indent + "  ",
                                     break_on_hyphens=False, break_long_words=False))


def report(model: str, dims: dict[str, int], data: Path, setting: str = "deploy") -> None:
    """The main job's report, from the files under `data` (missing parts say how to make them)."""
    from emmy_core.chain.paths import ChainPaths

    paths = ChainPaths(data=data)
    evaluation_section(paths.evaluation)
    install_line(paths)
    fork_section(model, dims, setting)
    next_steps_section(data)


def evaluation_section(folder: Path) -> None:
    """The evaluation table: the candidate prior beside the installed one, the baselines, and the verdict
    (`chain.evaluation.judge` on the report the chain wrote).

    An evaluation older than the last chain run, when that run stopped, is marked stale with the run's
    cause (`chain-status.json`): it is never shown as if it were this run's."""
    from emmy_core.chain import evaluation as ev
    from emmy_core.chain.chainstatus import read_status
    from emmy_core.fileio.sourcefile import SourceError

    typer.echo("== the prior, judged on the dataset (candidate beside the installed prior)")
    doc = folder / "report.json"
    try:
        status = read_status(folder.parent)
    except SourceError as exc:
        status = None
        say(f"(the last run's status cannot be read: {exc})")
    if status is not None and not status.success:
        say(f"the last chain run ({status.run_id[:36]}, {status.finished}) STOPPED: {status.cause}")
    try:
        evaluation = ev.read_evaluation(folder)
    except SourceError as exc:
        say(f"the evaluation in {folder} cannot be read: {exc}")
        return
    if evaluation is None:
        say(f"no evaluation in {folder} yet: `make run` fits and evaluates a prior")
        return
    if status is not None and not status.success and doc.stat().st_mtime < status.finished_at():
        written = _dt.datetime.fromtimestamp(doc.stat().st_mtime, _dt.UTC).replace(microsecond=0).isoformat()
        say(f"STALE: the evaluation below is from an earlier run (written {written}), not from the run "
                   "that stopped")
    from emmy_core.eval.tables import terminal_text

    say(terminal_text(evaluation.table(), width() - 2))
    verdict = ev.judge(evaluation)
    say(f"verdict: {'install' if verdict.passed else 'keep the installed prior'} ({verdict.reason[:600]})")
    say(f"report and plots: {folder}/ (report.json, table.md, "
               f"{', '.join(p.name for p in sorted(folder.glob('*.png'))) or 'no plots'})")


def install_line(paths: ChainPaths) -> None:
    """Whether the candidate is the installed prior now (content digests compared): `make run` never installs."""
    from emmy_core.chain import steps
    from emmy_core.prior import PriorError

    if not paths.candidate.is_file():
        return
    try:
        same = steps.content_digest(paths.candidate) == steps.content_digest(paths.installed)
    except (PriorError, OSError) as exc:
        say(f"installed: cannot tell ({str(exc)[:200]})")
        return
    say(f"installed: {'yes, the candidate is the installed prior' if same else 'no'} "
               f"({paths.installed}); `make run` never installs: the nightly_refresh job does when the verdict "
               "allows, and `emmy fit --install` refits the installed prior from the freeze")


def fork_section(model: str, dims: dict[str, int], setting: str) -> dict[str, int]:
    """The model's forks on this machine's card, each settled by the evidence resolver as a compile would
    (`emmy_core.compiler.explain`, nothing built): the freeze's goldens, the local tuning database, the
    installed prior, the rule's first option. Returns the count per tier."""
    from emmy_core.cli.compile_cmd import SMALL
    from emmy_core.cli.options import model_and_inputs
    from emmy_core.compiler import explain
    from emmy_core.ir import format_sizes

    module, inputs_fn = model_and_inputs(model, "f16", None)
    compiled = explain(module, inputs_fn(SMALL), dims, setting=setting, name=model)
    card, kernels = compiled.card, compiled.lowered.kernels
    counts = Counter(k.kernel_id for k in kernels)
    typer.echo("")
    say(f"== {model} at {format_sizes(dims)} for {card.name} ({card.target}), setting {setting}", indent="")
    say(f"{len(kernels)} kernels, {len(counts)} distinct")
    say(compiled.explain(width=width() - 2))
    tiers = compiled.record.tiers()
    if not tiers["golden"]:
        say(f"(no golden for {model}'s kernels on {card.name} in the freeze: `emmy tune` measures this machine, "
            "and the nightly refresh folds its tune files in)")
    return tiers


def next_steps_section(data: Path) -> None:
    """The three ways to look further, each a command to paste."""
    from emmy_core.prior.tracking import resolve_uri

    table = data / "dataset" / "measurements.parquet"
    query = ("SELECT card, setting, count(*) AS rows, count(DISTINCT kernel_id) AS kernels FROM "
             f"'{table}' GROUP BY ALL ORDER BY ALL")
    typer.echo("\n== where to look further")
    say("the asset graph, its runs and checks (then open http://127.0.0.1:3000):")
    say("  DAGSTER_HOME=\"$PWD\" .venv/bin/dagster dev -m pipelines.definitions -h 127.0.0.1 -p 3000")
    say("every fit, its parameters, metrics and plots (then open "
        "http://127.0.0.1:5000/#/experiments/1/runs?workflowType=machine_learning, the runs of emmy-prior-fits):")
    say(f"  .venv/bin/mlflow ui --backend-store-uri {resolve_uri(None)} --host 127.0.0.1 --port 5000")  # fits' own
    say("the dataset, with DuckDB:")
    say(f"  .venv/bin/python -c \"import duckdb; duckdb.sql(\\\"{query}\\\").show()\"")
