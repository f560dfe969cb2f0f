"""A kill -9 harness over the commands that write: import, fresh import, tune (into a database and into a
tune file), refresh-freeze, freeze and promote.

Each scenario is built once (a template folder: its inputs and, computed in this process, the state the
command would leave if it finished); each trial copies the template, starts the real command
(`python -m emmy_core.cli.main ...`), kills it with SIGKILL after a random delay, and checks:
`emmy db check` is clean; each (card, kernel) count is the one before or the one after; the freeze
folder is whole (every file the old one or the new one); no tune file's rows are lost. A check that
fails raises `Loss` saying what was lost; `rows_lost` counts the rows. Shared by tests/faults and
bench/faults.py.
"""

from __future__ import annotations

import shutil
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from emmy_core.exchange.importer import import_db, import_into
from emmy_core.formats.freeze import freeze_db
from emmy_core.formats.tunefile import tune_file_name, write_tune_file
from emmy_core.freezefolder.freeze_names import freeze_folder
from emmy_core.freezefolder.promote import promote_fastest
from emmy_core.freezefolder.refresh import refresh_freeze
from emmy_core.ir import kernel_id
from emmy_core.store import MeasurementRow, MeasurementStore, MemoryStore, open_store
from emmy_core.store.check import check_db
from tests.store.test_files_freeze import CPU, H100, H200, KERNELS, populate

ROOT = Path(__file__).resolve().parents[2]
Counts = dict[tuple[str, str], int]


class Loss(AssertionError):
    """A kill left something lost or half-written; `rows` says how many rows."""

    def __init__(self, message: str, rows: int = 0) -> None:
        super().__init__(message)
        self.rows = rows


def _rows(card: str, kernel: int, n: int, offset: int = 0) -> list[MeasurementRow]:
    kid = kernel_id(KERNELS[kernel])
    return [MeasurementRow.ok(kid, f"B={offset + i + 1}", {"block": 64}, card, "deploy", 1.0 + i % 97, samples=3)
            for i in range(n)]


def key_counts(db: Path) -> tuple[Counts, Counts]:
    """Measurements and goldens per (card, kernel) of a store file."""
    with open_store(db, "r") as s:
        m = Counter((r.card, r.kernel_id) for r in s.measurements())
        g = Counter((r.card, r.kernel_id) for r in s.goldens())
    return dict(m), dict(g)


def row_map(store: MeasurementStore) -> dict[tuple, tuple[str, float]]:
    """Every measurement of a store by its key -> (status, median)."""
    return {(m.kernel_id, m.sizes, m.schedule_id, m.card, m.setting): (m.status, m.median_us)
            for m in store.measurements()}


def folder_rows(folder: Path) -> dict[tuple, tuple[str, float]]:
    """The rows the freeze and tune files of a folder hold together (each file must import whole)."""
    mem = MemoryStore()
    freezes, tunes = freeze_folder(folder).freezes, freeze_folder(folder).tunes
    for path in (*freezes, *tunes):
        (outcome,) = import_into(mem, [path])
        if not outcome.ok:
            raise Loss(f"{path.name} is not whole: {outcome.message[:300]}")
    return row_map(mem)


def lost_rows(before: dict[tuple, tuple[str, float]], after: dict[tuple, tuple[str, float]]) -> int:
    """Rows of `before` missing from `after`, or there only as something worse (the writer keeps the better)."""
    lost = 0
    for key, (status, median) in before.items():
        got = after.get(key)
        if got is None or (status == "ok" and (got[0] != "ok" or got[1] > median)):
            lost += 1
    return lost


def _same_or(db: Path, before: tuple[Counts, Counts], after: tuple[Counts, Counts]) -> None:
    report = check_db(db)
    if not report.ok:
        raise Loss(f"emmy db check fails after the kill: {report.counts}")
    now = key_counts(db)
    for which, (n, b, a) in enumerate(zip(now, before, after, strict=True)):
        for key in set(n) | set(b) | set(a):
            if n.get(key, 0) not in (b.get(key, 0), a.get(key, 0)):
                what = ("measurements", "goldens")[which]
                raise Loss(f"{what} of {key[0]!r}/{key[1][:12]}: {n.get(key, 0)}, neither the {b.get(key, 0)} "
                           f"before nor the {a.get(key, 0)} after", rows=max(0, b.get(key, 0) - n.get(key, 0)))


@dataclass
class Scenario:
    """A command to kill, the folder it works in, and the check of what a kill may leave."""

    name: str
    argv: Callable[[Path], list[str]]
    check: Callable[[Path], None]
    rows: int  # rows at stake (for the report)
    template: Path = field(default_factory=Path)


def _copy(template: Path, work: Path) -> Path:
    if work.exists():
        shutil.rmtree(work)
    shutil.copytree(template, work)
    return work


