"""Version stamps and the rule that nothing migrates.

`meta` holds key/value rows: `schema_version` (emmy_core.store.schema.SCHEMA_VERSION),
`identity_version` (emmy_core.ir.identity.IDENTITY_VERSION, read at call time, since a
new identity scheme re-keys every kernel), `writer_version` and `created_at`. A writer
that opens a file of another version re-creates it empty with a warning naming both
versions (every row can be measured again); a reader refuses it naming both. A file that
holds tables but no `meta` is not an Emmy store and is refused by both (never wiped).
"""

from __future__ import annotations

import datetime as _dt
import warnings
from pathlib import Path
from typing import Any

from emmy_core.store.connect import translated
from emmy_core.store.errors import StoreError, StoreVersionWarning, VersionMismatchError
from emmy_core.store.schema import SCHEMA_VERSION, TABLE_NAMES, VIEW_NAMES, WRITER_VERSION, ddl

VERSION_KEYS = ("schema_version", "identity_version")


def current_versions() -> dict[str, str]:
    from emmy_core.ir import identity  # the live value, so a raised version is seen without re-import

    return {"schema_version": str(SCHEMA_VERSION), "identity_version": str(identity.IDENTITY_VERSION)}


def _objects(con: Any) -> dict[str, str]:
    rows = con.execute("SELECT table_name, table_type FROM information_schema.tables "
                       "WHERE table_schema = 'main' AND table_catalog = current_database()").fetchall()
    return {name: kind for name, kind in rows}


def read_meta(con: Any) -> dict[str, str]:
    return {k: v for k, v in con.execute("SELECT key, value FROM meta").fetchall()}


def describe(versions: dict[str, str]) -> str:
    return ", ".join(f"{k.replace('_', ' ')} {versions.get(k, 'none')}" for k in VERSION_KEYS)


def _create(con: Any) -> None:
    for statement in ddl():
        con.execute(statement)
    stamp = {**current_versions(), "writer_version": WRITER_VERSION,
             "created_at": _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat()}
    con.executemany("INSERT INTO meta VALUES (?, ?)", sorted(stamp.items()))


def _drop_all(con: Any, objects: dict[str, str]) -> None:
    import duckdb

    for name, kind in objects.items():  # names come from the catalogue, quoted as identifiers
        quoted = '"' + name.replace('"', '""') + '"'
        if kind == "VIEW":
            con.execute(f"DROP VIEW IF EXISTS {quoted}")
    for name, kind in objects.items():
        if kind != "VIEW":
            quoted = '"' + name.replace('"', '""') + '"'
            try:
                con.execute(f"DROP TABLE IF EXISTS {quoted} CASCADE")
            except duckdb.Error:
                con.execute(f"DROP TABLE IF EXISTS {quoted}")


def open_schema(con: Any, path: Path, mode: str) -> dict[str, str]:
    """Checks (reader) or establishes (writer) the schema and versions of an open file; returns `meta`."""
    with translated(path, "reading the version stamp"):
        objects = _objects(con)
        if not objects:
            if mode != "w":
                raise StoreError(f"{path} is empty: not an Emmy store (nothing has been recorded in it)")
            con.execute("BEGIN TRANSACTION")
            _create(con)
            con.execute("COMMIT")
            return read_meta(con)
        if "meta" not in objects:
            raise StoreError(f"{path} holds tables but no `meta`: not an Emmy store; refusing to "
                             f"{'overwrite' if mode == 'w' else 'read'} it")
        found = read_meta(con)
    want = current_versions()
    if any(found.get(k) != want[k] for k in VERSION_KEYS):
        if mode != "w":
            raise VersionMismatchError(
                f"{path} was written under {describe(found)}; this Emmy reads {describe(want)}. Nothing "
                "migrates: re-create it (a writer does so on its next write, e.g. `emmy db import --fresh`)")
        warnings.warn(f"{path} was written under {describe(found)}; this Emmy writes {describe(want)}: "
                      "re-creating it empty (nothing migrates; its rows can be measured again)",
                      StoreVersionWarning, stacklevel=3)
        with translated(path, "re-creating the store"):
            con.execute("BEGIN TRANSACTION")
            _drop_all(con, objects)
            _create(con)
            con.execute("COMMIT")
        return read_meta(con)
    missing = [n for n in (*TABLE_NAMES, *VIEW_NAMES) if n not in objects]
    if missing:
        raise StoreError(f"{path} is damaged: {', '.join(missing)} missing (schema version {SCHEMA_VERSION}); "
                         "re-create it with `emmy db import --fresh`")
    return found
