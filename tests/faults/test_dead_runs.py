"""A chain killed while a step holds the `duckdb` pool slot must not block every later chain (issue 45, item 1).

Dagster keeps a run killed with kill -9 STARTED and keeps its slot; the next chain then waits for that slot for
ever. `release_dead_runs` (which `python -m pipelines` calls under its chain lock) marks such a run failed, frees
its slot and says so in one line, and leaves a live run alone. A real Dagster instance in a temporary folder,
real child processes, a real kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from emmy_core.chain.deadruns import release_dead_runs

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 120
INSTANCE = "concurrency:\n  pools:\n    default_limit: 1\ntelemetry:\n  enabled: false\n"
RUN = textwrap.dedent("""
    import sys, time
    import dagster as dg

    @dg.asset(pool="duckdb")
    def dataset() -> None:
        print("holding the slot", flush=True)
        time.sleep(float(sys.argv[2]))

    with dg.DagsterInstance.from_config(sys.argv[1]) as instance:
        result = dg.materialize([dataset], instance=instance, raise_on_error=False)
        print("done", result.success, flush=True)
""")


@pytest.fixture
def home(tmp_path: Path) -> Path:
    (tmp_path / "dagster.yaml").write_text(INSTANCE)
    return tmp_path


def start_run(home: Path, seconds: float) -> subprocess.Popen[str]:
    """A child process materializing a `duckdb`-pool asset for `seconds`, returned once its step holds the slot."""
    proc = subprocess.Popen([sys.executable, "-c", RUN, str(home), str(seconds)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None
    for _ in range(200):  # bounded: Dagster's start-up lines, then ours
        line = proc.stdout.readline()
        if not line or line.strip() == "holding the slot":
            break
    assert line.strip() == "holding the slot", "the child run never took the slot"
    return proc


@pytest.fixture
def killed_run(home: Path) -> Iterator[int]:
    proc = start_run(home, 300)
    proc.send_signal(signal.SIGKILL)
    proc.wait(DEADLINE_S)
    yield proc.pid


def claimed(instance: dg.DagsterInstance) -> list[str]:
    return [s.run_id for s in instance.event_log_storage.get_concurrency_info("duckdb").claimed_slots]


def test_a_killed_runs_pool_slot_is_freed_and_the_run_marked_failed_in_one_line(home: Path, killed_run: int) -> None:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        (run,) = instance.get_runs()
        assert run.status == dg.DagsterRunStatus.STARTED and claimed(instance) == [run.run_id]  # the stuck state
        said: list[str] = []
        assert release_dead_runs(instance, said.append) == [run.run_id]
        assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
        assert claimed(instance) == []
        assert len(said) == 1 and run.run_id in said[0] and f"PID {killed_run}" in said[0] and "duckdb" in said[0]
        assert release_dead_runs(instance, said.append) == [] and len(said) == 1  # nothing left to release


def test_the_next_run_of_the_pool_completes_once_the_dead_run_is_released(home: Path, killed_run: int) -> None:
    with dg.DagsterInstance.from_config(str(home)) as instance:
        release_dead_runs(instance, lambda m: None)
    done = subprocess.run([sys.executable, "-c", RUN, str(home), "0"], cwd=ROOT, capture_output=True, text=True,
                          timeout=DEADLINE_S, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert "done True" in done.stdout, done.stdout[-1000:] + done.stderr[-2000:]


def test_a_live_run_is_left_alone(home: Path) -> None:
    proc = start_run(home, 300)
    try:
        with dg.DagsterInstance.from_config(str(home)) as instance:
            assert release_dead_runs(instance, lambda m: None) == []
            (run,) = instance.get_runs()
            assert run.status == dg.DagsterRunStatus.STARTED and claimed(instance) == [run.run_id]
    finally:
        proc.kill()
        proc.wait(DEADLINE_S)
