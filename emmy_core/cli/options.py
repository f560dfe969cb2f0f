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


def model_at(model: str, shape: str, dtype: str, setting: str) -> tuple[dict[str, int], list[Any]]:
    """A reference model's sizes and bench units at `shape` for a command that measures (tune) or plans
    measurements (suggest); CLI errors for an unknown setting, a bad shape or a model that does not lower."""
    from emmy_core.bench.plan import model_units
    from emmy_core.codegen.backend import SETTINGS
    from emmy_core.graph.errors import GraphError

    if setting not in SETTINGS:
        fail(f"--setting {setting!r}: known settings: {', '.join(SETTINGS)}")
    sizes = shape_of(shape)
    try:
        return sizes, model_units(model, sizes, dtype)
    except (GraphError, ValueError) as exc:
        fail(str(exc))
