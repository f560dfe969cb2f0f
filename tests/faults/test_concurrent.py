"""Concurrent writers on one database: importer processes (`emmy db import`) and tune workers (processes
recording kernel by kernel through the tune's recorder) at once. DuckDB lets one process write at a time;
each waits for the lock, and every row offered is stored: rows in equal rows stored."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from emmy_core.exchange.importer import import_into
from emmy_core.formats.tunefile import tune_file_name, write_tune_file
from emmy_core.ir import kernel_id
from emmy_core.store import MeasurementRow, MemoryStore, open_store
from emmy_core.store.check import check_db
from tests.store.test_files_freeze import H100, H200, KERNELS, populate

ROOT = Path(__file__).resolve().parents[2]
TUNE_WORKER = """
import sys, time
from emmy_core.store import open_store
from tests.faults.test_concurrent import worker_rows
time.sleep(max(0.0, float(sys.argv[3]) - time.time()))
for batch in worker_rows(int(sys.argv[2])):  # as the tune's recorder does: open, one transaction per kernel, close
    with open_store(sys.argv[1], "w", lock_timeout=120) as s:
        s.record(batch, origin="tune worker")
"""


def worker_rows(worker: int) -> list[list[MeasurementRow]]:
    """Five kernels' rows of one tune worker: its own keys, plus one key every worker offers."""
    kid = kernel_id(KERNELS[2])
    batches = [[MeasurementRow.ok(kid, f"B={100_000 * (worker + 1) + 100 * b + i}", {"block": 64}, H200.name,
                                  "rank", 1.0 + i, samples=3) for i in range(60)] for b in range(5)]
    batches[0].append(MeasurementRow.ok(kid, "B=1", {"block": 64}, H200.name, "rank", 50.0 - worker, samples=3))
    return batches


def test_concurrent_importers_and_tune_workers_lose_no_row(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with open_store(db, "w") as s:
        populate(s)
    sources = [write_tune_file(tmp_path / tune_file_name(card.name, f"20261130T00000{n}Z"), card=card,
                               kernels=KERNELS, measurements=[
                                   MeasurementRow.ok(kernel_id(KERNELS[n]), f"B={5000 + i}", {"block": 32}, card.name,
                                                     "deploy", 2.0 + i % 7, samples=3) for i in range(3000)])
               for n, card in enumerate((H200, H100))]
    start_at = f"{time.time() + 3.0}"
    procs = [subprocess.Popen([sys.executable, "-c", TUNE_WORKER, str(db), str(w), start_at], cwd=ROOT,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for w in range(3)]
    procs += [subprocess.Popen([sys.executable, "-m", "emmy_core.cli.main", "db", "import", "--db", str(db), str(src)],
                               cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for src in sources]
    for p in procs:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err[-2000:]
    offered = MemoryStore()
    populate(offered)
    for src in sources:
        import_into(offered, [src])
    for w in range(3):
        for batch in worker_rows(w):
            offered.record(batch)
    assert check_db(db).ok
    with open_store(db, "r") as s:
        stored = {(m.kernel_id, m.sizes, m.schedule_id, m.card, m.setting): m.median_us for m in s.measurements()}
    want = {(m.kernel_id, m.sizes, m.schedule_id, m.card, m.setting): m.median_us for m in offered.measurements()}
    assert stored == want  # every key offered is stored once, with the best time offered for it
