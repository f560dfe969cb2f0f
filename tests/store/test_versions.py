"""Nothing migrates: a file of another schema or identity version is refused by a reader; a writer moves it
aside under a name that says its versions and starts a new file (nothing destroyed)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from emmy_core.ir import identity
from emmy_core.store import (
    SCHEMA_VERSION,
    MeasurementRow,
    StoreError,
    VersionMismatchError,
    default_db_path,
    open_store,
)
from tests.store.conftest import ADD, ADD_ID, CARDS, H200, KNOBS_A


def _filled(path: Path) -> Path:
    with open_store(path, "w") as s:
        s.record([MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H200, "deploy", 4.0)], kernels=[ADD], cards=CARDS)
    return path


def _set_meta(path: Path, key: str, value: str) -> None:
    con = duckdb.connect(str(path))
    con.execute("UPDATE meta SET value = ? WHERE key = ?", [value, key])
    con.close()


def test_reader_refuses_a_file_of_an_older_schema_version(tmp_path: Path) -> None:
    path = _filled(tmp_path / "old.db")
    _set_meta(path, "schema_version", "0")
    with pytest.raises(VersionMismatchError) as err:
        open_store(path, "r")
    assert "schema version 0" in str(err.value) and f"schema version {SCHEMA_VERSION}" in str(err.value)


def _rows_in(path: Path) -> tuple[int, dict[str, str]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return (con.execute("SELECT count(*) FROM measurements").fetchall()[0][0],
                dict(con.execute("SELECT key, value FROM meta").fetchall()))
    finally:
        con.close()


def test_writer_moves_a_file_of_another_version_aside_and_starts_empty(tmp_path: Path) -> None:
    """Issue 9, item 3: the writer wiped a file of another version with only a Python warning as notice."""
    path = _filled(tmp_path / "old.db")
    _set_meta(path, "schema_version", "0")
    before = path.read_bytes()
    notes: list[str] = []
    with open_store(path, "w", notify=notes.append) as s:
        counts = s.counts()
        versions = s.versions()
        aside = s.moved_aside  # type: ignore[attr-defined]
    assert aside == tmp_path / "old.schema0-identity1.db"
    assert aside.read_bytes() == before, "the old file is moved, not re-written"
    n, meta = _rows_in(aside)
    assert n == 1 and meta["schema_version"] == "0"
    (note,) = notes
    assert "schema version 0" in note and f"schema version {SCHEMA_VERSION}" in note
    assert str(aside) in note and "use the Emmy that wrote it" in note
    assert counts["measurements"] == counts["kernels"] == counts["cards"] == 0
    assert versions["schema_version"] == str(SCHEMA_VERSION)
    with open_store(path, "r") as r:  # and it is readable again
        assert r.counts()["schedules"] == 0
    _set_meta(path, "schema_version", "0")  # a second stale file never takes the first one's name
    with open_store(path, "w", notify=notes.append) as s:
        assert s.moved_aside == tmp_path / "old.schema0-identity1.2.db"  # type: ignore[attr-defined]
    assert _rows_in(aside)[0] == 1


def test_writer_says_where_the_old_file_went_as_a_plain_line_on_stderr(tmp_path: Path) -> None:
    path = _filled(tmp_path / "old.db")
    _set_meta(path, "schema_version", "0")
    script = ("import sys, warnings; warnings.simplefilter('error'); from emmy_core.store import open_store; "
              "open_store(sys.argv[1], 'w').close()")
    done = subprocess.run([sys.executable, "-c", script, str(path)], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], check=False)
    assert done.returncode == 0, done.stderr
    assert done.stderr.startswith("emmy: note: ") and "Warning" not in done.stderr
    assert "old.schema0-identity1.db" in done.stderr


def test_a_file_of_another_identity_version_is_refused_then_moved_aside(tmp_path: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    path = _filled(tmp_path / "id.db")
    old = identity.IDENTITY_VERSION
    monkeypatch.setattr(identity, "IDENTITY_VERSION", old + 1)  # read at call time, not at import
    with pytest.raises(VersionMismatchError) as err:
        open_store(path, "r")
    assert f"identity version {old}" in str(err.value) and f"identity version {old + 1}" in str(err.value)
    notes: list[str] = []
    with open_store(path, "w", notify=notes.append) as s:
        assert s.counts()["measurements"] == 0
        assert s.versions()["identity_version"] == str(old + 1)
    assert re.search(f"identity version {old}.*identity version {old + 1}", notes[0])
    assert _rows_in(tmp_path / f"id.schema{SCHEMA_VERSION}-identity{old}.db")[0] == 1


def test_a_file_that_is_not_an_emmy_store_is_refused_and_not_wiped(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE results (x INTEGER)")
    con.execute("INSERT INTO results VALUES (1)")
    con.close()
    for mode in ("r", "w"):
        with pytest.raises(StoreError, match="not an Emmy store"):
            open_store(path, mode)
    con = duckdb.connect(str(path))
    assert con.execute("SELECT count(*) FROM results").fetchall() == [(1,)]
    con.close()


def test_a_file_whose_meta_table_has_no_emmy_stamp_is_refused_not_moved_aside(tmp_path: Path) -> None:
    path = tmp_path / "usermeta.db"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE meta (key VARCHAR, value VARCHAR)")
    con.execute("CREATE TABLE important (x INTEGER)")
    con.execute("INSERT INTO important VALUES (7)")
    con.close()
    before = path.read_bytes()
    for mode in ("r", "w"):
        with pytest.raises(StoreError, match="without Emmy's version stamp: not an Emmy store"):
            open_store(path, mode)
    assert path.read_bytes() == before and sorted(p.name for p in tmp_path.iterdir()) == ["usermeta.db"]


def test_a_file_that_is_not_duckdb_is_refused_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"this is not a database file" * 200)
    with pytest.raises(StoreError, match=r"junk\.db"):
        open_store(path, "r")


def test_a_reader_of_a_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(StoreError, match="no store at"):
        open_store(tmp_path / "absent.db", "r")
    assert not (tmp_path / "absent.db").exists()


def test_the_default_database_is_read_from_the_environment_at_call_time(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("EMMY_TUNING_DB", raising=False)
    assert default_db_path() == Path.home() / ".cache" / "emmy" / "autotune.db"
    monkeypatch.setenv("EMMY_TUNING_DB", str(tmp_path / "deep" / "tune.db"))
    with open_store(None, "w") as s:
        s.record(kernels=[ADD])
    assert (tmp_path / "deep" / "tune.db").is_file()
