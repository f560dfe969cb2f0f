"""The measured tiers: goldens of a freeze and rows of the local tuning database, matched by fork key only.

A schedule fork is answered by a golden, else (the local database) by the fastest measured row.
A structural fork is answered by a recorded decision (a golden naming it), else by pricing every
option as the sum of its kernels' fastest measurements (the kernel itself for keep, its pieces for
a decision) and taking the cheapest; a source that cannot price the kernel itself does not answer,
and the options it could not price are named in the answer's note.
"""

from __future__ import annotations

import math
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from emmy_core.evidence.resolution import Measured
from emmy_core.evidence.sources import (
    Answer,
    Miss,
    Source,
    Sources,
    option_kernels,
    piece_key,
    relative,
)
from emmy_core.graph.forks import Fork, ForkKey, ScheduleOption, StructuralOption
from emmy_core.ir.identity import kernel_id
from emmy_core.ir.nodes import Program
from emmy_core.knobs.route import is_library, library_knobs, routes
from emmy_core.knobs.view import view

LOCAL_LOCK_TIMEOUT_S = 0.5  # a compile does not wait on a tune holding the database


@dataclass(frozen=True)
class Row:
    """A measured ok row of a pool, as the measured sources index it."""

    schedule_id: str
    median_us: float
    measured_at: str


