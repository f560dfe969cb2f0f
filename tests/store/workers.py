"""Code the concurrency tests run in other processes (importable by a spawned interpreter)."""

from __future__ import annotations

import sys
import time
from pathlib import Path

from emmy_core.store import MeasurementRow, open_store
from tests.store.conftest import ADD_ID, H100, H200, KNOBS_A


def rows_for(worker: int, batch: int, size: int) -> list[MeasurementRow]:
    """Distinct keys per (worker, batch, i), plus one key every worker shares (best median must win)."""
    rows = [MeasurementRow.ok(ADD_ID, f"B={1 + worker * 100_000 + batch * size + i}", KNOBS_A,
                              H200 if i % 2 else H100, "deploy", 1.0 + i) for i in range(size)]
    rows.append(MeasurementRow.ok(ADD_ID, "B=1", KNOBS_A, H100, "rank", 100.0 - worker - batch / 100))
    return rows


def direct_writer(path: str, worker: int, batches: int, size: int, start_at: float = 0.0) -> None:
    """Opens the file for each batch (waiting for the other process's lock) and records it; prints
    when it asked for the file, got it and let it go, so the test can see the two processes contend.
    Both start at the wall-clock time `start_at`, so their interpreters' start-up does not keep them apart."""
    time.sleep(max(0.0, start_at - time.time()))
    for b in range(batches):
        asked = time.time()
        with open_store(Path(path), "w", lock_timeout=120) as s:
            got = time.time()
            s.record(rows_for(worker, b, size), origin=f"worker {worker} batch {b}")
            time.sleep(0.05)  # hold it a moment, as a longer batch would
        print(f"{asked} {got} {time.time()}", flush=True)


if __name__ == "__main__":
    direct_writer(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5]))
