"""The one seam between offline work and where it runs: a `map` in this process or over a Dask cluster.

The fit's folds and seed members, the search replays and the per-card evaluations are each a list of
independent tasks. Their loops call a `TaskMap` (`map(fn, items) -> list`, results in the order of the
items) instead of a `for` loop; which map they get is the scheduler setting:

- `inprocess` (the default): a plain loop in this process, nothing started;
- `local:N`: a `distributed.LocalCluster` of N worker processes (one thread each) started for the
  work and closed after it;
- `tcp://HOST:PORT`: a running Dask scheduler (a cluster from `dask-jobqueue` on SLURM, from
  `dask-kubernetes`, or `dask scheduler` / `dask worker` by hand).

Only small arguments travel: an item is a path and a few numbers, and each worker reads the dataset
export itself. A worker that dies mid-task has its task run again on another worker (Dask's
`allowed-failures`, 3 by default); a task that keeps killing workers, or raises, fails the whole map with
a `ComputeError` naming the task, and the caller writes nothing. Tasks are deterministic functions of their
arguments, so a map gives the same results, bit for bit, wherever it runs.

A `tcp://` address is looked at before Dask is let near it (`probe_dask`): a Dask scheduler greets a new
connection at once, so a peer that accepts and stays silent is given up on within `PROBE_S`, and
one that answers otherwise (an HTTP server) is refused by name. Dask's own client would wait for ever on
the first and read the second's `HTTP/1.1` as a frame length (an allocation of exbibytes).

`distributed` is imported only when a cluster is asked for. A `local:N` cluster spawns its workers, which
import the caller's main module again: a script that fits on `local:N` keeps its work under
`if __name__ == "__main__":` (the `emmy` command does).
"""

from __future__ import annotations

import re
import socket
import struct
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")

DEFAULT_SCHEDULER = "inprocess"
MAX_LOCAL_WORKERS = 64
_LOCAL = re.compile(r"local:(-?[0-9]{1,30})")  # any count, so an out-of-range one is told the range
_TCP = re.compile(r"tcp://([A-Za-z0-9._-]{1,253}|\[[0-9A-Fa-f:]{2,39}\]):([0-9]{1,5})")
CONNECT_TIMEOUT_S = 30
PROBE_S = 25  # the whole look at a tcp:// peer: connection, greeting, question, answer (under 30 s)
GREETING_S = 10  # how long a peer may take to greet before it is asked (a Dask scheduler greets at once)
MAX_GREETING = 64 * 1024 * 1024  # a Dask handshake is a few hundred bytes; a frame length past this is not Dask


class ComputeError(RuntimeError):
    """A scheduler setting that does not parse, a cluster that cannot be reached, or a task that failed there."""


class TaskMap(Protocol):
    """`map(fn, items)`: `[fn(x) for x in items]`, wherever the work runs; results in the items' order."""

    def __call__(self, fn: Callable[[Any], R], items: Sequence[Any], /) -> list[R]: ...


@dataclass(frozen=True)
class Scheduler:
    """A parsed scheduler setting: `kind` is inprocess, local or tcp."""

    kind: str
    workers: int = 0
    address: str = ""

    def __str__(self) -> str:
        if self.kind == "local":
            return f"local:{self.workers}"
        return self.address if self.kind == "tcp" else DEFAULT_SCHEDULER


def parse_scheduler(text: str | Scheduler | None) -> Scheduler:
    """`inprocess`, `local:N` (1..64 workers) or `tcp://HOST:PORT`; anything else is refused, quoting it."""
    if isinstance(text, Scheduler):
        return text
    if text is None or text == DEFAULT_SCHEDULER:
        return Scheduler("inprocess")
    m = _LOCAL.fullmatch(text)
    if m:
        n = int(m.group(1))
        if not 1 <= n <= MAX_LOCAL_WORKERS:
            raise ComputeError(f"scheduler {text!r}: a local cluster has 1 to {MAX_LOCAL_WORKERS} workers")
        return Scheduler("local", workers=n)
    m = _TCP.fullmatch(text)
    if m:
        if not 0 < int(m.group(2)) < 65536:
            raise ComputeError(f"scheduler {text[:80]!r}: a TCP port is 1 to 65535")
        return Scheduler("tcp", address=text)
    raise ComputeError(f"scheduler {text[:80]!r}: give {DEFAULT_SCHEDULER}, local:N or tcp://HOST:PORT")


def in_process_map(fn: Callable[[Any], R], items: Sequence[Any]) -> list[R]:
    """The default map: a loop in this process."""
    return [fn(x) for x in items]


def _task_name(fn: Callable[..., Any]) -> str:
    return getattr(fn, "__name__", type(fn).__name__)


def dask_map(client: Any, fn: Callable[[Any], R], items: Sequence[Any]) -> list[R]:
    """`fn` over `items` as Dask tasks on `client`'s cluster; the first failure is raised as a ComputeError
    naming the task (a worker lost more than `allowed-failures` times reads as KilledWorker)."""
    if not items:
        return []
    name = _task_name(fn)
    batch = uuid.uuid4().hex[:12]
    futures = client.map(fn, list(items), pure=False, key=[f"{name}-{i}-{batch}" for i in range(len(items))])
    try:
        return list(client.gather(futures))
    except Exception as exc:  # a task's own exception, or distributed's KilledWorker / CommClosedError
        failed = [i for i, f in enumerate(futures) if f.status in ("error", "lost", "cancelled")]
        which = f"task {name} #{failed[0]}" if failed else f"a task of {name}"
        raise ComputeError(f"{which} of {len(items)} failed on the Dask cluster: {type(exc).__name__}: "
                           f"{str(exc)[:300]}") from exc
    finally:
        client.cancel(futures)


