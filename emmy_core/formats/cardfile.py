"""The per-card document shared by freezes and tune files: a strict reader and a canonical writer.

Shape (version 1), one document per card:

    {"format": "emmy-freeze" | "emmy-tune", "version": 1, "knob_vocab": 1,
     "card": {"name": ..., "numbers": {...}, "target": "cuda" | "cpu"},
     "decisions": [{"decision": "split:k=2", "parent": 0, "pieces": [{"index": 0, "kernel": 1}, ...]}],
     "kernels": [{"c_name": ..., "goldens": [...], "program": "<loop-program text>", "rows": [ROW, ...]}]}

A kernel is its loop-program text and nothing derived: no identity, no feature (an import
computes the identity from the text). A freeze writes each dynamic axis's expected size from
the card's own rows (`freeze.own_hints`): the store keeps one text per identity, with the
hint of whichever writer came first, and a card's file must not depend on other cards. Decisions name kernels by their position in
`kernels`. A ROW is {"failure"?, "golden"?, "knobs", "median_us", "samples", "setting",
"sizes", "source", "spread"?, "status"}: `failure` only on a failed row, `golden` only when
true, `spread` only when recorded. `goldens` lists reviewed choices that are not a measured
row ({"decision" | "knobs", "setting", "sizes"}). No timestamps anywhere.

Canonical form: `format` and `version` first, every other object with sorted keys, kernels
sorted by program text, rows by (sizes, setting, knobs), one row per line, floats in
Python's shortest round-trip form, a trailing newline: the same content gives the same bytes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from emmy_core.codegen.backend import SETTINGS
from emmy_core.fileio.filekind import FREEZE_FORMAT, TUNE_FORMAT
from emmy_core.fileio.sourcefile import Fields, SourceError, json_path
from emmy_core.ir import IRError, Kernel, kernel_id, parse
from emmy_core.ir.sizes import format_sizes, parse_sizes
from emmy_core.ir.text import MAX_TEXT_BYTES
from emmy_core.knobs.vocab import KNOB_VOCAB_VERSION, canonical_knobs, knobs_problem, parse_decision
from emmy_core.store.batch import Batch
from emmy_core.store.rows import (
    CARD_NUMBERS,
    FAILURE_KINDS,
    PLACEHOLDER_US,
    SOURCES,
    CardRow,
    GoldenRow,
    MeasurementRow,
    RoutingRow,
    Schedule,
)
from emmy_core.targets.card import TARGETS

DOC_VERSION = 1
TOP_KEYS = frozenset({"format", "version", "knob_vocab", "card", "kernels", "decisions"})
KERNEL_KEYS = frozenset({"program", "c_name", "rows", "goldens"})
ROW_KEYS = frozenset({"sizes", "setting", "knobs", "status", "median_us", "spread", "samples", "source",
                      "failure", "golden"})
MAX_SAMPLES = 10**9
_REQUIRED = frozenset({"sizes", "setting", "knobs", "status", "median_us", "samples", "source"})
_OK_NUMBERS = frozenset({int, float})


@dataclass
class CardDocument:
    """A parsed card document: its format, card and the batch that imports it (one transaction)."""

    format: str
    card: CardRow
    batch: Batch
    rows: int = 0
    kernel_ids: list[str] = field(default_factory=list)


# ---- the card description ------------------------------------------------------------------------

def card_json(card: CardRow) -> dict[str, object]:
    numbers = {k: card.value(k) for k in sorted(card.numbers) if card.numbers.get(k) is not None}
    return {"arch": card.arch, "name": card.name, "numbers": numbers, "target": card.target,
            "tensor_cores": list(card.tensor_cores)}


def parse_card(f: Fields) -> CardRow:
    f.only(("arch", "name", "numbers", "target", "tensor_cores"))
    name = f.text("name", 128)
    arch = f.text("arch", 40, optional=True, allow_empty=True) or ""
    tensor_cores = f.array("tensor_cores", optional=True)
    target = f.text("target", 8)
    if target not in TARGETS:
        raise f.fail("target", f"{target!r} is not one of {', '.join(TARGETS)}")
    numbers = f.mapping("numbers", optional=True)
    for key, value in numbers.items():
        if key not in CARD_NUMBERS:
            raise SourceError(f.file, json_path(f.record, "numbers"), str(key)[:60],
                              f"unknown card number (known: {', '.join(CARD_NUMBERS)})")
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            raise SourceError(f.file, json_path(f.record, "numbers"), key, "must be a number or null")
    card = CardRow(name, target, dict(numbers), arch, tuple(tensor_cores))  # type: ignore[arg-type]
    problem = card.problem()
    if problem is not None:
        raise f.fail("", problem)
    return card


# ---- reading -------------------------------------------------------------------------------------

def _header(file: str, doc: object, formats: tuple[str, ...]) -> Fields:
    top = Fields(file, "$", doc, "a document")
    fmt = top.text("format", 32)
    if fmt not in formats:
        raise top.fail("format", f"{fmt!r} is not one of {', '.join(formats)}")
    version = top.raw("version")
    if isinstance(version, bool) or not isinstance(version, int):
        raise top.fail("version", f"must be an integer, not {version!r:.40}")
    if version != DOC_VERSION:
        raise top.fail("version", f"{fmt} version {version} is not readable: this Emmy reads {fmt} version "
                                  f"{DOC_VERSION} (nothing migrates: re-write the file with this version)")
    return top


def check_knob_vocab(top: Fields) -> None:
    vocab = top.raw("knob_vocab")
    if vocab != KNOB_VOCAB_VERSION or isinstance(vocab, bool):
        raise top.fail("knob_vocab", f"written under knob vocabulary version {vocab!r:.40}; this Emmy uses "
                                     f"version {KNOB_VOCAB_VERSION} (knob names may mean other things: refused)")


class RowReader:
    """Reads measurement rows fast (memoized sizes, settings and knobs), slowly only to explain a refusal."""

    def __init__(self, file: str, card: str) -> None:
        self.file = file
        self.card = card
        self.sizes: dict[str, bool] = {}
        self.settings: dict[str, bool] = {}
        self.knobs: dict[tuple, Schedule] = {}  # (items, value types) -> Schedule: True and 1 never meet

    def schedule(self, knobs: object, record: str, field_name: str = "knobs") -> Schedule:
        try:
            key = (tuple(knobs.items()), tuple(map(type, knobs.values())))  # type: ignore[union-attr]
            got = self.knobs.get(key)
        except (AttributeError, TypeError):
            key, got = None, None
        if got is None:
            if not isinstance(knobs, dict):
                raise SourceError(self.file, record, field_name, "must be an object of knob values")
            problem = knobs_problem(knobs)
            if problem is not None:
                bad = next((k for k in sorted(knobs, key=str) if knobs_problem({k: knobs[k]}) is not None), "")
                where = f"{field_name}.{str(bad)[:60]}" if bad else field_name
                raise SourceError(self.file, record, where, problem)
            got = Schedule(knobs)
            if key is not None:
                self.knobs[key] = got
        return got

    def sizes_ok(self, sizes: object, record: str) -> str:
        if type(sizes) is str and self.sizes.get(sizes):
            return sizes
        if not isinstance(sizes, str) or len(sizes) > 1024:
            raise SourceError(self.file, record, "sizes", "must be text like 'B=8,S=512' (at most 1024 characters)")
        try:
            canonical = format_sizes(parse_sizes(sizes))
        except IRError as exc:
            raise SourceError(self.file, record, "sizes", str(exc)) from None
        if canonical != sizes:
            raise SourceError(self.file, record, "sizes", f"not canonical (write {canonical!r})")
        self.sizes[sizes] = True
        return sizes

    def setting_ok(self, setting: object, record: str) -> str:
        if type(setting) is str and self.settings.get(setting):
            return setting
        if not isinstance(setting, str) or setting not in SETTINGS:
            raise SourceError(self.file, record, "setting", f"{str(setting)[:80]!r} is not a compile setting "
                                                            f"({', '.join(SETTINGS)})")
        self.settings[setting] = True
        return setting

    def rows(self, kid: str, raw: list, base: str, out: list[MeasurementRow]) -> list[MeasurementRow]:
        """Appends the rows of one kernel to `out`; returns the golden ones. A fast pass over well-formed
        rows (memoized sizes, settings and knobs); any row it is unsure of goes through `row`, which
        accepts it or says exactly what is wrong."""
        sizes_seen, settings_seen, knobs_seen = self.sizes, self.settings, self.knobs
        card, required, allowed, ok_numbers = self.card, _REQUIRED, ROW_KEYS, _OK_NUMBERS
        goldens = []
        append = out.append
        for j, r in enumerate(raw):
            try:
                keys = r.keys()
                knobs = r["knobs"]
                sched = knobs_seen.get((tuple(knobs.items()), tuple(map(type, knobs.values()))))
                sizes, setting, status, median = r["sizes"], r["setting"], r["status"], r["median_us"]
                samples, source, spread = r["samples"], r["source"], r.get("spread")
                fast = (sched is not None and keys <= allowed and keys >= required and sizes_seen.get(sizes) is True
                        and settings_seen.get(setting) is True and source in SOURCES and samples.__class__ is int
                        and median.__class__ in ok_numbers and status == "ok" and "failure" not in r
                        and 0.0 < median < PLACEHOLDER_US and 0 < samples <= MAX_SAMPLES
                        and (spread is None or (spread.__class__ in ok_numbers and 0 <= spread < math.inf))
                        and r.get("golden", False) is False)
            except (AttributeError, TypeError, KeyError):
                fast = False
            if fast:
                append(MeasurementRow(kid, sizes, sched, card, setting, "ok", float(median),
                                      None if spread is None else float(spread), samples, source, None))
                continue
            row, golden = self.row(kid, r, f"{base}[{j}]")
            append(row)
            if golden:
                goldens.append(row)
        return goldens

    def row(self, kid: str, r: object, record: str) -> tuple[MeasurementRow, bool]:
        """One ROW of a card document -> (measurement, golden flag)."""
        if type(r) is not dict:
            raise SourceError(self.file, record, "", "a row must be an object")
        if not r.keys() <= ROW_KEYS:
            bad = sorted(set(r) - ROW_KEYS)[0]
            raise SourceError(self.file, record, bad[:60], f"unknown field (known: {', '.join(sorted(ROW_KEYS))})")
        for key in ("sizes", "setting", "knobs", "status", "median_us", "samples", "source"):
            if key not in r:
                raise SourceError(self.file, record, key, "missing")
        sizes = self.sizes_ok(r["sizes"], record)
        setting = self.setting_ok(r["setting"], record)
        sched = self.schedule(r["knobs"], record)
        status, median, samples, source = r["status"], r["median_us"], r["samples"], r["source"]
        spread, failure, golden = r.get("spread"), r.get("failure"), r.get("golden", False)
        if type(median) is not float and (type(median) is not int):
            raise SourceError(self.file, record, "median_us", "must be a number")
        if type(samples) is not int or not 0 <= samples <= MAX_SAMPLES:
            raise SourceError(self.file, record, "samples", f"must be an integer in 0..{MAX_SAMPLES}")
        if source not in SOURCES:
            raise SourceError(self.file, record, "source", f"{str(source)[:20]!r} is not one of {', '.join(SOURCES)}")
        if spread is not None and (type(spread) not in (int, float) or not 0 <= spread < math.inf):
            raise SourceError(self.file, record, "spread", "must be a finite non-negative number (omit when unknown)")
        if golden is not True and golden is not False:
            raise SourceError(self.file, record, "golden", "must be true or false")
        if status == "ok":
            if "failure" in r:
                raise SourceError(self.file, record, "failure", "an ok row has no failure kind")
            if not 0.0 < median < PLACEHOLDER_US:
                raise SourceError(self.file, record, "median_us", f"{median!r} of an ok row is not in "
                                                                  f"(0, {PLACEHOLDER_US:g})")
            if samples < 1:
                raise SourceError(self.file, record, "samples", "an ok row has at least one sample")
        elif status == "failed":
            if failure not in FAILURE_KINDS:
                raise SourceError(self.file, record, "failure",
                                  f"{str(failure)[:20]!r} is not one of {', '.join(FAILURE_KINDS)}")
            if median != PLACEHOLDER_US:
                raise SourceError(self.file, record, "median_us",
                                  f"a failed row holds the placeholder time {PLACEHOLDER_US:g}")
        else:
            raise SourceError(self.file, record, "status", f"{str(status)[:20]!r} is not ok or failed")
        row = MeasurementRow(kid, sizes, sched, self.card, setting, status, float(median),
                             None if spread is None else float(spread), samples, source, failure)
        return row, golden


def parse_kernel_text(f: Fields, key: str = "program") -> Kernel:
    text = f.text(key, MAX_TEXT_BYTES)
    try:
        return parse(text, f"{f.record}.{key}")  # type: ignore[arg-type]
    except IRError as exc:
        raise f.fail(key, f"does not parse: {exc}") from None


def c_name_of(f: Fields, kernel: Kernel) -> str:
    c_name = f.text("c_name", 128, optional=True) or kernel.name
    if not c_name.isidentifier() or not c_name.isascii():
        raise f.fail("c_name", f"{c_name[:60]!r} is not an identifier")
    return c_name


def parse_golden(reader: RowReader, f: Fields, kid: str) -> GoldenRow:
    f.only(("sizes", "setting", "knobs", "decision"))
    sizes = reader.sizes_ok(f.raw("sizes"), f.record)
    setting = reader.setting_ok(f.raw("setting"), f.record)
    if f.has("knobs") == f.has("decision"):
        raise f.fail("", "a golden names exactly one of knobs and decision")
    if f.has("knobs"):
        return GoldenRow(kid, sizes, reader.card, setting, knobs=reader.schedule(f.raw("knobs"), f.record))
    decision = f.text("decision", 200)
    try:
        parse_decision(decision)  # type: ignore[arg-type]
    except ValueError as exc:
        raise f.fail("decision", str(exc)) from None
    return GoldenRow(kid, sizes, reader.card, setting, decision=decision)


def parse_card_document(doc: object, file: str, formats: tuple[str, ...] = (FREEZE_FORMAT, TUNE_FORMAT)
                        ) -> CardDocument:
    """A freeze or tune document -> the batch importing it; refuses naming the file, record and field."""
    top = _header(file, doc, formats)
    top.only(TOP_KEYS)
    check_knob_vocab(top)
    card = parse_card(top.sub("card"))
    out = CardDocument(top.obj["format"], card, Batch(file))
    batch = out.batch
    batch.add_card(card)
    reader = RowReader(file, card.name)
    ids = out.kernel_ids
    rows: list[MeasurementRow] = []
    goldens: list[GoldenRow] = []
    first: dict[str, int] = {}
    for i, entry in enumerate(top.array("kernels")):
        kf = Fields(file, json_path("$.kernels", i), entry, "a kernel")
        kf.only(KERNEL_KEYS)
        kernel = parse_kernel_text(kf)
        kid = kernel_id(kernel)
        if kid in first:
            raise kf.fail("program", f"the same kernel as $.kernels[{first[kid]}] (a kernel is listed once; "
                                     "expected sizes are not part of its identity)")
        first[kid] = i
        batch.kernels.append((kernel, c_name_of(kf, kernel)))
        ids.append(kid)
        start = len(rows)
        golden_rows = reader.rows(kid, kf.array("rows"), json_path(kf.record, "rows"), rows)
        pools = _one_row_per_key(file, kf.record, rows[start:], {id(r) for r in golden_rows})
        for row in golden_rows:
            goldens.append(GoldenRow(kid, row.sizes, card.name, row.setting, knobs=row.knobs))
        for j, g in enumerate(kf.array("goldens", optional=True)):
            gf = Fields(file, json_path(kf.record, "goldens", j), g, "a golden")
            golden = parse_golden(reader, gf, kid)
            _one_golden_per_pool(gf, pools, (golden.sizes, golden.setting))
            goldens.append(golden)
    seen_decisions: dict[tuple[str, str], int] = {}
    for i, entry in enumerate(top.array("decisions", optional=True)):
        df = Fields(file, json_path("$.decisions", i), entry, "a decision")
        routing = parse_decision_entry(df, ids)
        key = (routing[0].parent_id, routing[0].decision)
        if key in seen_decisions:
            raise df.fail("", f"decision {key[1][:40]!r} of the same parent as $.decisions[{seen_decisions[key]}] "
                              "is listed twice")
        seen_decisions[key] = i
        batch.routing.extend(routing)
    batch.measurements = rows
    batch.goldens = goldens
    out.rows = len(rows)
    return out


def _one_row_per_key(file: str, record: str, rows: list[MeasurementRow], golden: set[int]
                     ) -> dict[tuple[str, str], str]:
    """Refuses a kernel's rows that repeat a key (sizes, setting, knobs) or give one pool (sizes, setting)
    two goldens: a file that says two things about one variant contradicts itself. Returns the pools
    with a golden row, each with the JSON path of that row."""
    keys: dict[tuple[str, str, str], int] = {}
    pools: dict[tuple[str, str], str] = {}
    base = json_path(record, "rows")
    for j, r in enumerate(rows):
        key = (r.sizes, r.setting, r.knobs.schedule_id)  # type: ignore[union-attr]
        if keys.setdefault(key, j) != j:
            raise SourceError(file, f"{base}[{j}]", "", f"repeats the key (sizes, setting, knobs) of "
                                                        f"{base}[{keys[key]}]: one variant, two measurements")
        if id(r) in golden:
            pool = (r.sizes, r.setting)
            if pool in pools:
                raise SourceError(file, f"{base}[{j}]", "golden", f"a second golden for sizes {r.sizes!r}, setting "
                                                                  f"{r.setting!r} (the first: {pools[pool]})")
            pools[pool] = f"{base}[{j}]"
    return pools


def _one_golden_per_pool(f: Fields, pools: dict[tuple[str, str], str], pool: tuple[str, str]) -> None:
    if pool in pools:
        raise f.fail("", f"a second golden for sizes {pool[0]!r}, setting {pool[1]!r} (the first: {pools[pool]})")
    pools[pool] = f.record


def parse_decision_entry(f: Fields, ids: list[str]) -> list[RoutingRow]:
    f.only(("decision", "parent", "pieces"))
    decision = f.text("decision", 200)
    try:
        parse_decision(decision)  # type: ignore[arg-type]
    except ValueError as exc:
        raise f.fail("decision", str(exc)) from None
    parent = ids[f.integer("parent", 0, len(ids) - 1)]  # type: ignore[index]
    out = []
    pieces = f.array("pieces")
    if not pieces:
        raise f.fail("pieces", "a decision mints at least one piece")
    for j, p in enumerate(pieces):
        pf = Fields(f.file, json_path(f.record, "pieces", j), p, "a piece")
        pf.only(("index", "kernel"))
        index = pf.integer("index", 0, 4095)
        piece = ids[pf.integer("kernel", 0, len(ids) - 1)]  # type: ignore[index]
        if piece == parent:
            raise pf.fail("kernel", "a decision's piece is not its parent")
        out.append(RoutingRow(parent, decision, index, piece))  # type: ignore[arg-type]
    if len({r.piece_index for r in out}) != len(out):
        raise f.fail("pieces", "a piece index is given twice")
    return out


# ---- writing -------------------------------------------------------------------------------------

def _dumps(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


@dataclass
class KernelEntry:
    """One kernel of a document being written: its text, C name, rows (as JSON lines) and goldens."""

    program: str
    c_name: str
    rows: list[tuple[tuple[str, str, str], str]] = field(default_factory=list)  # (sort key, JSON line)
    goldens: list[tuple[tuple[str, str, str], dict]] = field(default_factory=list)


class RowWriter:
    """Renders measurement rows as canonical JSON lines (strings memoized: few distinct values)."""

    def __init__(self) -> None:
        self._s: dict[str, str] = {}

    def s(self, text: str) -> str:
        got = self._s.get(text)
        if got is None:
            got = self._s[text] = json.dumps(text, ensure_ascii=True)
        return got

    def line(self, sizes: str, setting: str, knobs_text: str, status: str, failure: str | None, median: float,
             spread: float | None, samples: int, source: str, golden: bool) -> str:
        if not math.isfinite(median) or (spread is not None and not math.isfinite(spread)):
            raise ValueError("a stored time is not finite")
        parts = []
        if status == "failed":
            parts.append(f'"failure":{self.s(failure or "crash")}')
        if golden:
            parts.append('"golden":true')
        parts.append(f'"knobs":{knobs_text},"median_us":{float(median)!r},"samples":{int(samples)},'
                     f'"setting":{self.s(setting)},"sizes":{self.s(sizes)},"source":{self.s(source)}')
        if spread is not None:
            parts.append(f'"spread":{float(spread)!r}')
        parts.append(f'"status":{self.s(status)}')
        return "{" + ",".join(parts) + "}"


def render_document(fmt: str, card: CardRow, kernels: Iterable[KernelEntry],
                    decisions: Iterable[tuple[str, str, list[tuple[int, str]]]]) -> str:
    """The canonical text of a card document. `decisions`: (parent text, decision, [(index, piece text)])."""
    entries = sorted(kernels, key=lambda e: e.program)
    index = {e.program: i for i, e in enumerate(entries)}
    out = [f'{{"format":{json.dumps(fmt)},"version":{DOC_VERSION},\n"card":{_dumps(card_json(card))},\n']
    dec = sorted(({"decision": d, "parent": index[p], "pieces": [{"index": i, "kernel": index[t]}
                                                                    for i, t in sorted(pieces)]}
                  for p, d, pieces in decisions), key=lambda x: (x["parent"], x["decision"]))
    out.append('"decisions":[' + ",\n".join(_dumps(d) for d in dec) + "],\n")
    out.append('"kernels":[')
    for n, e in enumerate(entries):
        goldens = [g for _, g in sorted(e.goldens, key=lambda x: x[0])]
        head = (f'{{"c_name":{json.dumps(e.c_name)},"goldens":{_dumps(goldens)},'
                f'"program":{json.dumps(e.program, ensure_ascii=True)},"rows":[')
        lines = [line for _, line in sorted(e.rows, key=lambda x: x[0])]
        body = ("\n" + ",\n".join(lines) + "\n") if lines else ""
        out.append(("\n" if n == 0 else ",\n") + head + body + "]}")
    out.append(f'],\n"knob_vocab":{KNOB_VOCAB_VERSION}}}\n')
    return "".join(out)


def golden_entry(sizes: str, setting: str, knobs_text: str | None, decision: str | None) -> tuple[tuple, dict]:
    body: dict[str, object] = {"setting": setting, "sizes": sizes}
    if knobs_text is not None:
        body["knobs"] = json.loads(knobs_text)
    else:
        body["decision"] = decision
    return (sizes, setting, knobs_text or "~" + str(decision)), body


def canonical_knob_text(text: str) -> str:
    """A stored knob JSON re-written canonically (so a freeze never depends on how a store spelled it)."""
    knobs = json.loads(text)
    if not isinstance(knobs, Mapping):
        raise ValueError("stored knobs are not an object")
    return canonical_knobs(dict(knobs))