class MeasuredSource(Source):
    """Evidence from a store: goldens and ok rows indexed by pool, for one card and setting.

    Subclasses fill `_load_kernel(kernel_id)`, which returns the kernel's ok rows by sizes and its
    goldens by sizes (a golden is a schedule id or a decision), and `_knobs(schedule_id)`.
    `answers_with_rows` says whether the fastest row answers a schedule fork without a golden.
    """

    answers_with_rows = True

    def __init__(self, card: str, setting: str, names: Mapping[str, str] | None = None) -> None:
        self.card = card
        self.setting = setting
        self._kernels: dict[str, tuple[dict[str, list[Row]], dict[str, tuple[str | None, str | None]]]] = {}
        self._names = dict(names or {})
        self._routes: dict[str, bool] = {}  # kernel id -> whether it has a library route (`knobs.route`)
        self._library_sid: str | None = None

    @abstractmethod
    def _load_kernel(self, kernel_id: str) -> tuple[dict[str, list[Row]], dict[str, tuple[str | None, str | None]]]:
        ...

    @abstractmethod
    def _knobs(self, schedule_id: str) -> dict[str, object] | None: ...

    def _pool(self, key: ForkKey) -> tuple[list[Row], tuple[str | None, str | None] | None]:
        if key.card != self.card or key.setting != self.setting:
            return [], None
        if key.kernel_id not in self._kernels:
            self._kernels[key.kernel_id] = self._load_kernel(key.kernel_id)
        rows, goldens = self._kernels[key.kernel_id]
        return rows.get(key.sizes, []), goldens.get(key.sizes)

    def forget(self, kernel_ids: Sequence[str]) -> None:
        for kid in kernel_ids:
            self._kernels.pop(kid, None)

    def _measured(self, key: ForkKey, row: Row, kernel: str = "") -> Measured:
        return Measured(key, row.schedule_id, row.median_us, row.measured_at, kernel)

    def price(self, kernel: Program, key: ForkKey, library: bool = False) -> Measured | None:
        """The kernel's measured time at `key`: the row its schedule fork would take. With `library` (torch's kernel
        first at a matrix product), a product whose library route is not measured here has no price: without that
        row it would run as torch runs it, at a time nobody measured."""
        rows, golden = self._pool(key)
        lib = self._library_row(kernel, rows) if library else None
        if lib is not None and lib[1] is None:
            return None
        lib_row = lib[1] if lib is not None else None
        if not self.answers_with_rows:  # a reviewed source prices a kernel by its golden's row only
            sid = golden[0] if golden else None
            row = next((r for r in rows if r.schedule_id == sid), None)
            if lib_row is not None and (row is None or lib_row.median_us < row.median_us):
                row = lib_row
        else:
            row = rows[0] if rows else None
        return None if row is None else self._measured(key, row, kernel.name)

    def _library_row(self, kernel: Program, rows: list[Row]) -> tuple[str, Row | None] | None:
        """For a matrix product with a library route: its schedule id and its measured row here (None: not
        measured); None for a kernel without one."""
        kid = kernel_id(kernel)
        if kid not in self._routes:
            self._routes[kid] = routes(view(kernel))
        if not self._routes[kid]:
            return None
        if self._library_sid is None:  # torch's release does not change within a process
            self._library_sid = ScheduleOption.of(library_knobs()).schedule_id
        sid = self._library_sid
        return sid, next((r for r in rows if r.schedule_id == sid), None)

    def _option(self, fork: Fork, schedule_id: str) -> ScheduleOption | None:
        candidates = fork.options if fork.enumerated else (fork.default,)
        for o in candidates:
            if isinstance(o, ScheduleOption) and o.schedule_id == schedule_id:
                return o
        knobs = self._knobs(schedule_id)
        return None if knobs is None else ScheduleOption(knobs, schedule_id)

    def schedule(self, fork: Fork, key: ForkKey, blocked: Mapping[str, str], sources: Sources) -> Answer | Miss:
        rows, golden = self._pool(key)
        usable = [r for r in rows if r.schedule_id not in blocked]
        # torch's kernel first (`knobs.route`): Emmy's kernel is taken only where it was measured beside torch's
        first = fork.default
        lib_sid = first.schedule_id if isinstance(first, ScheduleOption) and is_library(first.knobs) and \
            first.schedule_id not in blocked else None
        lib_row = next((r for r in rows if r.schedule_id == lib_sid), None) if lib_sid else None
        unmatched = Miss("torch's kernel was not measured beside Emmy's here: no evidence that Emmy's kernel wins")
        sid = golden[0] if golden else None
        if sid is not None and sid not in blocked:
            option = self._option(fork, sid)
            if option is not None:
                row = next((r for r in rows if r.schedule_id == sid), None)
                if lib_sid is not None and sid != lib_sid:
                    if lib_row is None:
                        return unmatched
                    if row is None or lib_row.median_us < row.median_us:
                        return Answer(first, f"torch's kernel measured faster than golden {sid[:12]}: "
                                      f"{lib_row.median_us:.2f} us", lib_row.median_us, None,
                                      (self._measured(key, lib_row, fork.kernel.name),), option.label,
                                      relative(row.median_us if row else None, lib_row.median_us))
                runner = next((r for r in usable if r.schedule_id != sid), None)
                t = row.median_us if row else None
                ev = f"golden {sid[:12]}" + (f": {t:.2f} us" if t is not None else " (no measured time kept)")
                return Answer(option, ev, t, None, (self._measured(key, row, fork.kernel.name),) if row else (),
                              self._label(fork, runner), relative(runner.median_us if runner else None, t))
        if not self.answers_with_rows:
            if sid is not None and sid in blocked:
                return Miss(f"its golden {sid[:12]} is blocked")
            return Miss("no golden for this pool" if golden is None or golden[1] is None
                        else f"its golden is a decision ({golden[1]}), not a schedule")
        for i, row in enumerate(usable):
            option = self._option(fork, row.schedule_id)
            if option is None:
                continue
            if lib_sid is not None and lib_row is None:
                return unmatched
            runner = usable[i + 1] if i + 1 < len(usable) else None
            when = f", measured {row.measured_at}" if row.measured_at else ""
            return Answer(option, f"fastest of {len(rows)} measured row(s): {row.median_us:.2f} us{when}",
                          row.median_us, None, (self._measured(key, row, fork.kernel.name),),
                          self._label(fork, runner), relative(runner.median_us if runner else None, row.median_us))
        if rows:
            return Miss(f"every measured row of this pool ({len(rows)}) is blocked")
        return Miss("no measured row for this pool")

    def _label(self, fork: Fork, row: Row | None) -> str | None:
        if row is None:
            return None
        o = self._option(fork, row.schedule_id)
        return o.label if o is not None else row.schedule_id[:12]

    def structural(self, fork: Fork, key: ForkKey, blocked: Mapping[str, str],
                   sources: Sources) -> Answer | Miss:
        _, golden = self._pool(key)
        recorded = golden[1] if golden else None
        by_label = {o.label: o for o in fork.options if isinstance(o, StructuralOption)}
        priced, unpriced = self._price_options(fork, key, blocked, sources.library)
        if recorded is not None and recorded in by_label and recorded not in blocked:
            option = by_label[recorded]
            total, rows = priced.get(recorded, (None, ()))
            others = sorted((t, lbl) for lbl, (t, _) in priced.items() if lbl != recorded)
            runner = others[0] if others else None
            ev = f"recorded decision {recorded}" + (f" (priced {total:.2f} us)" if total is not None else "")
            return Answer(option, ev, total, None, rows, runner[1] if runner else None,
                          relative(runner[0] if runner else None, total),
                          "a recorded decision outranks any priced sum")
        keep = fork.options[0].label
        if keep not in priced:
            why = "the kernel itself is not measured here" if keep not in blocked else f"{keep} is blocked"
            if recorded is not None and recorded not in by_label:
                why += f"; its recorded decision {recorded} is not an option of this fork"
            return Miss(why)
        order = {o.label: i for i, o in enumerate(fork.options)}
        ranked = sorted(priced.items(), key=lambda kv: (kv[1][0], order[kv[0]]))
        (label, (total, rows)) = ranked[0]
        runner = ranked[1] if len(ranked) > 1 else None
        note = f"unpriced here: {'; '.join(unpriced)}" if unpriced else ""
        what = "measured" if label == keep else f"priced sum of {len(rows)} pieces"
        return Answer(by_label[label], f"{what}: {total:.2f} us", total, None, rows,
                      runner[0] if runner else None, relative(runner[1][0] if runner else None, total), note)

    def _price_options(self, fork: Fork, key: ForkKey, blocked: Mapping[str, str], library: bool = False
                       ) -> tuple[dict[str, tuple[float, tuple[Measured, ...]]], list[str]]:
        priced: dict[str, tuple[float, tuple[Measured, ...]]] = {}
        unpriced: list[str] = []
        for o in fork.options:
            if not isinstance(o, StructuralOption) or o.label in blocked:
                continue
            rows: list[Measured] = []
            for k in option_kernels(fork, o):
                m = self.price(k, key if o.decision is None else piece_key(k, key), library)
                if m is None:
                    unpriced.append(f"{o.label} ({k.name} not measured)")
                    break
                rows.append(m)
            else:
                priced[o.label] = (sum(m.median_us for m in rows), tuple(rows))
        return priced, unpriced


