"""`emmy explain`: which evidence settles each fork of a model at a shape on a card (nothing built or run).

After the record, the coverage of `torch.compile(backend="emmy")`: the model traced by Dynamo on small
inputs (`COVERAGE_SIZES`), partitioned and its forks resolved, nothing built (torch computes the values).
"""

from __future__ import annotations

import json

import typer

from emmy_core.cli.common import fail
from emmy_core.cli.compile_cmd import (
    SMALL,
    StrictOpt,
    backend_coverage,
    prior_arg,
)
from emmy_core.cli.options import (
    CardOpt,
    DbOpt,
    DtypeOpt,
    FreezesOpt,
    InputOpt,
    JsonOpt,
    ModelOpt,
    NoPriorOpt,
    PriorOpt,
    SettingOpt,
    ShapeOpt,
    model_and_inputs,
    shape_of,
)

COVERAGE_SIZES = {"B": 2, "S": 3}  # small, not 1 (Dynamo specialises 1), so the trace is cheap at any --shape


def explain_command(
    model: ModelOpt,
    shape: ShapeOpt = "B=8,S=128",
    card: CardOpt = "local",
    setting: SettingOpt = "deploy",
    dtype: DtypeOpt = "f16",
    inputs: InputOpt = None,
    db: DbOpt = None,
    freezes: FreezesOpt = None,
    prior: PriorOpt = None,
    no_prior: NoPriorOpt = False,
    strict_evidence: StrictOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Print the resolution record: per fork, the tier that answered, its evidence, the runner-up, what was blocked."""
    from emmy_core.compiler import explain
    from emmy_core.graph.errors import GraphError
    from emmy_core.targets import UnknownCard

    sizes = shape_of(shape)
    # before any work, and outside the try below: the typer.Exit of its `fail` is a RuntimeError (click's)
    chosen_prior = prior_arg(prior, no_prior)
    if chosen_prior is None:  # the installed prior, read once for the record and the coverage (not twice)
        from emmy_core.evidence.context import load_prior_best_effort

        chosen_prior = load_prior_best_effort(None)[0]  # None where it cannot load: each step says why, as before
    module, inputs_fn = model_and_inputs(model, dtype, inputs)
    try:
        compiled = explain(module, inputs_fn(SMALL), sizes, card=card, setting=setting, tuning_db=db,
                           freezes=freezes, prior=chosen_prior, name=model if ":" not in model else None)
    except (UnknownCard, GraphError, ValueError, RuntimeError) as exc:
        fail(str(exc))
    reports = backend_coverage(module, inputs_fn(COVERAGE_SIZES), build=False, card=card, setting=setting,
                               tuning_db=db, freezes=freezes, prior=chosen_prior)
    if as_json:
        out = compiled.record.to_json()
        out["coverage"] = [r.to_json() for r in reports]
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
    else:
        from emmy_core.compiler.coverage import render_reports
        from emmy_core.evidence.render import terminal_width

        typer.echo(compiled.explain(width=terminal_width()))
        traced = ",".join(f"{k}={v}" for k, v in COVERAGE_SIZES.items())
        typer.echo(f"torch.compile(backend='emmy') coverage, traced at {traced}:")
        typer.echo(render_reports(reports))
    if strict_evidence and compiled.record.fell_through():
        raise typer.Exit(1)
