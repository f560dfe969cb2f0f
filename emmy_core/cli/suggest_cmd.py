"""`emmy suggest`: per fork of a model at a shape, the candidates most worth measuring next and why; the uncovered forks.

Thin: lower the model (a reference model, or a user's `package.module:Class` with `--input` specs, as the emmy
backend lowers it), read the tuning database's rows and the installed prior, print
`emmy_core.search.suggest`'s answer (or its JSON).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from emmy_core.cli.common import fail
from emmy_core.cli.options import (
    CardOpt,
    DbOpt,
    DtypeOpt,
    InputOpt,
    ModelOpt,
    Opt,
    SettingOpt,
    ShapeOpt,
    model_at,
)


def suggest_command(
    model: ModelOpt,
    shape: ShapeOpt,
    card: CardOpt = "local",
    setting: SettingOpt = "deploy",
    dtype: DtypeOpt = "f16",
    top: Annotated[int, Opt("--top", min=1, max=1000, help="suggestions per fork")] = 5,
    db: DbOpt = None,
    json_out: Annotated[bool, Opt("--json", help="print JSON instead of text")] = False,
    inputs: InputOpt = None,
) -> None:
    """Per fork, the candidates most worth measuring next (prior score, uncertainty, no row yet); uncovered forks."""
    from emmy_core.cli.tune_cmd import any_card_named
    from emmy_core.fileio.errors import FileError
    from emmy_core.prior import PriorError, load_installed_prior
    from emmy_core.search.suggest import read_rows, render, suggest
    from emmy_core.store import default_db_path

    the_card = any_card_named(card)
    _, units = model_at(model, shape, dtype, setting, inputs, the_card)
    try:
        prior = load_installed_prior()
    except PriorError as exc:
        typer.echo(f"emmy: no prior loads ({exc}); suggestions follow the rule's order", err=True)
        prior = None
    path = default_db_path() if db is None else db
    if db is not None and not Path(db).exists():  # the default may not exist yet; a path given must
        fail(f"no tuning database at {db} (--db): nothing was read; check the path, or leave --db out")
    try:
        rows = read_rows(path, the_card.name, setting)
    except (FileError, OSError) as exc:
        fail(str(exc) if str(path) in str(exc) else f"{path}: {exc}")
    forks = suggest(units, the_card, setting, prior, rows, top)
    if json_out:
        doc = {"model": model, "shape": shape, "card": the_card.name, "setting": setting, "db": str(path),
               "uncovered": [f"{f.kernel} {f.sizes}" for f in forks if f.uncovered],
               "forks": [f.to_json() for f in forks]}
        typer.echo(json.dumps(doc, indent=1, sort_keys=True))
    else:
        typer.echo(render(forks, the_card.name, setting, f"database {path}"), nl=False)
