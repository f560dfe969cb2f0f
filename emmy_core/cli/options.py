"""The options the CLI's commands share, each with one meaning and one help text, and the `--shape` parser.

A command that takes a card, a shape, a tuning database or a data type takes it through these types,
so `emmy compile --help` and `emmy tune --help` say the same thing of the same flag. An option whose
meaning differs gets its own name (`BenchCardOpt`: a card the timings come from, so this machine's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from emmy_core.cli.common import fail
from emmy_core.dtypes import MODEL_DTYPES
from emmy_core.graph.ops import DYNAMIC_AXES

Opt = typer.Option

ShapeOpt = Annotated[str, Opt("--shape", help="model shape: sizes of B and S, e.g. B=8,S=128")]
CardOpt = Annotated[str, Opt("--card", help="'local' (this machine's), or a card Emmy knows (the GPU table, a "
                                            "card file)")]
BenchCardOpt = Annotated[str, Opt("--card", help="card to bench on: 'local' or this machine's card name (the "
                                                 "timings come from here)")]
SettingOpt = Annotated[str, Opt("--setting", help="compile setting: deploy or rank")]
DtypeOpt = Annotated[str, Opt("--dtype", help=f"model data type: {', '.join(MODEL_DTYPES)} (the serving "
                                              "matrix's is f16)")]
DbOpt = Annotated[Path | None, Opt("--db", help="tuning database (default: $EMMY_TUNING_DB, else "
                                               "~/.cache/emmy/autotune.db)")]
FreezesOpt = Annotated[Path | None, Opt("--freezes", help="freeze folder or file (default: EMMY_FREEZES or the "
                                                          "freeze shipped with the package)")]
PriorOpt = Annotated[Path | None, Opt("--prior", help="a prior artifact (default: the installed prior)")]
NoPriorOpt = Annotated[bool, Opt("--no-prior", help="compile without the prior")]
JsonOpt = Annotated[bool, Opt("--json", help="print one JSON object")]
ModelOpt = Annotated[str, Opt("--model", help="a reference model (emmy graph models) or package.module:Class")]
InputOpt = Annotated[list[str] | None, Opt("--input", help="for package.module:Class: one shape per input, "
                                                           "e.g. --input B,S,256")]


def shape_of(text: str, *, model: bool = True) -> dict[str, int]:
    """`--shape` text as sizes; a CLI error naming the flag for bad text, or (for a model) unless it gives
    exactly B and S. `model=False` reads the sizes of a loop program's own dynamic axes."""
    from emmy_core.ir import IRError, parse_sizes

    try:
        sizes = parse_sizes(text)
    except IRError as exc:
        fail(f"--shape {text[:60]!r}: {exc}")
    if model and set(sizes) != set(DYNAMIC_AXES):
        fail(f"--shape must give exactly {' and '.join(DYNAMIC_AXES)} (e.g. B=8,S=128), got {text[:60]!r}")
    return sizes


def model_and_inputs(model: str, dtype: str, inputs: list[str] | None) -> tuple[Any, Any]:
    """The module and its inputs function; CLI errors for an unknown model or a bad input spec."""
    from emmy_core.dtypes import torch_dtype
    from emmy_core.graph.errors import GraphError
    from emmy_core.graph.user_models import load_model

    if dtype not in MODEL_DTYPES:
        fail(f"--dtype must be one of {', '.join(MODEL_DTYPES)}, got {dtype!r}")
    try:
        return load_model(model, torch_dtype(dtype), inputs or ())
    except GraphError as exc:
        fail(str(exc))


def model_at(model: str, shape: str, dtype: str, setting: str, inputs: list[str] | None = None,
             card: Any = "local") -> tuple[dict[str, int], list[Any]]:
    """A model's sizes and bench units at `shape` for a command that measures (tune) or plans measurements
    (suggest): a reference model's one-graph lowering, or the kernels the emmy backend makes of a user's
    `package.module:Class` (given `--input` specs) on `card`; CLI errors for an unknown setting, a bad shape
    or a model that does not lower."""
    from emmy_core.bench.plan import model_units
    from emmy_core.codegen.backend import SETTINGS
    from emmy_core.graph.errors import GraphError
    from emmy_core.graph.models import MODEL_NAMES

    if setting not in SETTINGS:
        fail(f"--setting {setting!r}: known settings: {', '.join(SETTINGS)}")
    sizes = shape_of(shape)
    if model not in MODEL_NAMES:
        from emmy_core.search.module_tune import module_units

        module, inputs_fn = model_and_inputs(model, dtype, inputs)
        try:
            units = module_units(module, inputs_fn(sizes), card=card, setting=setting)
        except Exception as exc:  # the user's own forward: whatever Dynamo or the module raised is named
            fail(f"{model}: running it through the emmy backend at {shape} raised {type(exc).__name__}: "
                 f"{str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}")
        if not units:
            fail(f"{model} at {shape}: the emmy backend lowers none of it to Emmy kernels, so there is nothing to "
                 "measure (emmy compile --run prints what runs as torch, and why)")
        return sizes, units
    if inputs:
        fail(f"{model} is a reference model: it brings its own inputs (no --input)")
    try:
        return sizes, model_units(model, sizes, dtype)
    except (GraphError, ValueError) as exc:
        fail(str(exc))
