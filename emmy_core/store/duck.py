"""The DuckDB store: one file per instance, one transaction per batch, set-based writes.

A batch is validated in Python (`Batch.prepare`), turned into Arrow tables, registered
with the connection under constant names, and written with a handful of set-based
statements inside one transaction: kernels and schedules are inserted once (shared by
digest), cards replaced by their latest description, and measurements MERGEd on their
key with the better-wins / never-downgrade rules in SQL. Any error rolls the whole batch
back. Values always travel as bound parameters or registered tables, never as SQL text.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emmy_core.fileio.errors import bounded
from emmy_core.fileio.safefile import ensure_folder
from emmy_core.graph.forks import ForkKey
from emmy_core.store.batch import MEASUREMENT_COLUMNS, Prepared
from emmy_core.store.connect import DEFAULT_LOCK_TIMEOUT, connect, first_line, refuse_unusable, translated
from emmy_core.store.errors import BatchError, StoreError, VersionMismatchError
from emmy_core.store.interface import MeasurementStore
from emmy_core.store.rows import (
    CARD_NUMBERS,
    CardRow,
    RoutingRow,
    StoredGolden,
    StoredMeasurement,
    WriteSummary,
)
from emmy_core.store.schema import TABLE_NAMES
from emmy_core.store.versions import move_aside, open_schema

_KEY_MATCH = ("m.kernel_id = s.kernel_id AND m.sizes = s.sizes AND m.schedule_id = s.schedule_id "
              "AND m.card = s.card AND m.setting = s.setting")
_COLS = ", ".join(MEASUREMENT_COLUMNS)
_MERGE = (
    "MERGE INTO measurements AS m USING ({source}) AS s ON " + _KEY_MATCH + " "
    "WHEN MATCHED AND ((m.status = 'failed' AND s.status = 'ok') "
    "OR (m.status = 'ok' AND s.status = 'ok' AND s.median_us < m.median_us)) THEN UPDATE SET "
    "status = s.status, failure = s.failure, median_us = s.median_us, spread = s.spread, samples = s.samples, "
    "source = s.source, measured_at = s.measured_at "
    f"WHEN NOT MATCHED THEN INSERT ({_COLS}) VALUES ({', '.join('s.' + c for c in MEASUREMENT_COLUMNS)})"
)
# A batch with one row per key merges as it is; one with repeated keys first keeps the best row of each key
# (ok before failed, then the lower median, then the first given), as the in-memory store does.
_MERGE_DISTINCT = _MERGE.format(source="SELECT * FROM st_measurements")
_MERGE_BEST = _MERGE.format(
    source="SELECT * FROM st_measurements QUALIFY row_number() OVER (PARTITION BY kernel_id, sizes, schedule_id, "
           "card, setting ORDER BY (status = 'ok') DESC, median_us, i) = 1")
_CARD_COLS = ("name", "target", "arch", "tensor_cores", *CARD_NUMBERS)
_CARD_UPSERT = (f"INSERT INTO cards ({', '.join(_CARD_COLS)}) SELECT {', '.join(_CARD_COLS)} FROM st_cards "
                "ON CONFLICT (name) DO UPDATE SET "
                + ", ".join(f"{c} = excluded.{c}" for c in _CARD_COLS[1:]))


def _arrow_measurements(p: Prepared) -> Any:
    import pyarrow as pa

    schema = pa.schema([("i", pa.int64()), ("kernel_id", pa.string()), ("sizes", pa.string()),
                        ("schedule_id", pa.string()), ("card", pa.string()), ("setting", pa.string()),
                        ("status", pa.string()), ("failure", pa.string()), ("median_us", pa.float64()),
                        ("spread", pa.float64()), ("samples", pa.int32()), ("source", pa.string()),
                        ("measured_at", pa.timestamp("us"))])
    arrays = [pa.array(range(p.rows), pa.int64())]
    arrays += [pa.array(p.columns[c], schema.field(c).type) for c in MEASUREMENT_COLUMNS]
    return pa.Table.from_arrays(arrays, schema=schema)


def _arrow(columns: dict[str, list], types: dict[str, Any]) -> Any:
    import pyarrow as pa

    return pa.Table.from_arrays([pa.array(columns[c], types[c]) for c in columns],
                                schema=pa.schema([(c, types[c]) for c in columns]))


_ROUTING = ("parent_id", "decision", "piece_index", "piece_id")
_GOLDEN = ("kernel_id", "sizes", "card", "setting", "schedule_id", "decision")
_ROUTING_COLS, _GOLDEN_COLS = ", ".join(_ROUTING), ", ".join(_GOLDEN)


def _stage(p: Prepared) -> dict[str, Any]:
    """The batch as Arrow tables, one per table written, under the names the statements read."""
    import pyarrow as pa

    cards = list(p.cards.values())
    card_types = {"name": pa.string(), "target": pa.string(), "arch": pa.string(), "tensor_cores": pa.string(),
                  **{k: pa.int64() if t is int else pa.float64() for k, t in CARD_NUMBERS.items()}}
    return {
        "st_kernels": _arrow({"kernel_id": [*p.kernels], "loop_program": [v[0] for v in p.kernels.values()],
                              "c_name": [v[1] for v in p.kernels.values()]}, dict.fromkeys(
                                 ("kernel_id", "loop_program", "c_name"), pa.string())),
        "st_schedules": _arrow({"schedule_id": [*p.schedules], "knobs": [*p.schedules.values()]},
                               dict.fromkeys(("schedule_id", "knobs"), pa.string())),
        "st_cards": _arrow({"name": [c.name for c in cards], "target": [c.target for c in cards],
                            "arch": [c.arch or None for c in cards],
                            "tensor_cores": [",".join(c.tensor_cores) or None for c in cards],
                            **{k: [c.value(k) for c in cards] for k in CARD_NUMBERS}}, card_types),
        "st_measurements": _arrow_measurements(p),
        "st_routing": _arrow({n: [r[i] for r in p.routing] for i, n in enumerate(_ROUTING)},
                             {**dict.fromkeys(_ROUTING, pa.string()), "piece_index": pa.int32()}),
        "st_goldens": _arrow({n: [g[i] for g in p.goldens] for i, n in enumerate(_GOLDEN)},
                             dict.fromkeys(_GOLDEN, pa.string())),
    }


def _repeats_a_key(p: Prepared) -> bool:
    c = p.columns
    keys = zip(c["kernel_id"], c["sizes"], c["schedule_id"], c["card"], c["setting"], strict=True)
    return len(set(keys)) < p.rows


class DuckStore(MeasurementStore):
    """A store in one DuckDB file, opened for reading ('r') or writing ('w')."""

    def __init__(self, path: Path | str, mode: str = "r", *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
                 notify: Callable[[str], None] | None = None) -> None:
        """`notify` hears what a writer must tell the user (a file of another version moved aside);
        by default a plain line on stderr."""
        if mode not in ("r", "w"):
            raise ValueError(f"mode must be 'r' or 'w', not {mode!r}")
        self.path = Path(path)
        self.mode = mode
        self.label = str(self.path)
        self.moved_aside: Path | None = None
        refuse_unusable(self.path)  # a FIFO or a device: refused by name, by a writer as by a reader
        if mode == "w":
            ensure_folder(self.path.parent)
        elif not self.path.is_file():
            folder = ": it is a folder" if self.path.is_dir() else ""
            raise StoreError(f"no store at {self.path}{folder}")
        self._con: Any = connect(self.path, read_only=(mode == "r"), lock_timeout=lock_timeout)
        try:
            self.meta = open_schema(self._con, self.path, mode)
        except VersionMismatchError as exc:
            self._con.close()
            if mode != "w":
                raise
            self.moved_aside = move_aside(self.path, exc.found, notify)
            self._con = connect(self.path, read_only=False, lock_timeout=lock_timeout)
            try:
                self.meta = open_schema(self._con, self.path, mode)
            except BaseException:
                self._con.close()
                raise
        except BaseException:
            self._con.close()
            raise

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    @property
    def con(self) -> Any:
        if self._con is None:
            raise StoreError(f"{self.label} is closed")
        return self._con

    def _all(self, sql: str, params: list | None = None) -> list[tuple]:
        with translated(self.label, "a query"):
            return self.con.execute(sql, params or []).fetchall()

    def arrow(self, sql: str, params: list | None = None) -> Any:
        """A read query's result as a pyarrow Table (for export and analysis)."""
        with translated(self.label, "a query"):
            return self.con.sql(sql, params=params or []).to_arrow_table()

    # ---- writing -------------------------------------------------------------------------------

    def _missing_kernels(self, ids: set[str]) -> set[str]:
        if not ids:
            return set()
        import pyarrow as pa

        self.con.register("st_need", pa.table({"kernel_id": pa.array(sorted(ids), pa.string())}))
        try:
            rows = self.con.execute("SELECT n.kernel_id FROM st_need n ANTI JOIN kernels k "
                                    "ON k.kernel_id = n.kernel_id").fetchall()
        finally:
            self.con.unregister("st_need")
        return {r[0] for r in rows}

    def _card_targets(self, names: set[str]) -> dict[str, str]:
        if not names:
            return {}
        rows = self.con.execute("SELECT name, target FROM cards WHERE list_contains(?, name)",
                                [sorted(names)]).fetchall()
        return {n: t for n, t in rows}

    def _count(self, table: str) -> int:
        assert table in TABLE_NAMES
        return self.con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0]

    def _commit(self, p: Prepared) -> WriteSummary:
        import duckdb

        con = self.con
        staged = _stage(p)
        try:
            con.execute("BEGIN TRANSACTION")
            self._resolve(p)
            for name, table in staged.items():
                con.register(name, table)
            kernels_before, schedules_before = self._count("kernels"), self._count("schedules")
            rows_before = self._count("measurements")
            con.execute("INSERT INTO kernels (kernel_id, loop_program, c_name) SELECT kernel_id, loop_program, "
                        "c_name FROM st_kernels ON CONFLICT DO NOTHING")
            con.execute("INSERT INTO schedules (schedule_id, knobs) SELECT schedule_id, knobs FROM st_schedules "
                        "ON CONFLICT DO NOTHING")
            if p.cards:
                con.execute(_CARD_UPSERT)
            merged = 0
            if p.rows:
                merged = con.execute(_MERGE_BEST if _repeats_a_key(p) else _MERGE_DISTINCT).fetchall()[0][0]
            if p.routing:
                con.execute(f"INSERT INTO routing ({_ROUTING_COLS}) SELECT {_ROUTING_COLS} FROM st_routing "
                            "ON CONFLICT (parent_id, decision, piece_index) DO UPDATE SET piece_id = excluded.piece_id")
            if p.goldens:
                con.execute(f"INSERT INTO goldens ({_GOLDEN_COLS}) SELECT {_GOLDEN_COLS} FROM st_goldens ON CONFLICT "
                            "(kernel_id, sizes, card, setting) DO UPDATE SET schedule_id = excluded.schedule_id, "
                            "decision = excluded.decision")
            inserted = self._count("measurements") - rows_before
            summary = WriteSummary(p.rows, inserted, merged - inserted, self._count("kernels") - kernels_before,
                                   self._count("schedules") - schedules_before)
            con.execute("COMMIT")
            return summary
        except BaseException as exc:
            try:
                con.execute("ROLLBACK")
            except duckdb.Error:
                pass  # the transaction is already gone (DuckDB aborted it); nothing was committed
            if isinstance(exc, duckdb.Error):
                where = f"{p.origin}: " if p.origin else ""
                raise StoreError(f"{self.label}: {where}writing the batch failed, nothing was written: "
                                 f"{first_line(exc)}") from None
            if isinstance(exc, BatchError):
                raise BatchError(bounded(f"{self.label}: {exc}")) from None
            raise
        finally:
            for name in staged:
                try:
                    con.unregister(name)
                except duckdb.Error:
                    pass  # not registered (the batch failed before staging)

    # ---- reading -------------------------------------------------------------------------------

    def versions(self) -> dict[str, str]:
        return {k: v for k, v in self._all("SELECT key, value FROM meta ORDER BY key")
                if k in ("schema_version", "identity_version", "writer_version")}

    def counts(self) -> dict[str, int]:
        with translated(self.label, "counting rows"):
            return {t: self._count(t) for t in TABLE_NAMES}

    def kernels(self) -> dict[str, tuple[str, str]]:
        return {k: (t, c) for k, t, c in self._all("SELECT kernel_id, loop_program, c_name FROM kernels")}

    def knobs(self, schedule_id: str) -> dict[str, object] | None:
        rows = self._all("SELECT knobs FROM schedules WHERE schedule_id = ?", [schedule_id])
        return json.loads(rows[0][0]) if rows else None

    def measurements(self, *, kernel_id: str | None = None, card: str | None = None,
                     setting: str | None = None) -> list[StoredMeasurement]:
        rows = self._all(
            f"SELECT {_COLS} FROM measurements WHERE (? IS NULL OR kernel_id = ?) AND (? IS NULL OR card = ?) "
            "AND (? IS NULL OR setting = ?) ORDER BY kernel_id, sizes, schedule_id, card, setting",
            [kernel_id, kernel_id, card, card, setting, setting])
        return [StoredMeasurement(*r) for r in rows]

    def measurement(self, kernel_id: str, sizes: str, knobs: Any, card: str,
                    setting: str) -> StoredMeasurement | None:
        from emmy_core.store.interface import schedule_key

        rows = self._all(f"SELECT {_COLS} FROM measurements WHERE kernel_id = ? AND sizes = ? AND schedule_id = ? "
                         "AND card = ? AND setting = ?", [kernel_id, sizes, schedule_key(knobs), card, setting])
        return StoredMeasurement(*rows[0]) if rows else None

    def fastest(self, key: ForkKey) -> StoredMeasurement | None:
        rows = self._all(f"SELECT {_COLS} FROM measurements WHERE kernel_id = ? AND sizes = ? AND card = ? "
                         "AND setting = ? AND status = 'ok' ORDER BY median_us, schedule_id LIMIT 1",
                         [key.kernel_id, key.sizes, key.card, key.setting])
        return StoredMeasurement(*rows[0]) if rows else None

    def routing(self, parent_id: str | None = None) -> list[RoutingRow]:
        rows = self._all("SELECT parent_id, decision, piece_index, piece_id FROM routing WHERE (? IS NULL OR "
                         "parent_id = ?) ORDER BY parent_id, decision, piece_index", [parent_id, parent_id])
        return [RoutingRow(*r) for r in rows]

    def goldens(self, *, card: str | None = None) -> list[StoredGolden]:
        rows = self._all("SELECT kernel_id, sizes, card, setting, schedule_id, decision FROM goldens "
                         "WHERE (? IS NULL OR card = ?) ORDER BY kernel_id, sizes, card, setting", [card, card])
        return [StoredGolden(*r) for r in rows]

    def cards(self) -> list[CardRow]:
        rows = self._all(f"SELECT {', '.join(_CARD_COLS)} FROM cards ORDER BY name")
        return [CardRow(r[0], r[1], {k: v for k, v in zip(CARD_NUMBERS, r[4:], strict=True) if v is not None},
                        r[2] or "", tuple(r[3].split(",")) if r[3] else ()) for r in rows]
