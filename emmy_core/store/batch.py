"""A batch: everything one write commits together, and the rules every row must pass before it does.

Both store implementations take a `Batch`, call `prepare()` (the same validation for both)
and commit the `Prepared` result in one transaction, or nothing. Rules checked here:
kernels parse (text) or validate (objects) and are keyed by their computed identity;
knobs belong to the schedule vocabulary and never spell a structural decision; sizes,
card names and settings are canonical; statuses, sources and failure kinds come from
their closed sets; an ok row has a real time, a failed row the watchdog's placeholder.
Errors name the batch's origin, the record and the field at fault.
"""

from __future__ import annotations

import datetime as _dt
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from emmy_core.codegen.backend import SETTINGS
from emmy_core.fileio.errors import bounded
from emmy_core.ir import Extern, IRError, Kernel, Program, format_sizes, kernel_id, parse, parse_sizes, render
from emmy_core.ir.check import validate
from emmy_core.knobs.vocab import EXTERN_PREFIX, SCHEDULE_KNOBS, parse_decision
from emmy_core.store.errors import BatchError
from emmy_core.store.rows import (
    CARD_NAME_PATTERN,
    FAILURE_KINDS,
    HEX64,
    PLACEHOLDER_US,
    SOURCES,
    STATUSES,
    CardRow,
    GoldenRow,
    KnobError,
    MeasurementRow,
    RoutingRow,
    Schedule,
)

MEASUREMENT_COLUMNS = ("kernel_id", "sizes", "schedule_id", "card", "setting", "status", "failure",
                       "median_us", "spread", "samples", "source", "measured_at")


@dataclass
class Prepared:
    """A validated batch, in the shape a backend writes: dictionaries and columns of plain values."""

    origin: str
    kernels: dict[str, tuple[str, str]]  # kernel_id -> (canonical text, c_name)
    schedules: dict[str, str]  # schedule_id -> canonical knob JSON
    cards: dict[str, CardRow]
    columns: dict[str, list]  # MEASUREMENT_COLUMNS -> one list each, in row order
    routing: list[tuple[str, str, int, str]]
    goldens: list[tuple[str, str, str, str, str | None, str | None]]
    need_kernels: set[str]  # kernel ids referenced but not defined in this batch
    need_cards: set[str]  # card names referenced but not described in this batch
    schedule_cards: set[tuple[str, str]]  # (schedule_id, card) pairs measured, for the per-target vocabulary

    @property
    def rows(self) -> int:
        return len(self.columns["kernel_id"])

    def fail(self, message: str) -> BatchError:
        return BatchError(bounded(f"{bounded(self.origin, 300)}: {message}" if self.origin else message))


@dataclass
class Batch:
    """Kernels, cards, measurements, routing and goldens to be written as one transaction."""

    origin: str = ""
    kernels: list[Kernel | str | tuple[Kernel | str, str]] = field(default_factory=list)
    cards: list[CardRow] = field(default_factory=list)
    measurements: list[MeasurementRow] = field(default_factory=list)
    routing: list[RoutingRow] = field(default_factory=list)
    goldens: list[GoldenRow] = field(default_factory=list)
    taken_now: bool = True
    """Whether rows without a time were measured now (a tune: stamped with the write's time). A batch read
    from a file is not (`load_source` sets False): its rows keep the file's own time, or none, so the same
    file gives the same store content whenever it is imported."""

    def add_kernel(self, kernel: Kernel | str, c_name: str | None = None) -> str:
        """Adds a kernel (object or loop-program text) and returns its identity."""
        k = parse(kernel, self.origin or "<kernel>") if isinstance(kernel, str) else kernel
        self.kernels.append(k if c_name is None else (k, c_name))
        return kernel_id(k)

    def add_card(self, card: CardRow) -> None:
        self.cards.append(card)

    def add_measurements(self, rows: Iterable[MeasurementRow]) -> None:
        self.measurements.extend(rows)

    def add_routing(self, rows: Iterable[RoutingRow]) -> None:
        self.routing.extend(rows)

    def add_goldens(self, rows: Iterable[GoldenRow]) -> None:
        self.goldens.extend(rows)

    def prepare(self) -> Prepared:
        """Validates everything and returns the plain values to write; raises `BatchError` naming the record."""
        p = Prepared(self.origin, {}, {}, {}, {}, [], [], set(), set(), set())
        _prepare_kernels(p, self.kernels)
        for i, card in enumerate(self.cards):
            problem = card.problem() if isinstance(card, CardRow) else "not a CardRow"
            if problem is not None:
                raise p.fail(f"card {i}: {problem}")
            p.cards[card.name] = card.normalized()
        _prepare_measurements(p, self.measurements, self.taken_now)
        _prepare_routing(p, self.routing)
        _prepare_goldens(p, self.goldens)
        p.routing = list({r[:3]: r for r in p.routing}.values())  # one row per key: the last given wins
        p.goldens = list({g[:4]: g for g in p.goldens}.values())
        p.need_kernels -= set(p.kernels)
        p.need_cards -= set(p.cards)
        return p


