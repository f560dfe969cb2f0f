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


WIDTH_IN = 9.0
"""Every figure is this wide (990 px at the saved 110 dpi): it fits a 1,280-px window or dialog unscaled."""


def price_vs_time(report: EvalReport, out: Path) -> Path | None:
    groups = {k: p.arrays() for k, p in sorted(report.points.items())}
    cards = sorted({k.split(" / ")[0] for k, (t, _) in groups.items() if len(t)})
    if not cards:
        return None
    plt = _pyplot()
    cols = min(2, len(cards))
    rows = math.ceil(len(cards) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(WIDTH_IN, 3.9 * rows), squeeze=False, layout="constrained")
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
        ax.set_title(textwrap.fill(card, 48), fontsize=8)  # the whole name, wrapped
        ax.set_xlabel("measured time (µs)", fontsize=8)
        ax.set_ylabel("prior's price (µs)", fontsize=8)
        ax.legend(fontsize=7, title="setting", title_fontsize=7, loc="upper left")
    for ax in list(axes.flat)[len(cards):]:
        ax.set_visible(False)
    fig.suptitle("The prior's price against measured time (a sample of working rows per pool)", fontsize=10)
    return _save(plt, fig, out / "price_vs_time.png")


def slowdowns(report: EvalReport, out: Path) -> Path | None:
    doc = report.to_json()
    pools = doc["per_pool"]
    if not any(isinstance(r.get("top1"), float) for r in pools):
        return None
    plt = _pyplot()
    keys = sorted(doc["by_card"])
    fig, (left, right) = plt.subplots(2, 1, figsize=(WIDTH_IN, 4.2 + 0.45 * len(keys) + 2.6),
                                      height_ratios=(4.2, 0.45 * len(keys) + 1.0), layout="constrained")
    color = {name: f"C{i}" for i, (name, _) in enumerate(SLOWDOWN_LINES)}  # one colour per figure in both panels
    for name, label in SLOWDOWN_LINES:
        _ecdf(left, [r[name] for r in pools if isinstance(r.get(name), float)], label, color=color[name])
    left.set_xscale("log")
    left.set_xlabel("slowdown against the fastest measured (1 = best)", fontsize=8)
    left.set_ylabel("share of pools at or below", fontsize=8)
    left.set_title("Per-pool slowdowns (pool counts in the legend)", fontsize=9)
    left.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    y = np.arange(len(keys))
    shown = [(n, lab) for n, lab in SLOWDOWN_LINES if n != "top5"]
    height = 0.8 / len(shown)
    for i, (name, label) in enumerate(shown):
        values = [doc["by_card"][k].get(name) for k in keys]
        right.barh(y + (i - (len(shown) - 1) / 2) * height, [v if v is not None else math.nan for v in values],
                   height=height, label=label, color=color[name])
    right.axvline(1.0, color="black", linewidth=0.8)
    right.set_yticks(y, [textwrap.fill(k, 44) for k in keys], fontsize=7)  # whole names, wrapped between words
    right.invert_yaxis()
    right.set_xlabel("geometric mean slowdown (1 = the fastest measured)", fontsize=8)
    right.set_title("Per card and setting", fontsize=9)
    right.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.01, 0.5), frameon=False)
    return _save(plt, fig, out / "slowdowns.png")


def golden_ranks(report: EvalReport, out: Path) -> Path | None:
    pools = [r for r in report.pools if isinstance(r.get("golden_rank"), float)]
    if not pools:
        return None
    plt = _pyplot()
    keys = sorted({f"{r['card']} / {r['setting']}" for r in pools})
    fig, ax = plt.subplots(figsize=(WIDTH_IN, 4.4 + 0.17 * len(keys)), layout="constrained")
    for i, key in enumerate(keys):
        group = [r for r in pools if f"{r['card']} / {r['setting']}" == key]
        color = f"C{i % 10}"
        _ecdf(ax, [r["golden_rank"] + 1 for r in group], key, color=color)
        _ecdf(ax, [r["golden_rank_ties"] + 1 for r in group], "", color=color, linestyle="--")
    ax.set_xscale("log")
    ax.set_xlabel("golden's place among its candidates (1 = first)", fontsize=8)
    ax.set_ylabel("share of goldens at or above", fontsize=8)
    handles, labels = ax.get_legend_handles_labels()
    strict = [(h, lab) for h, lab in zip(handles, labels, strict=True) if not lab.startswith(" (")]
    ax.set_title("Where the goldens rank: strict (solid), ties counted against (dashed)", fontsize=9)
    ax.legend([h for h, _ in strict], [lab for _, lab in strict], fontsize=7, loc="upper center",
              bbox_to_anchor=(0.5, -0.14), ncol=1, frameon=False, title="card / setting (goldens)", title_fontsize=7)
    return _save(plt, fig, out / "golden_ranks.png")


PLOT_NAMES = ("price_vs_time.png", "slowdowns.png", "golden_ranks.png")


def _save(plt: Any, fig: Any, path: Path) -> Path:
    """The figure rendered in memory, then written beside `path` and renamed over it (a PNG only)."""
    import io

    from emmy_core.fileio.safefile import atomic_write_text

    buf = io.BytesIO()
    try:
        fig.savefig(buf, format="png", dpi=110)
    finally:
        plt.close(fig)
    atomic_write_text(path, buf.getvalue())
    return path


def check_plots_out(out_dir: Path | str) -> None:
    """Refuses (FileWriteError) a plots folder that is a file, or whose plot names hold other kinds of file."""
    from emmy_core.fileio.filekind import check_output

    out = Path(out_dir)
    for name in PLOT_NAMES:
        check_output(out / name, "png", "a PNG plot")


def write_plots(report: EvalReport, out_dir: Path | str) -> list[Path]:
    """Writes the report's plots into `out_dir` (created); returns the paths written (none without data).
    A plot replaces only a PNG image of its name."""
    from emmy_core.fileio.safefile import ensure_folder

    out = Path(out_dir)
    check_plots_out(out)
    ensure_folder(out)
    written = [price_vs_time(report, out), slowdowns(report, out), golden_ranks(report, out)]
    return [p for p in written if p is not None]
