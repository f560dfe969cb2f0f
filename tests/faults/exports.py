"""Exports edited the way a careful attacker (or a buggy exporter) edits them: content changed, hashes redone.

Shared by tests/faults/test_export_content.py and bench/faults.py. `rehash` makes the manifest match
whatever the Parquet files now hold, so only a reader that checks content can tell.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emmy_core.exchange.export import MANIFEST, content_digest


def rehash(export: Path) -> None:
    """Rewrites the manifest's rows, sha256 and digest for the files as they are now."""
    import pyarrow.parquet as pq

    manifest = json.loads((export / MANIFEST).read_text())
    for name, entry in manifest["tables"].items():
        path = export / f"{name}.parquet"
        entry["sha256"] = hashlib.sha256(path.read_bytes()).hexdigest()
        entry["rows"] = pq.read_metadata(path).num_rows
    manifest["digest"] = content_digest(manifest["tables"])
    (export / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")


def edit_table(export: Path, table: str, edit: Callable[[Any], Any]) -> None:
    """Replaces `table` by `edit(table)` (pyarrow in, pyarrow out) and rehashes the manifest."""
    import pyarrow.parquet as pq

    path = export / f"{table}.parquet"
    pq.write_table(edit(pq.read_table(path)), path)
    rehash(export)


def set_cell(table: Any, column: str, row: int, value: object) -> Any:
    """`table` with one cell replaced (the column keeps its type)."""
    import pyarrow as pa

    values = table.column(column).to_pylist()
    values[row] = value
    i = table.column_names.index(column)
    return table.set_column(i, table.schema.field(column), pa.array(values, table.schema.field(column).type))


def first_row(table: Any, column: str, test: Callable[[Any], bool]) -> int:
    return next(i for i, v in enumerate(table.column(column).to_pylist()) if test(v))


def _strings(table: Any, column: str) -> Any:
    import pyarrow as pa

    values = ["yes" if v else "no" for v in table.column(column).to_pylist()]
    i = table.column_names.index(column)
    return table.set_column(i, pa.field(column, pa.string()), pa.array(values, pa.string()))


def _duplicate_pool(table: Any) -> Any:
    import pyarrow as pa

    return pa.concat_tables([table, table.slice(0, 1)])


def _ok_row(t: Any) -> int:
    return first_row(t, "status", lambda s: s == "ok")


CORRUPTIONS: dict[str, tuple[str, str, Callable[[Any], Any]]] = {
    # name: (table, column the refusal must name, edit)
    "measured_as_strings": ("pools", "measured", lambda t: _strings(t, "measured")),
    "negative_time": ("pools", "median_us", lambda t: set_cell(t, "median_us", _ok_row(t), -5.0)),
    "nan_time": ("pools", "median_us", lambda t: set_cell(t, "median_us", _ok_row(t), float("nan"))),
    "infinite_time": ("measurements", "median_us", lambda t: set_cell(t, "median_us", _ok_row(t), float("inf"))),
    "duplicated_pool_rows": ("pools", "kernel_id,sizes,card,setting,schedule_id", _duplicate_pool),
    "golden_of_an_absent_schedule": ("goldens", "schedule_id",
                                     lambda t: set_cell(t, "schedule_id", 0, "0123456789abcdef")),
    "unknown_status": ("pools", "status", lambda t: set_cell(t, "status", _ok_row(t), "great")),
    "knobs_not_json": ("pools", "knobs", lambda t: set_cell(t, "knobs", 0, "{not json")),
    "pool_of_an_absent_kernel": ("pools", "kernel_id", lambda t: set_cell(t, "kernel_id", 0, "f" * 64)),
    "measured_without_status": ("pools", "measured",
                                lambda t: set_cell(t, "status", _ok_row(t), None)),
}


def corrupted_copy(export: Path, out: Path, name: str) -> tuple[Path, str, str]:
    """A copy of `export` with the corruption `name` and matching hashes: (folder, table, column)."""
    if out.exists():
        shutil.rmtree(out)
    shutil.copytree(export, out)
    table, column, edit = CORRUPTIONS[name]
    edit_table(out, table, edit)
    return out, table, column
