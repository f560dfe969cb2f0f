"""`emmy explain`: which evidence settles each fork of a model at a shape on a card (nothing built or run)."""

from __future__ import annotations

import json

import typer

from emmy_core.cli.common import fail, shape_of
from emmy_core.cli.compile_cmd import (
    SMALL,
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
    StrictOpt,
    model_and_inputs,
    prior_arg,
)


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
    module, inputs_fn = model_and_inputs(model, dtype, inputs)
    try:
        compiled = explain(module, inputs_fn(SMALL), sizes, card=card, setting=setting, tuning_db=db,
                           freezes=freezes, prior=prior_arg(prior, no_prior),
                           name=model if ":" not in model else None)
    except (UnknownCard, GraphError, ValueError, RuntimeError) as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(compiled.record.to_json(), indent=2, sort_keys=True))
    else:
        typer.echo(compiled.explain())
    if strict_evidence and compiled.record.fell_through():
        raise typer.Exit(1)
