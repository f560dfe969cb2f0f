"""PNG plots of an evaluation, for a person to look at and for the fit's MLflow run to keep.

- `price_vs_time.png` (measured view): the prior's price against the measured time of a
  seeded sample of working rows, one panel per card, log-log, the diagonal drawn: where the
  points leave the diagonal, the absolute price a structural choice sums is off;
- `slowdowns.png` (measured view): the distribution of per-pool top-1 slowdowns (the prior's
  beside its top-5 and the baselines'), and per card and setting their geometric means;
- `golden_ranks.png` (golden view): the distribution of the goldens' ranks, strict and with
  ties counted against; the gap between the two curves is the plateau.

`write_plots` writes the ones the report has data for and returns their paths.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from emmy_core.eval.report import EvalReport

SLOWDOWN_LINES = (("top1", "prior top-1"), ("top5", "prior top-5"), ("first_slowdown", "first option"),
                  ("random_slowdown", "random (expected)"), ("similar_slowdown", "similar card"),
                  ("transfer_top1", "transfer"))


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _ecdf(ax: Any, values: Sequence[float], label: str, **style: Any) -> None:
    v = np.sort(np.asarray(values, dtype=np.float64))
    if len(v):
        ax.step(v, np.arange(1, len(v) + 1) / len(v), where="post", label=f"{label} ({len(v)})", **style)


def price_vs_time(report: EvalReport, out: Path) -> Path | None:
    groups = {k: p.arrays() for k, p in sorted(report.points.items())}
    cards = sorted({k.split(" / ")[0] for k, (t, _) in groups.items() if len(t)})
    if not cards:
        return None
    plt = _pyplot()
    cols = min(3, len(cards))
    rows = math.ceil(len(cards) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(4.6 * cols, 4.2 * rows), squeeze=False, layout="constrained")
    for ax, card in zip(axes.flat, cards, strict=False):
        lo, hi = math.inf, 0.0
        for key, (t, p) in groups.items():
            if key.split(" / ")[0] != card or not len(t):
                continue
            ax.scatter(t, p, s=4, alpha=0.35, label=key.split(" / ")[1])
            lo, hi = min(lo, t.min(), p.min()), max(hi, t.max(), p.max())
        ax.plot([lo, hi], [lo, hi], color="black", linewidth=0.8, linestyle="--")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(card[:40], fontsize=9)
        ax.set_xlabel("measured time (µs)")
        ax.set_ylabel("prior's price (µs)")
        ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(cards):]:
        ax.set_visible(False)
    fig.suptitle("The prior's price against measured time\n(a sample of working rows per pool)", fontsize=10)
    return _save(plt, fig, out / "price_vs_time.png")


def slowdowns(report: EvalReport, out: Path) -> Path | None:
    doc = report.to_json()
    pools = doc["per_pool"]
    if not any(isinstance(r.get("top1"), float) for r in pools):
        return None
    plt = _pyplot()
    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.6))
    color = {name: f"C{i}" for i, (name, _) in enumerate(SLOWDOWN_LINES)}  # one colour per figure in both panels
    for name, label in SLOWDOWN_LINES:
        _ecdf(left, [r[name] for r in pools if isinstance(r.get(name), float)], label, color=color[name])
    left.set_xscale("log")
    left.set_xlabel("slowdown against the fastest measured (1 = best)")
    left.set_ylabel("share of pools at or below")
    left.set_title("Per-pool slowdowns (pool counts in the legend)")
    left.legend(fontsize=8)
    keys = sorted(doc["by_card"])
    x = np.arange(len(keys))
    shown = [(n, lab) for n, lab in SLOWDOWN_LINES if n != "top5"]
    width = 0.8 / len(shown)
    for i, (name, label) in enumerate(shown):
        values = [doc["by_card"][k].get(name) for k in keys]
        right.bar(x + (i - (len(shown) - 1) / 2) * width, [v if v is not None else math.nan for v in values],
                  width=width, label=label, color=color[name])
    right.axhline(1.0, color="black", linewidth=0.8)
    right.set_xticks(x, [textwrap.fill(k, 16) for k in keys], fontsize=7)
    right.set_ylabel("geometric mean slowdown")
    right.set_title("Per card and setting")
    right.legend(fontsize=7)
    fig.tight_layout()
    return _save(plt, fig, out / "slowdowns.png")


def golden_ranks(report: EvalReport, out: Path) -> Path | None:
    pools = [r for r in report.pools if isinstance(r.get("golden_rank"), float)]
    if not pools:
        return None
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(7.5, 4.6))
    for i, key in enumerate(sorted({f"{r['card']} / {r['setting']}" for r in pools})):
        group = [r for r in pools if f"{r['card']} / {r['setting']}" == key]
        color = f"C{i % 10}"
        _ecdf(ax, [r["golden_rank"] + 1 for r in group], f"{key[:40]} strict", color=color)
        _ecdf(ax, [r["golden_rank_ties"] + 1 for r in group], f"{key[:40]} ties against", color=color, linestyle="--")
    ax.set_xscale("log")
    ax.set_xlabel("golden's place among its candidates (1 = first)")
    ax.set_ylabel("share of goldens at or above")
    ax.set_title("Where the goldens rank: strict (solid), ties counted against (dashed)")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(plt, fig, out / "golden_ranks.png")


PLOT_NAMES = ("price_vs_time.png", "slowdowns.png", "golden_ranks.png")


def _save(plt: Any, fig: Any, path: Path) -> Path:
    """The figure rendered in memory, then written beside `path` and renamed over it (a PNG only)."""
    import io

    from emmy_core.files.safefile import atomic_write_text

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110)
    finally:
        plt.close(fig)
    atomic_write_text(path, buf.getvalue())
    return path


def check_plots_out(out_dir: Path | str) -> None:
    """Refuses (FileWriteError) a plots folder that is a file, or whose plot names hold other kinds of file."""
    from emmy_core.files.filekind import check_output

    out = Path(out_dir)
    for name in PLOT_NAMES:
        check_output(out / name, "png", "a PNG plot")


def write_plots(report: EvalReport, out_dir: Path | str) -> list[Path]:
    """Writes the report's plots into `out_dir` (created); returns the paths written (none without data).
    A plot replaces only a PNG image of its name."""
    from emmy_core.files.safefile import ensure_folder

    out = Path(out_dir)
    check_plots_out(out)
    ensure_folder(out)
    written = [price_vs_time(report, out), slowdowns(report, out), golden_ranks(report, out)]
    return [p for p in written if p is not None]
