"""The evaluation as tables a person reads: one report, or two side by side with the change per card.

Tables are Markdown pipe tables padded to align, so the same text reads in a terminal and
renders in Dagster's metadata and MLflow. Cards (with their setting) are rows, figures are
columns, each figure with the count of pools behind it in parentheses, and the row over
every pool (slowdowns by geometric mean) comes last. Everything here reads the report's JSON
(`EvalReport.to_json`), so a report written with `--json` prints the same later.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

ALL = "all pools"
MEASURED_COLUMNS = (  # (figure, heading, kind)
    ("tau", "tau", "tau"), ("top1", "top-1", "x"), ("top5", "top-5", "x"), ("top10", "top-10", "x"),
    ("pick_failed", "failed picks", "share"), ("first_slowdown", "first option", "x"),
    ("random_slowdown", "random", "x"), ("similar_slowdown", "similar card", "x"), ("transfer_top1", "transfer", "x"),
    ("transfer_top5", "transfer top-5", "x"))
WORST = 5


def fmt(value: object, kind: str) -> str:
    """A figure as printed: slowdowns `1.043`, tau `0.772`, shares `12.5%`, ranks `7.3`; `-` for none."""
    if value is None or not isinstance(value, int | float):
        return "-"
    v = float(value)
    if kind == "share":
        return f"{v:.1%}"
    if kind == "rank":
        return f"{v:.1f}"
    return f"{v:.3f}"


def counted(summary: Mapping[str, Any], name: str, kind: str) -> str:
    """A figure of a summary with the count of pools behind it: `1.043 (12)`."""
    return f"{fmt(summary.get(name), kind)} ({summary.get(f'{name}_pools', 0)})"


def pipe_table(header: Sequence[str], rows: Sequence[Sequence[str]], left: int = 1) -> str:
    """A Markdown table with padded columns; the first `left` columns (names) left-aligned, figures right-aligned."""
    widths = [max(len(str(r[i])) for r in (header, *rows)) for i in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "| " + " | ".join(c.ljust(w) if i < left else c.rjust(w)
                                 for i, (c, w) in enumerate(zip(cells, widths, strict=True))) + " |"

    sep = "|" + "|".join(("-" * (w + 2)) if i < left else ("-" * (w + 1) + ":") for i, w in enumerate(widths)) + "|"
    return "\n".join([line(header), sep, *(line(r) for r in rows)])


def _rows(doc: Mapping[str, Any], by: str = "by_card") -> list[tuple[str, Mapping[str, Any]]]:
    return [*sorted(doc.get(by, {}).items()), (ALL, doc["mean"])]


def golden_table(doc: Mapping[str, Any]) -> str:
    """Golden view: where the goldens rank (mean · median · 90th percentile), strictly and with ties counted
    against them, the plateau between the two (mean · max), how often a compile would pick the golden,
    and the ranks the baselines give the goldens."""
    header = ["card / setting", "goldens", "rank strict (mean·p50·p90)", "rank ties against (mean·p50·p90)",
              "plateau (mean·max)", "compile picks golden", "first option", "random", "similar card (strict/ties)",
              "transfer (strict/ties)"]
    rows = []
    for key, s in _rows(doc):
        rows.append([key, str(s.get("golden_rank_pools", 0)), _dist(s, "golden_rank"), _dist(s, "golden_rank_ties"),
                     _dist(s, "golden_plateau", ("", "_max")), counted(s, "golden_picked", "share"),
                     counted(s, "first_golden_rank", "rank"), counted(s, "random_golden_rank", "rank"),
                     _pair(s, "similar"), _pair(s, "transfer")])
    return pipe_table(header, rows)


def _dist(s: Mapping[str, Any], name: str, parts: tuple[str, ...] = ("", "_p50", "_p90")) -> str:
    """A rank's mean and spread, `7.0·2.0·15.0 (66)`."""
    return "·".join(fmt(s.get(name + p), "rank") for p in parts) + f" ({s.get(name + '_pools', 0)})"


def _pair(s: Mapping[str, Any], baseline: str) -> str:
    """A baseline's golden rank strict and with ties counted against, `3.0/5.0 (12)`."""
    return (f"{fmt(s.get(baseline + '_golden_rank'), 'rank')}/{fmt(s.get(baseline + '_golden_rank_ties'), 'rank')} "
            f"({s.get(baseline + '_golden_rank_pools', 0)})")


