"""Two priors judged on the same dataset, side by side: the candidate a fit just made and the installed one.

Both views of the evaluation, with the fit's own per-fork figures (`emmy_core.prior.training.
fork_figures` over `emmy_core.prior.metrics`: one meaning per figure, and a report of the same
shape as the fit's `metrics.json`):

- golden view: for every fork with a golden, where the golden ranks among the fork's whole
  pool, counted strictly and with ties counted against it (the gap is the plateau's width);
- measured view: over each fork's measured members, the top-1 and top-5 slowdown of the
  prior's order (a failed pick replaced by the next working one), Kendall's tau and how
  often the pick failed, per card and setting and overall; each figure with its pool count.

Beside them, on the same pools, the baselines: the rule's first option and a random pick.
The card of each fork is the export's own description of it, never this machine. `verdict`
compares the headline figure (the measured top-1 slowdown, what tracks deployed speed)
against a stated tolerance: a candidate slower than the installed prior beyond it is not
to be installed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

HEADLINE = "top1"
DEFAULT_TOLERANCE = 0.02  # a candidate may be up to 2 % slower (geometric mean of top-1 slowdowns)
FIGURES = (("top1", "measured top-1 slowdown (1.00 = best)"), ("top5", "measured top-5 slowdown"),
           ("tau", "Kendall tau, prior vs measured order"), ("pick_failed", "share of picks that failed"),
           ("golden_rank", "golden rank, strictly better candidates"),
           ("golden_rank_ties", "golden rank, ties counted against"),
           ("first_slowdown", "baseline: the rule's first option, slowdown"),
           ("random_slowdown", "baseline: a random pick, expected slowdown"))
Progress = Callable[[str], None]


def prior_view(prior: Any, forks: list[Any]) -> dict[str, Any]:
    """Both views of one prior over the forks (with the baselines on the same pools), as the fit's
    per-fork figures summarized: `overall` and `by_card` ("card / setting")."""
    from emmy_core.prior.metrics import summarize
    from emmy_core.prior.training import fork_figures

    per_group: dict[str, list[dict[str, float | None]]] = {}
    for fork in forks:
        scores = prior.score(fork.kernel, fork.sizes, fork.card, fork.setting, fork.knobs)
        per_group.setdefault(f"{fork.card_name} / {fork.setting}", []).append(fork_figures(fork, scores))
    everything = [f for group in per_group.values() for f in group]
    return {"overall": summarize(everything), "by_card": {k: summarize(v) for k, v in sorted(per_group.items())}}


@dataclass(frozen=True)
class Verdict:
    """Whether the candidate may replace the installed prior, and why (figures and tolerance stated)."""

    passed: bool
    reason: str
    candidate: float | None
    installed: float | None
    tolerance: float


def verdict(report: Mapping[str, Any], tolerance: float = DEFAULT_TOLERANCE) -> Verdict:
    """The candidate passes unless its headline figure is worse than the installed prior's beyond `tolerance`
    (or it has none where the installed prior has one). With no installed prior, it passes."""
    cand = report["priors"]["candidate"]["overall"].get(HEADLINE)
    inst_view = report["priors"].get("installed")
    inst = inst_view["overall"].get(HEADLINE) if inst_view else None
    if inst_view is None:
        return Verdict(True, "no installed prior to compare against", cand, None, tolerance)
    if inst is None:
        return Verdict(True, f"the installed prior has no {HEADLINE} figure on this dataset", cand, None, tolerance)
    if cand is None:
        return Verdict(False, f"the candidate has no {HEADLINE} figure where the installed prior has {inst:.4f}",
                       None, inst, tolerance)
    limit = inst * (1.0 + tolerance)
    if cand > limit:
        return Verdict(False, f"candidate {HEADLINE} slowdown {cand:.4f} is worse than the installed prior's "
                              f"{inst:.4f} beyond the tolerance of {tolerance:.1%} (limit {limit:.4f})",
                       cand, inst, tolerance)
    return Verdict(True, f"candidate {HEADLINE} slowdown {cand:.4f} against the installed prior's {inst:.4f} "
                         f"(tolerance {tolerance:.1%})", cand, inst, tolerance)


def side_by_side(candidate: Path | str, installed: Path | str | None, dataset_dir: Path | str, *,
                 cards_file: Path | str | None = None, progress: Progress | None = None) -> dict[str, Any]:
    """The report: both priors' views and the baselines over the dataset. `installed` None or missing: none.

    Raises `PriorError` when the candidate (or an installed prior that exists) cannot be loaded.
    """
    from emmy_core.prior import load_prior
    from emmy_core.prior.dataset import read_dataset

    data = read_dataset(dataset_dir, cards_file, progress)
    priors = {"candidate": load_prior(candidate)}
    if installed is not None and Path(installed).exists():
        priors["installed"] = load_prior(installed)
    report: dict[str, Any] = {"dataset": data.digest, "forks": len(data.forks),
                              "undescribed_cards": data.undescribed_cards, "priors": {}, "sources": {}}
    for name, p in priors.items():
        if progress is not None:
            progress(f"scoring {len(data.forks)} forks with the {name} prior")
        report["priors"][name] = prior_view(p, data.forks)
        report["sources"][name] = str(p.source)
    return report


def _cell(value: object, name: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if name == "pick_failed":
        return f"{float(value):.1%}"  # type: ignore[arg-type]
    return f"{float(value):.2f}" if name.startswith("golden") else f"{float(value):.3f}"  # type: ignore[arg-type]


def markdown_table(report: Mapping[str, Any]) -> str:
    """The overall figures as a Markdown table: the candidate beside the installed prior, with pool counts."""
    cand = report["priors"]["candidate"]["overall"]
    inst = (report["priors"].get("installed") or {}).get("overall", {})
    lines = ["| figure | candidate | installed | pools |", "|---|---:|---:|---:|"]
    for name, label in FIGURES:
        lines.append(f"| {label} | {_cell(cand.get(name), name)} | {_cell(inst.get(name), name)} | "
                     f"{cand.get(f'{name}_pools', 0)} |")
    return "\n".join(lines) + "\n"


def by_card_table(report: Mapping[str, Any]) -> str:
    """Top-1 slowdown per card and setting as a Markdown table (candidate, installed, first option)."""
    cand = report["priors"]["candidate"]["by_card"]
    inst = (report["priors"].get("installed") or {}).get("by_card", {})
    first = {k: {"top1": v.get("first_slowdown")} for k, v in cand.items()}
    lines = ["| card / setting | candidate | installed | first option | pools |", "|---|---:|---:|---:|---:|"]
    for key in sorted(cand):
        lines.append(f"| {key} | {_cell(cand[key].get('top1'), 'top1')} | "
                     f"{_cell(inst.get(key, {}).get('top1'), 'top1')} | "
                     f"{_cell(first.get(key, {}).get('top1'), 'top1')} | {cand[key].get('top1_pools', 0)} |")
    return "\n".join(lines) + "\n"


def plot(report: Mapping[str, Any], out: Path | str) -> Path:
    """A PNG: top-1 slowdown per card and setting, candidate beside installed beside the first option."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cand = report["priors"]["candidate"]["by_card"]
    inst = (report["priors"].get("installed") or {}).get("by_card", {})
    first = {k: {"top1": v.get("first_slowdown")} for k, v in cand.items()}
    keys = sorted(cand)
    x = np.arange(len(keys))

    def values(view: Mapping[str, Any]) -> list[float]:
        return [float(view.get(k, {}).get("top1") or math.nan) for k in keys]

    fig, ax = plt.subplots(figsize=(max(6.0, 1.6 * len(keys) + 2), 4.2))
    for i, (label, view) in enumerate((("candidate", cand), ("installed", inst), ("first option", first))):
        ax.bar(x + (i - 1) * 0.27, values(view), width=0.27, label=label)
    ax.axhline(1.0, color="black", linewidth=0.8)
    ax.set_xticks(x, [k.replace(" / ", "\n") for k in keys], fontsize=8)
    ax.set_ylabel("top-1 slowdown (1.00 = fastest measured)")
    ax.set_title("Measured view: the pick against the fastest, per card and setting")
    ax.legend()
    fig.tight_layout()
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
