"""Two chains at once in one workspace: the second waits (bounded) or refuses, saying which and naming the
holder's PID; a lock left by a killed run is taken over with a note; `python -m pipelines` obeys it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from emmy_core.chain.runlock import RunLockedError, run_lock

ROOT = Path(__file__).resolve().parents[2]
HOLDER = textwrap.dedent("""
    import sys, time
    from emmy_core.chain.runlock import run_lock
    with run_lock(sys.argv[1], say=lambda m: None):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
""")


def hold(lock: Path, seconds: float) -> subprocess.Popen[str]:
    """A process holding `lock` for `seconds` (returned once it holds it)."""
    proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(lock), str(seconds)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    return proc


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    lock = tmp_path / "_data" / "chain.lock"
    proc = hold(lock, 60)
    yield lock, proc
    proc.kill()
    proc.wait()


def test_a_second_chain_refuses_at_once_naming_the_holders_pid(holder: tuple) -> None:
    lock, proc = holder
    with pytest.raises(RunLockedError) as info, run_lock(lock, wait_s=0, say=lambda m: None):
        pass
    message = str(info.value)
    assert f"PID {proc.pid}" in message and "not waiting" in message and "--wait" in message


def test_a_second_chain_waits_bounded_and_says_it_waited(holder: tuple) -> None:
    lock, proc = holder
    said: list[str] = []
    started = time.monotonic()
    with pytest.raises(RunLockedError, match="waited 1 s"), run_lock(lock, wait_s=1.0, say=said.append):
        pass
    assert 0.9 <= time.monotonic() - started < 10
    assert said and f"PID {proc.pid}" in said[0] and "waiting up to 1 s" in said[0]


def test_a_waiting_chain_starts_when_the_holder_finishes(tmp_path: Path) -> None:
    lock = tmp_path / "chain.lock"
    proc = hold(lock, 1.0)
    said: list[str] = []
    with run_lock(lock, wait_s=30, say=said.append):
        assert json.loads(lock.read_text())["pid"] == os.getpid()
    proc.wait()
    assert any("waiting" in s for s in said) and any("finished; starting" in s for s in said)
    assert lock.read_text() == ""  # a clean release leaves no record


def test_the_stale_lock_of_a_dead_pid_is_taken_over_with_a_note(tmp_path: Path) -> None:
    lock = tmp_path / "chain.lock"
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    lock.write_text(json.dumps({"pid": dead.pid, "started": "2026-01-01T00:00:00Z", "command": "killed run"}))
    said: list[str] = []
    with run_lock(lock, wait_s=0, say=said.append):
        pass
    assert any(f"PID {dead.pid}" in s and "no longer running" in s and "taken over" in s for s in said)


def test_a_lock_released_cleanly_is_taken_again_without_a_stale_lock_note(tmp_path: Path) -> None:
    said: list[str] = []
    for _ in range(3):  # a fresh file, then the empty file each clean release leaves
        with run_lock(tmp_path / "chain.lock", say=said.append):
            assert json.loads((tmp_path / "chain.lock").read_text())["pid"] == os.getpid()
    assert said == [] and (tmp_path / "chain.lock").read_text() == ""


def test_python_m_pipelines_refuses_while_another_chain_runs_in_the_workspace(tmp_path: Path) -> None:
    lock = tmp_path / "_data" / "chain.lock"
    proc = hold(lock, 120)
    try:
        done = subprocess.run([sys.executable, "-m", "pipelines", "--wait", "0"], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        proc.kill()
        proc.wait()
    assert done.returncode == 3, done.stdout + done.stderr[-2000:]
    assert f"PID {proc.pid}" in done.stderr and "refusing to start a second one" in done.stderr
    assert "== the chain" not in done.stdout  # nothing of the chain ran
