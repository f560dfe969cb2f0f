"""`emmy graph`: capture a reference model, show it after every pass, its kernels and its forks."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from emmy_core.cli.common import fail
from emmy_core.cli.options import DtypeOpt, JsonOpt, ShapeOpt, shape_of
from emmy_core.dtypes import MODEL_DTYPES, torch_dtype

app = typer.Typer(help="Model graphs: capture, passes, kernels, forks; the serving matrix.", no_args_is_help=True)

@app.command("show")
def show(
    model: Annotated[str, typer.Option("--model", help="a reference model (see `emmy graph models`)")],
    shape: ShapeOpt = "B=8,S=128",
    card: Annotated[str | None, typer.Option("--card", help="card for schedule forks: local or a table name")] = None,
    dtype: DtypeOpt = "f16",
    stage: Annotated[str | None, typer.Option("--stage", help="the graph after this pass (capture, canonicalize, "
                                                              "...; 'all' for every one); default: the final graph")]
    = None,
    as_json: JsonOpt = False,
) -> None:
    """Print the graph (after the last pass, or --stage), the kernels (deduped, with counts) and each fork.

    The model is captured at small sizes and specialised to --shape: no tensor of that shape is made.
    """

    from emmy_core.graph.errors import GraphError
    from emmy_core.graph.forks import forks
    from emmy_core.graph.models import MODEL_NAMES
    from emmy_core.graph.pipeline import compile_model
    from emmy_core.ir import IRError

    if model not in MODEL_NAMES:
        fail(f"unknown model {model!r}; known models: {', '.join(MODEL_NAMES)}")
    if dtype not in MODEL_DTYPES:
        fail(f"--dtype must be one of {', '.join(MODEL_DTYPES)}, got {dtype!r}")
    sizes = shape_of(shape)
    resolved = None
    if card is not None:
        from emmy_core.targets.resolve import UnknownCard, resolve_card

        try:
            resolved = resolve_card(card)
        except UnknownCard as exc:
            fail(str(exc))
    try:
        lowered = compile_model(model, sizes, torch_dtype(dtype))
        fks = forks(lowered, resolved)
    except (GraphError, IRError) as exc:
        fail(str(exc))
    kernels = [
        {"kernel_id": kid, "name": steps[0].program.name, "family": steps[0].family, "count": len(steps),
         "nodes": [s.node for s in steps]}
        for kid, steps in lowered.identities().items()
    ]
    from emmy_core.ir import kernel_id

    fork_rows = [
        {"kernel_id": kernel_id(f.kernel), "kernel": f.kernel.name, "rule": f.rule, "options": len(f.options),
         "default": f.option_label(0)}
        for f in fks
    ]
    from emmy_core.graph.pipeline import PASSES

    offers = {p.name: p.forks for p in PASSES}
    names = [name for name, _ in lowered.stages]
    if stage is None:
        stages = [lowered.stages[-1]]
    elif stage == "all":
        stages = list(lowered.stages)
    elif stage in names:
        stages = [s for s in lowered.stages if s[0] == stage]
    else:
        fail(f"--stage {stage!r}: the stages are {', '.join(names)} (or all)")
    if as_json:
        out = {
            "model": model, "shape": sizes, "dtype": dtype, "card": resolved.name if resolved else None,
            "stages": [{"pass": name, "nodes": len(g.nodes), "graph": g.text(), "offers": list(offers.get(name, ()))}
                       for name, g in stages],
            "kernels": kernels, "kernel_count": len(lowered.kernels), "forks": fork_rows,
        }
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    for name, g in stages:
        forks_note = f"; offers {', '.join(offers[name])}" if offers.get(name) else ""
        typer.echo(f"== after {name} ({sum(1 for _ in g.compute())} compute nodes{forks_note}) ==")
        typer.echo(g.text())
    typer.echo(f"== kernels: {len(lowered.kernels)} launches, {len(kernels)} distinct ==")
    for k in kernels:
        typer.echo(f"  {k['kernel_id'][:12]}  x{k['count']:<3} {k['family']:<11} {k['name']}")
    typer.echo(f"== forks ({'card ' + resolved.name if resolved else 'no card: schedule forks need --card'}) ==")
    for f in fork_rows:
        typer.echo(f"  {f['kernel_id'][:12]}  {f['rule']:<14} {f['options']:>5} options  default: {f['default']}")


@app.command("models")
def models() -> None:
    """List the reference models every `--model` option accepts."""
    from emmy_core.graph.models import MODEL_NAMES

    for name in MODEL_NAMES:
        typer.echo(name)


@app.command("matrix")
def matrix(
    path: Annotated[str | None, typer.Option("--file", help="a serving-matrix file (default: the committed one)")]
    = None,
) -> None:
    """Print the serving matrix the release gate covers: models, shapes, cards, settings."""
    from emmy_core.graph.serving import ServingMatrixError, load_serving_matrix

    try:
        m = load_serving_matrix(path)
    except ServingMatrixError as exc:
        fail(str(exc))
    for sm in m.models:
        shapes = "  ".join(",".join(f"{k}={v}" for k, v in s) for s in sm.shapes)
        typer.echo(f"{sm.name} ({sm.dtype}): {shapes}")
    typer.echo(f"cards: {', '.join(m.cards)}")
    typer.echo(f"settings: {', '.join(m.settings)}")
    typer.echo(f"cases: {len(m.cases())}")
