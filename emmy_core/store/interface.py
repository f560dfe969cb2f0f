"""The store interface: one writer with the measurement rules, and the readers later layers use.

Two implementations keep the same contract (tests/store/test_contract.py runs one suite
against both): `DuckStore` (a DuckDB file, what every command uses) and `MemoryStore`
(pure Python, for other layers' tests and replay). Writing goes through `write(batch)`
only: `record(...)` and `transaction()` build a `Batch`; `prepare()` validates it the same
way for both; `_commit` writes all of it in one transaction or nothing.

The rules of `_commit` (each has a test): the key is (kernel, sizes, knobs, card,
setting); a better `ok` row (lower median) replaces a worse one; a failure is kept with
the placeholder time; an `ok` row is never replaced by a failure; a failure is replaced
by an `ok` row; among rows of one key inside a batch the best wins (the first on a tie).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager

from emmy_core.graph.forks import ForkKey
from emmy_core.ir import Kernel
from emmy_core.store.batch import Batch, Prepared, check_references
from emmy_core.store.errors import StoreError
from emmy_core.store.rows import (
    CardRow,
    GoldenRow,
    MeasurementRow,
    RoutingRow,
    Schedule,
    StoredGolden,
    StoredMeasurement,
    WriteSummary,
)

KnobsLike = Mapping[str, object] | Schedule | str


def schedule_key(knobs: KnobsLike) -> str:
    """A schedule id from knobs, a `Schedule` or a schedule id (64 hex digits) itself."""
    if isinstance(knobs, str):
        return knobs
    return knobs.schedule_id if isinstance(knobs, Schedule) else Schedule(knobs).schedule_id


class MeasurementStore(ABC):
    """A measurement store opened for reading (`mode` 'r') or writing ('w')."""

    mode: str = "r"
    label: str = "<store>"
    last_summary: WriteSummary | None = None  # what the last `transaction()` block wrote

    # ---- writing -------------------------------------------------------------------------------

    def record(self, rows: Iterable[MeasurementRow] = (), *, kernels: Iterable[Kernel | str] = (),
               cards: Iterable[CardRow] = (), routing: Iterable[RoutingRow] = (),
               goldens: Iterable[GoldenRow] = (), origin: str = "") -> WriteSummary:
        """Writes one batch (all of it or nothing): kernels, cards, measurements, routing, goldens."""
        batch = Batch(origin, list(kernels), list(cards), list(rows), list(routing), list(goldens))
        return self.write(batch)

    @contextmanager
    def transaction(self, origin: str = "") -> Iterator[Batch]:
        """Collects a batch in a `with` block and writes it on a clean exit; an exception writes nothing."""
        batch = Batch(origin)
        yield batch
        self.last_summary = self.write(batch)

    def write(self, batch: Batch) -> WriteSummary:
        """The one writer: validates the batch, resolves its references and commits it in one transaction."""
        if self.mode != "w":
            raise StoreError(f"{self.label} is open for reading; open it with mode='w' to record")
        prepared = batch.prepare()
        return self._commit(prepared)

    def _resolve(self, p: Prepared) -> None:
        check_references(p, self._missing_kernels(p.need_kernels), self._card_targets(p.need_cards))

    @abstractmethod
    def _commit(self, p: Prepared) -> WriteSummary: ...

    @abstractmethod
    def _missing_kernels(self, ids: set[str]) -> set[str]: ...

    @abstractmethod
    def _card_targets(self, names: set[str]) -> dict[str, str]: ...

    # ---- reading -------------------------------------------------------------------------------

    @abstractmethod
    def versions(self) -> dict[str, str]:
        """The version stamp: schema_version, identity_version, writer_version (as text)."""

    @abstractmethod
    def counts(self) -> dict[str, int]:
        """Rows per table."""

    @abstractmethod
    def kernels(self) -> dict[str, tuple[str, str]]:
        """kernel_id -> (canonical loop-program text, c_name) for every stored kernel."""

    @abstractmethod
    def knobs(self, schedule_id: str) -> dict[str, object] | None:
        """The knob assignment of a stored schedule, or None."""

    @abstractmethod
    def measurements(self, *, kernel_id: str | None = None, card: str | None = None,
                     setting: str | None = None) -> list[StoredMeasurement]:
        """Stored measurements (filtered), sorted by key."""

    @abstractmethod
    def routing(self, parent_id: str | None = None) -> list[RoutingRow]:
        """Routing rows (of one parent), sorted by parent, decision, piece index."""

    @abstractmethod
    def goldens(self, *, card: str | None = None) -> list[StoredGolden]:
        """Golden rows (of one card), sorted by key."""

    @abstractmethod
    def cards(self) -> list[CardRow]:
        """Every described card, sorted by name."""

    def measurement(self, kernel_id: str, sizes: str, knobs: KnobsLike, card: str,
                    setting: str) -> StoredMeasurement | None:
        """The stored row of one variant (the measurement identity), or None: what a tune dedupes on."""
        sid = schedule_key(knobs)
        for m in self.measurements(kernel_id=kernel_id, card=card, setting=setting):
            if m.sizes == sizes and m.schedule_id == sid:
                return m
        return None

    def fastest(self, key: ForkKey) -> StoredMeasurement | None:
        """The fastest `ok` row of a pool (kernel, sizes, card, setting: a fork's key; ties: lowest schedule_id)."""
        ok = [m for m in self.measurements(kernel_id=key.kernel_id, card=key.card, setting=key.setting)
              if m.sizes == key.sizes and m.status == "ok"]
        return min(ok, key=lambda m: (m.median_us, m.schedule_id), default=None)

    def card(self, name: str) -> CardRow | None:
        return next((c for c in self.cards() if c.name == name), None)

    @abstractmethod
    def close(self) -> None:
        """Releases the file (and its lock); the store is unusable afterwards."""

    def __enter__(self) -> MeasurementStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
