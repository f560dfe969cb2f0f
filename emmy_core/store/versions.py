"""Version stamps and the rule that nothing migrates.

`meta` holds key/value rows: `schema_version` (emmy_core.store.schema.SCHEMA_VERSION),
`identity_version` (emmy_core.ir.identity.IDENTITY_VERSION, read at call time, since a
new identity scheme re-keys every kernel), `writer_version` and `created_at`. A reader
refuses a file of another version, naming both. A writer starts a new empty file in its
place (every row can be measured again) but destroys nothing: the old file is moved aside
to a name that says its versions (`autotune.schema1-identity1.db`), and the writer says,
as a plain message, where it went and how to read it with the version that wrote it. A
file that holds tables but no `meta`, or a `meta` without a schema version, is not an Emmy
store and is refused by both (never touched).
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emmy_core.fileio.safefile import FileWriteError, aside_name, fsync_folder, shown, why
from emmy_core.store.connect import translated
from emmy_core.store.errors import StoreError, VersionMismatchError
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


def stale_versions(found: dict[str, str]) -> bool:
    """Whether a file stamped `found` was written under another schema or identity version."""
    want = current_versions()
    return any(found.get(k) != want[k] for k in VERSION_KEYS)


def stderr_notice(message: str) -> None:
    """The default way a writer tells the user something they must know (a plain line on stderr)."""
    print(f"emmy: note: {message}", file=sys.stderr, flush=True)


_LABEL_PART = re.compile(r"[^A-Za-z0-9]+")


def aside_label(found: dict[str, str]) -> str:
    """`schema1-identity1`: the versions a moved-aside file was written under, as a file-name part."""
    parts = []
    for key in VERSION_KEYS:
        value = _LABEL_PART.sub("_", str(found.get(key, "none")))[:20] or "none"
        parts.append(f"{key.split('_')[0]}{value}")
    return "-".join(parts)


def move_aside(path: Path, found: dict[str, str], notify: Callable[[str], None] | None = None) -> Path:
    """Moves a store file of another version (and its write-ahead log) to a name that says its versions;
    tells `notify` (default: a line on stderr) where it went and how to read it. Returns the new path."""
    target = aside_name(path, aside_label(found))
    try:
        wal = Path(f"{path}.wal")
        if wal.exists():
            os.replace(wal, Path(f"{target}.wal"))
        os.replace(path, target)
    except OSError as exc:
        raise FileWriteError(f"{shown(path)} was written under {describe(found)} and cannot be moved aside to "
                             f"{shown(target)}: {why(exc)}; nothing was changed") from None
    fsync_folder(path.parent)
    stamp = [f"{k.replace('_', ' ')} {found[k][:40]}" for k in ("writer_version", "created_at") if found.get(k)]
    by = f" ({', '.join(stamp)})" if stamp else ""
    (notify or stderr_notice)(
        f"{shown(path)} was written under {describe(found)}{by}; this Emmy writes {describe(current_versions())}. "
        f"Nothing migrates, and nothing is destroyed: the old file was moved to {shown(target)}, and a new, "
        f"empty store starts at {shown(path)}. To read the old rows, use the Emmy that wrote it (the version "
        f"above), e.g. `emmy db export --db {shown(target)} DIR` or `emmy db freeze --db {shown(target)}` with it.")
    return target


def open_schema(con: Any, path: Path, mode: str) -> dict[str, str]:
    """Checks (reader) or establishes (writer) the schema and versions of an open file; returns `meta`.

    A file of another version raises `VersionMismatchError` (carrying its versions) in both modes: the
    writer (`DuckStore`) then closes it, moves it aside and starts a new file."""
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
        if "schema_version" not in found:  # every Emmy store of any version stamps it
            raise StoreError(f"{path} has a `meta` table without Emmy's version stamp: not an Emmy store; refusing "
                             f"to {'overwrite' if mode == 'w' else 'read'} it")
    if stale_versions(found):
        raise VersionMismatchError(
            f"{path} was written under {describe(found)}; this Emmy reads {describe(current_versions())}. "
            "Nothing migrates: read it with the Emmy that wrote it, or let a writer (e.g. `emmy db import`) start "
            "a new store here (the old file is then moved aside, not deleted)", found)
    missing = [n for n in (*TABLE_NAMES, *VIEW_NAMES) if n not in objects]
    if missing:
        raise StoreError(f"{path} is damaged: {', '.join(missing)} missing (schema version {SCHEMA_VERSION}); "
                         "re-create it with `emmy db import --fresh`")
    return found
