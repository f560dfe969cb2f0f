"""The resolution record as a table a person reads: one line per fork, then the notes and stale recordings."""

from __future__ import annotations

from emmy_core.evidence.resolution import Resolution, ResolutionRecord

MAX_CELL = 48


def _cut(text: str, width: int = MAX_CELL) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _margin(r: Resolution) -> str:
    if r.runner_up is None:
        return "-"
    if r.margin is None:
        return _cut(r.runner_up, 30)
    if r.tier == "prior" and r.rule == "schedule":  # a score gap; elsewhere a relative time
        return f"{_cut(r.runner_up, 30)} (score -{r.margin:.3g})"
    return f"{_cut(r.runner_up, 30)} (+{100 * r.margin:.1f}%)"


def resolution_rows(record: ResolutionRecord) -> list[list[str]]:
    rows = []
    for r in record.resolutions:
        blocked = "; ".join(f"{_cut(o, 24)}: {_cut(w, 60)}" for o, w in r.blocked)
        rows.append([_cut(r.kernel, 40), r.key.sizes or "-", r.rule, _cut(r.label, 40),
                     r.tier + ("" if r.applied else " (superseded)"), _cut(r.evidence, 60), _margin(r),
                     blocked or "-"])
    return rows


def render_record(record: ResolutionRecord) -> str:
    """Plain text: a header, the fork table, the tiers counted, the notes, the stale recordings."""
    head = ["kernel", "sizes", "rule", "choice", "tier", "evidence", "runner-up (margin)", "blocked"]
    rows = resolution_rows(record)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    lines = [f"{record.model} on {record.card} ({record.setting}), sizes {', '.join(record.sizes) or '-'}"]
    lines.append("  ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)).rstrip())
    lines.append("  ".join("-" * w for w in widths))
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    tiers = record.tiers()
    lines.append("forks by tier: " + ", ".join(f"{t} {n}" for t, n in tiers.items()))
    fell = record.fell_through()
    if fell:
        lines.append(f"{len(fell)} fork(s) fell past the measured tiers (golden, local); why each tier did not "
                     "answer is in the notes and in --json ('tried')")
    for note in record.notes:
        lines.append(f"note: {note}")
    for s in record.stale:
        lines.append(f"stale recording: {s.kernel} ({s.kernel_id[:12]}) at {s.sizes} ({s.setting}) in {s.source}: "
                     f"{s.why}")
    return "\n".join(lines)
