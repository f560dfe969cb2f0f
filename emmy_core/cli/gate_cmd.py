"""`emmy gate`: the release gate: every serving-matrix entry settled under strict evidence; exit 1 on a failure."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from emmy_core.cli.common import fail
from emmy_core.cli.compile_cmd import prior_arg
from emmy_core.cli.options import DbOpt, FreezesOpt, JsonOpt, NoPriorOpt, PriorOpt


def gate_command(
    matrix: Annotated[Path | None, typer.Option("--matrix", help="a serving-matrix file (default: the committed "
                                                                  "one)")] = None,
    db: DbOpt = None,
    freezes: FreezesOpt = None,
    prior: PriorOpt = None,
    no_prior: NoPriorOpt = False,
    verbose: Annotated[bool, typer.Option("--verbose", help="print each case's resolution record")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Resolve every serving-matrix case under strict evidence (this machine's card with builds); pass/fail table."""
    from emmy_core.compiler.build import Builder
    from emmy_core.evidence.gate import run_gate
    from emmy_core.evidence.render import render_record
    from emmy_core.graph.serving import ServingMatrixError, load_serving_matrix

    try:
        m = load_serving_matrix(matrix)
    except ServingMatrixError as exc:
        fail(str(exc))
    show = (lambda s: typer.echo(f"gate: {s}", err=True)) if sys.stderr.isatty() else None
    result = run_gate(m, tuning_db=db, freezes=freezes, prior=prior_arg(prior, no_prior),
                      checker=lambda card, setting: Builder(card, setting).check, progress=show)
    if as_json:
        typer.echo(json.dumps(result.to_json(), indent=2, sort_keys=True))
    else:
        head = f"{'':4}  {'model':<12} {'dtype':<5} {'shape':<12} {'setting':<7} {'card':<28} {'forks':>5}  " \
               f"{'measured':>8}  {'fell':>4}  {'stale':>5}  how"
        typer.echo(head)
        for c in result.cases:
            r = c.record
            forks = len([x for x in r.resolutions if x.applied]) if r else 0
            fell = len(r.fell_through()) if r else 0
            stale = len(r.stale) if r else 0
            how = c.error or ("built" if c.built else "resolved only")
            typer.echo(f"{'pass' if c.passed else 'FAIL':4}  {c.case.model:<12} {c.case.dtype:<5} {c.shape:<12} "
                       f"{c.case.setting:<7} {c.card[:28]:<28} {forks:>5}  {forks - fell:>8}  {fell:>4}  {stale:>5}  "
                       f"{how[:200]}")
        failed = [c for c in result.cases if not c.passed]
        typer.echo(f"gate: {len(result.cases) - len(failed)} of {len(result.cases)} cases pass")
        notes = sorted({n for c in result.cases if c.record for n in c.record.notes})
        for n in notes:
            typer.echo(f"note: {n}")
        if verbose:
            for c in result.cases:
                if c.record is not None:
                    typer.echo("\n" + render_record(c.record))
    if not result.passed:
        raise typer.Exit(1)
