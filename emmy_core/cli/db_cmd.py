"""`emmy db`: check a store against itself, count what it holds."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer

from emmy_core.cli.common import fail
from emmy_core.cli.options import DbOpt, JsonOpt
from emmy_core.freezefolder.promote import DEFAULT_MIN_POOL

app = typer.Typer(help="The measurement store (DuckDB): check, stats, import, export, freeze, promote, refresh-freeze.", no_args_is_help=True)

LockOption = Annotated[float, typer.Option("--lock-timeout", help="seconds to wait for another process's lock")]


def _path(db: Path | None) -> Path:
    from emmy_core.store import default_db_path

    return db if db is not None else default_db_path()


CheckDbOpt = Annotated[str | None, typer.Option("--db", help="tuning database (default: $EMMY_TUNING_DB, else "
                                                  "~/.cache/emmy/autotune.db), or a dataset export: a folder or "
                                                  "its fsspec URL (memory://, s3://...)")]


@app.command("check")
def check(db: CheckDbOpt = None, as_json: JsonOpt = False, lock_timeout: LockOption = 30.0) -> None:
    """Count the rows that break the store's own rules, per kind; exit 1 when any count is non-zero. A
    dataset export folder (or its URL) as --db is checked as an export (its content, then its tables)."""
    from emmy_core.exchange.check_export import check_export
    from emmy_core.fileio.errors import FileError
    from emmy_core.fileio.urlfolder import is_url, location
    from emmy_core.store.check import check_db

    try:
        where = location(db) if db is not None else _path(None)
        if is_url(where):  # a URL stays text: a Path would fold its `//` (memory://t -> memory:/t)
            report = check_export(where)
        else:
            path = Path(where)
            report = check_export(path) if path.is_dir() else check_db(path, lock_timeout=lock_timeout)
    except FileError as exc:
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
def stats(db: DbOpt = None, as_json: JsonOpt = False, lock_timeout: LockOption = 30.0) -> None:
    """Rows per table, per card and per setting; failures by kind; goldens."""
    from emmy_core.fileio.errors import FileError
    from emmy_core.store.stats import db_stats

    try:
        out = db_stats(_path(db), lock_timeout=lock_timeout)
    except FileError as exc:
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
def promote(db: DbOpt = None,
            card: Annotated[str | None, typer.Option("--card", help="only this card (full name)")] = None,
            setting: Annotated[str | None, typer.Option("--setting", help="only this compile setting")] = None,
            min_pool: Annotated[int, typer.Option("--min-pool", help="skip pools with fewer ok rows (the golden "
                                                  "must have beaten that many measurements)")] = DEFAULT_MIN_POOL,
            lock_timeout: LockOption = 30.0) -> None:
    """Make the fastest clean row of every measured pool of at least --min-pool ok rows its golden; print
    each new or replaced golden with the time it beat. The store must exist, and a --card or --setting
    given must be one it can hold: nothing is created or written otherwise."""
    from emmy_core.codegen.backend import SETTINGS
    from emmy_core.fileio.errors import FileError
    from emmy_core.freezefolder.promote import promote_fastest
    from emmy_core.store import StoreError, open_store
    from emmy_core.store.connect import refuse_unusable

    if setting is not None and setting not in SETTINGS:
        fail(f"--setting {setting!r}: known settings: {', '.join(SETTINGS)}")
    path = _path(db)
    try:
        refuse_unusable(path)  # a FIFO or a device is named as one, not as "no store"
    except FileError as exc:
        fail(f"{exc}; nothing was written")
    if not path.is_file():  # opening for writing would make a new, empty store (and its folder)
        fail(f"no store at {path}{': it is a folder' if path.is_dir() else ''}; nothing was written")
    try:
        store = open_store(path, "w", lock_timeout=lock_timeout)
        with store:
            if card is not None and store.card(card) is None:
                raise StoreError(f"{store.label}: card {card!r} is not described in this store")
            result = promote_fastest(store, card=card, setting=setting, min_pool=min_pool)
            names = {kid: c_name for kid, (_, c_name) in store.kernels().items()} if result.changes else {}
    except (FileError, ValueError) as exc:
        fail(str(exc))
    for c in result.changes:
        kid, sizes, card_name, pool_setting = c.pool
        knobs = json.dumps(c.knobs, sort_keys=True, separators=(",", ":"))
        beat = (f"beat {c.rivals} rows, the next best {c.runner_up_us:.4g} us" if c.runner_up_us is not None
                else "no rival")
        if c.kind == "replaced":
            old = json.dumps(c.old_knobs, sort_keys=True, separators=(",", ":")) if c.old_knobs else "?"
            was = f"{c.old_median_us:.4g} us" if c.old_median_us is not None else "not measured here"
            beat = f"replaces {old} ({was}); {beat}"
        typer.echo(f"{c.kind:<8} {names.get(kid, kid[:12])} [{kid[:12]}] {sizes or '-'} {card_name!r} {pool_setting}: "
                   f"{knobs} {c.median_us:.4g} us ({beat})")
    typer.echo(f"{len(result.goldens)} goldens written from {result.pools} pools ({result.skipped} skipped: fewer "
               f"than {min_pool} ok rows; {result.unchanged} unchanged; {result.decisions_kept} keep their decision "
               "golden)")
