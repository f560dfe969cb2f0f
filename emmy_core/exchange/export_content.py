"""What a reader checks of an export whose hashes match, before it trusts the rows: the content rules.

Types, missing values, ranges, unique keys and references, each refusal naming the file, the table, the
row and the column. `open_snapshot` (export.py) applies them to every export it reads; `emmy db check`
(check_export.py) counts them. They sit apart from both so that neither imports the other.
"""

from __future__ import annotations

from typing import Any

from emmy_core.fileio.sourcefile import SourceError

_STRING, _INT, _FLOAT, _BOOL, _TIME, _NUMBER = "text", "integer", "float", "boolean", "timestamp", "number"
_TYPES: dict[str, dict[str, str]] = {
    "cards": {"name": _STRING, "target": _STRING, "arch": _STRING, "tensor_cores": _STRING},
    "kernels": {"kernel_id": _STRING, "loop_program": _STRING, "c_name": _STRING},
    "routing": {"parent_id": _STRING, "decision": _STRING, "piece_index": _INT, "piece_id": _STRING},
    "schedules": {"schedule_id": _STRING, "knobs": _STRING},
    "measurements": {"kernel_id": _STRING, "sizes": _STRING, "schedule_id": _STRING, "card": _STRING,
                     "setting": _STRING, "status": _STRING, "failure": _STRING, "median_us": _FLOAT,
                     "spread": _FLOAT, "samples": _INT, "source": _STRING, "measured_at": _TIME},
    "goldens": {"kernel_id": _STRING, "sizes": _STRING, "card": _STRING, "setting": _STRING,
                "schedule_id": _STRING, "decision": _STRING},
    "pools": {"kernel_id": _STRING, "sizes": _STRING, "card": _STRING, "setting": _STRING, "schedule_id": _STRING,
              "knobs": _STRING, "candidate_rank": _INT, "measured": _BOOL, "status": _STRING, "median_us": _FLOAT},
}
_NOT_NULL: dict[str, tuple[str, ...]] = {
    "cards": ("name", "target"),
    "kernels": ("kernel_id", "loop_program"),
    "routing": ("parent_id", "decision", "piece_index", "piece_id"),
    "schedules": ("schedule_id", "knobs"),
    "measurements": ("kernel_id", "sizes", "schedule_id", "card", "setting", "status", "median_us"),
    "goldens": ("kernel_id", "sizes", "card", "setting"),
    "pools": ("kernel_id", "sizes", "card", "setting", "schedule_id", "knobs", "measured"),
}
_KEYS: dict[str, tuple[str, ...]] = {
    "cards": ("name",), "kernels": ("kernel_id",), "schedules": ("schedule_id",),
    "routing": ("parent_id", "decision", "piece_index"),
    "measurements": ("kernel_id", "sizes", "schedule_id", "card", "setting"),
    "goldens": ("kernel_id", "sizes", "card", "setting"),
    "pools": ("kernel_id", "sizes", "card", "setting", "schedule_id"),
}


def _type_ok(kind: str, t: Any) -> bool:
    import pyarrow as pa

    return {_STRING: lambda: pa.types.is_string(t) or pa.types.is_large_string(t),
            _INT: lambda: pa.types.is_integer(t), _FLOAT: lambda: pa.types.is_floating(t),
            _BOOL: lambda: pa.types.is_boolean(t), _TIME: lambda: pa.types.is_timestamp(t),
            _NUMBER: lambda: pa.types.is_integer(t) or pa.types.is_floating(t)}[kind]() or pa.types.is_null(t)


class _Refusal(Exception):
    def __init__(self, error: SourceError) -> None:
        self.error = error


