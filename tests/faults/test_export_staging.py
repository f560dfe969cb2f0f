"""An export killed with kill -9 leaves its staging folder beside the export; the next export removes it, and
never another export's live one (issue 45, "Smaller": `_data/.dataset.<random>` left behind).

A real export in a child process, paused inside its work by its own progress callback, then killed (or left
running, for the live case)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from emmy_core.exchange.export import export_db, open_snapshot

ROOT = Path(__file__).resolve().parents[2]
DEADLINE_S = 120
PAUSED = textwrap.dedent("""
    import sys, time
    from emmy_core.exchange.export import export_db

    def progress(table: str) -> None:
        print("exporting", table, flush=True)
        time.sleep(300)  # paused inside the export, its staging folder made

    export_db(sys.argv[1], sys.argv[2], progress)
""")


def paused_export(db: Path, out: Path) -> subprocess.Popen[str]:
    """A child process in the middle of exporting `db` to `out` (returned once it is)."""
    proc = subprocess.Popen([sys.executable, "-c", PAUSED, str(db), str(out)], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.stdout is not None and proc.stdout.readline().startswith("exporting")
    return proc


def staging(out: Path) -> list[Path]:
    return sorted(p for p in out.parent.iterdir() if p.name.startswith(f".{out.name}."))


@pytest.fixture
def live(corpus: dict[str, Path], tmp_path: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    out = tmp_path / "dataset"
    proc = paused_export(corpus["database"], out)
    yield out, proc
    proc.kill()
    proc.wait(DEADLINE_S)


def test_a_killed_exports_staging_folder_is_removed_by_the_next_export(corpus: dict[str, Path],
                                                                         tmp_path: Path) -> None:
    out = tmp_path / "dataset"
    export_db(corpus["database"], out)
    proc = paused_export(corpus["database"], out)
    proc.send_signal(signal.SIGKILL)
    proc.wait(DEADLINE_S)
    left = staging(out)
    assert len(left) == 1 and str(proc.pid) in left[0].name  # what the kill left: named by its writer
    export_db(corpus["database"], out)
    assert staging(out) == []
    assert open_snapshot(out).manifest["digest"]


def test_another_exports_live_staging_folder_is_never_removed(live: tuple[Path, subprocess.Popen[str]],
                                                              corpus: dict[str, Path]) -> None:
    out, proc = live
    (theirs,) = staging(out)
    export_db(corpus["database"], out)  # an export beside the live one
    assert theirs.is_dir() and staging(out) == [theirs]
    assert proc.poll() is None