def run_and_kill(argv: list[str], delay: float, timeout: float = 300.0) -> bool:
    """Runs `emmy ARGV...`, kills it with SIGKILL after `delay` seconds; True when it was still running."""
    proc = subprocess.Popen([sys.executable, "-m", "emmy_core.cli.main", *argv], cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=delay)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGKILL)
        proc.communicate(timeout=timeout)
        return True
    if proc.returncode not in (0, 1):  # 1: a tune whose kernels could not all be benched
        raise Loss(f"emmy {' '.join(argv[:2])} failed on its own (status {proc.returncode}): "
                   f"{err.decode(errors='replace')[-600:]}")
    return False


# ---- scenarios -------------------------------------------------------------------------------------

def _sources(folder: Path, rows: int) -> list[Path]:
    """Three sources, one per card, each the only one touching its (card, kernel) pairs."""
    out = []
    for i, (card, kernel) in enumerate(((H200, 0), (H100, 1), (CPU, 3))):
        knobs = {"tile_m": 8, "threads": 2} if card is CPU else {"block": 64}
        made = [MeasurementRow.ok(kernel_id(KERNELS[kernel]), f"B={1000 + j}", knobs, card.name, "deploy",
                                  1.0 + j % 89, samples=3) for j in range(rows)]
        out.append(write_tune_file(folder / tune_file_name(card.name, f"20261130T00000{i}Z"), card=card,
                                   kernels=KERNELS, measurements=made))
    return out


def _base_db(path: Path) -> Path:
    with open_store(path, "w") as s:
        populate(s)
    return path


def import_scenario(template: Path, rows: int, fresh: bool = False) -> Scenario:
    template.mkdir(parents=True)
    db = _base_db(template / "t.db")
    sources = _sources(template / "src", rows)
    before = key_counts(db)
    after_db = template.parent / f"{template.name}-after.db"
    shutil.copyfile(db, after_db)
    import_db(after_db, sources, fresh=fresh)
    after = key_counts(after_db)
    old_bytes = db.read_bytes()

    def check(work: Path) -> None:
        path = work / "t.db"
        if fresh:
            if path.read_bytes() == old_bytes:
                return
            if key_counts(path) != after:
                raise Loss("a fresh import left a database that is neither the old one nor the whole new one",
                           rows=sum(before[0].values()))
            if not check_db(path).ok:
                raise Loss("the swapped-in database does not check clean")
            return
        _same_or(path, before, after)

    return Scenario("fresh import" if fresh else "import",
                    lambda w: ["db", "import", "--db", str(w / "t.db"), *(["--fresh"] if fresh else []),
                               *(str(w / "src" / p.name) for p in sources)],
                    check, sum(before[0].values()) + 3 * rows, template)


def freeze_scenario(template: Path, rows: int) -> Scenario:
    template.mkdir(parents=True)
    small = _base_db(template / "small.db")
    freeze_db(small, template / "fz")
    big = _base_db(template / "big.db")
    with open_store(big, "w") as s:
        s.record(_rows(H200.name, 0, 2 * rows, offset=1000))
        s.record(_rows(H100.name, 1, 2 * rows, offset=1000), kernels=KERNELS)
    new_dir = template.parent / f"{template.name}-new"
    freeze_db(big, new_dir)
    old = {p.name: p.read_bytes() for p in (template / "fz").iterdir()}
    new = {p.name: p.read_bytes() for p in new_dir.iterdir()}

    def check(work: Path) -> None:
        for p in (work / "fz").glob("*.json"):
            if p.read_bytes() not in (old.get(p.name), new.get(p.name)):
                raise Loss(f"{p.name} is neither the old freeze nor the new one")
        missing = set(old) - {p.name for p in (work / "fz").glob("*.json")}
        if missing:
            raise Loss(f"freeze files lost: {sorted(missing)}", rows=len(missing))

    return Scenario("freeze", lambda w: ["db", "freeze", "--db", str(w / "big.db"), "--out", str(w / "fz")],
                    check, 4 * rows, template)


def refresh_scenario(template: Path, rows: int) -> Scenario:
    template.mkdir(parents=True)
    freeze_db(_base_db(template / "base.db"), template / "fz")
    (template / "base.db").unlink()
    _sources(template / "fz", rows)
    before = folder_rows(template / "fz")
    done = template.parent / f"{template.name}-done"
    shutil.copytree(template / "fz", done)
    refresh_freeze(done)
    new = {p.name: p.read_bytes() for p in done.iterdir()}
    old = {p.name: p.read_bytes() for p in (template / "fz").iterdir()}

    def check(work: Path) -> None:
        folder = work / "fz"
        for p in freeze_folder(folder).freezes:
            if p.read_bytes() not in (old.get(p.name), new.get(p.name)):
                raise Loss(f"{p.name} is neither the old freeze nor the refreshed one")
        lost = lost_rows(before, folder_rows(folder))
        if lost:
            raise Loss(f"{lost} rows of the freeze and its tune files are gone", rows=lost)

    return Scenario("refresh-freeze", lambda w: ["db", "refresh-freeze", "--freeze-dir", str(w / "fz")], check,
                    len(before), template)


