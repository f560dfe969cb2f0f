"""One chain at a time per workspace: a lock file that names its holder.

Dagster's run queue does not cover a chain run in-process (`python -m pipelines`), and two such
runs in one workspace would write one dataset, one candidate prior and one MLflow store at once
(one run's prior recorded the other's dataset). `run_lock` takes an exclusive `flock` on a lock
file and writes into it who holds it (PID, start time, command). A second run reads that record
and either waits, bounded, or refuses, saying which and naming the holder. The kernel releases a
`flock` when its holder dies, so a lock left by a killed run is never in the way; its record is
still there, and the next holder says it took over a stale lock of that PID.
"""

from __future__ import annotations

import datetime as _dt
import fcntl
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from emmy_core.fileio.pidfile import alive
from emmy_core.fileio.safefile import ensure_folder, shown
from emmy_core.store.errors import StoreError

MAX_RECORD = 4096
POLL_S = 0.25


class RunLockedError(StoreError):
    """Another run holds the workspace's lock (the message names it and says whether this one waited)."""


def _record(fd: int) -> dict[str, object] | None:
    """The holder's record in the lock file (None when empty or unreadable: it is only ever a message)."""
    try:
        data = os.pread(fd, MAX_RECORD, 0)
    except OSError:
        return None
    if not data.strip():
        return None  # a clean release leaves the file empty: nobody held it
    try:
        doc = json.loads(data.decode("utf-8"))
    except ValueError:
        return {"unreadable": True}
    return doc if isinstance(doc, dict) else {"unreadable": True}


def _pid(rec: dict[str, object] | None) -> int | None:
    pid = rec.get("pid") if rec else None
    return pid if isinstance(pid, int) and not isinstance(pid, bool) and 0 < pid < 2**31 else None


def describe_holder(rec: dict[str, object] | None) -> str:
    """The holder as a message names it."""
    pid = _pid(rec)
    if pid is None:
        return "a process that left no readable record"
    started = str(rec.get("started", "?"))[:40] if rec else "?"
    command = str(rec.get("command", ""))[:120] if rec else ""
    return f"PID {pid}, started {started}" + (f": {command}" if command else "")


@contextmanager
def run_lock(path: Path | str, *, wait_s: float = 0.0, say: Callable[[str], None] | None = None,
             what: str = "chain") -> Iterator[None]:
    """Holds the lock at `path` for the body. When another process holds it: waits up to `wait_s` seconds
    (saying so once), then raises RunLockedError naming the holder and whether it waited. A record left by
    a run that ended without releasing (killed) is taken over with a note through `say`."""
    say = say or (lambda m: print(m, file=sys.stderr, flush=True))
    path = Path(path)
    ensure_folder(path.parent)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o644)
    try:
        deadline = time.monotonic() + max(0.0, wait_s)
        waited = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder = describe_holder(_record(fd))
                if time.monotonic() >= deadline:
                    how = (f"waited {wait_s:.0f} s and it is still running" if waited else
                           "not waiting (give --wait SECONDS to wait for it)")
                    raise RunLockedError(f"another {what} is running in this workspace ({holder}; lock "
                                         f"{shown(path)}): {how}; refusing to start a second one") from None
                if not waited:
                    say(f"another {what} is running in this workspace ({holder}); waiting up to {wait_s:.0f} s "
                        "for it to finish")
                    waited = True
                time.sleep(POLL_S)
        left = _record(fd)
        if left:
            pid = _pid(left)
            state = "no longer running" if pid is not None and not alive(pid) else "no longer holding it"
            say(f"note: the {what} lock {shown(path)} was left by {describe_holder(left)}, {state}; the stale lock "
                "is taken over")
        if waited:
            say(f"the other {what} finished; starting")
        now = _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        record = json.dumps({"pid": os.getpid(), "started": now, "command": " ".join(sys.argv)[:500]})
        os.ftruncate(fd, 0)
        os.pwrite(fd, record.encode("utf-8"), 0)
        try:
            yield
        finally:
            os.ftruncate(fd, 0)  # a clean release leaves no record; the flock goes with the descriptor
    finally:
        os.close(fd)
