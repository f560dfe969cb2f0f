"""A store held in Python dictionaries: the same contract as the DuckDB store, no file, no database.

For other layers' tests and for replaying recorded measurements. It keeps the same tables
(as dictionaries keyed the way the DuckDB tables are keyed) and applies the same rules;
the contract suite runs against both. Versions are always current (nothing is persisted).
"""

from __future__ import annotations

import json

from emmy_core.store.batch import MEASUREMENT_COLUMNS, Prepared
from emmy_core.store.interface import MeasurementStore
from emmy_core.store.rows import CardRow, RoutingRow, StoredGolden, StoredMeasurement, WriteSummary
from emmy_core.store.schema import SCHEMA_VERSION, TABLE_NAMES, WRITER_VERSION

_Key = tuple[str, str, str, str, str]


def _better(new: StoredMeasurement, old: StoredMeasurement) -> bool:
    """Whether `new` replaces `old` for the same key: ok beats failed; a lower median beats a higher one."""
    if new.status == "ok":
        return old.status == "failed" or new.median_us < old.median_us
    return False


class MemoryStore(MeasurementStore):
    """The in-memory store (always writable)."""

    def __init__(self, label: str = "<memory>") -> None:
        self.mode = "w"
        self.label = label
        self._kernels: dict[str, tuple[str, str]] = {}
        self._schedules: dict[str, str] = {}
        self._cards: dict[str, CardRow] = {}
        self._measurements: dict[_Key, StoredMeasurement] = {}
        self._routing: dict[tuple[str, str, int], RoutingRow] = {}
        self._goldens: dict[tuple[str, str, str, str], StoredGolden] = {}

    def _missing_kernels(self, ids: set[str]) -> set[str]:
        return {i for i in ids if i not in self._kernels}

    def _card_targets(self, names: set[str]) -> dict[str, str]:
        return {n: self._cards[n].target for n in names if n in self._cards}

    def _commit(self, p: Prepared) -> WriteSummary:
        self._resolve(p)  # raises before anything changes: all or nothing
        kernels_before, schedules_before = len(self._kernels), len(self._schedules)
        for kid, value in p.kernels.items():
            self._kernels.setdefault(kid, value)
        for sid, text in p.schedules.items():
            self._schedules.setdefault(sid, text)
        self._cards.update(p.cards)
        best: dict[_Key, StoredMeasurement] = {}  # one row per key inside the batch, as the DuckDB store
        for values in zip(*(p.columns[c] for c in MEASUREMENT_COLUMNS), strict=True):
            row = StoredMeasurement(*values)
            key = (row.kernel_id, row.sizes, row.schedule_id, row.card, row.setting)
            current = best.get(key)
            if current is None or _better(row, current):
                best[key] = row
        inserted = replaced = 0
        for key, row in best.items():
            old = self._measurements.get(key)
            if old is None:
                inserted += 1
            elif _better(row, old):
                replaced += 1
            else:
                continue
            self._measurements[key] = row
        for parent, decision, index, piece in p.routing:
            self._routing[(parent, decision, index)] = RoutingRow(parent, decision, index, piece)
        for g in p.goldens:
            self._goldens[g[:4]] = StoredGolden(*g)
        return WriteSummary(p.rows, inserted, replaced, len(self._kernels) - kernels_before,
                            len(self._schedules) - schedules_before)

    def close(self) -> None:
        """Nothing to release (the dictionaries stay readable)."""

    def versions(self) -> dict[str, str]:
        from emmy_core.ir import identity

        return {"schema_version": str(SCHEMA_VERSION), "identity_version": str(identity.IDENTITY_VERSION),
                "writer_version": WRITER_VERSION}

    def counts(self) -> dict[str, int]:
        sizes = {"meta": 4, "cards": len(self._cards), "kernels": len(self._kernels),
                 "routing": len(self._routing), "schedules": len(self._schedules),
                 "measurements": len(self._measurements), "goldens": len(self._goldens)}
        return {t: sizes[t] for t in TABLE_NAMES}

    def kernels(self) -> dict[str, tuple[str, str]]:
        return dict(self._kernels)

    def knobs(self, schedule_id: str) -> dict[str, object] | None:
        text = self._schedules.get(schedule_id)
        return None if text is None else json.loads(text)

    def measurements(self, *, kernel_id: str | None = None, card: str | None = None,
                     setting: str | None = None) -> list[StoredMeasurement]:
        out = [m for k, m in self._measurements.items()
               if (kernel_id is None or k[0] == kernel_id) and (card is None or k[3] == card)
               and (setting is None or k[4] == setting)]
        return sorted(out, key=lambda m: (m.kernel_id, m.sizes, m.schedule_id, m.card, m.setting))

    def routing(self, parent_id: str | None = None) -> list[RoutingRow]:
        return [r for k, r in sorted(self._routing.items()) if parent_id is None or k[0] == parent_id]

    def goldens(self, *, card: str | None = None) -> list[StoredGolden]:
        return [g for k, g in sorted(self._goldens.items()) if card is None or k[2] == card]

    def cards(self) -> list[CardRow]:
        return [self._cards[n] for n in sorted(self._cards)]
