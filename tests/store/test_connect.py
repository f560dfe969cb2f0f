"""Opening a store file never reaches the network, and a file that is not DuckDB is refused by name."""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.store import StoreError
from emmy_core.store.connect import connect


def _sqlite_file(path: Path) -> bytes:
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE runs (run_id TEXT, name TEXT)")
    con.execute("INSERT INTO runs VALUES ('r1', 'an mlflow run')")
    con.commit()
    con.close()
    return path.read_bytes()


@pytest.mark.parametrize("command", [["db", "stats"], ["db", "check"], ["db", "promote"]])
def test_a_sqlite_file_given_as_db_is_refused_at_once_as_not_a_duckdb_file_and_left_unchanged(
        tmp_path: Path, command: list[str]) -> None:
    db = tmp_path / "mlflow.db"
    before = _sqlite_file(db)
    start = time.monotonic()
    result = CliRunner().invoke(app, [*command, "--db", str(db)])
    assert time.monotonic() - start < 2.0  # no wait on an extension download
    assert result.exit_code == 2, result.output
    assert f"cannot open {db}: not a DuckDB database file" in result.output
    assert "extension" not in result.output.lower() and "Traceback" not in result.output
    assert db.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mlflow.db"]  # no .wal, nothing moved aside


def test_connect_refuses_a_sqlite_file_without_handing_it_to_duckdb(tmp_path: Path) -> None:
    db = tmp_path / "mlflow.db"
    before = _sqlite_file(db)
    for read_only in (True, False):
        with pytest.raises(StoreError, match="not a DuckDB database file"):
            connect(db, read_only=read_only, lock_timeout=0)
    assert db.read_bytes() == before


def test_store_connections_never_install_or_load_duckdb_extensions_automatically(tmp_path: Path) -> None:
    con = connect(tmp_path / "new.db", read_only=False, lock_timeout=0)
    try:
        got = con.execute("SELECT current_setting('autoinstall_known_extensions'), "
                          "current_setting('autoload_known_extensions')").fetchone()
    finally:
        con.close()
    assert got == (False, False)


def test_a_plain_duckdb_connection_to_an_open_store_is_not_refused_as_another_configuration(tmp_path: Path) -> None:
    import duckdb

    con = connect(tmp_path / "s.db", read_only=False, lock_timeout=0)
    try:
        other = duckdb.connect(str(tmp_path / "s.db"))  # an analyst's, in the same process
        other.close()
    finally:
        con.close()
