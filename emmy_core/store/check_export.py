"""`emmy db check` on a dataset export: do the exported tables agree with themselves?

The export's manifest is verified first (versions and every file's sha256, `verify_export`);
then its tables are copied as they are, with no writer in between, into a scratch DuckDB
file beside a `meta` table stating the manifest's versions, and `check_db` counts what
fails there. The tables are checked, not re-derived: a bad row in a Parquet file is counted
under its kind, exactly as it would be in the store it came from.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from emmy_core.store.check import CheckReport, check_db
from emmy_core.store.connect import connect, translated
from emmy_core.store.export import verify_export
from emmy_core.store.schema import TABLE_NAMES
from emmy_core.store.tablesource import TABLE_COLUMNS
from emmy_core.store.versions import VERSION_KEYS


def check_export(export_dir: Path | str) -> CheckReport:
    """Checks an export folder's tables; raises SourceError when its manifest or files do not verify."""
    d = Path(export_dir)
    manifest = verify_export(d)
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
                    path = d / manifest["tables"][table]["file"]
                    con.execute(f"CREATE TABLE {table} AS SELECT * FROM read_parquet(?)", [str(path)])
        finally:
            con.close()
        report = check_db(db)
    report.path = str(d)
    return report
