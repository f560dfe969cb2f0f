"""`emmy db`: check a store against itself, count what it holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from emmy_core.cli.common import fail

app = typer.Typer(help="The measurement store (DuckDB): check, stats.", no_args_is_help=True)

DbOption = Annotated[Path | None, typer.Option(
    "--db", help="store file (default: $EMMY_TUNING_DB, else ~/.cache/emmy/autotune.db)")]
JsonOption = Annotated[bool, typer.Option("--json", help="print one JSON object")]
LockOption = Annotated[float, typer.Option("--lock-timeout", help="seconds to wait for another process's lock")]


def _path(db: Path | None) -> Path:
    from emmy_core.store import default_db_path

    return db if db is not None else default_db_path()


@app.command("check")
def check(db: DbOption = None, as_json: JsonOption = False, lock_timeout: LockOption = 30.0) -> None:
    """Count the rows that break the store's own rules, per kind; exit 1 when any count is non-zero."""
    from emmy_core.store import StoreError
    from emmy_core.store.check import check_db

    try:
        report = check_db(_path(db), lock_timeout=lock_timeout)
    except StoreError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(report.to_json(), indent=2, sort_keys=True))
    else:
        width = max(len(k) for k in report.counts)
        typer.echo(f"{report.path}: {'ok' if report.ok else 'FAILED'} ({report.seconds:.2f} s)")
        for kind, count in report.counts.items():
            typer.echo(f"  {kind:<{width}}  {count}")
            for example in report.examples[kind]:
                typer.echo(f"  {'':<{width}}    e.g. {example}")
    if not report.ok:
        raise typer.Exit(1)


@app.command("stats")
def stats(db: DbOption = None, as_json: JsonOption = False, lock_timeout: LockOption = 30.0) -> None:
    """Rows per table, per card and per setting; failures by kind; goldens."""
    from emmy_core.store import StoreError
    from emmy_core.store.stats import db_stats

    try:
        out = db_stats(_path(db), lock_timeout=lock_timeout)
    except StoreError as exc:
        fail(str(exc))
    if as_json:
        typer.echo(json.dumps(out, indent=2, sort_keys=True))
        return
    v = out["versions"]
    typer.echo(f"{out['path']} (schema {v.get('schema_version')}, identity {v.get('identity_version')})")
    typer.echo("tables: " + ", ".join(f"{t} {n}" for t, n in out["tables"].items()))
    for c in out["per_card"]:
        typer.echo(f"card {c['card']!r} ({c['target'] or 'undescribed'}): {c['measurements']} measurements, "
                   f"{c['ok']} ok, {c['failed']} failed, {c['kernels']} kernels")
    for s in out["per_setting"]:
        typer.echo(f"setting {s['setting']}: {s['measurements']} measurements, {s['failed']} failed")
    f = out["failures"]
    kinds = ", ".join(f"{k} {n}" for k, n in f["by_kind"].items())
    typer.echo(f"failures: {f['total']}" + (f" ({kinds})" if kinds else ""))
    g = out["goldens"]
    typer.echo(f"goldens: {g['total']} ({g['schedules']} schedules, {g['decisions']} decisions)")


@app.command("promote")
def promote(db: DbOption = None,
            card: Annotated[str | None, typer.Option("--card", help="only this card (full name)")] = None,
            setting: Annotated[str | None, typer.Option("--setting", help="only this compile setting")] = None,
            min_pool: Annotated[int, typer.Option("--min-pool", help="skip pools with fewer ok rows")] = 1,
            lock_timeout: LockOption = 30.0) -> None:
    """Make the fastest clean row of every measured pool its golden (the reviewed choice)."""
    from emmy_core.store import StoreError, open_store
    from emmy_core.store.promote import promote_fastest

    try:
        store = open_store(_path(db), "w", lock_timeout=lock_timeout)
        with store:
            result = promote_fastest(store, card=card, setting=setting, min_pool=min_pool)
    except (StoreError, ValueError) as exc:
        fail(str(exc))
    typer.echo(f"{len(result.goldens)} goldens written from {result.pools} pools "
               f"({result.skipped} skipped: fewer than {min_pool} ok rows)")
