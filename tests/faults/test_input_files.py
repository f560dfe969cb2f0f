"""A FIFO, a device, a folder or an oversized file named as an input is refused unread and at once: every
reader of an input path opens it through one helper that accepts regular files only, size capped."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from emmy_core.fileio.inputfile import InputFileError, read_input

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 120  # a reader that blocks on a FIFO would run into this instead of returning at once


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    path = tmp_path / "pipe.json"
    os.mkfifo(path)
    yield path


def emmy(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "emmy_core.cli.main", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=DEADLINE_S, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def test_the_input_helper_refuses_a_fifo_a_device_and_a_folder_unread(fifo: Path, tmp_path: Path) -> None:
    for path, kind in ((fifo, "FIFO"), (Path("/dev/zero"), "character device"), (tmp_path, "folder")):
        with pytest.raises(InputFileError, match=kind):
            read_input(path, 1024, "test input")


def test_the_input_helper_refuses_a_file_over_its_cap_before_reading(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    big.write_bytes(b" " * 2048)
    with pytest.raises(InputFileError, match="over the cap of 1024"):
        read_input(big, 1024)
    assert read_input(big, 4096) == b" " * 2048


@pytest.mark.parametrize(("grows_by", "whole"), [(100, True), (5000, False)])
def test_a_file_that_grows_after_it_is_checked_is_read_whole_under_the_cap_and_refused_past_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grows_by: int, whole: bool) -> None:
    """The read is sized by the file's size when opened; bytes appended after that are still read (never
    a silently cut file), up to the cap."""
    from emmy_core.fileio import inputfile

    path = tmp_path / "growing.json"
    path.write_bytes(b"a" * 1000)
    opened = inputfile.open_input

    def open_then_grow(p: object, cap: int, what: str = "file"):  # type: ignore[no-untyped-def]
        fh = opened(p, cap, what)  # type: ignore[arg-type]
        with open(path, "ab") as w:
            w.write(b"b" * grows_by)
        return fh

    monkeypatch.setattr(inputfile, "open_input", open_then_grow)
    if whole:
        assert read_input(path, 4096) == b"a" * 1000 + b"b" * grows_by
    else:
        with pytest.raises(InputFileError, match="grew past the cap of 4096"):
            read_input(path, 4096)


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_fifo_or_dev_zero_as_prior_artifact_is_refused_at_once(fifo: Path, special: str) -> None:
    path = str(fifo) if special == "fifo" else special
    done = emmy("prior", "info", "--file", path)
    assert done.returncode != 0 and "not a regular file" in done.stderr and "Traceback" not in done.stderr


@pytest.mark.parametrize("special", ["fifo", "/dev/zero"])
def test_a_fifo_or_dev_zero_as_cards_file_is_refused_at_once(fifo: Path, special: str) -> None:
    from emmy_core.targets.table import CardTableError, load_table

    with pytest.raises(CardTableError, match="not a regular file"):
        load_table(str(fifo) if special == "fifo" else special)


def test_a_fifo_as_extern_order_is_refused_at_once(fifo: Path) -> None:
    from emmy_core.eval.extern_order import file_order
    from emmy_core.fileio.sourcefile import SourceError

    with pytest.raises(SourceError, match="not a regular file"):
        file_order([fifo])


def test_a_fifo_as_a_loop_program_file_is_refused_at_once(fifo: Path) -> None:
    done = emmy("ir", "id", str(fifo))
    assert done.returncode != 0 and "not a regular file" in done.stderr and "Traceback" not in done.stderr


def test_a_fifo_as_a_source_to_import_is_refused_at_once(fifo: Path, tmp_path: Path) -> None:
    done = emmy("db", "import", "--db", str(tmp_path / "x.db"), str(fifo))
    assert done.returncode != 0 and "not a regular file" in done.stderr + done.stdout


def test_a_fifo_as_an_evaluation_report_is_refused_at_once(fifo: Path, tmp_path: Path) -> None:
    done = emmy("eval", "compare", str(fifo), str(fifo))
    assert done.returncode != 0 and "not a regular file" in done.stderr and "Traceback" not in done.stderr
