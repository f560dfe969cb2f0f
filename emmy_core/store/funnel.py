"""A batching writer: many bench worker processes, one process that writes the file.

DuckDB allows one writing process per file, so concurrent benches funnel their rows here:
`RowFunnel(path)` starts one writer process; workers (processes started with
`funnel.client` as an argument) call `client.record(rows, kernels=...)`. The client
validates the batch in the worker (a bad row fails there, naming the record) and puts it
on a bounded queue as JSON (no pickled objects cross); the writer merges what arrived
into one transaction every `flush_rows` rows or `flush_seconds`, opening the file only
for that write so other readers get their turn. If a merged write fails, each batch is
written alone so one bad batch cannot take the others down, and `close()` reports it.
"""

from __future__ import annotations

import datetime as _dt
import json
import multiprocessing as mp
import queue as _queue
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emmy_core.ir import Kernel, render
from emmy_core.store.batch import Batch
from emmy_core.store.connect import DEFAULT_LOCK_TIMEOUT
from emmy_core.store.errors import StoreError
from emmy_core.store.rows import CardRow, GoldenRow, MeasurementRow, RoutingRow, Schedule

_STOP = "stop"


def encode(batch: Batch) -> str:
    """A batch as JSON text (kernels as canonical text, knobs as objects, times as ISO text)."""
    def knobs(k: Any) -> Any:
        return dict(k.knobs) if isinstance(k, Schedule) else (None if k is None else dict(k))

    kernels = []
    for item in batch.kernels:
        k, c_name = item if isinstance(item, tuple) else (item, None)
        kernels.append([k if isinstance(k, str) else render(k), c_name])
    return json.dumps({
        "origin": batch.origin,
        "kernels": kernels,
        "cards": [[c.name, c.target, dict(c.numbers), c.arch, list(c.tensor_cores)] for c in batch.cards],
        "rows": [[r.kernel_id, r.sizes, knobs(r.knobs), r.card, r.setting, r.status, r.median_us, r.spread,
                  r.samples, r.source, r.failure, None if r.measured_at is None else r.measured_at.isoformat()]
                 for r in batch.measurements],
        "routing": [[r.parent_id, r.decision, r.piece_index, r.piece_id] for r in batch.routing],
        "goldens": [[g.kernel_id, g.sizes, g.card, g.setting, knobs(g.knobs), g.decision] for g in batch.goldens],
    }, allow_nan=False)


def decode(text: str) -> Batch:
    """The batch `encode` wrote (validated again when it is written)."""
    d = json.loads(text)
    kernels: list[Kernel | str | tuple[Kernel | str, str]] = [k if c is None else (k, c) for k, c in d["kernels"]]
    rows = [MeasurementRow(*r[:11], None if r[11] is None else _dt.datetime.fromisoformat(r[11]))
            for r in d["rows"]]
    return Batch(d["origin"], kernels, [CardRow(c[0], c[1], c[2], c[3], tuple(c[4])) for c in d["cards"]], rows,
                 [RoutingRow(*r) for r in d["routing"]], [GoldenRow(*g) for g in d["goldens"]])


@dataclass
class FunnelReport:
    """What the writer process did: batches and rows received, transactions committed, failed batches."""

    batches: int = 0
    rows: int = 0
    commits: int = 0
    errors: list[str] = field(default_factory=list)


class FunnelClient:
    """The worker's end: validates a batch and hands it to the writer process."""

    def __init__(self, q: Any) -> None:
        self._queue = q

    def record(self, rows: list[MeasurementRow] = (), *, kernels: list = (), cards: list = (),  # type: ignore[assignment]
               routing: list = (), goldens: list = (), origin: str = "") -> None:  # type: ignore[assignment]
        batch = Batch(origin, list(kernels), list(cards), list(rows), list(routing), list(goldens))
        batch.prepare()  # a bad row fails here, in the worker that made it
        self._queue.put(encode(batch))


def _write(path: str, batches: list[Batch], lock_timeout: float, report: FunnelReport) -> None:
    from emmy_core.store.duck import DuckStore

    merged = Batch("funnel")
    for b in batches:
        merged.kernels += b.kernels
        merged.cards += b.cards
        merged.measurements += b.measurements
        merged.routing += b.routing
        merged.goldens += b.goldens
    with DuckStore(path, "w", lock_timeout=lock_timeout) as store:
        try:
            store.write(merged)
            report.commits += 1
            return
        except StoreError:
            pass  # one batch spoiled the merge: write them one by one below
        for b in batches:
            try:
                store.write(b)
                report.commits += 1
            except StoreError as exc:
                report.errors.append(f"{b.origin or 'a batch'}: {exc}")


def _serve(path: str, q: Any, results: Any, flush_rows: int, flush_seconds: float, lock_timeout: float) -> None:
    report = FunnelReport()
    pending: list[Batch] = []
    pending_rows = 0
    try:
        while True:
            try:
                msg = q.get(timeout=flush_seconds)
            except _queue.Empty:
                msg = None
            if msg is not None and msg != _STOP:
                batch = decode(msg)
                pending.append(batch)
                pending_rows += len(batch.measurements)
                report.batches += 1
                report.rows += len(batch.measurements)
            if pending and (msg is None or msg == _STOP or pending_rows >= flush_rows):
                _write(path, pending, lock_timeout, report)
                pending, pending_rows = [], 0
            if msg == _STOP:
                break
    except Exception as exc:  # reported to the parent, never lost: the writer's failure is data for close()
        report.errors.append(f"writer process failed: {type(exc).__name__}: {exc}")
    results.put(json.dumps(report.__dict__))


class RowFunnel:
    """Starts the one writer process for `path`; `client` goes to the workers; `close()` reports."""

    def __init__(self, path: Path | str, *, flush_rows: int = 50_000, flush_seconds: float = 0.5,
                 lock_timeout: float = DEFAULT_LOCK_TIMEOUT, max_queued: int = 256) -> None:
        ctx = mp.get_context("spawn")  # no fork of a process that may hold DuckDB or torch threads
        self._queue = ctx.Queue(maxsize=max_queued)
        self._results = ctx.Queue()
        self._process = ctx.Process(target=_serve, name="emmy-store-writer", daemon=True,
                                    args=(str(path), self._queue, self._results, flush_rows, flush_seconds,
                                          lock_timeout))
        self._process.start()
        self.client = FunnelClient(self._queue)
        self.report: FunnelReport | None = None

    def close(self, timeout: float = 300.0) -> FunnelReport:
        """Writes what is queued, stops the writer and returns its report; raises if it lost anything."""
        if self.report is not None:
            return self.report
        self._queue.put(_STOP)
        try:
            self.report = FunnelReport(**json.loads(self._results.get(timeout=timeout)))
        except _queue.Empty:
            self._process.kill()
            raise StoreError(f"the store writer process did not finish within {timeout:g} s") from None
        self._process.join(timeout=30)
        if self.report.errors:
            raise StoreError("the store writer refused some batches: " + "; ".join(self.report.errors[:5]))
        return self.report

    def __enter__(self) -> RowFunnel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
