"""`emmy db export`: a dataset directory the fit and the evaluations read (and nothing else).

One Parquet file per table (rows in key order, so the same store gives the same files),
`pools.parquet` (the candidate pools the fit needs) and `manifest.json`: format, export,
schema, identity and knob-vocabulary versions, per file its rows and sha256, and a
content digest over all of them. Parquet is written by DuckDB from a relation (the path
is an argument of the call, never SQL text). A reader refuses an export written under
other versions, naming both, and an export whose files do not match their digests.

Pools: for every (kernel, sizes, card, setting) with measurements, the measured schedules;
for Emmy kernels also the options `emmy_core.knobs.candidates(kernel, card)` enumerates
(with their rank; `measured` says which were measured). Extern kernels have no rule: their
pool is what was measured. Candidates are enumerated for the card as the store's own
`cards` table describes it (`CardRow.to_card`), never for the host's table or probe, so
the same store exports the same pools on every machine. A card the store does not
describe (no numbers) gets measured pools only; the manifest counts those.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from emmy_core.exchange.export_content import refuse_bad_content
from emmy_core.fileio.pidfile import alive
from emmy_core.fileio.safefile import FileWriteError, ensure_folder, shown, swap_folder, through_link, why
from emmy_core.fileio.sourcefile import Fields, SourceError, load_json_file, loads_strict
from emmy_core.store.connect import first_line
from emmy_core.store.errors import StoreError
from emmy_core.store.tablesource import TABLE_COLUMNS, _select

EXPORT_FORMAT = "emmy-export"
EXPORT_VERSION = 1
MANIFEST = "manifest.json"
POOLS = "pools"
Progress = Callable[[str], None]

_POOLS_SQL = (
    "WITH meas AS (SELECT m.kernel_id, m.sizes, m.card, m.setting, m.schedule_id, s.knobs, m.status, m.median_us "
    "FROM measurements m JOIN schedules s ON s.schedule_id = m.schedule_id), "
    "c AS (SELECT g.kernel_id, g.sizes, g.card, g.setting, x.schedule_id, x.knobs, x.candidate_rank FROM "
    "(SELECT DISTINCT kernel_id, sizes, card, setting FROM measurements) g JOIN ex_candidates x "
    "ON x.kernel_id = g.kernel_id AND x.card = g.card) "
    "SELECT coalesce(meas.kernel_id, c.kernel_id) AS kernel_id, coalesce(meas.sizes, c.sizes) AS sizes, "
    "coalesce(meas.card, c.card) AS card, coalesce(meas.setting, c.setting) AS setting, "
    "coalesce(meas.schedule_id, c.schedule_id) AS schedule_id, coalesce(meas.knobs, c.knobs) AS knobs, "
    "c.candidate_rank, meas.status IS NOT NULL AS measured, meas.status, meas.median_us "
    "FROM meas FULL OUTER JOIN c ON meas.kernel_id = c.kernel_id AND meas.sizes = c.sizes "
    "AND meas.card = c.card AND meas.setting = c.setting AND meas.schedule_id = c.schedule_id "
    "ORDER BY kernel_id, sizes, card, setting, schedule_id"
)


def current_versions() -> dict[str, int]:
    from emmy_core.ir import identity
    from emmy_core.knobs.vocab import KNOB_VOCAB_VERSION
    from emmy_core.store.schema import SCHEMA_VERSION

    return {"export_version": EXPORT_VERSION, "schema_version": SCHEMA_VERSION,
            "identity_version": identity.IDENTITY_VERSION, "knob_vocab_version": KNOB_VOCAB_VERSION}


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _described(row: Any) -> Any:
    """The Card a store row describes, or None when it describes nothing a rule can enumerate for
    (no numbers, or a number a Card refuses, such as a zero): such pools are counted, not guessed."""
    if not row.described:
        return None
    try:
        return row.to_card()
    except ValueError:
        return None


def _candidate_table(store: Any) -> tuple[Any, dict[str, int]]:
    """Candidate options per measured (Emmy kernel, card) as an Arrow table, and counts of pools by kind.

    The pool does not depend on sizes or setting, so it is enumerated once per (kernel, card) and
    joined to every measured (kernel, sizes, card, setting) in SQL."""
    import pyarrow as pa

    from emmy_core.ir import Extern, parse
    from emmy_core.knobs import candidates
    from emmy_core.knobs.vocab import canonical_knobs, schedule_id

    pairs = store.arrow("SELECT g.kernel_id, g.card, count(*) AS pools, any_value(k.loop_program) AS text FROM "
                        "(SELECT DISTINCT kernel_id, sizes, card, setting FROM measurements) g JOIN kernels k "
                        "ON k.kernel_id = g.kernel_id GROUP BY g.kernel_id, g.card ORDER BY 1, 2").to_pydict()
    cols: dict[str, list] = {n: [] for n in ("kernel_id", "card", "schedule_id", "knobs", "candidate_rank")}
    cards = {row.name: _described(row) for row in store.cards()}
    stats = {"pools": 0, "enumerated": 0, "extern": 0, "unknown_card": 0}
    for kid, card, pools, text in zip(pairs["kernel_id"], pairs["card"], pairs["pools"], pairs["text"],
                                      strict=True):
        stats["pools"] += pools
        kernel = parse(text)
        if isinstance(kernel, Extern):
            stats["extern"] += pools
            continue
        if cards.get(card) is None:
            stats["unknown_card"] += pools
            continue
        stats["enumerated"] += pools
        for rank, option in enumerate(candidates(kernel, cards[card])):
            for name, value in (("kernel_id", kid), ("card", card), ("schedule_id", schedule_id(option)),
                                ("knobs", canonical_knobs(option)), ("candidate_rank", rank)):
                cols[name].append(value)
    types = {n: pa.int32() if n == "candidate_rank" else pa.string() for n in cols}
    return pa.table({n: pa.array(v, types[n]) for n, v in cols.items()}), stats


def _staging_prefix(out: Path, pid: int | str) -> str:
    return f".{out.name[:100]}.staging-{pid}."


def remove_stale_staging(out: Path) -> list[Path]:
    """Removes the staging folders that exports killed before they finished left beside `out`; returns them.

    A staging folder is named by its writer's PID and locked (flock) by it while it is written: one is stale
    only when that PID is gone and nobody holds its lock, so another export's live folder is never touched."""
    pattern = re.compile(re.escape(_staging_prefix(out, "")[:-1]) + r"([0-9]{1,10})\.[A-Za-z0-9_]{1,32}\Z")
    removed = []
    try:
        entries = list(out.parent.iterdir())
    except OSError:
        return []
    for p in entries:
        m = pattern.match(p.name)
        if m is None or p.is_symlink() or not p.is_dir() or alive(int(m.group(1))):
            continue
        try:
            fd = os.open(p, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            continue  # someone holds it: live
        else:
            shutil.rmtree(p, ignore_errors=True)
            removed.append(p)
        finally:
            os.close(fd)
    return removed


def export_store(store: Any, out_dir: Path | str, progress: Progress | None = None) -> dict[str, Any]:
    """Writes the export of an open DuckDB store into `out_dir` (replacing an earlier export there).

    It is staged in a folder beside `out_dir` named by this process and locked while written; what killed
    exports left there is removed first (`remove_stale_staging`)."""
    import duckdb

    out = _replaceable(Path(out_dir))
    ensure_folder(out.parent)
    remove_stale_staging(out)
    kept = f"the old export at {shown(out)} stands as it was" if out.exists() else "nothing was written"
    lock_fd = -1
    try:
        tmp = Path(tempfile.mkdtemp(prefix=_staging_prefix(out, os.getpid()), dir=out.parent))
        os.chmod(tmp, 0o755)  # mkdtemp makes it private; an export is meant to be read by others
        lock_fd = os.open(tmp, os.O_RDONLY)
        fcntl.flock(lock_fd, fcntl.LOCK_EX)  # released when the descriptor closes, or when this process dies
    except OSError as exc:
        if lock_fd >= 0:
            os.close(lock_fd)
        raise FileWriteError(f"cannot write an export beside {shown(out)}: {why(exc)}; {kept}") from None
    try:
        try:
            manifest = _write(store, tmp, progress)
        except duckdb.InterruptException:
            raise KeyboardInterrupt from None
        except RuntimeError as exc:  # Ctrl-C inside a relation's write comes as a plain RuntimeError
            if "interrupted" in str(exc).lower():
                raise KeyboardInterrupt from None
            raise
        except (OSError, duckdb.Error) as exc:
            reason = why(exc) if isinstance(exc, OSError) else first_line(exc)
            raise FileWriteError(f"cannot write the export {shown(out)}: {reason}; {kept}") from None
        try:
            old = swap_folder(tmp, out)
        except OSError as exc:
            raise FileWriteError(f"cannot put the export {shown(out)} in place: {why(exc)}; {kept}") from None
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
        os.close(lock_fd)
    return manifest


def export_files() -> frozenset[str]:
    """The names an export writes into its folder: one Parquet file per table, the pools, the manifest."""
    return frozenset({MANIFEST, *(f"{name}.parquet" for name in (*TABLE_COLUMNS, POOLS))})


def _replaceable(out: Path) -> Path:
    """The folder an export may be written to at `out` (a link to a folder is followed), or a refusal.

    An existing folder is replaced only when it is empty or an export: its manifest says so and it holds
    nothing an export does not write. Anything else there is a user's, and replacing the folder would
    delete it."""
    if out.is_symlink():
        if not out.exists():
            raise StoreError(f"{shown(out)} is a link to nothing: refusing to write an export there")
        out = through_link(out)
    if not out.exists():
        return out
    if not out.is_dir():
        raise StoreError(f"{shown(out)} exists and is not an export (not a folder): refusing to replace it")
    names = sorted(p.name for p in out.iterdir())
    if not names:
        return out
    manifest = out / MANIFEST
    if not manifest.is_file() or manifest.is_symlink():
        raise StoreError(f"{shown(out)} exists and is not an export (no {MANIFEST}): refusing to replace it")
    try:
        doc = load_json_file(manifest, 16 * 1024 * 1024)
    except SourceError as exc:
        raise StoreError(f"{shown(out)} exists and is not an export ({exc}): refusing to replace it") from None
    if not isinstance(doc, dict) or doc.get("format") != EXPORT_FORMAT:
        raise StoreError(f"{shown(out)} exists and is not an export (its {MANIFEST} is not an {EXPORT_FORMAT} "
                         "manifest): refusing to replace it")
    foreign = [n for n in names if n not in export_files()]
    if foreign:
        more = f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        raise StoreError(f"{shown(out)} is an export but also holds {', '.join(foreign[:3])}{more}, which no "
                         "export writes: replacing the folder would delete them; move them out first")
    return out


def _write(store: Any, tmp: Path, progress: Progress | None) -> dict[str, Any]:
    tables: dict[str, dict[str, Any]] = {}
    for table in TABLE_COLUMNS:
        if progress is not None:
            progress(table)
        path = tmp / f"{table}.parquet"
        store.con.sql(_select(table)).to_parquet(str(path))
        tables[table] = {"file": path.name, "rows": store.counts()[table], "sha256": _sha256(path)}
    if progress is not None:
        progress(POOLS)
    cand, stats = _candidate_table(store)
    store.con.register("ex_candidates", cand)
    try:
        rel = store.con.sql(_POOLS_SQL)
        path = tmp / f"{POOLS}.parquet"
        rel.to_parquet(str(path))
        rows = store.con.sql("SELECT count(*) FROM read_parquet(?)", params=[str(path)]).fetchall()[0][0]
    finally:
        store.con.unregister("ex_candidates")
    tables[POOLS] = {"file": path.name, "rows": rows, "sha256": _sha256(path), "candidates": stats}
    manifest: dict[str, Any] = {"format": EXPORT_FORMAT, **current_versions(), "tables": tables}
    manifest["digest"] = content_digest(tables)
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="ascii")
    return manifest


