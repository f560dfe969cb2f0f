"""`emmy db check` on a dataset export: the tables are checked, not the code."""

from __future__ import annotations

from pathlib import Path

import pytest

from emmy_core.exchange.check_export import check_export
from emmy_core.exchange.export import export_db
from emmy_core.fileio.sourcefile import SourceError
from emmy_core.store import open_store
from tests.store.test_files_freeze import populate


@pytest.fixture
def export(tmp_path: Path) -> Path:
    db = tmp_path / "src.db"
    with open_store(db, "w") as s:
        populate(s)
    out = tmp_path / "dataset"
    export_db(db, out)
    return out


def test_a_clean_export_checks_clean(export: Path) -> None:
    report = check_export(export)
    assert report.ok, report.to_json()
    assert report.path == str(export)


def test_the_tables_are_checked_not_the_code(export: Path, tmp_path: Path) -> None:
    """A row the writer would never write, planted in a Parquet file (and the manifest re-signed), is counted."""
    import duckdb

    from emmy_core.exchange.export import _sha256, content_digest, read_manifest

    path = export / "schedules.parquet"
    con = duckdb.connect()
    rel = con.sql("SELECT schedule_id, CASE WHEN row_number() OVER () = 1 THEN '{\"block\":1}' ELSE knobs END AS knobs "
                  "FROM read_parquet(?)", params=[str(path)])
    planted = tmp_path / "planted.parquet"
    rel.to_parquet(str(planted))
    con.close()
    planted.replace(path)
    manifest = read_manifest(export)
    manifest["tables"]["schedules"]["sha256"] = _sha256(path)
    manifest["digest"] = content_digest(manifest["tables"])
    import json

    (export / "manifest.json").write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
    report = check_export(export)
    assert not report.ok
    assert report.counts["schedule_digest"] == 1


def test_a_file_that_does_not_match_its_manifest_is_refused(export: Path) -> None:
    with (export / "measurements.parquet").open("ab") as fh:
        fh.write(b"x")
    with pytest.raises(SourceError, match="does not match the manifest"):
        check_export(export)