def _host_port(address: str) -> tuple[str, int]:
    m = _TCP.fullmatch(address)
    if m is None:  # parse_scheduler let it through, so this cannot happen
        raise ComputeError(f"scheduler {address[:80]!r}: not tcp://HOST:PORT")
    return m.group(1).strip("[]"), int(m.group(2))


def _recv_some(sock: socket.socket, deadline: float, want: int) -> bytes:
    """Up to `want` bytes, as many as arrive before `deadline` (fewer when the peer closes or stays silent)."""
    data = b""
    while len(data) < want:
        left = deadline - time.monotonic()
        if left <= 0:
            break
        sock.settimeout(left)
        try:
            chunk = sock.recv(want - len(data))
        except (TimeoutError, BlockingIOError):
            break
        if not chunk:
            break
        data += chunk
    return data


def _shown_bytes(data: bytes) -> str:
    text = data.split(b"\r\n", 1)[0].split(b"\n", 1)[0][:60]
    return repr(text.decode("latin-1"))


def probe_dask(address: str, timeout_s: float = PROBE_S) -> None:
    """Refuses (ComputeError naming the address) a `tcp://` peer that is not a Dask scheduler answering now.

    Connects (bounded), then waits for the greeting a Dask scheduler sends first on every connection: its
    frame length, eight bytes, of a plausible size. Silence for `GREETING_S` earns a question (a line no
    protocol takes for a request), so that an HTTP server answers and is named; silence until `timeout_s`
    is given up on. Nothing is sent to a peer that greeted like Dask."""
    host, port = _host_port(address)
    deadline = time.monotonic() + timeout_s
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except TimeoutError:
        raise ComputeError(f"scheduler {address}: no connection within {timeout_s:g} s (nothing answers at "
                           f"{host}:{port})") from None
    except OSError as exc:
        raise ComputeError(f"scheduler {address}: cannot reach it: {exc.strerror or exc}") from None
    with sock:
        head = _recv_some(sock, min(deadline, time.monotonic() + min(GREETING_S, timeout_s / 3)), 8)
        if not head:
            try:
                sock.sendall(b"EMMY-PROBE / HTTP/1.0\r\n\r\n")
            except OSError:
                pass  # it closed: said below
            head = _recv_some(sock, deadline, 8)
            if not head:
                raise ComputeError(f"scheduler {address}: something at {host}:{port} accepts connections but sent "
                                   f"nothing in {timeout_s:g} s; a Dask scheduler greets every connection at once: "
                                   "is this the scheduler's address (`dask scheduler` prints it)?")
        head += _recv_some(sock, min(deadline, time.monotonic() + 1.0), 8 - len(head)) if len(head) < 8 else b""
        if head[:5] in (b"HTTP/", b"http/"):
            raise ComputeError(f"scheduler {address}: {host}:{port} is an HTTP server (it answered "
                               f"{_shown_bytes(head + _recv_some(sock, time.monotonic() + 0.5, 64))}), not a Dask "
                               "scheduler: give the scheduler's tcp:// address (the dashboard is HTTP)")
        if len(head) < 8:
            raise ComputeError(f"scheduler {address}: {host}:{port} sent {_shown_bytes(head)} and stopped: not a "
                               "Dask scheduler's greeting")
        (size,) = struct.unpack("<Q", head)
        if not 0 < size <= MAX_GREETING:
            raise ComputeError(f"scheduler {address}: {host}:{port} answered {_shown_bytes(head)}, which is not a "
                               "Dask scheduler's greeting: is this the scheduler's tcp:// address?")


@contextmanager
def dask_client(scheduler: Scheduler) -> Iterator[Any]:
    """A `distributed.Client` for a local:N or tcp:// setting (a local cluster is closed on leaving)."""
    try:
        from distributed import Client, LocalCluster
    except ImportError as exc:  # pragma: no cover - distributed is a dependency
        raise ComputeError(f"scheduler {scheduler}: the `distributed` package is not installed") from exc
    if scheduler.kind == "local":
        cluster = LocalCluster(n_workers=scheduler.workers, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        try:
            with Client(cluster) as client:
                yield client
        finally:
            cluster.close()
        return
    probe_dask(scheduler.address)
    try:
        client = Client(scheduler.address, timeout=CONNECT_TIMEOUT_S)
    except (OSError, TimeoutError) as exc:
        raise ComputeError(f"scheduler {scheduler}: cannot reach it within {CONNECT_TIMEOUT_S} s: {exc}") from None
    try:
        yield client
    finally:
        client.close()


@contextmanager
def task_map(scheduler: str | Scheduler | None) -> Iterator[TaskMap]:
    """The map of a scheduler setting (`parse_scheduler`), for the duration of the `with` block."""
    parsed = parse_scheduler(scheduler)
    if parsed.kind == "inprocess":
        yield in_process_map
        return
    with dask_client(parsed) as client:

        def run(fn: Callable[[Any], R], items: Sequence[Any]) -> list[R]:
            return dask_map(client, fn, items)

        yield run