def content_digest(tables: dict[str, dict[str, Any]]) -> str:
    """sha256 over every file's name, rows and digest: one value naming the whole export."""
    text = "\n".join(f"{name}:{t['rows']}:{t['sha256']}" for name, t in sorted(tables.items()))
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def export_db(db: Path | str, out_dir: Path | str, progress: Progress | None = None) -> dict[str, Any]:
    """`emmy db export`: opens `db` for reading and exports it. `out_dir` may be an fsspec URL: the export is
    written into a local temporary folder and published there (`emmy_core.fileio.urlfolder.publish_folder`:
    its files first, then the pointer, so a reader never sees half an export). The URL is checked before the
    export is made: a protocol fsspec does not know, a store it cannot reach, or a folder there that is not an
    export (`urlfolder.check_replaceable`) is refused naming the URL, with nothing written."""
    from emmy_core.fileio.urlfolder import check_replaceable, is_url, local_path, publish_folder
    from emmy_core.store import open_store

    if is_url(out_dir):
        check_replaceable(str(out_dir), MANIFEST, "a dataset export")
    with open_store(db, "r") as store:
        if not is_url(out_dir):
            return export_store(store, local_path(out_dir), progress)
        with tempfile.TemporaryDirectory(prefix="emmy-export-") as tmp:
            manifest = export_store(store, Path(tmp) / "export", progress)
            publish_folder(Path(tmp) / "export", str(out_dir))
            return manifest


