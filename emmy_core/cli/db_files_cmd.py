"""`emmy db freeze | import | export | refresh-freeze`: the files that travel (thin: parse, call, print)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer

from emmy_core.cli.common import fail
from emmy_core.cli.options import DbOpt

MAX_SOURCE_MB = 64 * 1024
"""Largest `--max-mb` (64 GiB): a source is read whole into memory, so a larger cap would be no cap at all."""


def _path(db: Path | None) -> Path:
    from emmy_core.store import default_db_path

    return db if db is not None else default_db_path()


@contextmanager
def _progress(what: str) -> Iterator[Callable[[str], None]]:
    """A transient progress line on stderr (shown on a terminal only) naming the item being worked on."""
    from rich.console import Console
    from rich.progress import Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    with Progress(SpinnerColumn(), TextColumn("{task.description}"), TimeElapsedColumn(), console=console,
                  transient=True, disable=not console.is_terminal) as bar:
        task = bar.add_task(what, total=None)
        yield lambda item: bar.update(task, description=f"{what} {item}")


def freeze(db: DbOpt = None,
           out: Annotated[Path, typer.Option("--out", help="folder to write <card-slug>.json files into")] = Path(
               "freezes"),
           card: Annotated[str | None, typer.Option("--card", help="freeze this card only (full name)")] = None,
           ) -> None:
    """Write one canonical JSON file per card (kernels as loop-program text, decisions, rows, goldens)."""
    from emmy_core.fileio.errors import FileError
    from emmy_core.formats.freeze import freeze_db

    try:
        paths = freeze_db(_path(db), out, card)
    except (FileError, ValueError) as exc:
        fail(str(exc))
    for p in paths:
        typer.echo(f"wrote {p}")
    if not paths:
        typer.echo("nothing to freeze: no card has measurements or goldens")


def import_(sources: Annotated[list[Path], typer.Argument(
                help="freeze or tune files, golden records, Kernel Tuner caches (.json/.json.gz), another "
                     "tuning database, or a dataset export folder", show_default=False)],
            db: DbOpt = None,
            fresh: Annotated[bool, typer.Option("--fresh", help="start from an empty database: a new one is built "
                                                "beside the old and swapped in only when every source went in")] = False,
            card: Annotated[str | None, typer.Option(
                "--card", help="card of a Kernel Tuner cache whose device_name is empty")] = None,
            max_mb: Annotated[int, typer.Option("--max-mb", min=1, max=MAX_SOURCE_MB, help="refuse a source "
                                                "larger than this (decompressed), MiB")] = 512,
            ) -> None:
    """Import sources, each in one transaction; exit non-zero when any source is refused."""
    from emmy_core.exchange.importer import import_db
    from emmy_core.fileio.errors import FileError

    try:
        with _progress("importing") as progress:
            outcomes = import_db(_path(db), sources, fresh=fresh, card=card, max_bytes=max_mb * 1024 * 1024,
                                 progress=progress)
    except FileError as exc:
        fail(str(exc))
    for o in outcomes:
        if o.ok:
            typer.echo(f"imported {o.source} ({o.kind}): {o.message}")
        else:
            typer.echo(f"refused: {o.message}", err=True)
    refused = [o.source for o in outcomes if not o.ok]
    if refused:
        kept = (f"; with --fresh nothing was swapped in: {_path(db)} stands as it was" if fresh
                else " (nothing of them was written)")
        fail(f"{len(refused)} of {len(outcomes)} sources refused{kept}: {', '.join(refused)}")


def export(out_dir: Annotated[str, typer.Argument(
               help="dataset folder to write: a path, or an fsspec URL (file://, memory://, s3://...) where the "
                    "files go up as blobs before one pointer names them", show_default=False)],
           db: DbOpt = None) -> None:
    """Write a Parquet file per table, the candidate pools and manifest.json (versions, counts, digest)."""
    from emmy_core.exchange.export import export_db
    from emmy_core.fileio.errors import FileError
    from emmy_core.fileio.urlfolder import location

    try:
        with _progress("exporting") as progress:
            manifest = export_db(_path(db), location(out_dir), progress)
    except FileError as exc:
        fail(str(exc))
    rows = ", ".join(f"{n} {t['rows']}" for n, t in manifest["tables"].items())
    typer.echo(f"exported to {out_dir}: {rows}; digest {manifest['digest'][:16]}")
    c = manifest["tables"]["pools"]["candidates"]
    typer.echo(f"pools: {c['pools']} ({c['enumerated']} with enumerated candidates, {c['extern']} extern, "
               f"{c['unknown_card']} on cards without a description to enumerate for)")


def refresh_freeze(freeze_dir: Annotated[Path, typer.Option(
        "--freeze-dir", help="folder holding <card-slug>.json and tune files")] = Path("freezes")) -> None:
    """Fold the tune files beside the freeze into it, re-freeze, then remove the folded tune files."""
    from emmy_core.fileio.errors import FileError
    from emmy_core.freezefolder.refresh import refresh_freeze as run

    try:
        with _progress("folding") as progress:
            report = run(freeze_dir, progress)
    except FileError as exc:
        fail(str(exc))
    typer.echo(json.dumps({"freezes": [p.name for p in report.freezes], "folded": [p.name for p in report.folded],
                           "rows": report.rows}, sort_keys=True))


def register(app: typer.Typer) -> None:
    """Adds these commands to the `db` command group."""
    app.command("freeze")(freeze)
    app.command("import")(import_)
    app.command("export")(export)
    app.command("refresh-freeze")(refresh_freeze)
