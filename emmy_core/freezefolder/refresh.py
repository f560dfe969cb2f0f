"""`emmy db refresh-freeze`: fold the tune files beside a freeze into it, then remove them.

Order matters for crash safety: everything is imported into a fresh database in a
temporary folder first (a bad file stops the refresh with nothing changed); each card's
freeze is then re-written through a temporary file and a rename; only after every freeze
is in place are the folded tune files removed. A crash at any point loses nothing: at
worst a tune file already folded is folded again, which changes nothing (the writer keeps
the better of equal rows, and the freeze is canonical).
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from emmy_core.exchange.importer import Progress, load_source
from emmy_core.fileio.errors import FileError
from emmy_core.fileio.safefile import FileWriteError, locked_folder, shown, why
from emmy_core.fileio.sourcefile import SourceError, gc_paused
from emmy_core.formats.freeze import card_file_slug, freeze_store
from emmy_core.freezefolder.freeze_names import FREEZE_NAME, TUNE_NAME, freeze_folder
from emmy_core.store.errors import StoreError


@dataclass
class RefreshReport:
    freezes: list[Path] = field(default_factory=list)
    folded: list[Path] = field(default_factory=list)
    rows: int = 0


REFRESH_WAIT_S = 600.0  # how long a refresh waits for another one (or a tune file's merge) to let go of the folder


def refresh_freeze(freeze_dir: Path | str, progress: Progress | None = None,
                   wait_s: float = REFRESH_WAIT_S) -> RefreshReport:
    """Imports the freeze and its tune files into a fresh database, re-freezes, then removes the tune files.
    Waits up to `wait_s` for another process's lock on the folder (`FolderBusyError` after)."""
    d = Path(freeze_dir)
    if not d.is_dir():
        raise StoreError(f"{d} is not a folder")
    # one refresh of a folder at a time, from listing its files to removing the folded ones: two at once could
    # each fold a different set, and the slower one's freeze, renamed in last, would drop the other's rows
    # (the lock is the one a tune file's merge takes in its folder, so none is written half-way through either)
    with locked_folder(d, wait_s, progress):
        folder = freeze_folder(d)
        freezes, tunes = folder.freezes, folder.tunes
        report = RefreshReport()
        try:
            report.freezes = _fold(d, freezes, tunes, report, progress)
        except SourceError:
            raise
        except FileError as exc:  # the store, a write or a read refused: nothing was replaced
            raise type(exc)(f"{exc}; the refresh stopped and the freeze and tune files in {shown(d)} are as they "
                            "were") from None
        for path in tunes:
            path.unlink(missing_ok=True)  # folded; a user may have removed it meanwhile
            report.folded.append(path)
    return report


def _fold(d: Path, freezes: list[Path], tunes: list[Path], report: RefreshReport,
          progress: Progress | None) -> list[Path]:
    """Imports every file into a database in a temporary folder and re-freezes `d` from it."""
    from emmy_core.store import open_store

    try:
        tmp_dir = tempfile.TemporaryDirectory(prefix="emmy-refresh-")
    except OSError as exc:
        raise FileWriteError(f"cannot make a temporary folder to fold in: {why(exc)}") from None
    with tmp_dir as tmp, open_store(Path(tmp) / "fold.db", "w") as store:
        store.label = "the folding database"
        for path in (*freezes, *tunes):
            if progress is not None:
                progress(path.name)
            with gc_paused():
                loaded = load_source(path, store)
            kind, batch = loaded.kind, loaded.batch
            m = (TUNE_NAME if path in tunes else FREEZE_NAME).match(path.name)
            expected = "tune" if path in tunes else "freeze"
            if kind != expected:
                raise SourceError(str(path), "$", "format", f"a file named like a {expected} file holds a {kind}")
            card = batch.cards[0].name
            if m is None or card_file_slug(card) != m.group(1):
                raise SourceError(str(path), "$.card", "name", f"card {card!r} belongs in "
                                                              f"{card_file_slug(card)}.* files, not {path.name}")
            with gc_paused():
                report.rows += store.write(batch).offered
        return freeze_store(store, d)