def _prepare_kernels(p: Prepared, kernels: list[Kernel | str | tuple[Kernel | str, str]]) -> None:
    for i, item in enumerate(kernels):
        k, c_name = item if isinstance(item, tuple) else (item, None)
        try:
            if isinstance(k, str | bytes):
                k = parse(k, f"kernel {i}")
            elif isinstance(k, Program | Extern):
                validate(k)
            else:
                raise p.fail(f"kernel {i}: not a loop program ({type(k).__name__})")
        except IRError as exc:
            raise p.fail(f"kernel {i}: {exc}") from None
        name = k.name if c_name is None else c_name
        if not isinstance(name, str) or not name.isidentifier() or len(name) > 128:
            raise p.fail(f"kernel {i}: c_name {str(name)[:60]!r} is not an identifier")
        p.kernels.setdefault(kernel_id(k), (render(k), name))


def _schedule_of(knobs: object, memo: dict) -> Schedule:  # type: ignore[type-arg]
    """The validated schedule of a row's knobs, memoised so a million rows pay for a few thousand digests.

    The memo is keyed by the items in the dict's order and checked against the value types seen
    first, because `True == 1 == 1.0` hash alike but are different knob values.
    """
    if type(knobs) is not dict:
        if isinstance(knobs, Schedule):
            return knobs
        if not isinstance(knobs, Mapping):
            raise KnobError(f"knobs must be a mapping or a Schedule, not {type(knobs).__name__}")
        knobs = dict(knobs)
    try:
        content = tuple(knobs.items())
        hit = memo.get(content)
    except TypeError:  # an unhashable value: Schedule() says what is wrong with it
        return Schedule(knobs)
    types = tuple(map(type, knobs.values()))
    if hit is not None and hit[0] == types:
        return hit[1]
    got = Schedule(knobs)
    if hit is None:
        memo[content] = (types, got)
    return got


def _sizes_text(value: object, memo: dict[str, str]) -> str:
    if isinstance(value, str):
        got = memo.get(value)
        if got is None:
            canonical = format_sizes(parse_sizes(value))
            if canonical != value:
                raise IRError(f"sizes {value[:60]!r} are not canonical (write {canonical!r})")
            got = memo[value] = value
        return got
    if isinstance(value, Mapping):
        return _sizes_text(format_sizes(parse_sizes(format_sizes(dict(value)))), memo)
    raise IRError(f"sizes must be text like 'B=8,S=512', not {type(value).__name__}")


def _describe(p: Prepared, what: str, i: int) -> str:
    c = p.columns
    return f"{what} {i} (kernel {str(c['kernel_id'][i])[:12]}, sizes {c['sizes'][i]!r}, card {c['card'][i]!r})"


def _row_problem(status: object, median: object, spread: object, samples: object, failure: object) -> str | None:
    if status not in STATUSES:
        return f"status {str(status)[:20]!r} is not one of {', '.join(STATUSES)}"
    if spread is not None and (isinstance(spread, bool) or not isinstance(spread, int | float)
                               or not math.isfinite(spread) or spread < 0):
        return f"spread {spread!r} is not a finite non-negative number"
    if isinstance(samples, bool) or not isinstance(samples, int) or samples < 0:
        return f"samples {samples!r} is not a non-negative integer"
    if isinstance(median, bool) or not isinstance(median, int | float):
        return f"median_us {median!r} is not a number"
    if status == "ok":
        if failure is not None:
            return f"an ok row has no failure kind (got {str(failure)[:20]!r})"
        if not (0.0 < median < PLACEHOLDER_US):
            return f"median_us {median!r} of an ok row is not in (0, {PLACEHOLDER_US:g})"
        if samples < 1:
            return "an ok row has at least one sample"
        return None
    if failure not in FAILURE_KINDS:
        return f"failure {str(failure)[:20]!r} is not one of {', '.join(FAILURE_KINDS)}"
    if median != PLACEHOLDER_US:
        return f"a failed row stores the placeholder time {PLACEHOLDER_US:g}, not {median!r}"
    return None


def _first_bad(status: list, median: list, spread: list, samples: list, failure: list) -> int:
    """Index of the first row breaking a row rule, or -1 (a fast pass; `_row_problem` says why)."""
    ph = PLACEHOLDER_US
    for i, (st, med, sp, ns, fk) in enumerate(zip(status, median, spread, samples, failure, strict=True)):
        try:
            if type(ns) is not int or ns < 0 or not (sp is None or 0 <= sp < math.inf) or type(sp) is bool:
                return i
            if st == "ok":
                if fk is not None or not 0.0 < med < ph or ns < 1 or type(med) is bool:
                    return i
            elif st != "failed" or med != ph or fk not in FAILURE_KINDS or type(med) is bool:
                return i
        except TypeError:
            return i
    return -1


