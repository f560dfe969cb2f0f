"""`emmy db check`: does an instance agree with itself? A count of failing rows per kind.

It checks the tables, not the code (seed 09): it never re-derives a kernel's identity
from its text or re-runs the compiler; a row the current code disagrees with is
re-benched or re-imported, not repaired. Kinds:

- `schedule_digest`: a schedule whose id is not the digest of its knobs, or whose knobs are
  not canonical JSON of an object;
- `dangling_reference`: a row naming a kernel or schedule that is not stored;
- `undescribed_card`: a card named by a measurement or golden with no description in `cards`;
- `unknown_knob`: a schedule with a knob outside its vocabulary (unknown name, bad value, or
  a knob of the other target's vocabulary than a card it was measured on);
- `decision_measurement`: a measurement (or golden schedule) whose knobs spell a cut or a split;
- `stale_version`: a version key missing from `meta` or not the current one;
- `duplicate_key`: more than one measurement row for one key;
- `malformed_row`: a row breaking a writer rule (ok/failed consistency, placeholder time,
  non-canonical sizes, a setting outside the compile settings, a routing or golden decision
  that is not a decision).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emmy_core.codegen.backend import SETTINGS
from emmy_core.ir import IRError, format_sizes, parse_sizes
from emmy_core.knobs.vocab import (
    canonical_knobs,
    decision_in_knobs,
    knobs_problem,
    parse_decision,
    schedule_id,
)
from emmy_core.store.batch import knob_target_problem
from emmy_core.store.connect import DEFAULT_LOCK_TIMEOUT, connect, refuse_unusable, translated
from emmy_core.store.errors import StoreError
from emmy_core.store.rows import PLACEHOLDER_US
from emmy_core.store.schema import TABLE_NAMES
from emmy_core.store.versions import VERSION_KEYS, current_versions

KINDS = ("schedule_digest", "dangling_reference", "undescribed_card", "unknown_knob", "decision_measurement",
         "stale_version", "duplicate_key", "malformed_row")
MAX_EXAMPLES = 3


@dataclass
class CheckReport:
    path: str
    counts: dict[str, int] = field(default_factory=lambda: dict.fromkeys(KINDS, 0))
    examples: dict[str, list[str]] = field(default_factory=lambda: {k: [] for k in KINDS})
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not any(self.counts.values())

    def add(self, kind: str, count: int, examples: list[str]) -> None:
        self.counts[kind] += count
        room = MAX_EXAMPLES - len(self.examples[kind])
        self.examples[kind].extend(examples[:max(0, room)])

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "ok": self.ok, "counts": self.counts,
                "examples": {k: v for k, v in self.examples.items() if v}, "seconds": round(self.seconds, 3)}


def _count_and_examples(con: Any, sql: str, params: list | None = None) -> tuple[int, list[str]]:
    """Runs a query returning (description) rows; the count and the first few descriptions."""
    total = con.execute(f"SELECT count(*) FROM ({sql})", params or []).fetchall()[0][0]
    examples = [r[0] for r in con.execute(f"{sql} LIMIT {MAX_EXAMPLES}", params or []).fetchall()] if total else []
    return total, examples


def _check_versions(con: Any, report: CheckReport) -> None:
    found = dict(con.execute("SELECT key, value FROM meta").fetchall())
    want = current_versions()
    bad = [f"{k}: found {found.get(k, 'none')}, current {want[k]}" for k in VERSION_KEYS if found.get(k) != want[k]]
    report.add("stale_version", len(bad), bad)


def _check_schedules(con: Any, report: CheckReport) -> None:
    rows = con.execute("SELECT schedule_id, knobs FROM schedules ORDER BY schedule_id").fetchall()
    decisions: list[str] = []
    for sid, text in rows:
        try:
            knobs = json.loads(text)
            if not isinstance(knobs, dict):
                raise ValueError("not an object")
            canonical = canonical_knobs(knobs)
        except (ValueError, TypeError) as exc:
            report.add("schedule_digest", 1, [f"schedule {sid[:16]}: knobs are not a JSON object ({exc})"])
            continue
        if canonical != text or schedule_id(knobs) != sid:
            report.add("schedule_digest", 1, [f"schedule {sid[:16]}: digest does not match knobs {text[:60]}"])
        if decision_in_knobs(knobs) is not None:
            decisions.append(sid)
            continue
        problem = knobs_problem(knobs)
        if problem is not None:
            report.add("unknown_knob", 1, [f"schedule {sid[:16]}: {problem}"])
    if decisions:
        import pyarrow as pa

        con.register("ck_decisions", pa.table({"schedule_id": pa.array(decisions, pa.string())}))
        n, ex = _count_and_examples(
            con, "SELECT 'measurement of ' || left(m.kernel_id, 12) || ' on ' || m.card || ' spells a decision' "
                 "FROM measurements m JOIN ck_decisions d USING (schedule_id)")
        g, gex = _count_and_examples(
            con, "SELECT 'golden of ' || left(g.kernel_id, 12) || ' on ' || g.card || ' spells a decision' "
                 "FROM goldens g JOIN ck_decisions d USING (schedule_id)")
        con.unregister("ck_decisions")
        report.add("decision_measurement", n + g, ex + gex)
    # Knobs of the other target's vocabulary than the card they were measured on.
    pairs = con.execute(
        "SELECT DISTINCT s.schedule_id, s.knobs, c.target FROM (SELECT schedule_id, card FROM measurements "
        "UNION SELECT schedule_id, card FROM goldens WHERE schedule_id IS NOT NULL) u "
        "JOIN schedules s USING (schedule_id) JOIN cards c ON c.name = u.card ORDER BY 1, 3").fetchall()
    flagged: set[str] = set()
    for sid, text, target in pairs:
        try:
            problem = knob_target_problem(text, target)
        except (ValueError, TypeError, AttributeError):
            continue  # counted above as schedule_digest
        if problem is not None and sid not in flagged:
            flagged.add(sid)
            report.add("unknown_knob", 1, [f"schedule {sid[:16]}: {problem}"])


_DANGLING = (
    "SELECT 'measurements.kernel_id ' || m.kernel_id FROM measurements m ANTI JOIN kernels k USING (kernel_id)",
    "SELECT 'measurements.schedule_id ' || m.schedule_id FROM measurements m ANTI JOIN schedules s USING (schedule_id)",
    "SELECT 'routing.parent_id ' || r.parent_id FROM routing r ANTI JOIN kernels k ON k.kernel_id = r.parent_id",
    "SELECT 'routing.piece_id ' || r.piece_id FROM routing r ANTI JOIN kernels k ON k.kernel_id = r.piece_id",
    "SELECT 'goldens.kernel_id ' || g.kernel_id FROM goldens g ANTI JOIN kernels k USING (kernel_id)",
    "SELECT 'goldens.schedule_id ' || g.schedule_id FROM goldens g ANTI JOIN schedules s USING (schedule_id) "
    "WHERE g.schedule_id IS NOT NULL",
)
_UNDESCRIBED = (
    "SELECT 'card ' || u.card || ' has no row in cards' FROM (SELECT DISTINCT card FROM measurements UNION "
    "SELECT DISTINCT card FROM goldens) u ANTI JOIN cards c ON c.name = u.card",
    "SELECT 'card ' || name || ' has no target' FROM cards WHERE target IS NULL OR target NOT IN ('cuda', 'cpu')",
)
_MALFORMED = (
    "SELECT 'ok measurement of ' || left(kernel_id, 12) || ' breaks the ok-row rules' FROM measurements "
    "WHERE status = 'ok' AND (failure IS NOT NULL OR NOT (median_us > 0 AND median_us < ?) OR samples < 1 "
    "OR spread < 0 OR isnan(spread))",
    "SELECT 'failed measurement of ' || left(kernel_id, 12) || ' lacks its failure kind or placeholder time' "
    "FROM measurements WHERE status = 'failed' AND (failure IS NULL OR median_us <> ?)",
)


def _check_malformed(con: Any, report: CheckReport) -> None:
    for sql in _MALFORMED:
        report.add("malformed_row", *_count_and_examples(con, sql, [PLACEHOLDER_US]))
    for table in ("measurements", "goldens"):
        report.add("malformed_row", *_count_and_examples(
            con, f"SELECT '{table} row of ' || left(kernel_id, 12) || ': setting ' || left(setting, 40) || ' is not a "
                 f"compile setting' FROM {table} WHERE NOT list_contains(?, setting)", [list(SETTINGS)]))
    bad_sizes = []
    for (text,) in con.execute("SELECT DISTINCT sizes FROM measurements UNION SELECT DISTINCT sizes "
                               "FROM goldens").fetchall():
        try:
            if format_sizes(parse_sizes(text)) != text:
                bad_sizes.append(text)
        except IRError:
            bad_sizes.append(text)
    if bad_sizes:
        import pyarrow as pa

        con.register("ck_sizes", pa.table({"sizes": pa.array(bad_sizes, pa.string())}))
        for table in ("measurements", "goldens"):
            report.add("malformed_row", *_count_and_examples(
                con, f"SELECT '{table} sizes ' || sizes || ' not canonical' FROM {table} JOIN ck_sizes USING (sizes)"))
        con.unregister("ck_sizes")
    for table in ("routing", "goldens"):
        for (text,) in con.execute(f"SELECT DISTINCT decision FROM {table} WHERE decision IS NOT NULL").fetchall():
            try:
                parse_decision(text)
            except ValueError:
                n = con.execute(f"SELECT count(*) FROM {table} WHERE decision = ?", [text]).fetchall()[0][0]
                report.add("malformed_row", n, [f"{table} decision {text[:40]!r} is not a decision"])


def check_db(path: Path | str, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> CheckReport:
    """Checks the store file at `path` (read-only; any version) and returns the counts per kind."""
    path = Path(path)
    refuse_unusable(path)
    if not path.is_file():
        raise StoreError(f"no store at {path}")
    started = time.perf_counter()
    con = connect(path, read_only=True, lock_timeout=lock_timeout)
    try:
        with translated(path, "checking"):
            present = {r[0] for r in con.execute(
                "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall()}
            missing = [t for t in TABLE_NAMES if t not in present]
            if missing:
                raise StoreError(f"{path} is not an Emmy store of this schema: {', '.join(missing)} missing")
            report = CheckReport(str(path))
            _check_versions(con, report)
            _check_schedules(con, report)
            for sql in _DANGLING:
                report.add("dangling_reference", *_count_and_examples(con, sql))
            for sql in _UNDESCRIBED:
                report.add("undescribed_card", *_count_and_examples(con, sql))
            report.add("duplicate_key", *_count_and_examples(
                con, "SELECT 'key of ' || left(kernel_id, 12) || ' at ' || sizes || ' on ' || card || ' ' || setting "
                     "|| ' x' || count(*) FROM measurements GROUP BY kernel_id, sizes, schedule_id, card, setting "
                     "HAVING count(*) > 1"))
            _check_malformed(con, report)
    finally:
        con.close()
    report.seconds = time.perf_counter() - started
    return report
