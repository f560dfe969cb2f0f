"""The freeze folder: its digest, the tune files waiting in the inbox, and folding them in without loss."""

from __future__ import annotations

from pathlib import Path

import pytest

from emmy_core.fileio.sourcefile import SourceError
from emmy_core.formats.tunefile import tune_file_name
from emmy_core.freezefolder.fold import fold_tune_files, folder_digest, pending_tune_files
from emmy_core.store import open_store
from tests.store.test_files_freeze import H100, H200
from tests.store.test_files_refresh import freezes, tune  # noqa: F401  (fixture)


def test_the_digest_names_the_freeze_and_tune_files_and_ignores_the_rest(freezes: Path) -> None:  # noqa: F811
    before = folder_digest(freezes)
    (freezes / "README.md").write_text("notes\n")
    assert folder_digest(freezes) == before
    tune(freezes / tune_file_name(H200.name, "20261130T120000Z"), 9.0)
    assert folder_digest(freezes) != before


def test_pending_lists_tune_files_beside_the_freeze_and_in_the_inbox(freezes: Path, tmp_path: Path) -> None:  # noqa: F811
    inbox = tmp_path / "inbox"
    assert pending_tune_files(freezes, inbox) == []
    inbox.mkdir()
    a = tune(inbox / tune_file_name(H200.name, "20261130T120000Z"), 9.0)
    b = tune(freezes / tune_file_name(H200.name, "20261130T130000Z"), 8.0)
    (inbox / "other.json").write_text("{}")
    assert [p.name for p in pending_tune_files(freezes, inbox)] == sorted([a.name, b.name])


def test_a_fold_takes_the_inbox_into_the_freeze_and_empties_both(freezes: Path, tmp_path: Path) -> None:  # noqa: F811
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    name = tune_file_name(H200.name, "20261130T120000Z")
    tune(inbox / name, 0.5)
    report = fold_tune_files(freezes, inbox)
    assert [p.name for p in report.moved] == [name]
    assert [p.name for p in report.refresh.folded] == [name]
    assert pending_tune_files(freezes, inbox) == []
    db = tmp_path / "check.db"
    from emmy_core.exchange.importer import import_db

    assert all(o.ok for o in import_db(db, sorted(freezes.glob("*.json")), fresh=True))
    with open_store(db, "r") as s:
        assert 0.5 in [m.median_us for m in s.measurements(card=H200.name)]


def test_folding_nothing_new_changes_no_byte(freezes: Path, tmp_path: Path) -> None:  # noqa: F811
    before = {p.name: p.read_bytes() for p in freezes.iterdir()}
    report = fold_tune_files(freezes, tmp_path / "no-inbox")
    assert report.moved == [] and report.refresh.folded == []
    assert {p.name: p.read_bytes() for p in freezes.iterdir()} == before


def test_a_bad_inbox_file_stops_the_fold_with_nothing_moved(freezes: Path, tmp_path: Path) -> None:  # noqa: F811
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    good = tune(inbox / tune_file_name(H200.name, "20261130T120000Z"), 9.0)
    wrong_card = tune(inbox / tune_file_name(H100.name, "20261130T120001Z"), 9.0)  # holds H200 rows
    before = {p.name: p.read_bytes() for p in freezes.iterdir()}
    with pytest.raises(SourceError, match="belongs in nvidia-h200"):
        fold_tune_files(freezes, inbox)
    assert good.exists() and wrong_card.exists()
    assert {p.name: p.read_bytes() for p in freezes.iterdir()} == before


def test_a_name_taken_by_other_content_is_never_overwritten(freezes: Path, tmp_path: Path) -> None:  # noqa: F811
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    name = tune_file_name(H200.name, "20261130T120000Z")
    tune(inbox / name, 9.0)
    tune(freezes / name, 7.0)
    kept = (freezes / name).read_bytes()
    with pytest.raises(SourceError, match="exists with other content"):
        fold_tune_files(freezes, inbox)
    assert (freezes / name).read_bytes() == kept and (inbox / name).exists()


def test_a_file_already_copied_before_a_crash_is_folded_once(freezes: Path, tmp_path: Path) -> None:  # noqa: F811
    inbox = tmp_path / "inbox"
    inbox.mkdir()
    name = tune_file_name(H200.name, "20261130T120000Z")
    tune(inbox / name, 9.0)
    (freezes / name).write_bytes((inbox / name).read_bytes())  # the copy landed, the inbox file was not yet removed
    report = fold_tune_files(freezes, inbox)
    assert [p.name for p in report.refresh.folded] == [name]
    assert pending_tune_files(freezes, inbox) == []
