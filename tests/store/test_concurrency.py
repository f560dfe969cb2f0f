"""One writing process per file: a bounded wait for the lock with a clear message, and no row ever lost."""

from __future__ import annotations

import multiprocessing as mp
import queue
import subprocess
import sys
import time
from pathlib import Path

import pytest

from emmy_core.store import BatchError, MeasurementRow, StoreError, StoreLockedError, open_store
from emmy_core.store.funnel import FunnelClient, RowFunnel
from tests.store.conftest import ADD, ADD_ID, CARDS, H100, H200, KNOBS_A
from tests.store.workers import funnel_worker

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


def test_batching_writer_funnels_many_workers_without_losing_rows(tmp_path: Path) -> None:
    path = _prepared(tmp_path / "s.db")
    workers, batches, size = 3, 6, 50
    funnel = RowFunnel(path, flush_rows=300, flush_seconds=0.2)
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=funnel_worker, args=(funnel.client, w, batches, size)) for w in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=240)
        assert p.exitcode == 0
    report = funnel.close()
    assert report.batches == workers * batches and report.rows == workers * batches * (size + 1)
    assert report.errors == [] and 1 <= report.commits <= workers * batches
    with open_store(path, "r") as s:
        assert s.counts()["measurements"] == workers * batches * size + 1
        best = s.measurement(ADD_ID, "B=1", KNOBS_A, H100, "rank")
        assert best is not None and best.median_us == pytest.approx(100.0 - (workers - 1) - (batches - 1) / 100)


def test_funnel_client_refuses_a_bad_batch_in_the_worker() -> None:
    q: queue.Queue = queue.Queue()
    client = FunnelClient(q)
    with pytest.raises(BatchError, match="structural decision"):
        client.record([MeasurementRow.ok(ADD_ID, "B=8", {"split_k": 2}, H200, "deploy", 1.0)])
    assert q.empty()


def test_funnel_reports_a_batch_the_writer_refused_and_keeps_the_others(tmp_path: Path) -> None:
    path = _prepared(tmp_path / "s.db")
    funnel = RowFunnel(path, flush_rows=10_000, flush_seconds=5)
    funnel.client.record([MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H200, "deploy", 2.0)], origin="good")
    funnel.client.record([MeasurementRow.ok("a" * 64, "B=8", KNOBS_A, H200, "deploy", 2.0)], origin="orphan")
    with pytest.raises(StoreError, match="orphan"):
        funnel.close()
    assert funnel.report is not None and funnel.report.commits == 1
    with open_store(path, "r") as s:
        assert [m.median_us for m in s.measurements()] == [2.0]
