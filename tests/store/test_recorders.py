"""The tune's recorders: a tune file is written over only when it is a tune file of the same card and
setting (its rows merged by the writer's rules); anything else is refused naming what it is, and a
folder (existing, or a path ending with a slash) gets a file named by the card."""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from emmy_core.bench.harness import Outcome, Unit
from emmy_core.bench.integrity import Stats
from emmy_core.cli.main import app
from emmy_core.exchange.importer import import_into
from emmy_core.exchange.recorders import StoreRecorder, TuneFileRecorder, db_recorder
from emmy_core.fileio.errors import FileError
from emmy_core.fileio.safefile import FileWriteError
from emmy_core.formats.freeze import freeze_db
from emmy_core.ir.builders import rmsnorm
from emmy_core.store import MemoryStore, open_store
from emmy_core.targets import Card, card_slug, resolve_card
from tests.store.test_files_freeze import populate

NORM = rmsnorm(32, dtype="f32", batch_hint=4)
UNIT = Unit(NORM, {"B": 4})


@pytest.fixture(scope="module")
def card() -> Card:
    return resolve_card("local")


def outcome(card: Card, knobs: dict, median: float | None, setting: str = "deploy") -> Outcome:
    if median is None:
        return Outcome(UNIT, knobs, card.name, setting, "tune", "failed", failure="build_error")
    return Outcome(UNIT, knobs, card.name, setting, "tune", "ok", stats=Stats(median, median, median, 5))


def rows_of(path: Path) -> dict[tuple[str, str], tuple[str, float]]:
    doc = json.loads(path.read_text())
    return {(r["setting"], json.dumps(r["knobs"], sort_keys=True)): (r["status"], r["median_us"])
            for k in doc["kernels"] for r in k["rows"]}


def test_tune_file_never_overwrites_a_freeze(tmp_path: Path, card: Card) -> None:
    """Issue 9, item 1: a tune pointed at a freeze replaced it with a tune file of another card."""
    db = tmp_path / "src.db"
    with open_store(db, "w") as s:
        populate(s)
    (freeze,) = freeze_db(db, tmp_path / "fz", "NVIDIA H200")
    before = freeze.read_bytes()
    with pytest.raises(FileWriteError, match=r"it is a freeze of card 'NVIDIA H200' \(\d+ kernels, \d+ rows\)"):
        TuneFileRecorder(freeze, card, "deploy")
    rec = TuneFileRecorder(freeze)  # without a card given up front, the first write refuses the same way
    with pytest.raises(FileWriteError, match="it is a freeze"):
        rec.record_kernel(NORM, card, [outcome(card, {"unroll": 1}, 5.0)])
    assert freeze.read_bytes() == before


@pytest.mark.parametrize(("content", "what"), [
    (b"not json at all", "not a file Emmy writes"),
    (b'{"format": "emmy-golden"}', "a golden record"),
    (b'{"a": 1}', "a JSON document that is not an Emmy file"),
    (b"\x00" * 8 + b"DUCK" + b"\x00" * 100, "a DuckDB database"),
])
def test_tune_file_refuses_any_other_file_naming_what_it_is(tmp_path: Path, card: Card, content: bytes,
                                                             what: str) -> None:
    path = tmp_path / "precious.json"
    path.write_bytes(content)
    with pytest.raises(FileWriteError, match=what):
        TuneFileRecorder(path, card, "deploy")
    assert path.read_bytes() == content


def test_tune_file_of_another_card_or_setting_is_refused(tmp_path: Path, card: Card) -> None:
    path = tmp_path / "t.json"
    TuneFileRecorder(path, card, "rank").record_kernel(NORM, card, [outcome(card, {"unroll": 1}, 5.0, "rank")])
    before = path.read_bytes()
    with pytest.raises(FileWriteError, match="tune file of setting 'rank', not 'deploy'"):
        TuneFileRecorder(path, card, "deploy")
    other = dataclasses.replace(card, name="Some Other CPU x4")
    with pytest.raises(FileWriteError, match="tune file of card"):
        TuneFileRecorder(path, other, "rank")
    assert path.read_bytes() == before


