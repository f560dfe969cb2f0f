"""Outputs named through a link: the file or database the link points to is replaced and the link kept,
with nothing left beside either (a replaced link would leave its target stale and the user's layout broken)."""

from __future__ import annotations

from pathlib import Path

from emmy_core.exchange.importer import import_db
from emmy_core.fileio.safefile import atomic_write_text, write_all
from emmy_core.store import open_store
from tests.store.test_files_import import kt_cache, write


def test_a_file_written_through_a_link_updates_the_linked_file_and_keeps_the_link(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    target = tmp_path / "real" / "report.json"
    target.write_text("old")
    link = tmp_path / "latest.json"
    link.symlink_to(target)
    assert write_all([(link, lambda: "new")]) == [link]
    assert link.is_symlink() and target.read_text() == "new"
    atomic_write_text(link, "newer")
    assert link.is_symlink() and target.read_text() == "newer"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["latest.json", "real"]
    assert [p.name for p in (tmp_path / "real").iterdir()] == ["report.json"]


def test_a_link_to_nothing_is_replaced_by_the_file(tmp_path: Path) -> None:
    link = tmp_path / "out.json"
    link.symlink_to(tmp_path / "missing" / "x.json")
    write_all([(link, lambda: "text")])
    assert not link.is_symlink() and link.read_text() == "text" and not (tmp_path / "missing").exists()


def test_a_fresh_import_through_a_link_replaces_the_database_it_points_to(tmp_path: Path) -> None:
    (tmp_path / "data").mkdir()
    db = tmp_path / "data" / "tune.db"
    with open_store(db, "w"):
        pass
    link = tmp_path / "current.db"
    link.symlink_to(db)
    (outcome,) = import_db(link, [write(tmp_path, "good.json", kt_cache())], fresh=True)
    assert outcome.ok, outcome.message
    assert link.is_symlink()
    with open_store(db, "r") as s:
        assert s.counts()["measurements"] == 3
    assert not [p for p in (tmp_path / "data").iterdir() if p.name != "tune.db"]
