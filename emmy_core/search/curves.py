"""Search curves: each strategy replayed on each measured pool of an export, scored the way the field scores tuners.

Every fork of a dataset export with measured members becomes a frozen pool (its measured
members, with the prior's scores, the rule's or cache file's order, and the transfer evidence
of the same kernel on the other cards of the export). Each strategy is replayed on each pool
(`emmy_core.search.replay`; a stochastic one once per seed), and per budget the figure is
the geometric mean over pools of (best found) / (pool best), per card and overall, with the
count of pools; a run that found nothing working by then counts the pool's slowest working
time. Runs of outside tuners (Kernel Tuner's strategies in simulation mode, `bench/search.py`)
enter as `Runs` too, and are scored the same.

Beside it, the score of the autotuning methodology of Kernel Tuner's authors (Willemsen et al.,
the `autotuning-methodology` package): per pool, the curve of best found over function
evaluations 1..max budget, standardised against the calculated random-search baseline without
replacement, `(curve - random) / (optimum - random)` (0: random search, 1: the optimum at
once), averaged over the evaluations and then over pools. The package's own class computes
the baseline (`RandomSearchCalculatedBaseline`, its expected best after M draws, smoothed);
evaluations where that baseline already is the optimum are left out (the package refuses to
divide by zero there; its own experiments cut the range before), and a pool small enough for
random search to reach its optimum at once has no score. It is a bench-only extra
(`pip install .[bench]`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emmy_core.search.replay import FrozenPool, replay
from emmy_core.search.strategy import SearchPool, SearchStrategy, make_strategy

DEFAULT_BUDGETS = (1, 2, 4, 8, 16, 32)
STOCHASTIC = frozenset({"random"})
Runs = dict[str, list[list[float | None]]]  # pool label -> per run, the time of each trial in order (None: failed)


@dataclass(frozen=True)
class PoolTruth:
    """What the scoring knows of a pool: its card and its working times (any unit, one per pool)."""

    label: str
    card: str
    working: np.ndarray  # sorted ascending

    @property
    def best(self) -> float:
        return float(self.working[0])

    @property
    def worst(self) -> float:
        return float(self.working[-1])


def truth_of(label: str, card: str, times: Iterable[float]) -> PoolTruth | None:
    """A pool's truth from its times (NaN for failures); None when nothing in it works."""
    t = np.asarray(list(times), dtype=np.float64)
    ok = np.sort(t[np.isfinite(t)])
    return PoolTruth(label, card, ok) if len(ok) else None


def frozen_pools(dataset: Any, prior: Any | None, extern_order: Mapping[tuple[str, str], Mapping[str, int]] | None = None,
                 min_members: int = 2) -> list[tuple[str, FrozenPool]]:
    """(card, frozen pool) per fork of `dataset` (a `emmy_core.prior.dataset.Dataset`) with `min_members`
    measured members, at least one working. Scores come from `prior` (None: none); transfer evidence
    from the same kernel, sizes and setting on the dataset's other cards."""
    from emmy_core.eval.figures import rule_order
    from emmy_core.ranking import baselines

    out: list[tuple[str, FrozenPool]] = []
    for fork in dataset.forks:
        m = np.flatnonzero(fork.measured)
        if len(m) < min_members or not fork.ok[m].any():
            continue
        knobs = tuple(fork.knobs[i] for i in m)
        rule = rule_order(fork, None if extern_order is None else extern_order.get((fork.kernel_id, fork.card_name)))
        if rule is not None:  # the rule's order (an extern kernel: its cache file's) over the measured members
            order = tuple(int(j) for j in np.argsort(-rule[m], kind="stable"))
            first: int | None = order[0]
        else:
            order, first = tuple(range(len(m))), None
        scores = None
        if prior is not None:
            scores = np.asarray(prior.score(fork.kernel, fork.sizes, fork.card, fork.setting, list(knobs),
                                            ordered=fork.first is not None))
        elsewhere = baselines.same_kernel_elsewhere(fork, dataset.forks)
        transfer, evidence = None, None
        if elsewhere:
            t = baselines.transfer_scores(fork, elsewhere)[m]
            transfer = np.where(t <= baselines.UNSEEN, np.nan, t)
            per_card = [baselines.transfer_scores(fork, [other])[m] for other in elsewhere]
            evidence = tuple(np.where(e <= baselines.UNSEEN, np.nan, e) for e in per_card)
        name = getattr(fork.kernel, "name", fork.kernel_id[:12])
        label = f"{fork.card_name} / {name} {fork.sizes} / {fork.setting}"
        pool = SearchPool(knobs, order, first, scores, transfer, label, evidence)
        out.append((fork.card_name, FrozenPool(pool, fork.times[m].copy())))
    return out


