"""The one bench harness behind `emmy tune` and `emmy run --bench`.

For a plan of (kernel, sizes) units, each with the knob assignments to try:
dedupe by measurement identity (identical kernels at identical sizes are one unit of
work however often a model contains them; a variant already measured ok on this card
and setting is skipped), then per variant, in an isolated worker with a watchdog:
build, verify against the f64 reference on fresh random inputs and poisoned outputs,
time, and check integrity. A build error, launch error, hang or crash becomes a failed
row with the placeholder time and the bench goes on; a flagged result (wrong,
nondeterministic, too noisy, faster than the card allows) is reported and never
recorded. Each kernel's rows are recorded together, through the recorder given.

The machine's load is sampled around every timed variant (`load.LoadGuard`): a time, or a
timeout, taken while other processes held more than `max_busy` of the CPUs is measured
again after a pause, and flagged `busy` (never recorded) if the machine stays busy.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from emmy_core.bench.integrity import DEFAULT_SPREAD_LIMIT, Stats, summarize, timing_flags
from emmy_core.bench.load import (
    BUSY_FLAG,
    DEFAULT_MAX_BUSY,
    DEFAULT_PAUSE_S,
    DEFAULT_RETRIES,
    Busy,
    LoadGuard,
    LoadProbe,
    MachineProbe,
    busy_between,
)
from emmy_core.bench.progress import BenchProgress
from emmy_core.bench.watchdog import PLACEHOLDER_US, WorkerCrashed, WorkerProcess, WorkerTimeout
from emmy_core.codegen.backend import get_setting
from emmy_core.graph.forks import ForkKey
from emmy_core.ir import Program, facts, format_sizes, kernel_id, render, resolve_sizes
from emmy_core.knobs.vocab import canonical_knobs, knobs_problem, schedule_id
from emmy_core.targets import Card, min_time_us

BENCH_FAILURE_KINDS = ("build_error", "launch_error", "timeout", "crash", "runtime")  # what a bench can report
DEFAULT_TIMEOUT_S = 120.0
DEFAULT_PREPARE_TIMEOUT_S = 600.0
START_TIMEOUT_S = 180.0  # a fresh worker imports torch and the backend
BACKENDS: dict[str, str] = {  # target -> "module:attr" of its code generator
    "cpu": "emmy_core.codegen.c:CBackend",
    "cuda": "emmy_core.codegen.triton_gen:TritonBackend",
}


class BenchInterrupted(KeyboardInterrupt):
    """A bench stopped by Ctrl-C, after recording what it had measured; `report` says how far it got."""

    def __init__(self, report: BenchReport) -> None:
        super().__init__(f"interrupted after {report.rows_recorded} rows recorded")
        self.report = report


class BenchError(RuntimeError):
    """The bench cannot run at all (bad plan, backend missing, timings that must not be recorded)."""


@dataclass(frozen=True)
class Unit:
    """One kernel at concrete sizes of its dynamic axes (missing sizes take the expected ones)."""

    program: Program
    sizes: Mapping[str, int] = field(default_factory=dict)
    label: str = ""

    def __post_init__(self) -> None:
        object.__setattr__(self, "sizes", resolve_sizes(self.program, dict(self.sizes)))

    @property
    def kernel_id(self) -> str:
        return kernel_id(self.program)

    @property
    def sizes_text(self) -> str:
        return format_sizes(dict(self.sizes))

    @property
    def key(self) -> tuple[str, str]:
        return self.kernel_id, self.sizes_text


@dataclass
class Planned:
    """A deduplicated unit: how many times the plan contained it, and its variants in order."""

    unit: Unit
    count: int
    variants: list[dict[str, object]]


@dataclass(frozen=True)
class Outcome:
    """What became of one variant. status: ok | failed | flagged | verified (checked, not timed).

    `recordable` outcomes (ok and failed) are measurement rows: the key is (kernel_id, sizes,
    knobs, card, setting); a failed one carries its failure kind and the placeholder time.
    """

    unit: Unit
    knobs: dict[str, object]
    card: str
    setting: str
    source: str
    status: str
    failure: str | None = None
    flags: tuple[str, ...] = ()
    message: str = ""
    stats: Stats | None = None

    @property
    def recordable(self) -> bool:
        return self.status in ("ok", "failed")

    @property
    def median_us(self) -> float | None:
        if self.status == "failed":
            return PLACEHOLDER_US
        return self.stats.median_us if self.stats is not None else None


class Recorder(Protocol):
    """Where a bench's rows go, as an interface: the bench never imports the store (a higher layer).

    A `Recorder` answers the dedupe question (which schedules of a kernel at sizes on a card
    and setting are already measured ok) and takes one kernel's recordable outcomes (ok and
    failed; flagged ones never get here) at a time, so a bench that fails half-way has
    written whole kernels only; one interrupted (Ctrl-C) also writes the rows its kernel had
    finished, since each is a whole measurement that a re-run then skips. Implementations:
    `emmy_core.exchange.recorders.StoreRecorder` (the store's one writer) and `TuneFileRecorder`
    (a tune file, the store's format), beside it.
    """

    def measured_ok(self, key: ForkKey) -> set[str]:
        """Schedule ids of the variants of a pool (a fork's key) already measured ok (skipped by a bench)."""

    def record_kernel(self, program: Program, card: Card, outcomes: Sequence[Outcome]) -> None:
        """Writes one kernel's recordable outcomes (with the kernel and the card) in one transaction."""


@dataclass
class BenchReport:
    planned: list[Planned]
    outcomes: list[Outcome] = field(default_factory=list)
    skipped_known: int = 0
    unit_errors: list[tuple[Unit, str]] = field(default_factory=list)
    rows_recorded: int = 0
    wall_s: float = 0.0
    worker_starts: int = 0
    remeasured: int = 0  # variants measured again because the machine was busy

    @property
    def flagged(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "flagged"]

    def count(self, status: str) -> int:
        return sum(1 for o in self.outcomes if o.status == status)

    @property
    def flag_reasons(self) -> Counter[str]:
        return Counter(f for o in self.outcomes if o.status == "flagged" for f in o.flags)

    @property
    def failure_kinds(self) -> Counter[str]:
        return Counter(o.failure for o in self.outcomes if o.status == "failed")


@dataclass(frozen=True)
class BenchConfig:
    setting: str = "deploy"
    source: str = "tune"  # tune | hand
    timeout_s: float = DEFAULT_TIMEOUT_S  # per variant: build + verify + time
    prepare_timeout_s: float = DEFAULT_PREPARE_TIMEOUT_S  # per kernel: inputs and the f64 reference
    spread_limit: float = DEFAULT_SPREAD_LIMIT
    seed: int = 0
    time: bool = True  # False: build and verify only (nothing is recorded)
    skip_measured: bool = True  # skip variants the recorder already holds as measured ok
    progress: bool = False  # a bar on a terminal, else a line every `progress_every_s`
    progress_every_s: float = 5.0
    max_busy: float = DEFAULT_MAX_BUSY  # others' share of the CPUs above which a timing is not trusted (>= 1: off)
    busy_retries: int = DEFAULT_RETRIES  # measurements again of a variant timed on a busy machine
    busy_pause_s: float = DEFAULT_PAUSE_S  # pause before measuring again


class Chooser(Protocol):
    """Chooses a unit's variants as the bench goes (a search strategy, `emmy_core.search.tune`), instead of
    the plan's fixed list: `start` says how many variants the unit gets at most (for progress) given the
    schedules the recorder already holds ok; `next` gives the next ones after the unit's outcomes so far
    ([] ends the unit)."""

    def start(self, planned: Planned, known: set[str]) -> int: ...

    def next(self, planned: Planned, outcomes: Sequence[Outcome]) -> list[dict[str, object]]: ...


def _variants(p: Planned, todo: Sequence[dict[str, object]], chooser: Chooser | None,
              outcomes: Sequence[Outcome]) -> Iterable[dict[str, object]]:
    """A unit's variants in order: the fixed list, or the chooser's answers (asked again when one runs out)."""
    if chooser is None:
        yield from todo
        return
    while True:
        batch = chooser.next(p, outcomes)
        if not batch:
            return
        yield from batch


def dedupe(plan: Iterable[tuple[Unit, Sequence[Mapping[str, object]]]]) -> list[Planned]:
    """Merges units of one measurement identity (kernel, sizes), keeping first-seen order of variants."""
    merged: dict[tuple[str, str], Planned] = {}
    seen: dict[tuple[str, str], set[str]] = {}
    for unit, variants in plan:
        p = merged.get(unit.key)
        if p is None:
            p = merged[unit.key] = Planned(unit, 0, [])
            seen[unit.key] = set()
        p.count += 1
        for knobs in variants:
            k = dict(knobs)
            problem = knobs_problem(k)
            if problem is not None:
                raise BenchError(f"kernel {unit.program.name}: knobs {canonical_knobs(k)[:120]}: {problem}")
            sid = schedule_id(k)
            if sid not in seen[unit.key]:
                seen[unit.key].add(sid)
                p.variants.append(k)
    return list(merged.values())


class _Session:
    """The worker and what it currently holds (which backend was greeted, which unit is prepared)."""

    def __init__(self, backend: str, card: Card, config: BenchConfig, env: dict[str, str] | None) -> None:
        self.backend = backend
        self.card = card
        self.config = config
        self.proc = WorkerProcess(env)
        self.unit_key: tuple[str, str] | None = None
        self.can_time = True

    def _greet(self) -> None:
        self.proc.start()
        try:
            reply = self.proc.request({"op": "hello", "backend": self.backend}, START_TIMEOUT_S)
        except (WorkerTimeout, WorkerCrashed) as exc:
            raise BenchError(f"the bench worker could not start with backend {self.backend}: {exc}") from None
        if "error" in reply:
            raise BenchError(f"backend {self.backend}: {reply['error']}")
        if reply.get("target") != self.card.target:
            raise BenchError(f"backend {self.backend} targets {reply.get('target')!r}, card {self.card.name!r} "
                             f"is {self.card.target!r}")
        self.can_time = bool(reply.get("can_time"))
        if self.config.time and not self.can_time:
            raise BenchError("this backend runs under Triton's interpreter here (no GPU): interpreter timings "
                             "are never recorded; verify without timing, or bench on a GPU")
        self.unit_key = None

    def ensure(self, unit: Unit) -> None:
        """A live, greeted worker with `unit` prepared; raises WorkerTimeout/WorkerCrashed/RuntimeError."""
        if not self.proc.alive:
            self._greet()
        if self.unit_key == unit.key:
            return
        self.unit_key = None
        seed = (int(unit.kernel_id[:8], 16) + self.config.seed) % (2**32)
        reply = self.proc.request({"op": "unit", "kernel": render(unit.program), "sizes": unit.sizes_text,
                                   "seed": seed}, self.config.prepare_timeout_s)
        if "error" in reply:
            raise RuntimeError(f"reference for {unit.program.name} at {unit.sizes_text!r}: {reply['error']}")
        self.unit_key = unit.key

    def pids(self) -> list[int]:
        """This bench's processes: the harness and its worker (their CPU time is not the machine's load)."""
        worker = self.proc.pid
        return [os.getpid()] if worker is None else [os.getpid(), worker]

    def variant(self, knobs: dict[str, object]) -> dict[str, Any]:
        try:
            return self.proc.request({"op": "variant", "knobs": knobs, "setting": self.config.setting,
                                      "time": self.config.time, "spread_limit": self.config.spread_limit},
                                     self.config.timeout_s)
        except WorkerTimeout as exc:
            self.unit_key = None
            return {"status": "failed", "failure": "timeout", "message": str(exc)}
        except WorkerCrashed as exc:
            self.unit_key = None
            return {"status": "failed", "failure": "crash", "message": str(exc)}


def _outcome(unit: Unit, knobs: dict[str, object], reply: dict[str, Any], card: Card, config: BenchConfig,
             floor_us: float) -> Outcome:
    def out(status: str, **kw: Any) -> Outcome:
        return Outcome(unit, knobs, card.name, config.setting, config.source, status, **kw)

    if "error" in reply:
        reply = {"status": "failed", "failure": "runtime", "message": str(reply["error"])}
    status = reply.get("status")
    message = str(reply.get("message", ""))
    if status == "failed":
        failure = str(reply.get("failure"))
        return out("failed", failure=failure if failure in BENCH_FAILURE_KINDS else "runtime", message=message)
    samples = [float(x) for x in reply.get("samples_us") or []]
    stats = summarize(samples) if samples else None
    if status == "flagged":
        return out("flagged", flags=tuple(str(f) for f in reply.get("flags") or ()), message=message, stats=stats)
    if status != "ran":
        return out("failed", failure="runtime", message=f"worker answered {str(reply)[:200]}")
    if stats is None:
        return out("verified", message="built and verified; not timed")
    flags = timing_flags(stats, floor_us, config.spread_limit)
    if flags:
        why = []
        if "spread" in flags:
            why.append(f"spread (p90-p10)/median {stats.spread:.2f} > {config.spread_limit:g}")
        if "below_floor" in flags:
            why.append(f"median {stats.median_us:.3g} us below the card's floor {floor_us:.3g} us")
        return out("flagged", flags=tuple(flags), message="; ".join(why), stats=stats)
    return out("ok", stats=stats)


def _judged_by_load(out: Outcome) -> bool:
    """Outcomes a busy machine can fake: a time, a timeout and a spread too wide (a failure of the build, a
    wrong result are the kernel's own)."""
    return (out.status == "ok" or (out.status == "failed" and out.failure == "timeout")
            or (out.status == "flagged" and set(out.flags) <= {"spread"}))


def _busy_outcome(out: Outcome, busy: Busy, tries: int) -> Outcome:
    flags = (BUSY_FLAG, *(f for f in out.flags if f != BUSY_FLAG))
    return Outcome(out.unit, out.knobs, out.card, out.setting, out.source, "flagged", flags=flags,
                   message=f"machine busy while timing ({tries} tries): {busy.describe()}"
                           + (f"; {out.message}" if out.status == "flagged" and out.message else ""), stats=out.stats)


def _measure(session: _Session, unit: Unit, knobs: dict[str, object], card: Card, config: BenchConfig,
             floor_us: float, guard: LoadGuard | None, report: BenchReport) -> Outcome:
    """One variant, measured again while the machine was too busy to trust it (then flagged `busy`)."""
    tries = 0
    while True:
        tries += 1
        before = guard.probe.sample(session.pids()) if guard is not None else None
        reply = session.variant(knobs)
        out = _outcome(unit, knobs, reply, card, config, floor_us)
        if guard is None or before is None or not _judged_by_load(out):
            return out
        busy = busy_between(before, guard.probe.sample(session.pids()))
        if not guard.too_busy(busy):
            return out
        if tries > guard.retries:
            return _busy_outcome(out, busy, tries)
        report.remeasured += 1
        time.sleep(guard.pause_s)
        try:
            session.ensure(unit)
        except BenchError:
            raise
        except RuntimeError:  # the worker could not take the unit again: keep what was seen
            return _busy_outcome(out, busy, tries)


def _record(recorder: Recorder | None, config: BenchConfig, unit: Unit, card: Card, rows: list[Outcome],
            report: BenchReport) -> None:
    if rows and recorder is not None and config.time:
        recorder.record_kernel(unit.program, card, rows)
        report.rows_recorded += len(rows)


def bench(plan: Iterable[tuple[Unit, Sequence[Mapping[str, object]]]], card: Card, backend: str | None = None,
          recorder: Recorder | None = None, config: BenchConfig | None = None,
          on_outcome: Callable[[Outcome], None] | None = None, worker_env: dict[str, str] | None = None,
          probe: LoadProbe | None = None, chooser: Chooser | None = None) -> BenchReport:
    """Benches every variant of every unit of `plan` on `card`; returns what became of each.

    `backend` is `module:attr` of a code generator (default: the card's target's).
    Rows (ok and failed) go to `recorder` one kernel at a time; without a recorder nothing is written.
    Ctrl-C records the rows the current kernel finished, then raises `BenchInterrupted` with the report.
    `probe` reads the machine's load around each timed variant (default: this machine's /proc).
    `chooser` picks each unit's variants as the bench goes (the plan's variants are then only its pool).
    """
    config = config or BenchConfig()
    get_setting(config.setting)
    if config.source not in ("tune", "hand"):
        raise BenchError(f"source {config.source!r} is not tune or hand")
    backend = backend or BACKENDS[card.target]
    t0 = time.monotonic()
    report = BenchReport(dedupe(plan))
    work: list[tuple[Planned, list[dict[str, object]], int]] = []
    for p in report.planned:
        known = recorder.measured_ok(ForkKey(p.unit.kernel_id, p.unit.sizes_text, card.name, config.setting)) \
            if recorder is not None and config.time and config.skip_measured else set()
        todo = [k for k in p.variants if schedule_id(k) not in known]
        report.skipped_known += len(p.variants) - len(todo)
        planned = len(todo) if chooser is None else chooser.start(p, known)
        if planned:
            work.append((p, todo, planned))
    session = _Session(backend, card, config, worker_env)
    total = sum(n for _, _, n in work)
    guard = LoadGuard(probe or MachineProbe(), config.max_busy, config.busy_retries, config.busy_pause_s) \
        if config.time else None
    try:
        with BenchProgress(total, enabled=config.progress, every_s=config.progress_every_s) as progress:
            for p, todo, planned in work:
                unit = p.unit
                f = facts(unit.program, dict(unit.sizes))
                floor_us = min_time_us(card, f.bytes_moved, f.flops)
                rows: list[Outcome] = []
                seen: list[Outcome] = []
                try:
                    for i, knobs in enumerate(_variants(p, todo, chooser, seen)):
                        try:
                            session.ensure(unit)
                        except BenchError:
                            raise
                        except RuntimeError as exc:  # the reference could not be prepared: no variant runs
                            report.unit_errors.append((unit, str(exc)))
                            progress.skip(max(0, planned - i))
                            break
                        out = _measure(session, unit, knobs, card, config, floor_us, guard, report)
                        report.outcomes.append(out)
                        seen.append(out)
                        if out.recordable:
                            rows.append(out)
                        progress.advance(out, unit.program.name)
                        if on_outcome is not None:
                            on_outcome(out)
                except KeyboardInterrupt:  # keep the rows this kernel finished (a re-run skips them)
                    _record(recorder, config, unit, card, rows, report)
                    raise BenchInterrupted(report) from None
                _record(recorder, config, unit, card, rows, report)
    finally:
        report.worker_starts = session.proc.starts
        session.proc.close()
        report.wall_s = time.monotonic() - t0
    return report
