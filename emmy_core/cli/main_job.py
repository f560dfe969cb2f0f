"""`emmy main`: the main job `make run` starts, on the embedded defaults.

It walks the chain that exists today, each step a library call: compile a reference model
(kernels and forks), import the repository freeze into a fresh dataset database, check it,
count it, export it, and settle every fork of the model on this machine's card with the
evidence resolver (the freeze's goldens, the local tuning database, the prior, the rule's
first option), printing the resolution record. It writes only under `_data/` and never fails
on a fresh machine.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Annotated

import typer

DEFAULT_MODEL = "llama_block"
DEFAULT_SHAPE = "B=1,S=128"


def main_job(
    model: Annotated[str, typer.Option("--model", help="reference model of the serving matrix")] = DEFAULT_MODEL,
    shape: Annotated[str, typer.Option("--shape", help="model shape, e.g. B=1,S=128")] = DEFAULT_SHAPE,
    freezes: Annotated[Path, typer.Option("--freezes", help="folder of the repository freeze")] = Path("freezes"),
    data: Annotated[Path, typer.Option("--data", help="folder for the dataset database and export")] = Path("_data"),
    setting: Annotated[str, typer.Option("--setting", help="compile setting")] = "deploy",
) -> None:
    """Run the main job on the embedded defaults: compile, import the freeze, check, export, evidence."""
    from emmy_core.cli.common import fail
    from emmy_core.graph.forks import forks
    from emmy_core.graph.pipeline import compile_model
    from emmy_core.ir import parse_sizes
    from emmy_core.store.check import check_db
    from emmy_core.store.export import export_db
    from emmy_core.store.importer import import_db
    from emmy_core.store.stats import db_stats
    from emmy_core.targets import local_card

    try:
        dims = parse_sizes(shape)
    except ValueError as exc:
        fail(str(exc))
    card = local_card()
    typer.echo(f"== 1. compile {model} at {shape} for {card.name} ({card.target})")
    import torch

    lowered = compile_model(model, dims, torch.float16)
    counts = Counter(k.kernel_id for k in lowered.kernels)
    for k in {k.kernel_id: k for k in lowered.kernels}.values():
        typer.echo(f"  {k.kernel_id[:12]}  {k.family:<11} x{counts[k.kernel_id]}  {k.program.name}")
    fork_list = forks(lowered, card)
    by_rule = Counter(f.rule.split(":")[0] for f in fork_list)
    typer.echo(f"  {len(lowered.kernels)} kernels, {len(counts)} distinct; forks: "
               + ", ".join(f"{n} {rule}" for rule, n in sorted(by_rule.items())))

    sources = sorted(p for p in freezes.glob("*.json")) if freezes.is_dir() else []
    db = data / "main.db"
    data.mkdir(parents=True, exist_ok=True)
    typer.echo(f"\n== 2. import the repository freeze ({len(sources)} files) into {db} (fresh)")
    outcomes = import_db(db, sources, fresh=True)
    for o in outcomes:
        typer.echo(f"  {'imported' if o.ok else 'REFUSED '}  {o.source} ({o.kind}): {o.message}")

    typer.echo("\n== 3. check and count")
    report = check_db(db)
    typer.echo(f"  emmy db check: {'ok' if report.ok else 'FAILED'} "
               f"({sum(report.counts.values())} problems over {len(report.counts)} kinds)")
    stats = db_stats(db)
    typer.echo("  rows: " + ", ".join(f"{t} {n}" for t, n in sorted(stats["tables"].items())))
    manifest = export_db(db, data / "dataset")
    typer.echo(f"  exported to {data / 'dataset'} (digest {str(manifest.get('digest', ''))[:16]})")

    typer.echo(f"\n== 4. evidence for each fork on {card.name}, setting {setting} (the resolver)")
    from emmy_core.evidence.context import open_sources
    from emmy_core.evidence.model import ModelResolver, resolutions_of
    from emmy_core.evidence.render import render_record
    from emmy_core.evidence.resolution import ResolutionRecord

    sources = open_sources(card, setting, freezes=freezes)  # golden: the freeze; local: the tuning database
    try:
        plans = ModelResolver(sources).model(lowered, dims)
    finally:
        skipped = sources.close()
    record = ResolutionRecord(model, card.name, setting, resolutions_of(plans), [*sources.notes, *skipped],
                              sizes=[shape])
    typer.echo("\n".join(f"  {line}" for line in render_record(record).splitlines()))
    if not record.tiers()["golden"]:
        typer.echo("  (the freeze holds no golden for this card; `emmy tune` measures this machine)")
    if not report.ok or any(not o.ok for o in outcomes):
        raise typer.Exit(1)
