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
from typing import Annotated

import typer

from emmy_core.cli.options import SettingOpt, ShapeOpt, shape_of

DEFAULT_MODEL = "llama_block"
DEFAULT_SHAPE = "B=1,S=128"
MLFLOW_DB = Path("_tune/mlflow.db")


def main_job(
    model: Annotated[str, typer.Option("--model", help="reference model of the serving matrix")] = DEFAULT_MODEL,
    shape: ShapeOpt = DEFAULT_SHAPE,
    data: Annotated[Path, typer.Option("--data", help="folder the chain wrote (tuning database, dataset, "
                                                      "evaluation)")] = Path("_data"),
    setting: SettingOpt = "deploy",
) -> None:
    """Print what the chain left: the evaluation, the model's forks and their evidence, where to look further."""
    report(model, shape_of(shape), data, setting)


def report(model: str, dims: dict[str, int], data: Path, setting: str = "deploy") -> None:
    """The main job's report, from the files under `data` (missing parts say how to make them)."""
    evaluation_section(data / "evaluation")
    fork_section(model, dims, setting)
    next_steps_section(data)


def evaluation_section(folder: Path) -> None:
    """The evaluation table: the candidate prior beside the installed one, the baselines, and the verdict.

    An evaluation older than the last chain run, when that run stopped, is marked stale with the run's
    cause (`chain-status.json`): it is never shown as if it were this run's."""
    from emmy_core.store.chainstatus import read_status
    from emmy_core.store.sourcefile import SourceError, load_json_file

    typer.echo("== the prior, judged on the dataset (candidate beside the installed prior)")
    table, doc = folder / "table.md", folder / "report.json"
    try:
        status = read_status(folder.parent)
    except SourceError as exc:
        status = None
        typer.echo(f"  (the last run's status cannot be read: {exc})")
    if status is not None and not status.success:
        typer.echo(f"  the last chain run ({status.run_id[:36]}, {status.finished}) STOPPED: {status.cause}")
    if not table.is_file() or not doc.is_file():
        typer.echo(f"  no evaluation in {folder} yet: `make run` fits and evaluates a prior")
        return
    if status is not None and not status.success and doc.stat().st_mtime < status.finished_at():
        written = _dt.datetime.fromtimestamp(doc.stat().st_mtime, _dt.UTC).replace(microsecond=0).isoformat()
        typer.echo(f"  STALE: the evaluation below is from an earlier run (written {written}), not from the run "
                   "that stopped")
    for line in table.read_text(encoding="utf-8", errors="replace").splitlines():
        typer.echo("  " + line)
    try:
        report = load_json_file(doc, 256 * 1024 * 1024)
        verdict = report.get("verdict", {}) if isinstance(report, dict) else {}
        verdict = verdict if isinstance(verdict, dict) else {}
    except SourceError as exc:
        verdict = {"reason": f"the report cannot be read: {exc}"}
    typer.echo(f"  verdict: {'install' if verdict.get('passed') is True else 'keep the installed prior'} "
               f"({str(verdict.get('reason', 'no verdict recorded'))[:600]})")


def fork_section(model: str, dims: dict[str, int], setting: str) -> dict[str, int]:
    """The model's forks on this machine's card, each settled by the evidence resolver as a compile would.

    The tiers, in order: the freeze's goldens, the local tuning database, the installed prior, the
    rule's first option; the resolution record says which answered each fork. Returns the count per tier.
    """
    import torch

    from emmy_core.evidence.context import open_sources
    from emmy_core.evidence.model import ModelResolver, resolutions_of
    from emmy_core.evidence.render import render_record
    from emmy_core.evidence.resolution import ResolutionRecord
    from emmy_core.graph.forks import forks
    from emmy_core.graph.pipeline import compile_model
    from emmy_core.ir import format_sizes
    from emmy_core.targets import local_card

    card = local_card()
    shape = format_sizes(dims)
    typer.echo(f"\n== {model} at {shape} for {card.name} ({card.target}), setting {setting}")
    lowered = compile_model(model, dims, torch.float16)
    counts = Counter(k.kernel_id for k in lowered.kernels)
    for k in {k.kernel_id: k for k in lowered.kernels}.values():
        typer.echo(f"  {k.kernel_id[:12]}  {k.family:<11} x{counts[k.kernel_id]}  {k.program.name}")
    fork_list = forks(lowered, card)
    by_rule = Counter(f.rule.split(":")[0] for f in fork_list)
    typer.echo(f"  {len(lowered.kernels)} kernels, {len(counts)} distinct; forks: "
               + ", ".join(f"{n} {rule}" for rule, n in sorted(by_rule.items())))
    sources = open_sources(card, setting)  # the shipped freeze's goldens, the local tuning database, the prior
    try:
        plans = ModelResolver(sources).model(lowered, dims)
    finally:
        skipped = sources.close()
    record = ResolutionRecord(model, card.name, setting, resolutions_of(plans), [*sources.notes, *skipped],
                              sizes=[shape])
    typer.echo("\n".join(f"  {line}" for line in render_record(record).splitlines()))
    tiers = record.tiers()
    if not tiers["golden"]:
        typer.echo(f"  (no golden for {card.name} in the freeze: `emmy tune` measures this machine, and the "
                   "nightly refresh folds its tune files in)")
    return tiers


def next_steps_section(data: Path) -> None:
    """The three ways to look further, each a command to paste."""
    table = data / "dataset" / "measurements.parquet"
    select = "SELECT card, setting, count(*) AS rows, count(DISTINCT kernel_id) AS kernels FROM "
    group = " GROUP BY ALL ORDER BY ALL"
    typer.echo("\n== where to look further")
    typer.echo("  the asset graph, its runs and checks (then open http://127.0.0.1:3000):")
    typer.echo("    DAGSTER_HOME=\"$PWD\" .venv/bin/dagster dev -m pipelines.definitions -h 127.0.0.1 -p 3000")
    typer.echo("  every fit, its parameters, metrics and plots (then open http://127.0.0.1:5000):")
    typer.echo(f"    .venv/bin/mlflow ui --backend-store-uri sqlite:///{MLFLOW_DB} --host 127.0.0.1 --port 5000")
    typer.echo("  the dataset, with DuckDB:")
    typer.echo(f"    .venv/bin/python -c \"import duckdb; duckdb.sql(\\\"{select}'{table}'{group}\\\").show()\"")
    if table.is_file():
        import duckdb

        with duckdb.connect() as con:
            for line in str(con.sql(select + "read_parquet(?)" + group, params=[str(table)])).splitlines():
                typer.echo("    " + line)