def replay_runs(pools: Sequence[tuple[str, FrozenPool]], strategy: str, budget: int, seeds: Sequence[int],
                make: Callable[[str, int], SearchStrategy] = make_strategy, first_always: bool = True) -> Runs:
    """Per pool label, the trials' times of `strategy` replayed within `budget` (once per seed if stochastic).
    Random's sample depends on its budget: its runs are replayed per budget by `emmy_search_curves`."""
    out: Runs = {}
    for _, frozen in pools:
        runs = []
        for seed in (seeds if strategy in STOCHASTIC else seeds[:1]):
            trials = replay(make(strategy, seed), frozen, budget, first_always=first_always)
            runs.append([t.time_us for t in trials])
        out[frozen.pool.label] = runs
    return out


def _best_at(run: Sequence[float | None], budget: int, truth: PoolTruth) -> float:
    found = [t for t in run[:budget] if t is not None and math.isfinite(t)]
    return min(found) if found else truth.worst


def geomean(values: Sequence[float]) -> float | None:
    return float(math.exp(sum(math.log(v) for v in values) / len(values))) if values else None


def slowdowns(runs: Runs, truths: Mapping[str, PoolTruth], budget: int) -> dict[str, float]:
    """Per pool, the geomean over runs of (best found within `budget`) / (pool best)."""
    out = {}
    for label, rs in runs.items():
        truth = truths.get(label)
        if truth is None or not rs:
            continue
        g = geomean([_best_at(r, budget, truth) / truth.best for r in rs])
        if g is not None:
            out[label] = g
    return out


def best_curve(run: Sequence[float | None], length: int, truth: PoolTruth) -> np.ndarray:
    """After each of the first `length` measurements of a run, the best time found (the pool's worst until one
    works; a run shorter than `length`, its pool measured out, keeps its last value): `_best_at` at every budget
    in one pass."""
    times = np.array([t if t is not None and math.isfinite(t) else np.inf for t in run[:length]], dtype=np.float64)
    curve = np.full(length, truth.worst)
    if len(times):
        found = np.minimum.accumulate(times)
        found[np.isinf(found)] = truth.worst
        curve[: len(found)] = found
        curve[len(found):] = found[-1]
    return curve


def methodology_score(runs: Runs, truths: Mapping[str, PoolTruth], max_budget: int) -> float | None:
    """The autotuning methodology's score (module docstring), mean over pools; needs `autotuning-methodology`.
    A pool's evaluations stop at its count of working members: from there random search has found its best,
    where the score is undefined and left out, so a budget past every pool costs no more than the pools."""
    from autotuning_methodology.baseline import RandomSearchCalculatedBaseline
    from autotuning_methodology.searchspace_statistics import SearchspaceStatistics

    scores = []
    for label, rs in runs.items():
        truth = truths.get(label)
        if truth is None or not rs or len(truth.working) < 2 or truth.best == truth.worst:
            continue
        fevals = np.arange(1, min(max_budget, len(truth.working)) + 1)
        stats = SearchspaceStatistics.__new__(SearchspaceStatistics)  # the package reads its own files; ours are
        stats.minimization = True                                     # in memory: the fields the baseline reads
        stats.objective_performances_total_sorted = truth.working
        stats.objective_performances_total_sorted_nan = truth.working
        baseline = RandomSearchCalculatedBaseline(stats, include_nan=False)
        curve = np.mean([best_curve(r, len(fevals), truth) for r in rs], axis=0)
        random_curve = baseline.get_curve(fevals, "fevals")
        keep = random_curve != truth.best  # where random search has reached the optimum the score is undefined
        if not keep.any():  # (the package refuses to divide by zero there): those evaluations are left out
            continue
        standard = (curve[keep] - random_curve[keep]) / (truth.best - random_curve[keep])  # the package's formula
        scores.append(float(np.mean(standard)))
    return float(np.mean(scores)) if scores else None


