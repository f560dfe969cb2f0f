"""The resolution record as a table a person reads: one line per fork, then the notes and stale recordings."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from emmy_core.evidence.resolution import Resolution, ResolutionRecord

MAX_CELL = 200  # a cell wraps in its column; only a text longer than this (a hostile name) is cut


def _cut(text: str, width: int = MAX_CELL) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _margin(r: Resolution) -> str:
    if r.runner_up is None:
        return "-"
    if r.margin is None:
        return _cut(r.runner_up)
    if r.tier == "prior" and r.rule == "schedule":  # a score gap; elsewhere a relative time
        return f"{_cut(r.runner_up)} (score -{r.margin:.3g})"
    return f"{_cut(r.runner_up)} (+{100 * r.margin:.1f}%)"


def model_sizes(sizes: str, axes: Mapping[str, str] | None) -> str:
    """A kernel's sizes named by the model's axes: `B=128` of a kernel whose axis B is the model's B·S reads
    `B·S=128` (a model run at B=1,S=128 has no B of 128). `axes`: kernel axis -> the model dims it is made of."""
    if not axes or not sizes:
        return sizes or "-"
    parts = []
    for part in sizes.split(","):
        name, _, value = part.partition("=")
        parts.append(f"{axes.get(name, name)}={value}")
    return ",".join(parts)


def resolution_rows(record: ResolutionRecord, axes: Mapping[str, Mapping[str, str]] | None = None) -> list[list[str]]:
    """One row per fork; `axes` (kernel_id -> kernel axis -> model dims) names the sizes by the model's axes."""
    rows = []
    for r in record.resolutions:
        blocked = "; ".join(f"{_cut(o)}: {_cut(w)}" for o, w in r.blocked)
        rows.append([_cut(r.kernel), model_sizes(r.key.sizes, (axes or {}).get(r.key.kernel_id)), r.rule,
                     _spaced(_cut(r.label)), r.tier + ("" if r.applied else " (superseded)"), _cut(r.evidence),
                     _spaced(_margin(r)), blocked or "-"])
    return rows


WIDTH = 120
"""Columns a table is fitted to when the terminal's width is not known (output to a file or a pipe)."""


def terminal_width(fallback: int = WIDTH) -> int:
    """The terminal's columns (`COLUMNS` when set), else `fallback`; never under 40."""
    import shutil

    return max(40, shutil.get_terminal_size((fallback, 24)).columns)


def _spaced(label: str) -> str:
    """A knob assignment with a space after each comma, so a line breaks between knobs, never inside one."""
    return ", ".join(p.strip() for p in label.split(","))


def _longest_token(cells: Sequence[str]) -> int:
    return max((len(t) for c in cells for t in c.split()), default=1)


def fits(head: Sequence[str], rows: Sequence[Sequence[str]], width: int) -> bool:
    """Whether a table with every token whole (no word cut) fits `width` columns."""
    widths = [max(_longest_token([h]), _longest_token([r[i] for r in rows])) for i, h in enumerate(head)]
    return sum(widths) + 2 * (len(widths) - 1) <= width


def table_text(head: Sequence[str], rows: Sequence[Sequence[str]], width: int | None = None) -> str:
    """A table as plain text fitted to `width` columns (default the terminal's), wrapping long cells between
    words rather than cutting them: each column is at least as wide as its longest word."""
    import io

    from rich.console import Console
    from rich.table import Table

    width = width or terminal_width()
    table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold", expand=False)
    for i, h in enumerate(head):
        table.add_column(h, overflow="fold", min_width=min(max(_longest_token([h]), _longest_token(
            [r[i] for r in rows])), width // 2))
    for r in rows:
        table.add_row(*r)
    out = io.StringIO()
    Console(file=out, width=width, color_system=None, force_terminal=False, highlight=False,
            emoji=False, markup=False).print(table)
    return "\n".join(line.rstrip() for line in out.getvalue().splitlines())


def stacked_text(head: Sequence[str], rows: Sequence[Sequence[str]], width: int, first: int = 3) -> str:
    """Each row as a short block for a narrow terminal: its first `first` cells on one line, then each other
    cell on its own indented line (`choice: ...`), wrapped between words at `width`."""
    import textwrap

    out = []
    for r in rows:
        out.append(textwrap.fill("  ".join(r[:first]), width, subsequent_indent="    ", break_long_words=False,
                                 break_on_hyphens=False))
        out += [textwrap.fill(f"{h}: {c}", width, initial_indent="    ", subsequent_indent="      ",
                              break_long_words=False, break_on_hyphens=False)
                for h, c in zip(head[first:], r[first:], strict=True) if c not in ("-", "")]
    return "\n".join(out)


def render_record(record: ResolutionRecord, axes: Mapping[str, Mapping[str, str]] | None = None,
                  width: int | None = None) -> str:
    """Plain text: a header, the fork table (fitted to `width`, default the terminal's; sizes by the model's
    axes when `axes` says how each kernel's axes are made of them), the tiers counted, the notes, the stale
    recordings. A terminal too narrow for the table with every word whole gets one block per fork instead: kernel,
    sizes, rule and tier on a line, the choice, evidence and runner-up each on its own."""
    import textwrap

    width = width or terminal_width()
    head = ["kernel", "sizes", "rule", "tier", "choice", "evidence", "runner-up (margin)", "blocked"]
    lines = [f"{record.model} on {record.card} ({record.setting}), sizes {', '.join(record.sizes) or '-'}"]
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
    wrapped = [textwrap.fill(line, width, subsequent_indent="  ", break_on_hyphens=False) for line in lines]
    rows = [[r[0], r[1], r[2], r[4], r[3], *r[5:]] for r in resolution_rows(record, axes)]
    body = table_text(head, rows, width) if fits(head, rows, width) else stacked_text(head, rows, width, first=4)
    return "\n".join([wrapped[0], body, *wrapped[1:]])