class StoreSource(MeasuredSource):
    """A measured source over an open `Store` (a `MemoryStore` holding a freeze, or any store in tests)."""

    def __init__(self, tier: str, label: str, store: Any, card: str, setting: str, *,
                 answers_with_rows: bool, measured_at: bool = True, read_all: bool = False) -> None:
        super().__init__(card, setting)
        self.tier = tier
        self.label = label
        self.store = store
        self.answers_with_rows = answers_with_rows
        self._with_time = measured_at
        self._read_all = read_all  # an in-memory store: index every row of the card and setting in one pass
        self._by_kernel: dict[str, list[Any]] | None = None
        self._goldens: dict[str, dict[str, tuple[str | None, str | None]]] | None = None
        self._knob_cache: dict[str, dict[str, object] | None] = {}

    def _all_goldens(self) -> dict[str, dict[str, tuple[str | None, str | None]]]:
        if self._goldens is None:
            out: dict[str, dict[str, tuple[str | None, str | None]]] = {}
            for g in self.store.goldens(card=self.card):
                if g.setting == self.setting:
                    out.setdefault(g.kernel_id, {})[g.sizes] = (g.schedule_id, g.decision)
            self._goldens = out
        return self._goldens

    def _load_kernel(self, kernel_id: str) -> tuple[dict[str, list[Row]], dict[str, tuple[str | None, str | None]]]:
        rows: dict[str, list[Row]] = {}
        if self._read_all:
            if self._by_kernel is None:
                self._by_kernel = {}
                for m in self.store.measurements(card=self.card, setting=self.setting):
                    self._by_kernel.setdefault(m.kernel_id, []).append(m)
            stored = self._by_kernel.get(kernel_id, [])
        else:
            stored = self.store.measurements(kernel_id=kernel_id, card=self.card, setting=self.setting)
        for m in stored:
            if m.status == "ok" and math.isfinite(m.median_us):
                when = m.measured_at.isoformat(timespec="seconds") if self._with_time and m.measured_at else ""
                rows.setdefault(m.sizes, []).append(Row(m.schedule_id, float(m.median_us), when))
        for pool in rows.values():
            pool.sort(key=lambda r: (r.median_us, r.schedule_id))
        return rows, self._all_goldens().get(kernel_id, {})

    def recordings(self) -> list[tuple[str, str, str, str]]:
        """(kernel_id, kernel name, sizes, schedule id or decision) of every golden of this card and setting."""
        names = {kid: c_name for kid, (_, c_name) in self.store.kernels().items()}
        return [(kid, names.get(kid, ""), sizes, sid or dec or "")
                for kid, pools in self._all_goldens().items() for sizes, (sid, dec) in pools.items()]

    def _knobs(self, schedule_id: str) -> dict[str, object] | None:
        if schedule_id not in self._knob_cache:
            self._knob_cache[schedule_id] = self.store.knobs(schedule_id)
        return self._knob_cache[schedule_id]


