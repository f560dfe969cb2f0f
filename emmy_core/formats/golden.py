"""Golden records: a reviewed choice together with the traced program it came from.

A freeze keeps no traced program, so a compiler change that re-keys a kernel leaves its
frozen rows behind; a golden record keeps the serving-matrix entry (model and shapes) it
was found for, so it can be restamped. Format "emmy-golden", version 1:

    {"format": "emmy-golden", "version": 1, "knob_vocab": 1, "card": {...},
     "goldens": [{"c_name": ..., "knobs": {...} | "decision": "split:K=2", "pieces": [...]?,
                  "program": "<loop-program text>", "setting": "deploy", "sizes": "B=8",
                  "trace": {"model": "...", "shapes": {"x": [8, 512]}}}]}

A decision golden lists the kernels its decision mints (`pieces`: {"c_name", "program"}
in piece order) so the routing can be put in with it. Importing a record puts in the
kernel (identity computed from its text), its card and the golden row.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path

from emmy_core.fileio.filekind import GOLDEN_FORMAT
from emmy_core.fileio.sourcefile import Fields, SourceError, json_path
from emmy_core.formats.cardfile import (
    DOC_VERSION,
    RowReader,
    _header,
    c_name_of,
    card_json,
    check_knob_vocab,
    parse_card,
    parse_kernel_text,
)
from emmy_core.ir import Kernel, kernel_id, render
from emmy_core.knobs.vocab import KNOB_VOCAB_VERSION, canonical_knobs, parse_decision
from emmy_core.store.batch import Batch
from emmy_core.store.rows import CardRow, GoldenRow, RoutingRow

MODEL_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.:/+-]{0,127}\Z")
MAX_RANK = 8
MAX_DIM = 2**31 - 1


@dataclass(frozen=True)
class Trace:
    """The serving-matrix entry a golden was found for: a model and its input shapes."""

    model: str
    shapes: Mapping[str, tuple[int, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class GoldenRecord:
    """One golden and its trace: exactly one of `knobs` and `decision` (with the pieces it mints)."""

    trace: Trace
    kernel: Kernel
    sizes: str
    setting: str
    knobs: Mapping[str, object] | None = None
    decision: str | None = None
    pieces: tuple[Kernel, ...] = ()
    c_name: str | None = None


def _dumps(value: object) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def _entry(r: GoldenRecord) -> dict[str, object]:
    if (r.knobs is None) == (r.decision is None):
        raise ValueError("a golden names exactly one of knobs and decision")
    body: dict[str, object] = {
        "c_name": r.c_name or r.kernel.name, "program": render(r.kernel), "setting": r.setting, "sizes": r.sizes,
        "trace": {"model": r.trace.model, "shapes": {k: list(v) for k, v in r.trace.shapes.items()}}}
    if r.knobs is not None:
        body["knobs"] = json.loads(canonical_knobs(dict(r.knobs)))
    else:
        parse_decision(r.decision)  # type: ignore[arg-type]
        body["decision"] = r.decision
        body["pieces"] = [{"c_name": p.name, "program": render(p)} for p in r.pieces]
    return body


def render_golden_file(card: CardRow, records: Iterable[GoldenRecord]) -> str:
    """Canonical text of a golden file (one golden per line, sorted)."""
    entries = sorted(_dumps(_entry(r)) for r in records)
    body = ",\n".join(entries)
    return (f'{{"format":"{GOLDEN_FORMAT}","version":{DOC_VERSION},\n"card":{_dumps(card_json(card))},\n'
            f'"goldens":[\n{body}\n],\n"knob_vocab":{KNOB_VOCAB_VERSION}}}\n')


def write_golden_file(path: Path | str, card: CardRow, records: Iterable[GoldenRecord]) -> Path:
    """Checks the records (by parsing what would be written) and writes the file atomically; refuses to
    write over anything but a golden record of the same card."""
    from emmy_core.fileio.filekind import check_replaceable
    from emmy_core.fileio.safefile import atomic_write_text

    text = render_golden_file(card, records)
    parse_golden_file(json.loads(text), str(path)).batch.prepare()
    check_replaceable(Path(path), GOLDEN_FORMAT, card.name, "a golden record")
    atomic_write_text(Path(path), text)
    return Path(path)


def _trace(f: Fields) -> None:
    f.only(("model", "shapes"))
    model = f.text("model", 128)
    if not MODEL_NAME.match(model):  # type: ignore[arg-type]
        raise f.fail("model", f"{model!r} is not a model name ({MODEL_NAME.pattern})")
    shapes = f.mapping("shapes")
    if len(shapes) > 256:
        raise f.fail("shapes", "more than 256 inputs")
    for name, dims in shapes.items():
        if not isinstance(name, str) or not name.isidentifier() or len(name) > 64:
            raise SourceError(f.file, json_path(f.record, "shapes"), str(name)[:60], "not an input name")
        if (not isinstance(dims, list) or len(dims) > MAX_RANK
                or any(isinstance(d, bool) or not isinstance(d, int) or not 0 <= d <= MAX_DIM for d in dims)):
            raise SourceError(f.file, json_path(f.record, "shapes"), name,
                              f"must be an array of at most {MAX_RANK} non-negative integers")


@dataclass
class GoldenFile:
    card: CardRow
    batch: Batch
    goldens: int


def parse_golden_file(doc: object, file: str) -> GoldenFile:
    """A golden file -> the batch putting its kernels, card, routing and golden rows in."""
    top = _header(file, doc, (GOLDEN_FORMAT,))
    top.only(("format", "version", "knob_vocab", "card", "goldens"))
    check_knob_vocab(top)
    card = parse_card(top.sub("card"))
    batch = Batch(file)
    batch.add_card(card)
    reader = RowReader(file, card.name)
    entries = top.array("goldens")
    pools: dict[tuple[str, str, str], int] = {}
    for i, g in enumerate(entries):
        f = Fields(file, json_path("$.goldens", i), g, "a golden")
        f.only(("c_name", "program", "setting", "sizes", "trace", "knobs", "decision", "pieces"))
        _trace(f.sub("trace"))
        kernel = parse_kernel_text(f)
        kid = kernel_id(kernel)
        batch.kernels.append((kernel, c_name_of(f, kernel)))
        sizes = reader.sizes_ok(f.raw("sizes"), f.record)
        setting = reader.setting_ok(f.raw("setting"), f.record)
        if pools.setdefault((kid, sizes, setting), i) != i:
            raise f.fail("", f"a second golden for this kernel at sizes {sizes!r}, setting {setting!r} (the first: "
                             f"$.goldens[{pools[(kid, sizes, setting)]}])")
        if f.has("knobs") == f.has("decision"):
            raise f.fail("", "a golden names exactly one of knobs and decision")
        if f.has("knobs"):
            if f.has("pieces"):
                raise f.fail("pieces", "only a decision golden lists pieces")
            batch.goldens.append(GoldenRow(kid, sizes, card.name, setting, knobs=reader.schedule(f.raw("knobs"),
                                                                                               f.record)))
            continue
        decision = f.text("decision", 200)
        try:
            parse_decision(decision)  # type: ignore[arg-type]
        except ValueError as exc:
            raise f.fail("decision", str(exc)) from None
        pieces = f.array("pieces")
        if not pieces:
            raise f.fail("pieces", "a decision golden lists the kernels its decision mints")
        for j, p in enumerate(pieces):
            pf = Fields(file, json_path(f.record, "pieces", j), p, "a piece")
            pf.only(("c_name", "program"))
            piece = parse_kernel_text(pf)
            pid = kernel_id(piece)
            if pid == kid:
                raise pf.fail("program", "a decision's piece is not its parent")
            batch.kernels.append((piece, c_name_of(pf, piece)))
            batch.routing.append(RoutingRow(kid, decision, j, pid))  # type: ignore[arg-type]
        batch.goldens.append(GoldenRow(kid, sizes, card.name, setting, decision=decision))
    return GoldenFile(card, batch, len(entries))
