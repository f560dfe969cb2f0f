"""A writer killed with SIGKILL in the middle of a 100,000-row batch leaves all of that batch or none of it."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emmy_core.store import MeasurementRow, open_store
from emmy_core.store.check import check_db
from tests.store.conftest import ADD, ADD_ID, CARDS, H200, KNOBS_A

ROOT = Path(__file__).resolve().parents[2]
BATCH = 100_000
BEFORE = 1_000

WRITER = """
import sys, time
from emmy_core.store import MeasurementRow
from emmy_core.store.duck import DuckStore
from tests.store.conftest import ADD_ID, H200, KNOBS_A


class Announcing(DuckStore):
    def _resolve(self, p):  # called first thing inside the batch's transaction
        super()._resolve(p)
        print("in-transaction", flush=True)


rows = [MeasurementRow.ok(ADD_ID, f"B={100_000 + i}", KNOBS_A, H200, "deploy", 1.0 + i % 97, samples=3)
        for i in range(int(sys.argv[2]))]
store = Announcing(sys.argv[1], "w")
store.record(rows, origin="the big batch")
print("committed", flush=True)
time.sleep(60)
"""


@pytest.mark.parametrize("delay", [0.0, 0.15, None], ids=["right-after-begin", "mid-batch", "after-commit"])
def test_sigkill_mid_batch_leaves_all_of_it_or_none(tmp_path: Path, delay: float | None) -> None:
    path = tmp_path / "k.db"
    with open_store(path, "w") as s:
        s.record([MeasurementRow.ok(ADD_ID, f"B={i + 1}", KNOBS_A, H200, "deploy", 5.0) for i in range(BEFORE)],
                 kernels=[ADD], cards=CARDS)
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path), str(BATCH)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    line = proc.stdout.readline().strip()
    assert line == "in-transaction", proc.stderr.read() if proc.stderr else ""
    if delay is None:
        assert proc.stdout.readline().strip() == "committed"
    else:
        time.sleep(delay)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    committed = delay is None or "committed" in proc.stdout.read()
    assert proc.returncode == -signal.SIGKILL

    report = check_db(path)
    assert report.ok, report.counts
    with open_store(path, "r") as s:
        n = s.counts()["measurements"]
    assert n in (BEFORE, BEFORE + BATCH)
    if committed:
        assert n == BEFORE + BATCH
    if delay == 0.0:
        assert n == BEFORE, "killed right after BEGIN, yet the batch was committed"