def _utc_naive(value: object) -> _dt.datetime:
    if not isinstance(value, _dt.datetime):
        raise TypeError(f"measured_at must be a datetime, not {type(value).__name__}")
    if value.tzinfo is not None:
        value = value.astimezone(_dt.UTC).replace(tzinfo=None)
    return value


def _prepare_measurements(p: Prepared, rows: list[MeasurementRow], taken_now: bool = True) -> None:
    if any(not isinstance(r, MeasurementRow) for r in rows):
        i = next(i for i, r in enumerate(rows) if not isinstance(r, MeasurementRow))
        raise p.fail(f"measurement {i}: not a MeasurementRow ({type(rows[i]).__name__})")
    c = p.columns
    for name in ("kernel_id", "card", "setting", "status", "failure", "median_us", "spread", "samples", "source"):
        c[name] = [getattr(r, name) for r in rows]
    raw_sizes = [r.sizes for r in rows]
    c["sizes"] = raw_sizes
    memo_s: dict[str, str] = {}
    try:
        c["sizes"] = [_sizes_text(s, memo_s) for s in raw_sizes]
    except IRError as exc:
        i = next(i for i, s in enumerate(raw_sizes) if not _sizes_ok(s))
        raise p.fail(f"{_describe(p, 'measurement', i)}: field sizes: {exc}") from None
    memo_k: dict = {}  # type: ignore[type-arg]
    sids: list[str] = []
    append = sids.append
    for i, r in enumerate(rows):
        try:
            append(_schedule_of(r.knobs, memo_k).schedule_id)
        except KnobError as exc:
            raise p.fail(f"{_describe(p, 'measurement', i)}: field knobs: {exc}") from None
    for _, sched in memo_k.values():
        p.schedules[sched.schedule_id] = sched.text
    if len(p.schedules) < len(set(sids)):  # Schedule objects given directly, or knobs the memo could not key
        for r in rows:
            sched = _schedule_of(r.knobs, memo_k)
            p.schedules[sched.schedule_id] = sched.text
    c["schedule_id"] = sids
    _check_distinct(p, "kernel_id", lambda v: isinstance(v, str) and HEX64.match(v) is not None,
                    "is not a 64-digit lower-case hex kernel identity")
    _check_distinct(p, "card", _card_ok, "is not a card name (1-128 printable ASCII characters)")
    _check_distinct(p, "setting", _setting_ok, f"is not a compile setting ({', '.join(SETTINGS)})")
    _check_distinct(p, "source", lambda v: v in SOURCES, f"is not one of {', '.join(SOURCES)}")
    bad = _first_bad(c["status"], c["median_us"], c["spread"], c["samples"], c["failure"])
    if bad >= 0:
        problem = _row_problem(c["status"][bad], c["median_us"][bad], c["spread"][bad], c["samples"][bad],
                               c["failure"][bad]) or "breaks a row rule"
        raise p.fail(f"{_describe(p, 'measurement', bad)}: {problem}")
    c["median_us"] = [float(m) for m in c["median_us"]]
    c["spread"] = [None if s is None else float(s) for s in c["spread"]]
    now = _dt.datetime.now(_dt.UTC).replace(tzinfo=None, microsecond=0) if taken_now else None
    stamps = [r.measured_at for r in rows]
    try:
        c["measured_at"] = [now if s is None else _utc_naive(s) for s in stamps]
    except TypeError as exc:
        i = next(i for i, s in enumerate(stamps) if s is not None and not isinstance(s, _dt.datetime))
        raise p.fail(f"{_describe(p, 'measurement', i)}: field measured_at: {exc}") from None
    p.need_kernels.update(c["kernel_id"])
    p.need_cards.update(c["card"])
    p.schedule_cards.update(zip(c["schedule_id"], c["card"], strict=True))


def _sizes_ok(value: object) -> bool:
    try:
        _sizes_text(value, {})
    except IRError:
        return False
    return True


def _card_ok(v: object) -> bool:
    return isinstance(v, str) and CARD_NAME_PATTERN.match(v) is not None


def _setting_ok(v: object) -> bool:
    return isinstance(v, str) and v in SETTINGS


def _check_distinct(p: Prepared, name: str, ok, why: str) -> None:  # type: ignore[no-untyped-def]
    col = p.columns[name]
    for value in set(col):
        if not ok(value):
            i = col.index(value)
            raise p.fail(f"{_describe(p, 'measurement', i)}: field {name}: {str(value)[:80]!r} {why}")