def measured_table(doc: Mapping[str, Any], by: str = "by_card", label: str = "card / setting") -> str:
    """Measured view: the prior's figures and the baselines' on the same pools, each with its pool count,
    per card (`by_card`) or per kernel family (`by_family`), then over every pool."""
    header = [label, "pools", *(h for _, h, _ in MEASURED_COLUMNS)]
    rows = [[key, str(s.get("measured_pools", s.get("top1_pools", 0))),
             *(counted(s, n, k) for n, _, k in MEASURED_COLUMNS)] for key, s in _rows(doc, by)]
    return pipe_table(header, rows)


def _pool_name(r: Mapping[str, Any]) -> str:
    return f"{str(r['kernel'])[:40]} {r['sizes'] or ''}".strip() + f" ({str(r['kernel_id'])[:12]})"


def worst_pools(doc: Mapping[str, Any], figure: str, kind: str, k: int = WORST) -> str:
    """The k pools where `figure` is worst (highest): where to look first."""
    pools = sorted((r for r in doc["per_pool"] if isinstance(r.get(figure), int | float)),
                   key=lambda r: -float(r[figure]))[:k]
    if not pools:
        return ""
    members = "measured_members" if kind == "x" else "members"  # the pool the figure is over
    rows = [[_pool_name(r), f"{r['card']} / {r['setting']}", fmt(r[figure], kind), str(r.get(members, "?")),
             fmt(r.get("first_slowdown" if kind == "x" else "first_golden_rank"), kind)] for r in pools]
    return pipe_table(["kernel (sizes)", "card / setting", figure, members.replace("_", " "), "first option"], rows,
                      left=2)


def reach_line(doc: Mapping[str, Any]) -> str:
    """The lookup's reach over every pool (`ranking.baselines.lookup_reach`), where another card measured one:
    the best of the other cards' own picks, which a target below it asks a model to beat."""
    mean = doc.get("mean", doc)
    if not mean.get("reach_top1_pools"):
        return ""
    return (f"lookup reach: top-1 {counted(mean, 'reach_top1', 'x')}, top-5 {counted(mean, 'reach_top5', 'x')}: the "
            "best of the other cards' own best (own top 5) read on each pool; below it, picks no other card "
            "ranked that high.")


GOLDEN_NOTE = ("rank: candidates the prior scored above the golden; with ties counted against it (a compile takes "
               "the first of equal scores); the plateau is the gap. Baselines rank by the rule's order, a random "
               "order, the most similar other card's measured order, and the transfer order.")
MEASURED_NOTE = ("top-k: the best measured among the prior's first k working picks over the pool's best; a failed pick "
                 "is counted and the next working candidate stands in. Slowdowns are geometric means, tau and failed "
                 "picks arithmetic means; counts in parentheses.")


def _view(title: str, pools: object, empty: str, body: Callable[[], list[str]]) -> list[str]:
    """One view's section: its title, then its tables, or why it has none."""
    return [f"\n## {title}", *(body() if pools else [empty])]