MAX_TABLE_BYTES = 8 * 1024**3
"""Largest Parquet file of an export a reader takes (each is read whole, hashed and parsed from memory)."""
SNAPSHOT_TRIES = 5


class _Moved(Exception):
    """The folder was swapped by an export while it was being opened: open it again."""


def read_manifest(export_dir: Path | str) -> dict[str, Any]:
    """The manifest of an export, refused when its versions are not this Emmy's (naming both).

    Only for a look at the versions and counts: a reader of tables uses `open_snapshot`, which reads
    the manifest and the tables it lists from one folder, whatever an export does meanwhile."""
    d = Path(export_dir)
    path = d / MANIFEST
    if not path.is_file():
        raise SourceError(str(d), "", "", f"no {MANIFEST}: not a dataset export")
    return _parse_manifest(load_json_file(path, 16 * 1024 * 1024), path)


def _parse_manifest(doc: Any, path: Path) -> dict[str, Any]:
    f = Fields(str(path), "$", doc, "a manifest")
    if f.raw("format") != EXPORT_FORMAT:
        raise f.fail("format", f"{str(f.raw('format'))[:40]!r} is not {EXPORT_FORMAT}")
    want = current_versions()
    found = {k: f.obj.get(k) for k in want}
    if found != want:
        def show(v: dict) -> str:
            return ", ".join(f"{k.replace('_', ' ')} {str(v[k])[:20]}" for k in want)

        raise f.fail("", f"exported under {show(found)}; this Emmy reads {show(want)} "
                         "(nothing migrates: export again with this version)")
    tables = f.mapping("tables")
    for name in (*TABLE_COLUMNS, POOLS):
        t = Fields(str(path), f"$.tables.{name}", tables.get(name), "a table entry")
        file = t.text("file", 64)
        if file != f"{name}.parquet":
            raise t.fail("file", f"must be {name}.parquet")
        t.integer("rows", 0, 2**62)
        t.text("sha256", 64)
    extra = sorted(set(tables) - {*TABLE_COLUMNS, POOLS})
    if extra:
        raise f.fail(f"tables.{str(extra[0])[:40]}", "not a table of an export")
    if f.raw("digest") != content_digest({n: tables[n] for n in (*TABLE_COLUMNS, POOLS)}):
        raise f.fail("digest", "does not match the tables listed")
    return doc


