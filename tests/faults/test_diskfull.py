"""A full disk (a file-size limit, `ulimit -f`, in a subprocess) during freeze, export, refresh, tune-file
writes and import: the old files stand byte for byte, nothing is left half-written beside them, and the
message names the file and why, on one line without a trace."""

from __future__ import annotations

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from emmy_core.exchange.export import export_db
from emmy_core.formats.freeze import freeze_db
from emmy_core.formats.tunefile import tune_file_name, write_tune_file
from emmy_core.ir import kernel_id
from emmy_core.store import MeasurementRow, open_store
from emmy_core.store.check import check_db
from tests.store.test_files_freeze import H200, NORM, populate

ROOT = Path(__file__).resolve().parents[2]
LIMIT = 24 * 1024  # bytes any one file may grow to in the limited process


def big_rows(n: int) -> list[MeasurementRow]:
    return [MeasurementRow.ok(kernel_id(NORM), f"B={i + 1}", {"block": 64, "num_warps": 4}, H200.name, "deploy",
                              1.0 + i, samples=3) for i in range(n)]


@pytest.fixture
def small_db(tmp_path: Path) -> Path:
    path = tmp_path / "small.db"
    with open_store(path, "w") as s:
        populate(s)
    return path


@pytest.fixture
def big_db(tmp_path: Path) -> Path:
    path = tmp_path / "big.db"
    with open_store(path, "w") as s:
        populate(s)
        s.record(big_rows(2000))
    return path


def limited(*args: str, limit: int = LIMIT) -> subprocess.CompletedProcess[str]:
    """Runs `python ARGS...` in the project with RLIMIT_FSIZE set to `limit` bytes (what `ulimit -f` sets)."""
    def cap() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return subprocess.run([sys.executable, *args], cwd=ROOT, capture_output=True, text=True, preexec_fn=cap,
                          timeout=300, check=False)


def emmy(*args: str, limit: int = LIMIT) -> subprocess.CompletedProcess[str]:
    return limited("-m", "emmy_core.cli.main", *args, limit=limit)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def one_clear_line(done: subprocess.CompletedProcess[str], *must: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr and done.stderr.startswith("emmy: error: "), done.stderr
    for text in must:
        assert text in done.stderr, done.stderr


def test_disk_full_during_freeze_replaces_no_card_file(small_db: Path, big_db: Path, tmp_path: Path) -> None:
    """Issue 9, item 4: a raw traceback on any file-system error; across cards, none replaced unless all are."""
    out = tmp_path / "freezes"
    freeze_db(small_db, out)
    before = snapshot(out)
    done = emmy("db", "freeze", "--db", str(big_db), "--out", str(out))
    one_clear_line(done, str(out / "nvidia-h200.json"), "file too large", "no file was replaced")
    assert snapshot(out) == before
    assert sorted(p.name for p in out.iterdir()) == sorted(before), "no temporary file is left behind"


def test_freeze_to_an_out_that_is_a_file_or_cannot_be_made_says_so(small_db: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "afile"
    blocker.write_text("precious")
    done = emmy("db", "freeze", "--db", str(small_db), "--out", str(blocker), limit=resource.RLIM_INFINITY)
    one_clear_line(done, str(blocker), "exists and is not a folder")
    done = emmy("db", "freeze", "--db", str(small_db), "--out", str(blocker / "sub"), limit=resource.RLIM_INFINITY)
    one_clear_line(done, "cannot create the folder", str(blocker / "sub"))
    assert blocker.read_text() == "precious"


def test_disk_full_during_export_leaves_the_old_export(small_db: Path, big_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "dataset"
    export_db(small_db, out)
    before = snapshot(out)
    done = emmy("db", "export", "--db", str(big_db), str(out), limit=8 * 1024)
    one_clear_line(done, "cannot write the export", f"the old export at {out} stands as it was")
    assert snapshot(out) == before
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []


def test_disk_full_during_refresh_folds_nothing_and_removes_no_tune_file(small_db: Path, tmp_path: Path) -> None:
    out = tmp_path / "freezes"
    freeze_db(small_db, out)
    write_tune_file(out / tune_file_name(H200.name, "20261130T010000Z"), card=H200, kernels=[NORM],
                    measurements=big_rows(2000))
    before = snapshot(out)
    done = emmy("db", "refresh-freeze", "--freeze-dir", str(out))  # the folding database hits the limit
    one_clear_line(done, "the refresh stopped", f"{out} are as they were")
    assert snapshot(out) == before


TUNE_WRITER = """
import sys
from pathlib import Path
from emmy_core.fileio.errors import FileError
from emmy_core.formats.tunefile import merge_into_tune_file
from tests.faults.test_diskfull import big_rows
from tests.store.test_files_freeze import H200, NORM
try:
    merge_into_tune_file(Path(sys.argv[1]), card=H200, setting="deploy", kernels=[NORM], measurements=big_rows(2000))
except FileError as exc:
    print(exc, file=sys.stderr)
    sys.exit(2)
"""


def test_disk_full_during_a_tune_file_merge_keeps_the_old_tune_file(tmp_path: Path) -> None:
    path = tmp_path / "nvidia-h200.tune-20261130T010000Z.json"
    write_tune_file(path, card=H200, kernels=[NORM], measurements=big_rows(3))
    before = snapshot(tmp_path)
    done = limited("-c", TUNE_WRITER, str(path))
    assert done.returncode == 2 and "file too large" in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert snapshot(tmp_path) == before
    assert json.loads(path.read_text())["format"] == "emmy-tune"


def test_disk_full_during_import_leaves_the_database_as_it_was(small_db: Path, big_db: Path, tmp_path: Path) -> None:
    (big_freeze,) = freeze_db(big_db, tmp_path / "fz", H200.name)
    with open_store(small_db, "r") as s:
        before = s.counts()
    done = emmy("db", "import", "--db", str(small_db), str(big_freeze), limit=16 * 1024)
    assert done.returncode != 0 and "Traceback" not in done.stderr, done.stderr
    assert check_db(small_db).ok
    with open_store(small_db, "r") as s:
        assert s.counts() == before