def report_text(doc: Mapping[str, Any]) -> str:
    """The whole report as text (see the module's docstring)."""
    prov = doc["prior"].get("provenance", {})
    out = [f"prior {doc['prior']['source']} (fitted on dataset "
           f"{str(prov.get('dataset_digest', '?'))[:12]}, pools {prov.get('pools', '?')}, seed {prov.get('seed', '?')})",
           f"dataset {doc['dataset_digest'][:12]}: {doc['forks']} forks, {len(doc['per_pool'])} pools evaluated, "
           f"each in the context of the card it was recorded on"]
    mean = doc["mean"]
    if doc["pools"] in ("golden", "both"):
        out += _view("golden view: where each golden ranks among its candidates", mean.get("golden_pools"),
                     "no goldens in this dataset (`emmy db promote` records the fastest clean row of each measured "
                     "pool as its golden); the measured view is `--pools measured`",
                     lambda: [golden_table(doc), GOLDEN_NOTE, "\nworst goldens (ties counted against):",
                              worst_pools(doc, "golden_rank_ties", "rank")])
    if doc["pools"] in ("measured", "both"):
        out += _view("measured view: what the prior's pick costs against the fastest measured (1.000 = best)",
                     mean.get("measured_pools"), "no pool with enough measured members in this dataset",
                     lambda: [measured_table(doc), *([measured_table(doc, "by_family", "family")]
                                                     if doc.get("by_family") else []),
                              MEASURED_NOTE, *([reach_line(doc)] if reach_line(doc) else []), "\nworst pools (top-1):",
                              worst_pools(doc, "top1", "x")])
        extern = [r for r in doc["per_pool"] if r.get("extern")]
        if extern and not doc.get("extern_order"):
            out.append(f"{len(extern)} extern pools have no first option: give their Kernel Tuner caches with "
                       "--extern-order (the first configuration of each file is the baseline)")
    sizes = ", ".join(f"{k} {v}" for k, v in doc["minimum_sizes"].items())
    out.append(f"\nminimum pool sizes: {sizes}; {mean.get('pools_excluded', 0)} pools too small for every figure "
               "are counted nowhere")
    if doc.get("undescribed_cards"):
        out.append(f"{doc['undescribed_pools']} pools on cards described nowhere (hardware features missing): "
                   + ", ".join(c[:60] for c in doc["undescribed_cards"]))
    return "\n".join(out) + "\n"


COMPARED = {  # view -> (figure, heading, kind); a slowdown changes as a ratio, the rest as a difference
    "measured": (("top1", "top-1", "x"), ("top5", "top-5", "x"), ("tau", "tau", "tau"),
                 ("pick_failed", "failed picks", "share")),
    "golden": (("golden_rank", "rank strict", "rank"), ("golden_rank_ties", "rank ties against", "rank"),
               ("golden_plateau", "plateau", "rank")),
}


def change(a: object, b: object, kind: str) -> str:
    if not isinstance(a, int | float) or not isinstance(b, int | float):
        return ""
    if kind == "x":
        return f"{float(b) / float(a) - 1:+.1%}" if a else ""
    if kind == "share":
        return f"{(float(b) - float(a)) * 100:+.1f} pp"
    return f"{float(b) - float(a):+.3f}" if kind == "tau" else f"{float(b) - float(a):+.1f}"


def compare_text(a: Mapping[str, Any], b: Mapping[str, Any], a_name: str = "A", b_name: str = "B") -> str:
    """Two reports side by side per card and setting, with the change from A to B (see `compare_reports`)."""
    out = [f"A = {a_name}: prior {a['prior']['source']}, dataset {a['dataset_digest'][:12]}",
           f"B = {b_name}: prior {b['prior']['source']}, dataset {b['dataset_digest'][:12]}"]
    if a["dataset_digest"] != b["dataset_digest"]:
        out.append("warning: the two reports are on different datasets; their figures are not over the same pools")
    for view, columns in COMPARED.items():
        if not all(x["pools"] in (view, "both") for x in (a, b)):
            continue
        keys = sorted(set(a["by_card"]) | set(b["by_card"]))
        header = ["card / setting", "pools A/B"]
        for _, h, _ in columns:
            header += [f"{h} A", f"{h} B", "change"]
        rows = []
        count = "measured_pools" if view == "measured" else "golden_pools"
        for key in [*keys, ALL]:
            sa = a["mean"] if key == ALL else a["by_card"].get(key, {})
            sb = b["mean"] if key == ALL else b["by_card"].get(key, {})
            row = [key, f"{sa.get(count, 0)}/{sb.get(count, 0)}"]
            for name, _, kind in columns:
                row += [counted(sa, name, kind), counted(sb, name, kind), change(sa.get(name), sb.get(name), kind)]
            rows.append(row)
        out += [f"\n## {view} view", pipe_table(header, rows)]
    if len(out) == 2 + (a["dataset_digest"] != b["dataset_digest"]):
        out.append("the two reports share no view (one is golden, the other measured)")
    return "\n".join(out) + "\n"


def first_label(ranking: Mapping[str, Any]) -> str:
    """What the `first` choice of a fit's ranking stood for: the rule's first option, or, where no held-out
    pool had a rule's order (imported caches: `first_pools` 0), a random pick's expectation."""
    if ranking.get("first_pools") == 0:
        return "the rule's order (a random pick's expectation: no held-out pool has a rule's order)"
    return "the rule's first option"


