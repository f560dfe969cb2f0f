"""`emmy db freeze`: one canonical JSON document per card, written from a store.

A freeze holds every kernel measured (or given a golden) on the card, as loop-program
text; the kernel-set decisions that reach those kernels (with the decision's parent and
all its pieces, transitively up to the root); the measured rows and which are golden.
Freezing the same store twice gives byte-identical files (`cardfile` is the canonical
writer). Every card's file is staged under a temporary name first and renamed only when all
of them are written (`safefile.write_all`): a crash, a full disk or a file-size limit leaves
the old files whole, and the message names the file and why.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emmy_core.fileio.filekind import FREEZE_FORMAT, check_replaceable
from emmy_core.fileio.safefile import write_all
from emmy_core.fileio.sourcefile import gc_paused
from emmy_core.formats.cardfile import (
    KernelEntry,
    RowWriter,
    canonical_knob_text,
    golden_entry,
    render_document,
)
from emmy_core.ir import Axis, Program, parse, parse_sizes, render
from emmy_core.store.errors import StoreError
from emmy_core.store.interface import MeasurementStore
from emmy_core.store.rows import CardRow, RoutingRow, StoredGolden

ROW_COLUMNS = ("kernel_id", "sizes", "schedule_id", "setting", "status", "failure", "median_us", "spread",
               "samples", "source")


def card_file_slug(name: str) -> str:
    """File-name form of a card name (`NVIDIA H200` -> `nvidia-h200`), as the targets layer defines it."""
    from emmy_core.targets import card_slug

    return card_slug(name)


@dataclass
class CardSnapshot:
    """What a store holds about one card, as plain values: the input of the canonical writer."""

    card: CardRow
    kernels: dict[str, tuple[str, str]]  # kernel_id -> (text, c_name), every stored kernel
    schedules: dict[str, str]  # schedule_id -> knob JSON, those the rows and goldens name
    columns: dict[str, list]  # ROW_COLUMNS of the card's measurements
    routing: list[RoutingRow]
    goldens: list[StoredGolden]


def _columns_duck(store: Any, card: str) -> tuple[dict[str, list], dict[str, str]]:
    cols = store.arrow("SELECT kernel_id, sizes, schedule_id, setting, status, failure, median_us, spread, "
                       "samples, source FROM measurements WHERE card = ?", [card]).to_pydict()
    sched = store.arrow("SELECT schedule_id, knobs FROM schedules WHERE schedule_id IN (SELECT schedule_id FROM "
                        "measurements WHERE card = ? UNION SELECT schedule_id FROM goldens WHERE card = ?)",
                        [card, card]).to_pydict()
    return cols, dict(zip(sched["schedule_id"], sched["knobs"], strict=True))


def snapshot(store: MeasurementStore, card: str) -> CardSnapshot:
    """The card's rows, kernels, routing and goldens from `store` (bulk reads on a DuckDB store)."""
    described = store.card(card)
    if described is None:
        raise StoreError(f"{store.label}: card {card!r} is not described in this store")
    goldens = store.goldens(card=card)
    if hasattr(store, "arrow"):
        cols, schedules = _columns_duck(store, card)
    else:
        rows = store.measurements(card=card)
        cols = {c: [getattr(m, c) for m in rows] for c in ROW_COLUMNS}
        schedules = {}
        for sid in {*cols["schedule_id"], *(g.schedule_id for g in goldens if g.schedule_id)}:
            knobs = store.knobs(sid)
            if knobs is None:
                raise StoreError(f"{store.label}: schedule {sid[:12]} is referenced but not stored")
            from emmy_core.knobs.vocab import canonical_knobs

            schedules[sid] = canonical_knobs(knobs)
    return CardSnapshot(described, store.kernels(), schedules, cols, store.routing(), goldens)


def _reach(start: set[str], routing: list[RoutingRow], golden_decisions: set[tuple[str, str]]
           ) -> tuple[set[str], dict[tuple[str, str], list[tuple[int, str]]]]:
    """Kernels and decisions reaching `start`: each decision with a piece in the set, its parent and pieces."""
    groups: dict[tuple[str, str], list[tuple[int, str]]] = {}
    by_piece: dict[str, list[tuple[str, str]]] = {}
    for r in routing:
        groups.setdefault((r.parent_id, r.decision), []).append((r.piece_index, r.piece_id))
        by_piece.setdefault(r.piece_id, []).append((r.parent_id, r.decision))
    kernels = set(start)
    chosen: dict[tuple[str, str], list[tuple[int, str]]] = {}
    work = list(start)
    pending = [g for g in golden_decisions if g in groups]

    def take(g: tuple[str, str]) -> None:
        if g in chosen:
            return
        chosen[g] = groups[g]
        for node in (g[0], *(p for _, p in groups[g])):
            if node not in kernels:
                kernels.add(node)
                work.append(node)

    for g in pending:
        take(g)
    while work:
        for g in by_piece.get(work.pop(), ()):
            take(g)
    return kernels, chosen


def _most_common(counts: Counter[int]) -> int:
    return min(counts, key=lambda v: (-counts[v], v))