class GoldenSource(StoreSource):
    """Tier 1: the goldens of the freeze (reviewed choices), in memory; its rows give times and runners-up."""

    def __init__(self, store: Any, label: str, card: str, setting: str) -> None:
        super().__init__("golden", label, store, card, setting, answers_with_rows=False, measured_at=False,
                         read_all=True)


class LocalSource(StoreSource):
    """Tier 2: the local tuning database, opened read-only at the first fork that reaches it.

    Missing, locked, of another version or unreadable: skipped, with the reason as its note
    (the duckdb module itself is imported only then, so a compile imports without it). Once read, the file is
    opened again only to read a kernel not read yet: a server's every new length asks for the kernels it has
    read already, and opening the database for each (20 ms here) was most of what a new length cost once a tune
    had made the file.
    """

    def __init__(self, path: Path | None, card: str, setting: str,
                 opener: Callable[[Path], Any] | None = None) -> None:
        super().__init__("local", "", None, card, setting, answers_with_rows=True)
        self.path = path
        self._opener = opener
        self._why: str | None = None
        self._opened = False
        self._read_as: tuple[str, int, int, int] | None = None  # the file as last opened whole: path, inode, mtime, size
        self._unchanged = False  # the file found as read, since the last close

    @staticmethod
    def _stamp(path: Path) -> tuple[str, int, int, int] | None:
        try:
            st = path.stat()
        except OSError:
            return None
        return str(path), st.st_ino, st.st_mtime_ns, st.st_size

    def _path(self) -> Path:
        from emmy_core.store.connect import default_db_path

        return Path(self.path) if self.path is not None else default_db_path()

    def _open(self) -> None:
        if self._opened:
            return
        self._opened = True
        self._why = None  # opened again (after a close): the file may have come since
        path = self._path()
        self.label = str(path)
        if not path.is_file():
            self._why = f"no tuning database at {path} (skipped)"
            return
        try:
            if self._opener is not None:
                self.store = self._opener(path)
            else:
                from emmy_core.store import open_store

                self.store = open_store(path, "r", lock_timeout=LOCAL_LOCK_TIMEOUT_S)
        except ImportError as exc:
            self._why = f"tuning database {path} not read: {exc} (skipped)"
        except Exception as exc:  # StoreError, StoreLockedError, VersionMismatchError: the message names why
            self._why = f"tuning database skipped: {str(exc)[:300]}"
        self._read_as = self._stamp(path) if self.store is not None else None

    def unavailable(self) -> str | None:
        if not self._opened and self._read_as is not None and \
                (self._unchanged or self._stamp(self._path()) == self._read_as):
            self._unchanged = True  # looked at once until the next close, not at every fork
            return None  # read before and unchanged since: it is opened when a kernel not read yet is asked for
        self._open()
        return self._why

    def _pool(self, key: ForkKey) -> tuple[list[Row], tuple[str | None, str | None] | None]:
        if key.kernel_id not in self._kernels:
            self._open()
            if self.store is None:  # not readable this time: nothing kept, so a later read tries again
                return [], None
        return super()._pool(key)

    def _knobs(self, schedule_id: str) -> dict[str, object] | None:
        if schedule_id not in self._knob_cache:
            self._open()
            if self.store is None:
                return None
        return super()._knobs(schedule_id)

    @property
    def skipped(self) -> str | None:
        """Why the database was skipped, once something tried to read it (None: read, or not needed)."""
        return self._why if self._opened else None

    def forget(self, kernel_ids: Sequence[str]) -> None:
        super().forget(kernel_ids)
        self.close()  # opened again, the database shows what was recorded since (or the file created since)

    def close(self) -> None:
        """Releases the file's lock; a later fork opens it again (rows read so far stay cached)."""
        if self.store is not None:
            self.store.close()
            self.store = None
        self._opened = False
        self._unchanged = False
