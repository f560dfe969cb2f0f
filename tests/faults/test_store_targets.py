"""Writes refuse what reads refuse: a store path that is a FIFO, a device, a folder or a link to nothing (or whose
write-ahead log is one) is refused by name, at once, by a writer exactly as by a reader, never "no store" and
never a process blocked for ever on the FIFO (issue 45, item 2 and its "no store" wording).

Each open runs in a child process under a deadline, so a writer that still blocked would fail the test, not hang
the suite."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 120
OPEN = textwrap.dedent("""
    import sys
    from emmy_core.store import StoreError, open_store
    try:
        open_store(sys.argv[1], sys.argv[2], lock_timeout=1).close()
        print("OPENED")
    except StoreError as exc:
        print("REFUSED", exc)
""")


def child(*args: str, code: str | None = None) -> subprocess.CompletedProcess[str]:
    """`emmy ARGS` (or the Python `code` with ARGS) in a child process, under the deadline."""
    cmd = [sys.executable, "-c", code, *args] if code else [sys.executable, "-m", "emmy_core.cli.main", *args]
    return subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=DEADLINE_S, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})


def specials(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    """Store paths nobody can use, each with the words its refusal must carry."""
    fifo = tmp_path / "fifo.db"
    os.mkfifo(fifo)
    link = tmp_path / "link-to-fifo.db"
    link.symlink_to(fifo)
    dangling = tmp_path / "dangling.db"
    dangling.symlink_to(tmp_path / "nowhere.db")
    wal = tmp_path / "walfifo.db"
    os.mkfifo(tmp_path / "walfifo.db.wal")
    folder = tmp_path / "folder.db"
    folder.mkdir()
    return {"fifo": (fifo, "FIFO"), "device": (Path("/dev/zero"), "character device"),
            "link to a FIFO": (link, "FIFO"), "link to nothing": (dangling, "link to nothing"),
            "FIFO write-ahead log": (wal, "write-ahead log"), "folder": (folder, "folder")}


@pytest.mark.parametrize("mode", ["w", "r"])
def test_a_store_path_that_is_no_file_is_refused_by_name_by_writer_and_reader_alike(tmp_path: Path,
                                                                                   mode: str) -> None:
    for name, (path, words) in specials(tmp_path).items():
        done = child(str(path), mode, code=OPEN)
        assert done.returncode == 0, f"{name}: {done.stderr[-1500:]}"
        assert done.stdout.startswith("REFUSED"), f"{name} opened for {mode!r}: {done.stdout}"
        assert words in done.stdout and str(path) in done.stdout, f"{name}: {done.stdout}"
        assert "no store at" not in done.stdout, f"{name} called 'no store': {done.stdout}"


def test_db_import_and_tune_into_a_fifo_are_refused_at_once(tmp_path: Path) -> None:
    fifo = tmp_path / "f.db"
    os.mkfifo(fifo)
    source = tmp_path / "src.json"
    source.write_text("{}")
    for args in (["db", "import", "--db", str(fifo), str(source)],
                 ["db", "import", "--fresh", "--db", str(fifo), str(source)],
                 ["tune", "--model", "llama_block", "--shape", "B=1,S=128", "--budget", "1", "--db", str(fifo)]):
        done = child(*args)
        out = done.stdout + done.stderr
        assert done.returncode != 0, f"{args}: {out[-1500:]}"
        assert "FIFO" in out and "Traceback" not in out, f"{args}: {out[-1500:]}"
        assert stat_is_fifo(fifo)  # left as it was


def stat_is_fifo(path: Path) -> bool:
    import stat

    return stat.S_ISFIFO(os.lstat(path).st_mode)


def test_tune_checks_its_budget_and_strategy_before_capturing_the_model(tmp_path: Path) -> None:
    """A bad --budget or --strategy is refused before the model is captured: the refusal says so although the
    model named does not even exist (capturing it would have failed first)."""
    for bad, words in ((["--budget", "0"], "--budget"), (["--strategy", "fastest"], "--strategy")):
        done = child("tune", "--model", "no_such_model_here", "--shape", "B=1,S=128", *bad,
                     "--tune-file", str(tmp_path / "out.json"))
        out = done.stdout + done.stderr
        assert done.returncode != 0 and words in out and "no_such_model_here" not in out, out[-1500:]


def test_eval_search_with_no_budgets_says_none_were_given() -> None:
    done = child("eval", "search", "--budgets", "", "no-such-dataset")
    out = done.stdout + done.stderr
    assert done.returncode != 0 and "--budgets" in out and "at least one" in out, out[-1500:]
    assert "not none" not in out and "Traceback" not in out