def content_problems(snap: Any, limit: int = 1) -> list[SourceError]:
    """Rows of an export that no store could have written (at most `limit`, the first found of each rule
    in table order): a column of the wrong type, a missing value, a time not finite or not positive on
    an ok row, a status outside ok/failed, a repeated key, a pool member said measured without a status
    (or the reverse), knobs that are not a JSON object, a pool, row or golden of a kernel the export lacks,
    a row or golden of a schedule the export lacks. Each names the file, the table, the row and the column."""
    import polars as pl

    from emmy_core.store.rows import CARD_NUMBERS, STATUSES

    found: list[SourceError] = []

    def refuse(table: str, row: int | None, column: str, problem: str) -> None:
        record = table if row is None else f"{table} row {row}"
        found.append(SourceError(snap.file(table), record, column, problem))
        if len(found) >= limit:
            raise _Refusal(found[-1])

    def first(df: pl.DataFrame, mask: pl.Expr) -> int | None:
        hit = df.with_row_index("_row").filter(mask.fill_null(False)).head(1)
        return None if hit.is_empty() else int(hit["_row"][0])

    try:
        frames: dict[str, pl.DataFrame] = {}
        for table, types in _TYPES.items():
            arrow = snap.tables[table]
            wanted = {**types, **({n: _NUMBER for n in CARD_NUMBERS} if table == "cards" else {})}
            for column, kind in wanted.items():
                if column not in arrow.column_names:
                    refuse(table, None, column, "column missing")
                    continue
                t = arrow.schema.field(column).type
                if not _type_ok(kind, t):
                    refuse(table, None, column, f"column of type {t}, must be {kind}")
            df = pl.from_arrow(arrow)
            assert isinstance(df, pl.DataFrame)
            frames[table] = df
            for column in _NOT_NULL[table]:
                row = first(df, pl.col(column).is_null())
                if row is not None:
                    refuse(table, row, column, "missing (null)")
            keys = list(_KEYS[table])
            row = first(df, pl.struct(keys).is_duplicated()) if len(df) else None
            if row is not None:
                refuse(table, row, ",".join(keys), "key repeated: the same row twice (every key is unique)")
        for table in ("measurements", "pools"):
            df = frames[table]
            row = first(df, pl.col("status").is_not_null() & ~pl.col("status").is_in(list(STATUSES)))
            if row is not None:
                refuse(table, row, "status", f"{str(df['status'][row])[:20]!r} is not one of {', '.join(STATUSES)}")
            ok = pl.col("status") == "ok"
            time = pl.col("median_us").cast(pl.Float64)
            row = first(df, ok & (time.is_nan() | time.is_infinite() | (time <= 0)))
            if row is not None:
                refuse(table, row, "median_us", f"{df['median_us'][row]!r} on an ok row: a time must be finite "
                                                "and greater than 0")
        m = frames["measurements"]
        row = first(m, pl.col("spread").cast(pl.Float64).is_nan() | (pl.col("spread").cast(pl.Float64) < 0)
                    | (pl.col("samples") < 0))
        if row is not None:
            refuse("measurements", row, "spread", "spread and samples must be numbers of at least 0")
        p = frames["pools"]
        row = first(p, pl.col("measured") != pl.col("status").is_not_null())
        if row is not None:
            refuse("pools", row, "measured", "says measured without a status, or a status without measured")
        row = first(p, pl.col("candidate_rank") < 0)
        if row is not None:
            refuse("pools", row, "candidate_rank", "must be at least 0")
        for i, text in enumerate(p["knobs"].to_list()):
            problem = _knobs_problem(text)
            if problem is not None:
                refuse("pools", i, "knobs", problem)
                break
        kernels = set(frames["kernels"]["kernel_id"].to_list())
        row = first(p, ~pl.col("kernel_id").is_in(list(kernels)))
        if row is not None:
            refuse("pools", row, "kernel_id", f"{str(p['kernel_id'][row])[:16]!r}: no such kernel in kernels.parquet")
        known = set(frames["schedules"]["schedule_id"].to_list())
        for table in ("measurements", "goldens"):
            df = frames[table]
            row = first(df, pl.col("kernel_id").is_not_null() & ~pl.col("kernel_id").is_in(list(kernels)))
            if row is not None:
                refuse(table, row, "kernel_id", f"{str(df['kernel_id'][row])[:16]!r}: no such kernel in "
                                                "kernels.parquet")
            row = first(df, pl.col("schedule_id").is_not_null() & ~pl.col("schedule_id").is_in(list(known)))
            if row is not None:
                refuse(table, row, "schedule_id", f"{str(df['schedule_id'][row])[:16]!r}: no such schedule in "
                                                  "schedules.parquet (a golden or a row must name a schedule the "
                                                  "export has)")
        # a golden's schedule need not be a member of its pool (a golden recorded for a schedule this pool did
        # not measure and the rule does not enumerate is the store's own, valid state); one the export does
        # not have at all is refused above
    except _Refusal:
        pass
    return found


def _knobs_problem(text: object) -> str | None:
    import json

    if not isinstance(text, str):
        return "must be text"
    try:
        doc = json.loads(text)
    except ValueError as exc:
        return f"not valid JSON: {str(exc)[:80]}"
    return None if isinstance(doc, dict) else "must be a JSON object"


def refuse_bad_content(snap: Any) -> None:
    """Raises the first content problem of an export (`content_problems`) as a SourceError."""
    problems = content_problems(snap, limit=1)
    if problems:
        raise problems[0]
