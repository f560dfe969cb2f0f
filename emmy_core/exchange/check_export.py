"""`emmy db check` on a dataset export: do the exported tables agree with themselves?

The export is read as one snapshot (`open_snapshot`: versions, and every file's sha256 on
the bytes read); its content is checked by the rules every reader applies (`content_problems`,
in `export_content.py`: types, ranges, unique keys, references, each refusal naming file, table, row and
column); then its tables are copied as they are into a scratch DuckDB file beside a `meta`
table stating the manifest's versions, and `check_db` counts what fails there. The tables are checked, not re-derived: a bad row in a Parquet file is counted
under its kind, exactly as it would be in the store it came from.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from emmy_core.exchange.export import open_snapshot
from emmy_core.exchange.export_content import content_problems
from emmy_core.store.check import CheckReport, check_db
from emmy_core.store.connect import connect, translated
from emmy_core.store.schema import TABLE_NAMES
from emmy_core.store.tablesource import TABLE_COLUMNS
from emmy_core.store.versions import VERSION_KEYS


def check_export(export_dir: Path | str) -> CheckReport:
    """Checks an export folder's tables; raises SourceError when its manifest or files do not verify.

    The content rules a reader applies (`content_problems`) are counted first, under `export_content`,
    each with its file, table, row and column; an export that breaks them is not loaded further (its
    columns may not even have the types the store's checks query)."""
    import time

    from emmy_core.fileio.urlfolder import location
    from emmy_core.store.check import MAX_EXAMPLES

    started = time.perf_counter()
    d = location(str(export_dir))  # a URL stays text (a Path would fold its `//`)
    snap = open_snapshot(d, content=False)
    problems = content_problems(snap, limit=1000)
    if problems:
        report = CheckReport(str(d))
        report.counts["export_content"] = len(problems)
        report.examples["export_content"] = [str(p) for p in problems[:MAX_EXAMPLES]]
        report.seconds = time.perf_counter() - started
        return report
    manifest = snap.manifest
    with tempfile.TemporaryDirectory(prefix="emmy-check-export-") as tmp:
        db = Path(tmp) / "export.db"
        con = connect(db, read_only=False)
        try:
            with translated(db, "loading the export to check it"):
                con.execute("CREATE TABLE meta (key TEXT, value TEXT)")
                con.executemany("INSERT INTO meta VALUES (?, ?)",
                                [(k, str(manifest[k])) for k in VERSION_KEYS])
                for table in TABLE_COLUMNS:
                    assert table in TABLE_NAMES  # names come from the schema's constants, never from the file
                    con.register("export_table", snap.tables[table])  # the snapshot's bytes, not the path again
                    con.execute(f"CREATE TABLE {table} AS SELECT * FROM export_table")
                    con.unregister("export_table")
        finally:
            con.close()
        report = check_db(db)
    report.path = str(d)
    report.counts.setdefault("export_content", 0)
    report.examples.setdefault("export_content", [])
    return report