def _prepare_routing(p: Prepared, rows: list[RoutingRow]) -> None:
    for i, r in enumerate(rows):
        where = f"routing {i}"
        if not isinstance(r, RoutingRow):
            raise p.fail(f"{where}: not a RoutingRow")
        for name in ("parent_id", "piece_id"):
            v = getattr(r, name)
            if not isinstance(v, str) or not HEX64.match(v):
                raise p.fail(f"{where}: field {name}: {str(v)[:80]!r} is not a kernel identity")
        try:
            parse_decision(r.decision)
        except (ValueError, TypeError) as exc:
            raise p.fail(f"{where}: field decision: {exc}") from None
        if isinstance(r.piece_index, bool) or not isinstance(r.piece_index, int) or not 0 <= r.piece_index < 4096:
            raise p.fail(f"{where}: field piece_index: {r.piece_index!r} is not an integer in 0..4095")
        if r.piece_id == r.parent_id:
            raise p.fail(f"{where}: a decision's piece is not its parent")
        p.routing.append((r.parent_id, r.decision, r.piece_index, r.piece_id))
        p.need_kernels.update((r.parent_id, r.piece_id))


def _prepare_goldens(p: Prepared, rows: list[GoldenRow]) -> None:
    memo_k: dict = {}  # type: ignore[type-arg]
    memo_s: dict[str, str] = {}
    for i, g in enumerate(rows):
        where = f"golden {i}"
        if not isinstance(g, GoldenRow):
            raise p.fail(f"{where}: not a GoldenRow")
        if not isinstance(g.kernel_id, str) or not HEX64.match(g.kernel_id):
            raise p.fail(f"{where}: field kernel_id: {str(g.kernel_id)[:80]!r} is not a kernel identity")
        try:
            sizes = _sizes_text(g.sizes, memo_s)
        except IRError as exc:
            raise p.fail(f"{where}: field sizes: {exc}") from None
        if not _card_ok(g.card):
            raise p.fail(f"{where}: field card: {str(g.card)[:80]!r} is not a card name")
        if not _setting_ok(g.setting):
            raise p.fail(f"{where}: field setting: {str(g.setting)[:80]!r} is not a compile setting "
                         f"({', '.join(SETTINGS)})")
        if (g.knobs is None) == (g.decision is None):
            raise p.fail(f"{where}: a golden names exactly one of knobs and decision")
        sid = None
        if g.knobs is not None:
            try:
                sched = _schedule_of(g.knobs, memo_k)
            except KnobError as exc:
                raise p.fail(f"{where}: field knobs: {exc}") from None
            p.schedules[sched.schedule_id] = sched.text
            sid = sched.schedule_id
            p.schedule_cards.add((sid, g.card))
        else:
            try:
                parse_decision(g.decision)  # type: ignore[arg-type]
            except (ValueError, TypeError) as exc:
                raise p.fail(f"{where}: field decision: {exc}") from None
        p.goldens.append((g.kernel_id, sizes, g.card, g.setting, sid, g.decision))
        p.need_kernels.add(g.kernel_id)
        p.need_cards.add(g.card)


def knob_target_problem(knobs_text: str, target: str) -> str | None:
    """Why a stored knob assignment is outside the vocabulary of `target` (cuda or cpu), or None."""
    import json

    knobs = json.loads(knobs_text)
    for name in sorted(knobs):
        if name.startswith(EXTERN_PREFIX):
            continue
        spec = SCHEDULE_KNOBS.get(name)
        if spec is not None and spec.target not in (target, "any"):  # any: the library route's knobs
            return f"knob {name!r} belongs to the {spec.target} vocabulary, not {target}"
    return None


def check_references(p: Prepared, missing_kernels: set[str], card_targets: dict[str, str]) -> None:
    """Refuses a batch whose references do not resolve (in the batch or the store), or whose knobs
    belong to another target's vocabulary than the card they were measured on."""
    if missing_kernels:
        kid = sorted(missing_kernels)[0]
        raise p.fail(f"{len(missing_kernels)} referenced kernel(s) are neither in this batch nor stored, "
                     f"e.g. {kid}: add the kernel to the batch")
    targets = {name: card.target for name, card in p.cards.items()}
    targets.update({k: v for k, v in card_targets.items() if k not in targets})
    undescribed = sorted(p.need_cards - set(targets))
    if undescribed:
        raise p.fail(f"card {undescribed[0]!r} is not described (in this batch or stored): add its CardRow")
    checked: dict[tuple[str, str], str | None] = {}
    for sid, card in p.schedule_cards:
        key = (sid, targets[card])
        if key not in checked:
            checked[key] = knob_target_problem(p.schedules[sid], targets[card]) if sid in p.schedules else None
        if checked[key] is not None:
            raise p.fail(f"schedule {sid[:12]} measured on {card!r}: {checked[key]}")
