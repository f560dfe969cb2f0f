"""`emmy main`: the main job `make run` starts, on the embedded defaults.

It walks the chain that exists today, each step a library call: compile a reference model
(kernels and forks), import the repository freeze into a fresh dataset database, check it,
count it, export it, and say which evidence would settle each of the model's schedule forks
on this machine's card (golden, local measurement, or the rule's safe first option; the
prior is not built yet). It writes only under `_data/` and never fails on a fresh machine.
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
    from emmy_core.bench.plan import model_units
    from emmy_core.cli.common import fail
    from emmy_core.graph.forks import ForkKey, forks
    from emmy_core.graph.pipeline import compile_model
    from emmy_core.ir import format_sizes, kernel_id, parse_sizes
    from emmy_core.store import open_store
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

    typer.echo(f"\n== 4. evidence for each schedule fork on {card.name}, setting {setting}")
    tiers: Counter[str] = Counter()
    with open_store(db, "r") as store:
        golden = {(g.kernel_id, g.sizes) for g in store.goldens(card=card.name) if g.setting == setting}
        seen: set[tuple[str, str]] = set()
        for unit in model_units(model, dims):
            key = (kernel_id(unit.program), format_sizes(unit.sizes))
            if key in seen:
                continue
            seen.add(key)
            if key in golden:
                tier = "golden"
            elif store.fastest(ForkKey(key[0], key[1], card.name, setting)) is not None:
                tier = "measured"
            else:
                tier = "safe default (first option)"
            tiers[tier] += 1
            typer.echo(f"  {key[0][:12]}  {key[1]:<10} {tier}")
    typer.echo("  " + ", ".join(f"{n} {t}" for t, n in tiers.most_common()))
    if "golden" not in tiers:
        typer.echo("  (the freeze holds no golden for this card; `emmy tune` measures this machine)")
    if not report.ok or any(not o.ok for o in outcomes):
        raise typer.Exit(1)
