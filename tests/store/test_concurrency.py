"""One writing process per file: a bounded wait for the lock with a clear message, and no row ever lost."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from emmy_core.store import MeasurementRow, StoreLockedError, open_store
from tests.store.conftest import ADD, ADD_ID, CARDS, H100, H200, KNOBS_A

ROOT = Path(__file__).resolve().parents[2]
HOLD = """
import sys, time
from emmy_core.store import open_store
s = open_store(sys.argv[1], "w")
print("held", flush=True)
time.sleep(float(sys.argv[2]))
s.close()
print("released", flush=True)
time.sleep(30)
"""


def _prepared(path: Path) -> Path:
    with open_store(path, "w") as s:
        s.record(kernels=[ADD], cards=CARDS)
    return path


def _hold(path: Path, seconds: float) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(path), str(seconds)], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


def test_a_second_writer_waits_a_bounded_time_then_fails_with_a_clear_message(tmp_path: Path) -> None:
    path = _prepared(tmp_path / "s.db")
    holder = _hold(path, 60)
    try:
        for mode in ("w", "r"):
            started = time.monotonic()
            with pytest.raises(StoreLockedError) as err:
                open_store(path, mode, lock_timeout=0.6)
            assert time.monotonic() - started >= 0.6
            message = str(err.value)
            assert str(path) in message and "waited 0.6 s" in message and f"process {holder.pid}" in message
            assert "IOException" not in message and "Traceback" not in message
    finally:
        holder.kill()
        holder.wait()


def test_a_second_writer_gets_the_lock_once_the_first_lets_go(tmp_path: Path) -> None:
    path = _prepared(tmp_path / "s.db")
    holder = _hold(path, 1.0)
    try:
        with open_store(path, "w", lock_timeout=30) as s:
            s.record([MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H200, "deploy", 3.0)])
            assert s.counts()["measurements"] == 1
    finally:
        holder.kill()
        holder.wait()


def test_two_processes_recording_at_once_lose_no_row(tmp_path: Path) -> None:
    path = _prepared(tmp_path / "s.db")
    batches, size = 6, 40
    start_at = time.time() + 4.0
    procs = [subprocess.Popen([sys.executable, "-m", "tests.store.workers", str(path), str(w), str(batches),
                               str(size), str(start_at)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for w in range(2)]
    outs = [p.communicate(timeout=240) for p in procs]
    for p, (_, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, err
        assert "Traceback" not in err
    spans = [[tuple(map(float, line.split())) for line in out.splitlines()] for out, _ in outs]
    # one process was waiting for the file ([asked, got]) while the other held it ([got, released])
    contended = [asked for me, other in ((0, 1), (1, 0)) for asked, got, _ in spans[me]
                 if any(max(asked, held) < min(got, released) for _, held, released in spans[other])]
    assert contended, "the two processes never waited for each other: the test proved nothing"
    with open_store(path, "r") as s:
        assert s.counts()["measurements"] == 2 * batches * size + 1
        best = s.measurement(ADD_ID, "B=1", KNOBS_A, H100, "rank")
        assert best is not None and best.median_us == pytest.approx(100.0 - 1 - (batches - 1) / 100)
