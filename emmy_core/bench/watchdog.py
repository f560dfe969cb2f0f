"""The watchdog: a bench worker process the harness can always get an answer from, or kill.

Each request has a deadline. When it passes, the worker's whole process group (the
worker, a compiler it started) is killed and the request ends as `WorkerTimeout`; when
the worker dies (a segfault, an abort, an exit), as `WorkerCrashed` with how it died and
the tail of what it wrote to standard error. Either way the next request starts a fresh
worker. The worker is a fresh interpreter (`python -m emmy_core.bench.worker`, like the
`spawn` start method) started in its own session, with the parent's import path.
"""

from __future__ import annotations

import os
import select
import signal
import subprocess
import sys
import tempfile
import time
from typing import Any

from emmy_core.bench.protocol import FrameReader, ProtocolError, encode

PLACEHOLDER_US = 1e9  # the watchdog's time for a failed row: the store keeps failures with it

STDERR_TAIL = 1500


class WorkerTimeout(RuntimeError):
    """The worker did not answer before the deadline; it was killed."""


class WorkerCrashed(RuntimeError):
    """The worker died while answering (signal or exit), or broke the protocol; it is gone."""


def _signal_name(returncode: int) -> str:
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


class WorkerProcess:
    """One worker process; `request` sends a frame and waits for the reply within a deadline."""

    def __init__(self, env: dict[str, str] | None = None) -> None:
        self._env = env
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader = FrameReader()
        self._stderr: Any = None
        self.starts = 0

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        """The worker's process id while it runs (its CPU time is the bench's own, not the machine's load)."""
        return self._proc.pid if self.alive and self._proc is not None else None

    def start(self) -> None:
        env = dict(os.environ if self._env is None else self._env)
        paths = [p for p in sys.path if p and os.path.isdir(p)]
        env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([os.getcwd(), *paths]))
        self._stderr = tempfile.TemporaryFile()
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "emmy_core.bench.worker"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=self._stderr, env=env, start_new_session=True)
        self._reader = FrameReader()
        self.starts += 1

    def stderr_tail(self) -> str:
        if self._stderr is None:
            return ""
        try:
            self._stderr.seek(0, os.SEEK_END)
            size = self._stderr.tell()
            self._stderr.seek(max(0, size - STDERR_TAIL))
            return self._stderr.read().decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def kill(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                proc.kill()
        proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                stream.close()

    def close(self) -> None:
        """Asks the worker to exit, then makes sure it has."""
        proc = self._proc
        if proc is not None and proc.poll() is None and proc.stdin is not None:
            try:
                proc.stdin.write(encode({"op": "exit"}))
                proc.stdin.flush()
                proc.wait(timeout=5)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self.kill()
        if self._stderr is not None:
            self._stderr.close()
            self._stderr = None

    def _died(self, what: str) -> WorkerCrashed:
        proc = self._proc
        code = proc.wait() if proc is not None else None
        how = (_signal_name(code) if code is not None and code < 0 else f"exited with status {code}")
        tail = self.stderr_tail()
        self.kill()
        return WorkerCrashed(f"worker {how} during {what}" + (f"; stderr: ...{tail[-600:]}" if tail else ""))

    def request(self, message: dict[str, Any], timeout_s: float) -> dict[str, Any]:
        """Sends `message` and returns the reply; WorkerTimeout / WorkerCrashed (worker gone) otherwise."""
        if not self.alive:
            self.start()
        proc = self._proc
        assert proc is not None and proc.stdin is not None and proc.stdout is not None
        what = str(message.get("op"))
        try:
            proc.stdin.write(encode(message))
            proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._died(what) from None
        deadline = time.monotonic() + timeout_s
        fd = proc.stdout.fileno()
        while True:
            try:
                reply = self._reader.pop()
            except ProtocolError as exc:
                self.kill()
                raise WorkerCrashed(f"worker broke the protocol during {what}: {exc}") from None
            if reply is not None:
                return reply
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerTimeout(f"no answer to {what} within {timeout_s:g} s; worker killed")
            ready, _, _ = select.select([fd], [], [], min(left, 1.0))
            if not ready:
                continue
            data = os.read(fd, 1 << 20)
            if not data:
                raise self._died(what)
            self._reader.feed(data)