def test_tune_file_of_the_same_card_and_setting_is_merged_by_the_writers_rules(tmp_path: Path,
                                                                              card: Card) -> None:
    path = tmp_path / "t.json"
    first = TuneFileRecorder(path, card, "deploy")
    first.record_kernel(NORM, card, [outcome(card, {"unroll": 1}, 5.0), outcome(card, {"unroll": 2}, 9.0),
                              outcome(card, {"unroll": 4}, None)])
    second = TuneFileRecorder(path, card, "deploy")
    second.record_kernel(NORM, card, [outcome(card, {"unroll": 1}, 7.0),  # worse: the file keeps 5.0
                               outcome(card, {"unroll": 2}, 3.0),  # better: replaces 9.0
                               outcome(card, {"unroll": 4}, 4.0),  # ok replaces a failure
                               outcome(card, {"unroll": 8}, None)])  # new failure kept
    got = rows_of(path)
    assert got == {("deploy", '{"unroll": 1}'): ("ok", 5.0), ("deploy", '{"unroll": 2}'): ("ok", 3.0),
                   ("deploy", '{"unroll": 4}'): ("ok", 4.0), ("deploy", '{"unroll": 8}'): ("failed", 1e9)}
    third = TuneFileRecorder(path, card, "deploy")
    third.record_kernel(NORM, card, [outcome(card, {"unroll": 1}, None)])  # a failure never replaces a working row
    assert rows_of(path)[("deploy", '{"unroll": 1}')] == ("ok", 5.0)
    mem = MemoryStore()
    (o,) = import_into(mem, [path])
    assert o.ok and len(mem.measurements()) == 4


def test_a_tune_files_merge_waits_for_a_held_folder_only_as_long_as_it_says_and_loses_no_row(
        tmp_path: Path, card: Card) -> None:
    """A hung process holding the folder's lock (a refresh, another tune's merge) held a tune at its next
    kernel without a word, for ever; now it waits as long as it says, leaves the file as it was and keeps
    every row so far whole in a tune file of its own, which the refresh folds like any other."""
    from emmy_core.fileio.safefile import FolderBusyError, locked_folder
    from emmy_core.formats.tunefile import read_own_tune_file, tune_file_name
    from emmy_core.freezefolder.freeze_names import TUNE_NAME

    path = tmp_path / tune_file_name(card.name, "20261203T000000Z")
    said: list[str] = []
    rec = TuneFileRecorder(path, card, "deploy", wait_s=0.3, say=said.append)
    rec.record_kernel(NORM, card, [outcome(card, {"unroll": 1}, 5.0)])
    before = path.read_bytes()
    kept = [path.with_name(f"{card_slug(card.name)}.tune-20261203T000000Z-unmerged{n}.json") for n in ("", "-2")]
    with locked_folder(tmp_path):  # another process's lock: flock conflicts across open descriptions
        for i, n in enumerate((2, 4)):
            with pytest.raises(FolderBusyError, match=rf"held its lock .* for the 0.3 s this waits; nothing was "
                                                      rf"changed.*rows are whole in .*{kept[i].name}"):
                rec.record_kernel(NORM, card, [outcome(card, {"unroll": n}, 4.0)])
    assert said and said[0].startswith("waiting for another process's lock on")
    assert path.read_bytes() == before
    assert set(rows_of(kept[0])) == {("deploy", '{"unroll": 1}'), ("deploy", '{"unroll": 2}')}
    assert set(rows_of(kept[1])) == {("deploy", '{"unroll": 1}'), ("deploy", '{"unroll": 2}'),
                                     ("deploy", '{"unroll": 4}')}
    for k in kept:  # a tune file by name and content: the refresh folds it
        m = TUNE_NAME.match(k.name)
        assert m is not None and m.group(1) == card_slug(card.name)
        assert read_own_tune_file(k, card.name, "deploy") is not None
    rec.record_kernel(NORM, card, [outcome(card, {"unroll": 8}, 6.0)])  # once let go, the merge goes through
    assert len(rows_of(path)) == 4
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, kept[0].name, kept[1].name])


@pytest.mark.parametrize("make", ["existing", "slash"])
def test_tune_file_a_folder_gets_a_file_named_by_the_card(tmp_path: Path, card: Card, make: str) -> None:
    folder = tmp_path / "out"
    if make == "existing":
        folder.mkdir()
        target: str | Path = folder
    else:
        target = str(folder) + "/"
    rec = TuneFileRecorder(target, card, "deploy")
    rec.record_kernel(NORM, card, [outcome(card, {"unroll": 1}, 5.0)])
    assert rec.path is not None and rec.path.parent == folder
    assert rec.path.name.startswith(card_slug(card.name) + ".tune-")
    assert [p.name for p in folder.iterdir()] == [rec.path.name]


def test_tune_cli_refuses_a_freeze_as_tune_file_before_benching(tmp_path: Path) -> None:
    db = tmp_path / "src.db"
    with open_store(db, "w") as s:
        populate(s)
    (freeze,) = freeze_db(db, tmp_path / "fz", "NVIDIA H200")
    before = freeze.read_bytes()
    result = CliRunner().invoke(app, ["tune", "--model", "mlp", "--shape", "B=1,S=8", "--budget", "1",
                                      "--tune-file", str(freeze), "--no-progress"])
    assert result.exit_code == 2, result.output
    assert "refusing to write the tune's rows over" in result.output and "a freeze of card" in result.output
    assert "Traceback" not in result.output and freeze.read_bytes() == before


