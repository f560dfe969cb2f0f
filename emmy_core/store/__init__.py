"""The measurement store: DuckDB tables, the one writer and its rules, versions, checks.

`open_store(path, mode)` opens a DuckDB file (the default tuning database when `path` is
None); `MemoryStore()` is the same contract in memory. Importing this package does not
import DuckDB, Arrow or Polars: they are loaded when a file is opened.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from emmy_core.store.batch import Batch
from emmy_core.store.connect import DEFAULT_LOCK_TIMEOUT, default_db_path
from emmy_core.store.errors import (
    BatchError,
    StoreError,
    StoreLockedError,
    VersionMismatchError,
)
from emmy_core.store.interface import MeasurementStore
from emmy_core.store.memory import MemoryStore
from emmy_core.store.rows import (
    FAILURE_KINDS,
    PLACEHOLDER_US,
    SOURCES,
    STATUSES,
    CardRow,
    GoldenRow,
    KnobError,
    MeasurementRow,
    RoutingRow,
    Schedule,
    StoredGolden,
    StoredMeasurement,
    WriteSummary,
)
from emmy_core.store.schema import SCHEMA_VERSION


def open_store(path: Path | str | None = None, mode: str = "r", *,
               lock_timeout: float = DEFAULT_LOCK_TIMEOUT, notify: Callable[[str], None] | None = None) -> MeasurementStore:
    """Opens a store file for reading ('r') or writing ('w'); `path` None: the local tuning database.

    A writer meeting a file of another version moves it aside and tells `notify` (default: stderr)."""
    from emmy_core.store.duck import DuckStore

    return DuckStore(default_db_path() if path is None else path, mode, lock_timeout=lock_timeout, notify=notify)


__all__ = [
    "DEFAULT_LOCK_TIMEOUT",
    "FAILURE_KINDS",
    "PLACEHOLDER_US",
    "SCHEMA_VERSION",
    "SOURCES",
    "STATUSES",
    "Batch",
    "BatchError",
    "CardRow",
    "GoldenRow",
    "KnobError",
    "MeasurementRow",
    "MeasurementStore",
    "MemoryStore",
    "RoutingRow",
    "Schedule",
    "StoreError",
    "StoreLockedError",
    "StoredGolden",
    "StoredMeasurement",
    "VersionMismatchError",
    "WriteSummary",
    "default_db_path",
    "open_store",
]