def own_hints(kernel_ids: list[str], sizes: list[str], goldens: list[StoredGolden]) -> dict[str, dict[str, int]]:
    """The expected size of each dynamic axis, from one card's own rows and goldens: per kernel, the size
    its rows were measured at most often (ties: the smaller); under the key "" the same per axis name over
    all of the card's rows, for kernels with none of their own (a decision's parent or piece)."""
    per: dict[str, dict[str, Counter[int]]] = {}
    pairs = Counter(zip(kernel_ids, sizes, strict=True))
    pairs.update((g.kernel_id, g.sizes) for g in goldens)
    parsed: dict[str, dict[str, int]] = {}
    for (kid, text), n in pairs.items():
        if not text:
            continue
        dims = parsed.get(text)
        if dims is None:
            dims = parsed[text] = parse_sizes(text)
        for axis, value in dims.items():
            for key in (kid, ""):
                per.setdefault(key, {}).setdefault(axis, Counter())[value] += n
    return {key: {axis: _most_common(c) for axis, c in axes.items()} for key, axes in per.items()}


def rehinted(text: str, own: dict[str, int], card_wide: dict[str, int]) -> str:
    """A kernel's text with each dynamic axis's expected size taken from the card's own rows (its own
    sizes, else the card's usual size of that axis, else 1), so a card's freeze never depends on which
    card's writer stored the kernel first (the identity ignores expected sizes)."""
    kernel = parse(text)
    if not isinstance(kernel, Program) or not kernel.dynamic_axes:
        return text
    axes = tuple(Axis(a.name, None, own.get(a.name) or card_wide.get(a.name) or 1) if a.dynamic else a
                 for a in kernel.axes)
    return render(dataclasses.replace(kernel, axes=axes))


def render_snapshot(snap: CardSnapshot, fmt: str = FREEZE_FORMAT) -> str:
    """The canonical document of one card."""
    c = snap.columns
    knob_text = {sid: canonical_knob_text(text) for sid, text in snap.schedules.items()}
    golden_rows = {(g.kernel_id, g.sizes, g.setting, g.schedule_id) for g in snap.goldens if g.schedule_id}
    measured = set(c["kernel_id"])
    start = measured | {g.kernel_id for g in snap.goldens}
    kernels, decisions = _reach(start, snap.routing,
                                {(g.kernel_id, g.decision) for g in snap.goldens if g.decision})
    missing = sorted(k for k in kernels if k not in snap.kernels)
    if missing:
        raise StoreError(f"kernel {missing[0][:12]} is referenced but not stored (run `emmy db check`)")
    hints = own_hints(c["kernel_id"], c["sizes"], snap.goldens)
    entries = {k: KernelEntry(rehinted(snap.kernels[k][0], hints.get(k, {}), hints.get("", {})),
                              snap.kernels[k][1]) for k in kernels}
    w = RowWriter()
    used_goldens: set[tuple[str, str, str, str]] = set()
    for kid, sizes, sid, setting, status, failure, median, spread, samples, source in zip(
            *(c[n] for n in ROW_COLUMNS), strict=True):
        text = knob_text.get(sid)
        if text is None:
            raise StoreError(f"schedule {sid[:12]} is referenced but not stored (run `emmy db check`)")
        golden = (kid, sizes, setting, sid) in golden_rows
        if golden:
            used_goldens.add((kid, sizes, setting, sid))
        entries[kid].rows.append(((sizes, setting, text), w.line(sizes, setting, text, status, failure, median,
                                                                  spread, samples, source, golden)))
    for g in snap.goldens:
        if g.schedule_id and (g.kernel_id, g.sizes, g.setting, g.schedule_id) in used_goldens:
            continue
        entries[g.kernel_id].goldens.append(golden_entry(g.sizes, g.setting, knob_text.get(g.schedule_id)
                                                         if g.schedule_id else None, g.decision))
    program = {k: entries[k].program for k in kernels}
    decs = [(program[p], d, [(i, program[piece]) for i, piece in pieces]) for (p, d), pieces in decisions.items()]
    return render_document(fmt, snap.card, entries.values(), decs)


def frozen_cards(store: MeasurementStore) -> list[str]:
    """Cards with at least one measurement or golden, sorted."""
    if hasattr(store, "arrow"):
        got = store.arrow("SELECT DISTINCT card FROM measurements UNION SELECT DISTINCT card FROM goldens")
        return sorted(got.column("card").to_pylist())
    return sorted({m.card for m in store.measurements()} | {g.card for g in store.goldens()})


def freeze_store(store: MeasurementStore, out_dir: Path | str, cards: Iterable[str] | None = None) -> list[Path]:
    """Writes `<card-slug>.json` for each card (all cards with rows when `cards` is None); returns the paths."""
    out = Path(out_dir)
    names = sorted(cards) if cards is not None else frozen_cards(store)
    slugs: dict[str, str] = {}
    for name in names:
        slug = card_file_slug(name)
        if slug in slugs:
            raise StoreError(f"cards {slugs[slug]!r} and {name!r} share the file name {slug}.json")
        slugs[slug] = name
    for slug, name in slugs.items():  # a file is never written over by another kind or another card
        check_replaceable(out / f"{slug}.json", FREEZE_FORMAT, name, "a freeze")

    def text_of(name: str) -> Callable[[], str]:
        def make() -> str:
            with gc_paused():
                return render_snapshot(snapshot(store, name))
        return make

    return write_all((out / f"{slug}.json", text_of(name)) for slug, name in slugs.items())


def freeze_db(db: Path | str, out_dir: Path | str, card: str | None = None) -> list[Path]:
    """`emmy db freeze`: opens `db` for reading and freezes one card or every card with rows."""
    from emmy_core.store import open_store

    with open_store(db, "r") as store:
        return freeze_store(store, out_dir, None if card is None else [card])