def promote_scenario(template: Path, rows: int) -> Scenario:
    template.mkdir(parents=True)
    db = _base_db(template / "t.db")
    with open_store(db, "w") as s:
        kid = kernel_id(KERNELS[0])
        s.record([MeasurementRow.ok(kid, f"B={b}", {"block": 2 ** (4 + i % 7), "num_warps": 2 ** (i // 7)},
                                    H200.name, "rank", 1.0 + (i * 7 + b) % 31, samples=3)
                  for b in range(1, rows // 20) for i in range(17)])
    before = key_counts(db)
    after_db = template.parent / f"{template.name}-after.db"
    shutil.copyfile(db, after_db)
    with open_store(after_db, "w") as s:
        promote_fastest(s)
    after = key_counts(after_db)
    return Scenario("promote", lambda w: ["db", "promote", "--db", str(w / "t.db")],
                    lambda w: _same_or(w / "t.db", before, after), sum(before[0].values()), template)


def tune_scenario(template: Path, rows: int, into_file: bool = False) -> Scenario:
    """`emmy tune` of the mlp at a small shape, into a database or merged into an existing tune file."""
    from emmy_core.bench.harness import dedupe
    from emmy_core.bench.plan import model_units, tune_plan
    from emmy_core.store import CardRow
    from emmy_core.targets import resolve_card

    template.mkdir(parents=True)
    card = resolve_card("local")
    planned = dedupe(tune_plan(model_units("mlp", {"B": 1, "S": 8}), card, 2, 0))
    per_kernel = Counter({(card.name, p.unit.kernel_id): len(p.variants) for p in planned})
    args = ["tune", "--model", "mlp", "--shape", "B=1,S=8", "--budget", "2", "--setting", "rank", "--no-progress",
            "--max-busy", "1", "--spread-limit", "1000", "--timeout", "60"]
    if not into_file:
        def check_db_file(work: Path) -> None:
            path = work / "t.db"
            if not path.exists():
                return  # killed before it opened the database: nothing there to lose
            _same_or(path, ({}, {}), (dict(per_kernel), {}))

        return Scenario("tune", lambda w: [*args, "--db", str(w / "t.db")], check_db_file,
                        sum(per_kernel.values()), template)
    existing = write_tune_file(template / tune_file_name(card.name, "20261130T000000Z"),
                               card=CardRow.from_card(card), kernels=[KERNELS[0]],
                               measurements=[MeasurementRow.ok(kernel_id(KERNELS[0]), f"B={i}", {"vec": 4},
                                                               card.name, "rank", 2.0, samples=3)
                                             for i in range(1, rows // 40)])
    mem = MemoryStore()
    import_into(mem, [existing])
    before = row_map(mem)

    def check_file(work: Path) -> None:
        path = work / existing.name
        if not path.exists():
            raise Loss("the tune file is gone", rows=len(before))
        got = MemoryStore()
        (outcome,) = import_into(got, [path])
        if not outcome.ok:
            raise Loss(f"the tune file is not whole: {outcome.message[:300]}", rows=len(before))
        lost = lost_rows(before, row_map(got))
        if lost:
            raise Loss(f"{lost} rows of the tune file are gone", rows=lost)

    return Scenario("tune into a tune file", lambda w: [*args, "--tune-file", str(w / existing.name)],
                    check_file, len(before), template)


SCENARIOS: dict[str, Callable[[Path, int], Scenario]] = {  # (template folder, rows per source) -> scenario
    "import": import_scenario,
    "fresh import": lambda t, n: import_scenario(t, n, fresh=True),
    "freeze": freeze_scenario,
    "refresh-freeze": refresh_scenario,
    "promote": promote_scenario,
    "tune": tune_scenario,
    "tune into a tune file": lambda t, n: tune_scenario(t, n, into_file=True),
}


def trial(scenario: Scenario, work: Path, delay: float) -> tuple[bool, Loss | None]:
    """One kill: copy the template to `work`, run the command, kill it after `delay`, check. Returns
    whether it was killed while running, and the loss found (None: nothing lost)."""
    _copy(scenario.template, work)
    killed = run_and_kill(scenario.argv(work), delay)
    try:
        scenario.check(work)
    except Loss as loss:
        return killed, loss
    return killed, None


def timed_run(scenario: Scenario, work: Path) -> float:
    """How long the command takes when nobody kills it (to spread kill points over its run)."""
    _copy(scenario.template, work)
    t0 = time.monotonic()
    run_and_kill(scenario.argv(work), 600.0)
    scenario.check(work)
    return time.monotonic() - t0


def summary_line(name: str, trials: int, killed: int, lost: int) -> str:
    return f"{name:<22} {trials:>4} kills ({killed} while running)  rows lost {lost}"