def refused_lines(ranking: Mapping[str, Any]) -> list[str]:
    """One line per choice with a lower top-1 than the shipped one that the selection refused, and why."""
    return [f"  not shipped though its top-1 was lower: {r.get('mode')} ({r.get('source')}, weight "
            f"{r.get('weight')}), top-1 {fmt(r.get('top1'), 'x')}: {r.get('why')}"
            for r in ranking.get("refused", []) if isinstance(r, Mapping)]


def fit_text(report: Mapping[str, Any]) -> str:
    """A fit's `metrics.json` as a person reads it: the card split (cards the fit never saw) per card and per
    family beside the baselines on the same pools, the ranking it selected there, and the kernel split."""
    rk = report.get("ranking", {})
    out = [f"validated on {report.get('split', '?')} split ({len(report.get('folds', []))} folds): each held-out "
           "card ranked from a model fitted without it, its transfer features from the other cards only"]
    if report.get("split") == "card":
        out += [measured_table(report), measured_table(report, "by_family", "family")]
        out += [reach_line(report)] if reach_line(report) else []
    choices = ", ".join(f"{c['source']} {c['weight']:.2f}: {fmt(c.get('top1'), 'x')}" for c in rk.get("candidates", []))

    def pct(v: object) -> str:
        return f"{float(v):+.1%}" if isinstance(v, int | float) else "-"

    out.append(f"shipped ranking: {rk.get('mode')} ({rk.get('source')}, weight {rk.get('weight')}), top-1 on held-out cards "
               f"{fmt(rk.get('top1'), 'x')}; {pct(rk.get('vs_first'))} against {first_label(rk)}, "
               f"{pct(rk.get('vs_ranker'))} against the ranker alone, "
               f"{pct(rk.get('vs_transfer_order'))} against the transfer order, {pct(rk.get('vs_transfer_baseline'))} "
               f"against the transfer baseline (every weight: {choices or 'none'})")
    out += refused_lines(rk)
    km = report.get("kernel_mean", {})
    out.append(f"kernel split ({len(report.get('kernel_folds', []))} folds, new kernels on known cards): top-1 "
               f"{fmt(km.get('top1'), 'x')}, top-5 {fmt(km.get('top5'), 'x')}, first option "
               f"{fmt(km.get('first_slowdown'), 'x')}, random {fmt(km.get('random_slowdown'), 'x')}")
    return "\n".join(out)


TERMINAL_WIDTH = 120


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def terminal_text(markdown: str, width: int = TERMINAL_WIDTH) -> str:
    """The tables' text for a terminal: every pipe table re-laid out by rich to fit `width` columns, a long cell
    wrapping within its column between words (a column is as wide as its longest word: a card's name never breaks
    inside a word; nothing cut); figures stay right-aligned. Other lines are kept as they are."""
    import io

    from rich.console import Console
    from rich.table import Table

    lines, out, i = markdown.splitlines(), [], 0
    while i < len(lines):
        if not (lines[i].startswith("|") and i + 1 < len(lines) and set(lines[i + 1]) <= set("|-: ")):
            out.append(lines[i])
            i += 1
            continue
        head, aligns = _cells(lines[i]), _cells(lines[i + 1])
        table = Table(box=None, show_edge=False, pad_edge=False, header_style="bold")
        i += 2
        body = []
        while i < len(lines) and lines[i].startswith("|"):
            body.append(_cells(lines[i]))
            i += 1
        for k, (h, a) in enumerate(zip(head, aligns, strict=False)):  # a column is as wide as its longest word
            words = [w for c in [h, *(r[k] for r in body if k < len(r))] for w in c.split()]
            table.add_column(h, overflow="fold", justify="right" if a.endswith(":") else "left",
                             min_width=min(max((len(w) for w in words), default=1), width // 2))
        for r in body:
            table.add_row(*r)
        buf = io.StringIO()
        Console(file=buf, width=width, color_system=None, force_terminal=False, highlight=False, emoji=False,
                markup=False).print(table)
        out += [line.rstrip() for line in buf.getvalue().splitlines()]
    return "\n".join(out)
