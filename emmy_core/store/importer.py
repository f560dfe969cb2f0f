"""`emmy db import`: any mix of sources into a store, each source in one transaction.

Sources: freeze and tune files, golden records, Kernel Tuner caches (`.json` or
`.json.gz`), another tuning database (a DuckDB file) and a dataset export directory.
The kind is read from the content, never guessed from the name. Each source is parsed
strictly into one batch (identities recomputed from loop-program text), then written by
the store's one writer in one transaction: a bad source is refused with the file, record
and field at fault and nothing of it is written, while the other sources still go in.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from emmy_core.store.batch import Batch
from emmy_core.store.errors import StoreError
from emmy_core.store.interface import Store
from emmy_core.store.rows import WriteSummary
from emmy_core.store.sourcefile import MAX_SOURCE_BYTES, SourceError, gc_paused, load_json_file

DUCKDB_MAGIC = b"DUCK"
Progress = Callable[[str], None]


@dataclass
class SourceOutcome:
    """What became of one source: imported (with the writer's summary) or refused (with the reason)."""

    source: str
    kind: str
    ok: bool
    message: str
    summary: WriteSummary | None = None


def is_duckdb(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            head = fh.read(16)
    except OSError:
        return False
    return head[8:12] == DUCKDB_MAGIC


def load_source(path: Path | str, store: Store, *, card: str | None = None,
                max_bytes: int = MAX_SOURCE_BYTES) -> tuple[str, Batch]:
    """The kind of a source and the batch that imports it (nothing written); refuses with a SourceError."""
    from emmy_core.store import cardfile, golden, kerneltuner, tablesource

    p = Path(path)
    name = str(path)
    if p.is_dir():
        from emmy_core.store.export import read_export_tables

        return "export", tablesource.batch_from_tables(read_export_tables(p), name)
    if not p.is_file():
        raise SourceError(name, "", "", "no such file or directory")
    if is_duckdb(p):
        label = getattr(store, "path", None)
        if label is not None and p.resolve() == Path(label).resolve():
            raise SourceError(name, "", "", "is the database being imported into")
        return "database", tablesource.batch_from_tables(tablesource.read_db_tables(p), name)
    doc = load_json_file(p, max_bytes)
    if kerneltuner.looks_like_cache(doc):
        cache = kerneltuner.parse_cache(doc, name, card=card)
        if store.card(cache.card) is None:
            cache.batch.add_card(kerneltuner.card_row(cache.card))
        return "kerneltuner", cache.batch
    if not isinstance(doc, dict) or "format" not in doc:
        raise SourceError(name, "$", "format", "missing: not a freeze, tune file, golden record or Kernel Tuner "
                                               "cache")
    fmt = doc["format"]
    if fmt == golden.GOLDEN_FORMAT:
        return "golden", golden.parse_golden_file(doc, name).batch
    parsed = cardfile.parse_card_document(doc, name)
    return ("freeze" if parsed.format == cardfile.FREEZE_FORMAT else "tune"), parsed.batch


def import_into(store: Store, sources: Iterable[Path | str], *, card: str | None = None,
                max_bytes: int = MAX_SOURCE_BYTES, progress: Progress | None = None) -> list[SourceOutcome]:
    """Imports each source in its own transaction; returns one outcome per source, in order."""
    out = []
    for src in sources:
        name = str(src)
        if progress is not None:
            progress(name)
        kind = "?"
        try:
            with gc_paused():
                kind, batch = load_source(src, store, card=card, max_bytes=max_bytes)
                summary = store.write(batch)
                del batch
        except (SourceError, StoreError) as exc:
            out.append(SourceOutcome(name, kind, False, str(exc)))
            continue
        out.append(SourceOutcome(name, kind, True, f"{summary.offered} rows offered: {summary.inserted} new, "
                                                   f"{summary.replaced} better, {summary.ignored} kept as stored; "
                                                   f"{summary.kernels_added} kernels and {summary.schedules_added} "
                                                   "schedules added", summary))
    return out


def fresh_store(db: Path | str) -> Store:
    """Opens `db` for writing, emptied first when it is an Emmy store (a foreign file is refused, not wiped)."""
    from emmy_core.store import open_store

    path = Path(db)
    if path.exists():
        open_store(path, "w").close()  # refuses a file that is not an Emmy store; re-creates another version
        path.unlink()
        Path(str(path) + ".wal").unlink(missing_ok=True)
    return open_store(path, "w")


def import_db(db: Path | str, sources: Iterable[Path | str], *, fresh: bool = False, card: str | None = None,
              max_bytes: int = MAX_SOURCE_BYTES, progress: Progress | None = None) -> list[SourceOutcome]:
    """`emmy db import`: opens (or, with `fresh`, empties) the store file and imports every source."""
    from emmy_core.store import open_store

    store = fresh_store(db) if fresh else open_store(db, "w")
    with store:
        return import_into(store, sources, card=card, max_bytes=max_bytes, progress=progress)
