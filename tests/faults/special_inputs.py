"""Every reader of an input path given a FIFO, /dev/zero and a folder: each must refuse at once, naming the
file (a hang, an acceptance or a raw exception is a violation). Run as its own process by bench/faults.py's
section 7 (`python -m tests.faults.special_inputs FOLDER`): one line a read, `reader<TAB>kind<TAB>outcome`,
under a 10 s alarm each (a hang is reported, not waited for)."""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


def _alarm(*_: Any) -> None:
    raise TimeoutError("hang")


def _prior(p: str) -> None:
    from emmy_core.prior import load_prior
    load_prior(p)


def _cards(p: str) -> None:
    from emmy_core.targets.table import load_table
    load_table(p)


def _extern_order(p: str) -> None:
    from emmy_core.eval.extern_order import file_order
    file_order([p])


def _report(p: str) -> None:
    from emmy_core.eval.compare import read_report
    read_report(p)


def _import_source(p: str) -> None:
    from emmy_core.exchange.importer import load_source
    from emmy_core.store import MemoryStore
    load_source(p, MemoryStore("x"))


def _loop_program(p: str) -> None:
    from emmy_core.fileio.inputfile import read_input
    read_input(p, 1 << 20, "source file")


def _export(p: str) -> None:
    from emmy_core.prior.dataset import read_dataset
    read_dataset(p)


def _store_write(p: str) -> None:
    from emmy_core.store import open_store
    open_store(p, "w", lock_timeout=1).close()


def _store_read(p: str) -> None:
    from emmy_core.store import open_store
    open_store(p, "r", lock_timeout=1).close()


READERS: dict[str, Callable[[str], None]] = {
    "prior": _prior, "cards": _cards, "extern-order": _extern_order, "report": _report, "import": _import_source,
    "loop program": _loop_program, "export": _export, "store (write)": _store_write, "store (read)": _store_read}


def _path_for(name: str, kind: str, path: str, work: Path) -> str:
    """The path a reader is given: an export is a folder, so its manifest is made the special file."""
    if name != "export" or kind == "folder":
        return path
    folder = work / "not-an-export"
    folder.mkdir(exist_ok=True)
    manifest = folder / "manifest.json"
    if kind == "fifo" and not manifest.exists():
        os.mkfifo(manifest)
    elif kind == "/dev/zero" and not manifest.exists():
        manifest.symlink_to("/dev/zero")
    return str(folder)


def main(work: Path) -> int:
    from emmy_core.fileio.errors import FileError
    from emmy_core.prior import PriorError
    from emmy_core.targets import CardTableError

    signal.signal(signal.SIGALRM, _alarm)
    fifo = work / "pipe.json"
    if not fifo.exists():
        os.mkfifo(fifo)
    specials = {"fifo": str(fifo), "/dev/zero": "/dev/zero", "folder": str(work)}
    for name, read in READERS.items():
        for kind, path in specials.items():
            if name == "extern-order" and kind == "folder":
                continue  # a folder stands for the cache files in it (documented), not a file to refuse
            path = _path_for(name, kind, path, work)
            signal.alarm(10)
            try:
                read(path)
                outcome = "ACCEPTED"
            except (PriorError, FileError, CardTableError, ValueError) as exc:
                outcome = "refused: " + str(exc).splitlines()[0][:90]
            except TimeoutError:
                outcome = "HANG"
            except BaseException as exc:  # reported, never raised: a raw exception is the violation
                outcome = f"RAW {type(exc).__name__}: {str(exc)[:80]}"
            finally:
                signal.alarm(0)
            print(f"{name}\t{kind}\t{outcome}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
