"""`emmy db stats`: how much a store holds: rows per table, per card and per setting, failures, goldens."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from emmy_core.store.connect import DEFAULT_LOCK_TIMEOUT, translated


def db_stats(path: Path | str, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> dict[str, Any]:
    """Counts of a store file (opened for reading: a file of another version is refused)."""
    from emmy_core.store.duck import DuckStore

    store = DuckStore(path, "r", lock_timeout=lock_timeout)
    try:
        con = store.con
        with translated(store.path, "counting"):
            per_card = [
                {"card": c, "target": t, "measurements": n, "ok": ok, "failed": f, "kernels": k}
                for c, t, n, ok, f, k in con.execute(
                    "SELECT m.card, any_value(c.target), count(*), count(*) FILTER (WHERE m.status = 'ok'), "
                    "count(*) FILTER (WHERE m.status = 'failed'), count(DISTINCT m.kernel_id) "
                    "FROM measurements m LEFT JOIN cards c ON c.name = m.card GROUP BY m.card ORDER BY m.card"
                ).fetchall()]
            per_setting = [
                {"setting": s, "measurements": n, "failed": f}
                for s, n, f in con.execute(
                    "SELECT setting, count(*), count(*) FILTER (WHERE status = 'failed') FROM measurements "
                    "GROUP BY setting ORDER BY setting").fetchall()]
            failures = dict(con.execute("SELECT failure, count(*) FROM measurements WHERE status = 'failed' "
                                        "GROUP BY failure ORDER BY failure").fetchall())
            goldens = con.execute("SELECT count(*), count(schedule_id), count(decision) FROM goldens").fetchall()[0]
        return {
            "path": str(store.path),
            "versions": store.versions(),
            "tables": store.counts(),
            "per_card": per_card,
            "per_setting": per_setting,
            "failures": {"total": sum(failures.values()), "by_kind": failures},
            "goldens": {"total": goldens[0], "schedules": goldens[1], "decisions": goldens[2]},
        }
    finally:
        store.close()


def cards_markdown(stats: dict[str, Any]) -> str:
    """`db_stats`'s per-card counts as a Markdown table (what the tuning database's asset shows)."""
    rows = [f"| {c['card']} | {c['target']} | {c['measurements']} | {c['failed']} | {c['kernels']} |"
            for c in stats["per_card"]]
    return "| card | target | measurements | failed | kernels |\n|---|---|---:|---:|---:|\n" + "\n".join(rows)
