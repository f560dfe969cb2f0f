"""Where a tune's rows go: the store's one writer, or a tune file (the bench's `Recorder` interface).

The bench never imports the store (a higher layer); these recorders live in the store and
are handed to the harness. `StoreRecorder` writes each kernel's rows through the one writer
and dedupes against what the database holds. `TuneFileRecorder` writes a tune file, merging
into it after every kernel so an interrupted tune leaves whole kernels; it never writes over
a file that is not a tune file of its own card and setting (`tunefile.merge_into_tune_file`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from emmy_core.bench.harness import Outcome
from emmy_core.graph.forks import ForkKey
from emmy_core.ir import Program, kernel_id
from emmy_core.store.rows import CardRow, MeasurementRow, WriteSummary
from emmy_core.targets import Card


def measurement_row(o: Outcome) -> MeasurementRow:
    """A recordable outcome as the store's row (a failed one gets the placeholder time)."""
    key = (o.unit.kernel_id, o.unit.sizes_text, o.knobs, o.card, o.setting)
    if o.status == "failed":
        return MeasurementRow.failed(*key, str(o.failure), source=o.source)
    if o.status != "ok" or o.stats is None:
        raise ValueError(f"a {o.status} outcome is not recorded")
    return MeasurementRow.ok(*key, o.stats.median_us, spread=o.stats.spread, samples=o.stats.samples,
                             source=o.source)


class StoreRecorder:
    """Records through the store's one writer; dedupes against what the store holds.

    `store` is an open MeasurementStore (used as is) or a callable opening one for writing, called per
    operation so that a long tune does not hold the database file's lock between kernels.
    `label` names where the rows go (the database file), for the tune's messages.
    """

    def __init__(self, store: Any, origin: str = "tune", label: str | None = None) -> None:
        self._open: Callable[[], Any] | None = store if callable(store) and not hasattr(store, "record") else None
        self._store = None if self._open is not None else store
        self.origin = origin
        self.label = label if label is not None else getattr(store, "label", "the store")
        self.summaries: list[WriteSummary] = []

    def _use(self, fn: Callable[[Any], Any]) -> Any:
        if self._open is None:
            return fn(self._store)
        store = self._open()
        try:
            return fn(store)
        finally:
            store.close()

    def measured_ok(self, key: ForkKey) -> set[str]:
        rows = self._use(lambda s: s.measurements(kernel_id=key.kernel_id, card=key.card, setting=key.setting))
        return {m.schedule_id for m in rows if m.sizes == key.sizes and m.status == "ok"}

    def record_kernel(self, program: Program, card: Card, outcomes: Sequence[Outcome]) -> None:
        rows = [measurement_row(o) for o in outcomes if o.recordable]
        summary = self._use(lambda s: s.record(rows, kernels=[program], cards=[CardRow.from_card(card)],
                                               origin=f"{self.origin} {program.name}"))
        self.summaries.append(summary)


class TuneFileRecorder:
    """Writes a tune's rows into a tune file, merged in after every kernel (no dedupe: a tune file is
    not a database). `target` is the file, or a folder (an existing one, or any path ending with a
    slash) to write `<card-slug>.tune-<stamp>.json` into. Given the card and setting, the target is
    checked at once (its folder made and written to, a file there read), so a tune that could not write
    its file is refused before it benches anything. An empty target is refused (it is not "here").
    A merge waits `wait_s` seconds at most for another process's lock on the folder (`say` is told when
    it waits; default: standard error); past that the rows so far go into a tune file of their own and
    `FolderBusyError` names it (`tunefile.merge_into_tune_file`).
    """

    def __init__(self, target: str | Path, card: Card | None = None, setting: str | None = None,
                 wait_s: float | None = None, say: Callable[[str], None] | None = None) -> None:
        from emmy_core.fileio.safefile import FileWriteError
        from emmy_core.formats.tunefile import read_own_tune_file, tune_file_path

        if not str(target):
            raise FileWriteError("the tune file's path is empty: name a file, or a folder ending with a slash; "
                                 "nothing was written")
        self.target = target
        self.setting = setting
        self.wait_s = wait_s
        self.say = say if say is not None else _to_stderr
        self.path: Path | None = None
        self.kernels: dict[str, Program] = {}
        self.rows: list[MeasurementRow] = []
        if card is not None and setting is not None:
            self.path = tune_file_path(target, card.name)
            _check_writable_folder(self.path.parent)
            read_own_tune_file(self.path, card.name, setting)

    @property
    def label(self) -> str:
        return f"tune file {self.path if self.path is not None else self.target}"

    def measured_ok(self, key: ForkKey) -> set[str]:
        return set()

    def record_kernel(self, program: Program, card: Card, outcomes: Sequence[Outcome]) -> None:
        from emmy_core.formats.tunefile import merge_into_tune_file, tune_file_path

        recordable = [o for o in outcomes if o.recordable]
        if not recordable:
            return
        setting = self.setting or recordable[0].setting
        if self.path is None:
            self.path = tune_file_path(self.target, card.name)
        self.kernels.setdefault(kernel_id(program), program)
        self.rows.extend(measurement_row(o) for o in recordable)
        wait = {} if self.wait_s is None else {"wait_s": self.wait_s}
        merge_into_tune_file(self.path, card=CardRow.from_card(card), setting=setting,
                             kernels=list(self.kernels.values()), measurements=self.rows, say=self.say, **wait)


def _to_stderr(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def _check_writable_folder(folder: Path) -> None:
    """Makes `folder` (`ensure_folder`) and writes a temporary file in it, so that a folder that cannot take the
    tune file is refused (FileWriteError naming it) before anything is benched."""
    import tempfile

    from emmy_core.fileio.safefile import FileWriteError, ensure_folder, shown, why

    ensure_folder(folder)
    try:
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as exc:
        raise FileWriteError(f"cannot write a tune file in the folder {shown(folder)}: {why(exc)}; "
                             "nothing was written") from None


def check_db_target(db: Path | None) -> Path:
    """The database a recorder will write (None: the local tuning database), checked before anything is
    measured: an existing path is opened as a store for writing and closed (a folder, a user's file, a locked
    or foreign file is refused by name); a new one needs its nearest existing folder to be a writable folder.
    Nothing is created. Raises StoreError."""
    import os

    from emmy_core.fileio.safefile import shown
    from emmy_core.store import StoreError, default_db_path, open_store

    path = default_db_path() if db is None else Path(db)
    if path.exists():
        if path.is_dir():
            raise StoreError(f"no store at {shown(path)}: it is a folder")
        open_store(path, "w").close()
        return path
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir() or not os.access(folder, os.W_OK | os.X_OK):
        raise StoreError(f"cannot create a store at {shown(path)}: {shown(folder)} is not a writable folder")
    return path


def db_recorder(db: Path | None, origin: str) -> StoreRecorder:
    """A recorder writing into the database `db` (None: the local tuning database), opened per kernel."""
    from emmy_core.store import default_db_path, open_store

    path = default_db_path() if db is None else Path(db)
    return StoreRecorder(lambda: open_store(path, "w"), origin, label=f"database {path}")
