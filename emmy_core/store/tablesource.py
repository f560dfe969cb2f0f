"""Another store's tables (a DuckDB file, or a dataset export's Parquet files) as one batch.

Nothing in them is trusted: every kernel's identity is recomputed from its loop-program
text, every schedule's digest from its knobs, and rows follow the recomputed keys (so a
source written under another identity scheme is re-keyed, not copied). A row naming a
kernel, schedule or card the source does not define is refused, naming the table, the row
and the field.
"""

from __future__ import annotations

import datetime as _dt
import json
from collections.abc import Mapping
from pathlib import Path

from emmy_core.fileio.sourcefile import SourceError
from emmy_core.ir import IRError, kernel_id, parse
from emmy_core.store.batch import Batch
from emmy_core.store.rows import (
    CARD_NUMBERS,
    CardRow,
    GoldenRow,
    KnobError,
    MeasurementRow,
    RoutingRow,
    Schedule,
)

TABLE_COLUMNS: dict[str, tuple[str, ...]] = {
    "cards": ("name", "target", "arch", "tensor_cores", *CARD_NUMBERS),
    "kernels": ("kernel_id", "loop_program", "c_name"),
    "routing": ("parent_id", "decision", "piece_index", "piece_id"),
    "schedules": ("schedule_id", "knobs"),
    "measurements": ("kernel_id", "sizes", "schedule_id", "card", "setting", "status", "failure", "median_us",
                     "spread", "samples", "source", "measured_at"),
    "goldens": ("kernel_id", "sizes", "card", "setting", "schedule_id", "decision"),
}
ORDER_BY: dict[str, str] = {
    "cards": "name", "kernels": "kernel_id", "routing": "parent_id, decision, piece_index",
    "schedules": "schedule_id", "measurements": "kernel_id, sizes, schedule_id, card, setting",
    "goldens": "kernel_id, sizes, card, setting",
}
Columns = Mapping[str, list]


def _need(file: str, table: str, cols: Columns) -> int:
    missing = [c for c in TABLE_COLUMNS[table] if c not in cols]
    if missing:
        raise SourceError(file, table, missing[0], "column missing")
    lengths = {len(cols[c]) for c in TABLE_COLUMNS[table]}
    if len(lengths) > 1:
        raise SourceError(file, table, "", "columns of different lengths")
    return lengths.pop() if lengths else 0


def _text(file: str, table: str, i: int, field: str, v: object, limit: int = 4 * 1024 * 1024) -> str:
    if not isinstance(v, str) or len(v) > limit:
        raise SourceError(file, f"{table}[{i}]", field, f"must be text of at most {limit} characters")
    return v


def batch_from_tables(tables: Mapping[str, Columns], file: str) -> Batch:
    """The batch that puts another store's rows in, under identities recomputed here."""
    batch = Batch(file)
    n = {t: _need(file, t, tables[t]) for t in TABLE_COLUMNS}
    c = tables["cards"]
    for i in range(n["cards"]):
        numbers = {k: c[k][i] for k in CARD_NUMBERS if c[k][i] is not None}
        arch, cores = c["arch"][i], c["tensor_cores"][i]
        batch.cards.append(CardRow(_text(file, "cards", i, "name", c["name"][i], 128),
                                   _text(file, "cards", i, "target", c["target"][i], 8), numbers,
                                   "" if arch is None else _text(file, "cards", i, "arch", arch, 40),
                                   () if cores is None else tuple(
                                       _text(file, "cards", i, "tensor_cores", cores, 1000).split(","))))
    k = tables["kernels"]
    ids: dict[str, str] = {}
    for i in range(n["kernels"]):
        text = _text(file, "kernels", i, "loop_program", k["loop_program"][i])
        try:
            kernel = parse(text, f"{file}: kernels[{i}].loop_program")
        except IRError as exc:
            raise SourceError(file, f"kernels[{i}]", "loop_program", f"does not parse: {exc}") from None
        c_name = _text(file, "kernels", i, "c_name", k["c_name"][i], 128)
        batch.kernels.append((kernel, c_name))
        ids[k["kernel_id"][i]] = kernel_id(kernel)
    s = tables["schedules"]
    scheds: dict[str, Schedule] = {}
    for i in range(n["schedules"]):
        text = _text(file, "schedules", i, "knobs", s["knobs"][i], 1 << 20)
        try:
            scheds[s["schedule_id"][i]] = Schedule(json.loads(text))
        except (KnobError, ValueError) as exc:
            raise SourceError(file, f"schedules[{i}]", "knobs", str(exc)[:300]) from None

    def kid(table: str, i: int, field: str, old: object) -> str:
        got = ids.get(old)  # type: ignore[arg-type]
        if got is None:
            raise SourceError(file, f"{table}[{i}]", field, f"{str(old)[:16]} names no kernel of the source")
        return got

    def sched(table: str, i: int, field: str, old: object) -> Schedule:
        got = scheds.get(old)  # type: ignore[arg-type]
        if got is None:
            raise SourceError(file, f"{table}[{i}]", field, f"{str(old)[:16]} names no schedule of the source")
        return got

    r = tables["routing"]
    for i in range(n["routing"]):
        batch.routing.append(RoutingRow(kid("routing", i, "parent_id", r["parent_id"][i]), r["decision"][i],
                                        r["piece_index"][i], kid("routing", i, "piece_id", r["piece_id"][i])))
    m = tables["measurements"]
    rows = []
    for i, (k_, sz, sid, card, setting, st, fail, med, spread, samples, src, at) in enumerate(
            zip(*(m[x] for x in TABLE_COLUMNS["measurements"]), strict=True)):
        if at is not None and not isinstance(at, _dt.datetime):
            raise SourceError(file, f"measurements[{i}]", "measured_at", "must be a timestamp")
        rows.append(MeasurementRow(kid("measurements", i, "kernel_id", k_), sz,
                                   sched("measurements", i, "schedule_id", sid), card, setting, st, med, spread,
                                   samples, src, fail, at))
    batch.measurements = rows
    g = tables["goldens"]
    for i in range(n["goldens"]):
        sid = g["schedule_id"][i]
        batch.goldens.append(GoldenRow(kid("goldens", i, "kernel_id", g["kernel_id"][i]), g["sizes"][i],
                                       g["card"][i], g["setting"][i],
                                       None if sid is None else sched("goldens", i, "schedule_id", sid),
                                       g["decision"][i]))
    return batch


def read_db_tables(path: Path | str) -> dict[str, dict[str, list]]:
    """Every table of another store file (opened for reading: its versions must be current)."""
    from emmy_core.store import open_store

    with open_store(path, "r", lock_timeout=5.0) as store:
        return {t: store.arrow(_select(t)).to_pydict() for t in TABLE_COLUMNS}  # type: ignore[attr-defined]


def _select(table: str) -> str:
    """The constant read query of a table (names from TABLE_COLUMNS, never from input)."""
    assert table in TABLE_COLUMNS
    return f"SELECT {', '.join(TABLE_COLUMNS[table])} FROM {table} ORDER BY {ORDER_BY[table]}"