class Snapshot:
    """One export as it was at one moment: its manifest and every table it lists, all read from the
    files of one folder (opened through one folder descriptor) and each checked against the manifest's
    sha256 on the very bytes parsed. An export swapped in meanwhile is not mixed in."""

    def __init__(self, path: Path, manifest: dict[str, Any], tables: dict[str, Any]) -> None:
        self.path = path
        self.manifest = manifest
        self.tables = tables

    def file(self, table: str) -> str:
        """The file a table came from, for messages."""
        return str(self.path / f"{table}.parquet")


def _read_at(dir_fd: int, name: str, cap: int, folder: Path) -> bytes:
    import stat

    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW, dir_fd=dir_fd)
    except FileNotFoundError:
        raise _Moved(name) from None
    except OSError as exc:
        raise SourceError(str(folder / name), "", "", f"cannot read: {exc.strerror or exc}") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise SourceError(str(folder / name), "", "", "not a regular file: refused unread")
    with os.fdopen(fd, "rb") as fh:
        if st.st_size > cap:
            raise SourceError(str(folder / name), "", "", f"{st.st_size} bytes, over the cap of {cap}")
        data = fh.read(cap + 1)
    if len(data) > cap:
        raise SourceError(str(folder / name), "", "", f"over the cap of {cap} bytes")
    return data