@dataclass
class SearchCurves:
    """Per strategy and budget the geomean slowdown and pool count, overall and per card; the methodology score."""

    budgets: tuple[int, ...]
    curves: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    per_card: dict[str, dict[str, dict[str, dict[str, Any]]]] = field(default_factory=dict)
    methodology: dict[str, float | None] = field(default_factory=dict)
    methodology_missing: str | None = None  # why no methodology score was computed (the package is a bench extra)

    def add(self, strategy: str, runs_per_budget: Mapping[int, Runs], truths: Mapping[str, PoolTruth],
            with_methodology: bool = True) -> None:
        """Scores one strategy's runs (per budget: a strategy whose path does not depend on its budget may give
        the runs of the largest one for every budget)."""
        self.curves[strategy] = {}
        cards = sorted({truths[lbl].card for runs in runs_per_budget.values() for lbl in runs if lbl in truths})
        for b in self.budgets:
            per_pool = slowdowns(runs_per_budget[b], truths, b)
            self.curves[strategy][str(b)] = {"slowdown": geomean(list(per_pool.values())), "pools": len(per_pool)}
            for card in cards:
                vals = [v for lbl, v in per_pool.items() if truths[lbl].card == card]
                self.per_card.setdefault(card, {}).setdefault(strategy, {})[str(b)] = {
                    "slowdown": geomean(vals), "pools": len(vals)}
        if with_methodology:
            top = max(self.budgets)
            try:
                self.methodology[strategy] = methodology_score(runs_per_budget[top], truths, top)
            except ImportError as exc:
                self.methodology[strategy] = None
                self.methodology_missing = f"{exc}; install the bench extra (pip install .[bench])"

    def to_json(self) -> dict[str, Any]:
        return {"format": "emmy-search-curves", "version": 1, "budgets": list(self.budgets), "curves": self.curves,
                "per_card": self.per_card, "methodology_score": self.methodology,
                "methodology_missing": self.methodology_missing}

    def markdown(self) -> str:
        head = "| strategy | " + " | ".join(f"b={b}" for b in self.budgets) + " | methodology score |\n"
        head += "|---|" + "---|" * (len(self.budgets) + 1) + "\n"

        def row(name: str, c: Mapping[str, Mapping[str, Any]], score: float | None) -> str:
            cells = [("-" if c[str(b)]["slowdown"] is None else f"{c[str(b)]['slowdown']:.3f} ({c[str(b)]['pools']})")
                     for b in self.budgets]
            return f"| {name} | " + " | ".join(cells) + f" | {'-' if score is None else f'{score:.3f}'} |\n"

        text = "All pools: geomean of best found / pool best (pools)\n\n" + head
        if self.methodology_missing:
            text = f"methodology score not computed: {self.methodology_missing}\n\n" + text
        text += "".join(row(s, c, self.methodology.get(s)) for s, c in self.curves.items())
        for card, by in sorted(self.per_card.items()):
            text += f"\n{card}\n\n" + head + "".join(row(s, c, None) for s, c in by.items())
        return text


def emmy_search_curves(pools: Sequence[tuple[str, FrozenPool]], strategies: Sequence[str], budgets: Sequence[int],
                       seeds: Sequence[int] = (0, 1, 2, 3, 4), with_methodology: bool = True,
                       make: Callable[[str, int], SearchStrategy] = make_strategy, first_always: bool = True,
                       suffix: str = "", replay: Callable[..., Runs] | None = None,
                       ) -> tuple[SearchCurves, dict[str, PoolTruth]]:
    """Every strategy replayed on every pool at every budget, scored (module docstring). `first_always`: the
    rule's first option is measured first, as a tune does (False: the strategy's own order from the start,
    as an outside tuner has no first option); `suffix` is added to each strategy's name in the curves;
    `replay` runs the replays (`replay_runs`'s signature; default in this process,
    `emmy_core.search.replay_tasks.MappedReplay` on a cluster)."""
    replay_runs_ = replay or replay_runs
    budgets = tuple(sorted(set(budgets)))
    truths = {}
    for card, frozen in pools:
        t = truth_of(frozen.pool.label, card, frozen.times)
        if t is not None:
            truths[frozen.pool.label] = t
    result = SearchCurves(budgets)
    for name in strategies:
        if name in STOCHASTIC:
            per_budget = {b: replay_runs_(pools, name, b, seeds, make, first_always) for b in budgets}
        else:
            runs = replay_runs_(pools, name, max(budgets), seeds, make, first_always)
            per_budget = dict.fromkeys(budgets, runs)
        result.add(name + suffix, per_budget, truths, with_methodology)
    return result, truths


