"""Dagster runs left behind by a killed process: marked failed, their pool slots freed, said in one line.

A run killed with kill -9 never records its end. Dagster keeps it STARTED and keeps the pool slot its step
claimed (the `duckdb` pool has one), so the next chain waits for that slot for ever, without a word, after
its first steps. `release_dead_runs` finds the runs still in progress, or still holding or waiting for a
slot, whose process is gone, marks each failed and frees its slots; a run that finished but kept a slot
has the slot freed.

A run's process is the PID Dagster recorded with its RUN_START event (the in-process executor's, or the
run worker's that `dagster dev` launched). Only an instance whose storage is local SQLite is judged: its
runs run on this machine, so a PID that is not alive here is a dead run. A run whose PID is alive, or
was never recorded (not started yet), is left alone; a PID reused by another process leaves the run
alone too (the safe side). The chain calls this while it holds the workspace's chain lock.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from emmy_core.fileio.pidfile import alive


def _local(instance: Any) -> bool:
    """Whether the instance keeps its runs in local SQLite files (its runs ran on this machine)."""
    return type(instance.run_storage).__name__.startswith("Sqlite") and \
        type(instance.event_log_storage).__name__.startswith("Sqlite")


def run_pid(instance: Any, run_id: str) -> int | None:
    """The PID that started run `run_id` (from its RUN_START event), None when it never started."""
    from dagster._core.events import DagsterEventType

    records = instance.get_records_for_run(run_id, of_type=DagsterEventType.RUN_START, limit=1).records
    event = records[0].event_log_entry.dagster_event if records else None
    pid = getattr(event, "pid", None)
    return pid if isinstance(pid, int) and pid > 0 else None


def _held_pools(storage: Any, run_id: str) -> list[str]:
    """The pools in which `run_id` holds or waits for a slot."""
    pools = []
    for key in sorted(storage.get_concurrency_keys()):
        info = storage.get_concurrency_info(key)
        if any(s.run_id == run_id for s in info.claimed_slots) or any(p.run_id == run_id for p in info.pending_steps):
            pools.append(key)
    return pools


def release_dead_runs(instance: Any, say: Callable[[str], None]) -> list[str]:
    """Marks failed every run of `instance` left in progress by a process that is gone, and frees the pool
    slots of those runs and of finished runs that still hold one; says one line per run. Returns their ids."""
    import dagster as dg

    if not _local(instance):
        return []
    storage = instance.event_log_storage
    in_progress = (dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING)
    run_ids = {r.run_id for r in instance.get_runs(filters=dg.RunsFilter(statuses=list(in_progress)))}
    slotted = set(storage.get_concurrency_run_ids()) if storage.supports_global_concurrency_limits else set()
    released = []
    for run_id in sorted(run_ids | slotted):
        run = instance.get_run_by_id(run_id)
        pools = _held_pools(storage, run_id) if run_id in slotted else []
        slots = f"; freed its slot in pool {', '.join(pools)}" if pools else ""
        if run is None or run.is_finished:
            if pools:
                storage.free_concurrency_slots_for_run(run_id)
                state = "no longer exists" if run is None else f"ended {run.status.value}"
                say(f"note: Dagster run {run_id} {state} but still held a pool slot{slots}")
                released.append(run_id)
            continue
        pid = run_pid(instance, run_id)
        if pid is None or pid == os.getpid() or alive(pid):
            continue
        message = (f"its process (PID {pid}) is gone, killed before the run could record its end; marked failed "
                   "by the next chain")
        instance.report_run_failed(run, message=message)
        if pools:
            storage.free_concurrency_slots_for_run(run_id)
        say(f"note: Dagster run {run_id} ({run.job_name}) was left {run.status.value} by PID {pid}, which is gone: "
            f"marked it failed{slots}")
        released.append(run_id)
    return released
