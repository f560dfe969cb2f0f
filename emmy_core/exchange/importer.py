"""`emmy db import`: any mix of sources into a store, each source in one transaction.

Sources: freeze and tune files, golden records, Kernel Tuner caches (`.json` or
`.json.gz`), another tuning database (a DuckDB file) and a dataset export directory.
The kind is read from the content, never guessed from the name. Each source is parsed
strictly into one batch (identities recomputed from loop-program text), then written by
the store's one writer in one transaction: a bad source is refused with the file, record
and field at fault and nothing of it is written, while the other sources still go in.
"""

from __future__ import annotations

import glob
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from emmy_core.fileio.errors import FileError
from emmy_core.fileio.filekind import FREEZE_FORMAT, GOLDEN_FORMAT, is_duckdb, is_kernel_tuner_cache
from emmy_core.fileio.pidfile import alive
from emmy_core.fileio.safefile import ensure_folder, fsync_folder, shown, through_link
from emmy_core.fileio.sourcefile import MAX_SOURCE_BYTES, SourceError, gc_paused, load_json_file
from emmy_core.store.batch import Batch
from emmy_core.store.errors import StoreError, VersionMismatchError
from emmy_core.store.interface import MeasurementStore
from emmy_core.store.rows import WriteSummary
from emmy_core.store.versions import move_aside, stale_versions

Progress = Callable[[str], None]


@dataclass
class SourceOutcome:
    """What became of one source: imported (with the writer's summary) or refused (with the reason)."""

    source: str
    kind: str
    ok: bool
    message: str
    summary: WriteSummary | None = None


@dataclass
class LoadedSource:
    """A source read and checked: its kind, the batch that imports it, and notes for the import summary."""

    kind: str
    batch: Batch
    notes: list[str]


def load_source(path: Path | str, store: MeasurementStore, *, card: str | None = None,
                max_bytes: int = MAX_SOURCE_BYTES) -> LoadedSource:
    """The kind of a source and the batch that imports it (nothing written); refuses with a SourceError,
    also when the source names this machine's CPU card with another description (`localcard`)."""
    from emmy_core.formats.localcard import check_cards, local_cpu

    loaded = _load_source(path, store, card=card, max_bytes=max_bytes)
    loaded.batch.taken_now = False  # a row read from a file keeps the file's time or none, never the import's
    table = loaded.kind in ("export", "database")
    check_cards(loaded.batch.cards, str(path), local_cpu(), "cards[{i}]" if table else "$.card")
    return loaded


def _load_source(path: Path | str, store: MeasurementStore, *, card: str | None, max_bytes: int) -> LoadedSource:
    from emmy_core.formats import cardfile, golden, kerneltuner
    from emmy_core.store import tablesource

    p = Path(path)
    name = str(path)
    if p.is_dir():
        from emmy_core.exchange.export import read_export_tables

        return LoadedSource("export", tablesource.batch_from_tables(read_export_tables(p), name), [])
    if not p.is_file():
        if p.exists():  # a FIFO would block a reader, a device read forever: refused unread
            raise SourceError(name, "", "", "not a regular file (a FIFO, a device or a socket): refused unread")
        raise SourceError(name, "", "", "no such file or directory")
    if is_duckdb(p):
        label = getattr(store, "path", None)
        if label is not None and p.resolve() == Path(label).resolve():
            raise SourceError(name, "", "", "is the database being imported into")
        return LoadedSource("database", tablesource.batch_from_tables(tablesource.read_db_tables(p), name), [])
    doc = load_json_file(p, max_bytes)
    if is_kernel_tuner_cache(doc):
        from emmy_core.formats.localcard import local_cpu

        cache = kerneltuner.parse_cache(doc, name, card=card)
        here = local_cpu()  # the card would be told apart from this CPU's and every stored one's by its file name
        kerneltuner.check_cache_card(cache.card, name, (c.name for c in store.cards()), here.name if here else None)
        if store.card(cache.card) is None:
            cache.batch.add_card(kerneltuner.card_row(cache.card))
        notes = [f"{cache.time_disagrees} working entries whose time is not the mean of their times (the median "
                 "of times was recorded)"] if cache.time_disagrees else []
        return LoadedSource("kerneltuner", cache.batch, notes)
    if not isinstance(doc, dict) or "format" not in doc:
        raise SourceError(name, "$", "format", "missing: not a freeze, tune file, golden record or Kernel Tuner "
                                               "cache")
    fmt = doc["format"]
    if fmt == GOLDEN_FORMAT:
        return LoadedSource("golden", golden.parse_golden_file(doc, name).batch, [])
    parsed = cardfile.parse_card_document(doc, name)
    return LoadedSource("freeze" if parsed.format == FREEZE_FORMAT else "tune", parsed.batch, [])


