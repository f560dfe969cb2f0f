"""A store's content digest: one value that changes exactly when what the store holds changes.

sha256 over every table an export carries, each read in key order by the same constant
queries (`tablesource.TABLE_COLUMNS`), row by row as canonical JSON. The `meta` table (the
version stamp and the time the file was created) is left out: two stores built from one
freeze at different times hold the same content. It is the tuning database's data version in
the Dagster chain, so an unchanged freeze leaves everything downstream fresh.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
from pathlib import Path

from emmy_core.store.tablesource import TABLE_COLUMNS, _select

BATCH_ROWS = 65536


def _plain(value: object) -> object:
    if isinstance(value, _dt.datetime | _dt.date):
        return value.isoformat()
    raise TypeError(f"a stored value of type {type(value).__name__} has no canonical text")


def store_digest(path: Path | str) -> str:
    """The content digest of a store file (opened for reading: a file of another version is refused)."""
    from emmy_core.store import open_store

    h = hashlib.sha256()
    with open_store(path, "r") as store:
        for table, columns in TABLE_COLUMNS.items():
            h.update(f"table {table} {','.join(columns)}\n".encode("ascii"))
            reader = store.arrow(_select(table)).to_batches(max_chunksize=BATCH_ROWS)  # type: ignore[attr-defined]
            for batch in reader:
                for row in zip(*(batch.column(i).to_pylist() for i in range(batch.num_columns)), strict=True):
                    h.update(json.dumps(row, default=_plain, ensure_ascii=True, allow_nan=False).encode("ascii"))
                    h.update(b"\n")
    return h.hexdigest()