def _snapshot(d: Path) -> Snapshot:
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        dir_fd = os.open(d, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        raise SourceError(str(d), "", "", "no such folder: not a dataset export") from None
    except NotADirectoryError:
        raise SourceError(str(d), "", "", "not a folder: not a dataset export") from None
    except OSError as exc:
        raise SourceError(str(d), "", "", f"cannot open: {exc.strerror or exc}") from None
    try:
        try:
            raw = _read_at(dir_fd, MANIFEST, 16 * 1024 * 1024, d)
        except _Moved:
            if os.path.isdir(d) and not os.path.exists(d / MANIFEST):
                raise SourceError(str(d), "", "", f"no {MANIFEST}: not a dataset export") from None
            raise
        manifest = _parse_manifest(loads_strict(raw, str(d / MANIFEST)), d / MANIFEST)
        entries = manifest["tables"]
        try:
            data = {name: _read_at(dir_fd, t["file"], MAX_TABLE_BYTES, d) for name, t in entries.items()}
        except _Moved as moved:
            if _swapped(d, dir_fd):
                raise
            raise SourceError(str(d / str(moved)), "", "", "missing: the manifest lists it") from None
        tables: dict[str, Any] = {}
        for name, t in entries.items():
            if hashlib.sha256(data[name]).hexdigest() != t["sha256"]:
                if _swapped(d, dir_fd):
                    raise _Moved(name)
                raise SourceError(str(d / t["file"]), "", "", "content does not match the manifest's sha256 "
                                                              "(changed or damaged)")
            try:
                table = pq.ParquetFile(pa.BufferReader(data.pop(name))).read()
            except (pa.ArrowException, OSError, ValueError) as exc:
                raise SourceError(str(d / t["file"]), "", "", f"not a readable Parquet file: "
                                                              f"{str(exc)[:200]}") from None
            if table.num_rows != t["rows"]:
                raise SourceError(str(d / t["file"]), "", "", f"{table.num_rows} rows; the manifest says {t['rows']}")
            tables[name] = table
        return Snapshot(d, manifest, tables)
    finally:
        os.close(dir_fd)


def _swapped(d: Path, dir_fd: int) -> bool:
    """Whether the folder at `d` is no longer the one opened (an export was swapped in meanwhile)."""
    try:
        now, opened = os.stat(d), os.fstat(dir_fd)
    except OSError:
        return True
    return (now.st_dev, now.st_ino) != (opened.st_dev, opened.st_ino)


def open_snapshot(export_dir: Path | str, *, content: bool = True) -> Snapshot:
    """The export at `export_dir` read as one snapshot (`Snapshot`); with `content` also checked row by row
    (`emmy_core.exchange.export_content.refuse_bad_content`: types, ranges, unique keys, references). Raises
    SourceError naming the file, the table, the row and the column. `export_dir` may be an fsspec URL of a
    published export (fetched into a temporary folder, each file's digest checked, and read from there)."""
    from emmy_core.fileio.urlfolder import fetch_folder, is_url, local_path

    if is_url(export_dir):
        url = str(export_dir).rstrip("/")
        with tempfile.TemporaryDirectory(prefix="emmy-export-") as tmp:
            if not fetch_folder(url, Path(tmp) / "export"):
                raise SourceError(url, "", "", "nothing is published there (no HEAD.json): not a dataset export "
                                               "(emmy db export DB URL writes one)")
            try:
                return open_snapshot(Path(tmp) / "export", content=content)
            except SourceError as exc:  # name the URL, not the temporary copy
                copy = str(Path(tmp) / "export")
                raise SourceError(exc.file.replace(copy, url), exc.record, exc.field,
                                  exc.problem.replace(copy, url)) from None
    d = local_path(export_dir)
    for _ in range(SNAPSHOT_TRIES):
        try:
            snap = _snapshot(d)
        except _Moved:
            continue
        if content:
            refuse_bad_content(snap)
        return snap
    raise SourceError(str(d), "", "", f"the export changed {SNAPSHOT_TRIES} times while it was read (is "
                                      "`emmy db export` writing it right now?): try again when it is done")


def verify_export(export_dir: Path | str) -> dict[str, Any]:
    """The manifest, after checking that every file's digest matches it (one snapshot)."""
    return open_snapshot(export_dir, content=False).manifest


def read_export_tables(export_dir: Path | str) -> dict[str, dict[str, list]]:
    """The store tables of a verified export, as columns (what `import` re-keys and writes)."""
    snap = open_snapshot(export_dir)
    return {name: snap.tables[name].to_pydict() for name in TABLE_COLUMNS}


def read_pools(export_dir: Path | str) -> Any:
    """The candidate pools of a verified export, as a pyarrow Table."""
    return open_snapshot(export_dir).tables[POOLS]


def read_export(export_dir: Path | str) -> dict[str, Any]:
    """Every table of a verified export (the store's tables and `pools`) as pyarrow Tables: what fit and eval
    read (one snapshot, its content checked)."""
    return open_snapshot(export_dir).tables