def import_into(store: MeasurementStore, sources: Iterable[Path | str], *, card: str | None = None,
                max_bytes: int = MAX_SOURCE_BYTES, progress: Progress | None = None) -> list[SourceOutcome]:
    """Imports each source in its own transaction; returns one outcome per source, in order."""
    out = []
    for src in sources:
        name = str(src)
        if progress is not None:
            progress(name)
        kind = "?"
        notes: list[str] = []
        try:
            with gc_paused():
                loaded = load_source(src, store, card=card, max_bytes=max_bytes)
                kind, notes = loaded.kind, loaded.notes
                summary = store.write(loaded.batch)
                del loaded
        except FileError as exc:  # a source refused, or the store refused its rows
            out.append(SourceOutcome(name, kind, False, str(exc)))
            continue
        out.append(SourceOutcome(name, kind, True, "; ".join([
            f"{summary.offered} rows offered: {summary.inserted} new, {summary.replaced} better, {summary.ignored} "
            f"kept as stored; {summary.kernels_added} kernels and {summary.schedules_added} schedules added",
            *notes]), summary))
    return out


def _fresh_name(path: Path) -> Path:
    """The file a fresh import builds beside `path` (named by this process, so a killed one's is found)."""
    return path.with_name(f".{path.name}.fresh-{os.getpid()}")


def _remove_stale_fresh(path: Path) -> None:
    """Removes what fresh imports killed before their swap left beside `path` (their process is gone)."""
    pattern = re.compile(re.escape(f".{path.name}.fresh-") + r"([0-9]{1,10})(\.wal)?\Z")
    for p in path.parent.glob(f".{glob.escape(path.name)}.fresh-*"):
        m = pattern.match(p.name)
        if m is not None and not alive(int(m.group(1))):
            p.unlink(missing_ok=True)


def _check_replaceable(path: Path) -> dict[str, str] | None:
    """What a fresh import may replace: None (no file), or the versions of an Emmy store; refuses a file
    that is not one. The file is opened read-only, so it stands byte for byte whatever happens next."""
    from emmy_core.store import open_store

    if not path.exists():
        return None
    try:
        with open_store(path, "r") as old:
            return old.versions()
    except VersionMismatchError as exc:
        return exc.found


def fresh_import(db: Path | str, sources: Iterable[Path | str], *, card: str | None = None,
                 max_bytes: int = MAX_SOURCE_BYTES, progress: Progress | None = None,
                 notify: Callable[[str], None] | None = None) -> list[SourceOutcome]:
    """`emmy db import --fresh`: builds a new database beside `db` from the sources and swaps it in
    atomically, only when every source was read and written. If any source is refused, or the process
    dies, `db` stands byte for byte and the new file is removed (or, after a kill, removed by the next
    fresh import). A file of another version is moved aside (never deleted) before the swap."""
    from emmy_core.store import open_store

    path = through_link(Path(db))  # a link to a database: the database it points to is replaced, the link kept
    ensure_folder(path.parent)
    _remove_stale_fresh(path)
    old_versions = _check_replaceable(path)
    tmp = _fresh_name(path)
    tmp.unlink(missing_ok=True)
    Path(f"{tmp}.wal").unlink(missing_ok=True)
    swapped = False
    try:
        with open_store(tmp, "w") as store:
            store.label = f"{shown(path)} (fresh, built beside it)"
            outcomes = import_into(store, sources, card=card, max_bytes=max_bytes, progress=progress)
        if any(not o.ok for o in outcomes):
            return outcomes
        if Path(f"{path}.wal").exists():
            raise StoreError(f"{shown(path)} was written by another process during the fresh import (it has a "
                             "write-ahead log): nothing was swapped in; run the fresh import again")
        if old_versions is not None and stale_versions(old_versions):
            move_aside(path, old_versions, notify)
        os.replace(tmp, path)
        swapped = True
        fsync_folder(path.parent)
        return outcomes
    finally:
        if not swapped:
            tmp.unlink(missing_ok=True)
            Path(f"{tmp}.wal").unlink(missing_ok=True)


def import_db(db: Path | str, sources: Iterable[Path | str], *, fresh: bool = False, card: str | None = None,
              max_bytes: int = MAX_SOURCE_BYTES, progress: Progress | None = None,
              notify: Callable[[str], None] | None = None) -> list[SourceOutcome]:
    """`emmy db import`: imports every source into the store file (with `fresh`, into a new database
    swapped in for the old one only when every source went in: see `fresh_import`)."""
    from emmy_core.store import open_store

    if fresh:
        return fresh_import(db, sources, card=card, max_bytes=max_bytes, progress=progress, notify=notify)
    with open_store(db, "w", notify=notify) as store:
        return import_into(store, sources, card=card, max_bytes=max_bytes, progress=progress)
