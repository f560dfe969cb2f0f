"""Dataset export: Parquet per table, candidate pools, a manifest with versions, counts and a digest;
read back by import it gives the same store; a reader refuses other versions naming both."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from emmy_core.ir import identity, kernel_id
from emmy_core.knobs import candidates
from emmy_core.knobs.vocab import schedule_id
from emmy_core.store import StoreError, open_store
from emmy_core.store.export import export_db, read_export, read_pools, verify_export
from emmy_core.store.importer import import_db
from emmy_core.store.sourcefile import SourceError
from emmy_core.targets import load_table
from tests.store.test_files_freeze import H200, NORM, populate, stats_of


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "src.db"
    with open_store(path, "w") as s:
        populate(s)
    return path


@pytest.fixture
def exported(db: Path, tmp_path: Path) -> Path:
    out = tmp_path / "it's \"odd\" ; DROP TABLE x"
    export_db(db, out)
    return out


def test_an_export_read_back_by_import_gives_the_same_stats(db: Path, exported: Path, tmp_path: Path) -> None:
    (outcome,) = import_db(tmp_path / "back.db", [exported], fresh=True)
    assert outcome.ok and outcome.kind == "export", outcome.message
    assert stats_of(tmp_path / "back.db") == stats_of(db)


def test_the_manifest_names_versions_counts_and_a_digest(db: Path, exported: Path, tmp_path: Path) -> None:
    manifest = json.loads((exported / "manifest.json").read_text())
    assert manifest["format"] == "emmy-export" and manifest["identity_version"] == identity.IDENTITY_VERSION
    with open_store(db, "r") as s:
        counts = s.counts()
    for table in ("cards", "kernels", "routing", "schedules", "measurements", "goldens"):
        assert manifest["tables"][table]["rows"] == counts[table]
        assert pq.read_table(exported / f"{table}.parquet").num_rows == counts[table]
    tables = read_export(exported)
    assert {n: t.num_rows for n, t in tables.items() if n != "pools"} == {n: counts[n] for n in tables if n != "pools"}
    again = export_db(db, tmp_path / "again")
    assert again["digest"] == manifest["digest"], "the same store exports to the same content"


def test_nothing_migrates_a_reader_refuses_an_export_of_other_versions_naming_both(exported: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    path = exported / "manifest.json"
    manifest = json.loads(path.read_text())
    path.write_text(json.dumps({**manifest, "schema_version": 999}))
    with pytest.raises(SourceError, match=r"schema version 999.*this Emmy reads.*schema version"):
        verify_export(exported)
    path.write_text(json.dumps(manifest))
    verify_export(exported)
    monkeypatch.setattr(identity, "IDENTITY_VERSION", identity.IDENTITY_VERSION + 1)
    with pytest.raises(SourceError, match=r"identity version 1\b.*identity version 2"):
        verify_export(exported)


def test_a_changed_file_is_refused(exported: Path, db: Path, tmp_path: Path) -> None:
    data = (exported / "measurements.parquet").read_bytes()
    (exported / "measurements.parquet").write_bytes(data[:-20] + bytes(20))
    with pytest.raises(SourceError, match="does not match the manifest"):
        verify_export(exported)
    (outcome,) = import_db(tmp_path / "x.db", [exported])
    assert not outcome.ok and "measurements.parquet" in outcome.message


def test_pools_hold_measured_schedules_and_the_enumerated_candidates(exported: Path) -> None:
    pools = read_pools(exported).to_pylist()
    nid = kernel_id(NORM)
    pool = [p for p in pools if (p["kernel_id"], p["sizes"], p["card"], p["setting"]) == (nid, "B=8", H200.name,
                                                                                           "deploy")]
    options = candidates(NORM, load_table()[H200.name])
    assert len(options) > 1
    ranked = sorted((p for p in pool if p["candidate_rank"] is not None), key=lambda p: p["candidate_rank"])
    assert [p["schedule_id"] for p in ranked] == [schedule_id(o) for o in options]
    measured = [p for p in pool if p["measured"]]
    assert [p["knobs"] for p in measured] == ['{"block":64,"num_warps":4}']
    assert all(p["status"] is None for p in pool if not p["measured"])


def test_export_refuses_to_replace_a_folder_that_is_not_an_export(db: Path, tmp_path: Path) -> None:
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("keep me")
    with pytest.raises(StoreError, match="not an export"):
        export_db(db, tmp_path / "mine")
    assert (tmp_path / "mine" / "notes.txt").read_text() == "keep me"