ALL_POOLS = "all pools"  # the overall panel's title


def plot_name(title: str) -> str:
    """The PNG a panel of `plot_curves` is written to: `search-<title>.png`, the title's non-alphanumerics as `_`."""
    return "search-" + "".join(ch if ch.isalnum() else "_" for ch in title)[:80] + ".png"


def check_plots_out(out_dir: Any, names: Sequence[str] | None = None) -> None:
    """Refuses (FileWriteError) a plots folder that is a file, or whose plot `names` hold other kinds of file:
    checked before a replay (the overall plot) and again before any plot is written (every card's)."""
    from pathlib import Path

    from emmy_core.fileio.filekind import check_output

    for name in names if names is not None else [plot_name(ALL_POOLS)]:
        check_output(Path(out_dir) / name, "png", "a search-curve plot")


def plot_curves(curves: SearchCurves, out_dir: Any) -> list[Any]:
    """One PNG of the overall curves (one line per strategy) and one per card, into `out_dir` (Agg backend).
    A plot replaces only a PNG of its name; every name is checked before the first is written, and all are
    rendered in memory and put in place together (`safefile.write_all`)."""
    import io
    from pathlib import Path

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from emmy_core.fileio.safefile import ensure_folder, write_all

    out = Path(out_dir)
    panels: list[tuple[str, Mapping[str, Mapping[str, Mapping[str, Any]]]]] = [(ALL_POOLS, curves.curves)]
    panels += [(card, by) for card, by in sorted(curves.per_card.items())]
    check_plots_out(out, [plot_name(title) for title, _ in panels])
    ensure_folder(out)

    def render(title: str, by: Mapping[str, Mapping[str, Mapping[str, Any]]]) -> bytes:
        fig, ax = plt.subplots(figsize=(6, 4))
        try:
            for i, (name, c) in enumerate(by.items()):
                xs = [b for b in curves.budgets if c[str(b)]["slowdown"] is not None]
                ax.plot(xs, [c[str(b)]["slowdown"] for b in xs], marker="o", label=name, color=plt.cm.tab20(i % 20),
                        linestyle="--" if name.startswith("kt_") else "-")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("budget (measurements, failures included)")
            ax.set_ylabel("geomean best found / pool best")
            ax.set_title(f"search curves: {title}")
            ax.grid(True, alpha=0.3)
            ax.legend(fontsize=8)
            fig.tight_layout()
            buf = io.BytesIO()
            fig.savefig(buf, format="png", dpi=100)
            return buf.getvalue()
        finally:
            plt.close(fig)

    return write_all([(out / plot_name(title), lambda t=title, b=by: render(t, b)) for title, by in panels])


CURVES_FORMAT = "emmy-search-curves"


def write_curves(curves: SearchCurves, out: Any) -> Any:
    """Writes the curves' JSON atomically; refuses (FileWriteError) to replace a file that is not search curves."""
    import json
    from pathlib import Path

    from emmy_core.fileio.safefile import atomic_write_text

    path = Path(out)
    check_curves_out(path)
    atomic_write_text(path, json.dumps(curves.to_json(), indent=1, sort_keys=True, allow_nan=False) + "\n")
    return path


def check_curves_out(out: Any) -> None:
    """Refuses (FileWriteError) a `--json` path that holds anything but search curves, before a replay."""
    from pathlib import Path

    from emmy_core.fileio.filekind import check_output

    check_output(Path(out), CURVES_FORMAT, "search curves")