def test_recorders_name_where_they_record(tmp_path: Path, card: Card) -> None:
    assert db_recorder(tmp_path / "x.db", "tune").label == f"database {tmp_path / 'x.db'}"
    assert str(tmp_path) in TuneFileRecorder(tmp_path, card, "deploy").label
    assert StoreRecorder(MemoryStore()).label == "<memory>"


def test_a_recorders_refusal_is_a_file_error_not_a_raw_os_error(tmp_path: Path, card: Card) -> None:
    (tmp_path / "f").write_text("x")
    with pytest.raises(FileError, match="exists and is not a folder"):
        TuneFileRecorder(tmp_path / "f" / "t.json").record_kernel(NORM, card, [outcome(card, {"unroll": 1}, 5.0)])


def test_tune_file_under_a_plain_file_is_refused_before_anything_is_benched(tmp_path: Path, card: Card) -> None:
    """A target whose folder is a file was once found out only when the first kernel's rows were written."""
    notes = tmp_path / "notes.txt"
    notes.write_text("notes\n")
    for target in (str(notes) + "/", notes / "t.json"):
        with pytest.raises(FileWriteError, match=f"{notes} exists and is not a folder: nothing was written"):
            TuneFileRecorder(target, card, "deploy")
    assert notes.read_text() == "notes\n"


def test_tune_file_an_empty_path_is_refused_not_taken_as_the_current_folder(tmp_path: Path, card: Card,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    for args in ((card, "deploy"), ()):
        with pytest.raises(FileWriteError, match="the tune file's path is empty"):
            TuneFileRecorder("", *args)
    assert list(tmp_path.iterdir()) == []


_READ_ONLY_PROBE = """
import sys
from emmy_core.fileio.errors import FileError
from emmy_core.exchange.recorders import TuneFileRecorder
from emmy_core.targets import resolve_card
try:
    TuneFileRecorder(sys.argv[1], resolve_card("local"), "deploy")
except FileError as exc:
    print(exc)
"""


def test_tune_file_in_a_read_only_folder_is_refused_before_anything_is_benched(tmp_path: Path) -> None:
    """Run without the capabilities that let root write anywhere (as the review did, with setpriv)."""
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    drop = "-dac_override,-dac_read_search,-fowner"
    prefix: list[str] = []
    if os.geteuid() == 0:
        if shutil.which("setpriv") is None:
            pytest.skip("running as root without setpriv to drop the capabilities that ignore folder modes")
        prefix = ["setpriv", f"--bounding-set={drop}", f"--inh-caps={drop}"]
    try:
        done = subprocess.run([*prefix, sys.executable, "-c", _READ_ONLY_PROBE, str(folder / "new.json")],
                              capture_output=True, text=True, timeout=120, check=False)
    finally:
        folder.chmod(0o755)
    if prefix and done.returncode != 0 and done.stderr.startswith("setpriv"):
        pytest.skip(f"setpriv cannot drop capabilities here: {done.stderr.strip()[:200]}")
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    assert f"cannot write a tune file in the folder {folder}: permission denied" in done.stdout, done.stdout
    assert list(folder.iterdir()) == []


@pytest.mark.parametrize("target", ["notes.txt/", ""])
def test_tune_cli_refuses_an_unwritable_or_empty_tune_file_before_measuring(tmp_path: Path, target: str,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("notes\n")
    result = CliRunner().invoke(app, ["tune", "--model", "mlp", "--shape", "B=1,S=1", "--budget", "1",
                                      "--strategy", "first", "--tune-file", target, "--no-progress"])
    assert result.exit_code == 2, result.output
    assert "emmy: error:" in result.output and "Traceback" not in result.output, result.output
    assert "tuning mlp" not in result.output and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_a_tune_db_that_cannot_take_rows_is_refused_before_anything_is_measured(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Once found out only when the first kernel's rows were recorded, after it had been measured."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("notes\n")
    for db, says in (("notes.txt", "not a DuckDB database file"), (".", "it is a folder"),
                     ("notes.txt/t.db", "is not a writable folder")):
        result = CliRunner().invoke(app, ["tune", "--model", "mlp", "--shape", "B=1,S=1", "--budget", "1",
                                          "--strategy", "first", "--db", db, "--no-progress"])
        assert result.exit_code == 2 and says in result.output and "nothing was measured" in result.output, result.output
        assert "tuning mlp" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"] and (tmp_path / "notes.txt").read_text() == "notes\n"
