"""`evaluate`: a prior judged on a dataset export, per card and setting, and the report that says so.

Seed 09, "Finding out where the prior is wrong". Every fork of the export (kernel, sizes, card,
setting) is scored by the prior in the compile context of the card it was recorded on: the
export's own description of that card (`emmy_core.prior.dataset`), never the machine running
the evaluation. The golden view covers forks with a golden, the measured view forks with
measured members (`emmy_core.eval.figures`); `both` computes the two from one scoring.

The report keeps one record per pool, summarizes them per "card / setting" and over every
pool (`metrics.summarize`: slowdowns by geometric mean, the rest by mean, each with the count
of pools behind it; the golden ranks and the top-1 slowdown also with their median, 90th
percentile and maximum), and serializes in the shape of a fit's `metrics.json` (`mean` over
every pool), so two reports compare by diff or with `compare_reports`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from emmy_core.eval import figures as fg
from emmy_core.eval.extern_order import FileOrder
from emmy_core.ir import Extern
from emmy_core.prior import FEATURE_VERSION, Prior, load_prior, metrics
from emmy_core.prior.dataset import Dataset, DatasetFork
from emmy_core.ranking import PriorRanker, RankContext

REPORT_FORMAT = "emmy-eval"
REPORT_VERSION = 2  # 2: by_family
VIEWS = ("golden", "measured", "both")
SPREAD = ("golden_rank", "golden_rank_ties", "golden_plateau", "top1")  # figures also reported as distributions
MAX_POINTS = 400  # measured rows per fork priced for the price-against-time plot (a seeded sample)
Progress = Callable[[str], None]


class EvalError(ValueError):
    """An evaluation that cannot be made or a report that cannot be read; the message says which and why."""


def group_key(fork: DatasetFork) -> str:
    return f"{fork.card_name} / {fork.setting}"


@dataclass
class PricePoints:
    """Measured working rows of one card and setting with the prior's price for them (µs both)."""

    times: list[np.ndarray] = field(default_factory=list)
    prices: list[np.ndarray] = field(default_factory=list)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return (np.concatenate(self.times) if self.times else np.zeros(0),
                np.concatenate(self.prices) if self.prices else np.zeros(0))


@dataclass
class EvalReport:
    """One prior on one dataset: a record per pool (its key, sizes and figures), and what it was made of."""

    view: str
    dataset_digest: str
    prior_source: str
    prior_provenance: dict[str, Any]
    forks: int
    undescribed_pools: int
    undescribed_cards: list[str]
    extern_order: bool  # whether extern kernels' first options were known (their cache files given)
    pools: list[dict[str, Any]]
    points: dict[str, PricePoints] = field(default_factory=dict, repr=False)

    def names(self) -> tuple[str, ...]:
        """The figures this report's view computes."""
        golden = (*fg.GOLDEN, *fg.GOLDEN_BASELINES)
        measured = (*fg.MEASURED, *fg.MEASURED_BASELINES)
        return {"golden": golden, "measured": measured, "both": (*golden, *measured)}[self.view]

    def summary(self, records: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        """Figures of `records` aggregated, each with `<figure>_pools`; the pools each view used."""
        names = self.names()
        figures = [{n: r.get(n) for n in names} for r in records]
        out: dict[str, Any] = metrics.summarize(figures)
        for n in names:  # a figure no pool had still shows, with its zero count
            out.setdefault(n, None)
            out.setdefault(f"{n}_pools", 0)
        for n in SPREAD:
            if n in names:
                for k, v in metrics.spread(f.get(n) for f in figures).items():
                    out[f"{n}_{k}"] = v
        out["pools_used"] = sum(1 for f in figures if any(v is not None for v in f.values()))
        out["pools_excluded"] = len(figures) - out["pools_used"]
        if self.view != "measured":
            out["golden_pools"] = sum(1 for r in records if r.get("golden_rank") is not None)
        if self.view != "golden":
            out["measured_pools"] = sum(1 for r in records if any(r.get(n) is not None for n in fg.MEASURED))
        return out

    def by_card(self) -> dict[str, dict[str, Any]]:
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in self.pools:
            groups.setdefault(f"{r['card']} / {r['setting']}", []).append(r)
        return {k: self.summary(v) for k, v in sorted(groups.items())}

    def by_family(self) -> dict[str, dict[str, Any]]:
        """The same figures per kernel family (matmul, row, elementwise, extern) over every card."""
        groups: dict[str, list[dict[str, Any]]] = {}
        for r in self.pools:
            groups.setdefault(str(r.get("family", "?")), []).append(r)
        return {k: self.summary(v) for k, v in sorted(groups.items())}

    def to_json(self) -> dict[str, Any]:
        """The report as JSON: the shape of a fit's `metrics.json` (`mean` over every pool), plus per card
        and setting (`by_card`), per kernel family (`by_family`) and per pool (`per_pool`)."""
        return {"format": REPORT_FORMAT, "version": REPORT_VERSION, "feature_version": FEATURE_VERSION,
                "dataset_digest": self.dataset_digest, "pools": self.view,
                "prior": {"source": self.prior_source, "provenance": self.prior_provenance},
                "minimum_sizes": metrics.minimum_sizes(fg.KS), "mean": self.summary(self.pools),
                "by_card": self.by_card(), "by_family": self.by_family(), "forks": self.forks, "undescribed_pools": self.undescribed_pools,
                "undescribed_cards": list(self.undescribed_cards), "extern_order": self.extern_order,
                "per_pool": self.pools}

    def markdown(self) -> str:
        """The report as a person reads it: cards as rows, counts beside figures, every pool last."""
        from emmy_core.eval.tables import report_text

        return report_text(self.to_json())


def check_report_out(out: Path | str) -> None:
    """Refuses (FileWriteError) a report's output unless it is absent or an evaluation report already."""
    from emmy_core.files.filekind import check_output

    check_output(Path(out), REPORT_FORMAT, "an evaluation report")


def write_json(doc: Mapping[str, Any], out: Path | str) -> Path:
    """Writes a report through a temporary file beside `out` and a rename (`emmy_core.files.safefile`): an
    older report there stays whole until the new one is complete; any other kind of file is refused."""
    from emmy_core.files.safefile import atomic_write_text

    out = Path(out)
    check_report_out(out)
    atomic_write_text(out, json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n")
    return out


def kernel_label(fork: DatasetFork) -> str:
    """The kernel's name as a person knows it (an extern kernel with its problem size)."""
    k = fork.kernel
    if isinstance(k, Extern):
        return f"{k.name} {'x'.join(map(str, k.problem))}"
    return k.name


def _others_index(forks: Sequence[DatasetFork]) -> dict[tuple[str, str, str], list[DatasetFork]]:
    """Forks by (kernel, sizes, setting): where the baselines look for other cards' measurements."""
    out: dict[tuple[str, str, str], list[DatasetFork]] = {}
    for f in forks:
        out.setdefault((f.kernel_id, f.sizes, f.setting), []).append(f)
    return out


def _price_sample(prior: Prior, fork: DatasetFork, into: PricePoints) -> None:
    ok = np.flatnonzero(fork.ok)
    if not len(ok):
        return
    rng = np.random.default_rng(len(into.times))
    pick = np.sort(rng.choice(ok, size=min(MAX_POINTS, len(ok)), replace=False))
    into.times.append(fork.times[pick])
    into.prices.append(prior.price(fork.kernel, fork.sizes, fork.card, fork.setting, [fork.knobs[i] for i in pick]))


def evaluate(dataset_dir: Path | str | Dataset, prior: Prior | Path | str, *, pools: str = "golden",
             cards_file: Path | str | None = None, extern_order: FileOrder | None = None,
             cards: Collection[str] | None = None, progress: Progress | None = None) -> EvalReport:
    """Judges `prior` on a dataset export (`pools`: golden, measured or both views).

    `dataset_dir` is an export folder (or a Dataset already read); `cards_file` a user card file
    merged for cards the export does not describe; `extern_order` the cache files' order of extern
    kernels (`extern_order.file_order`), for their first-option baseline; `cards` the cards whose pools
    are evaluated (default every card; the baselines still read every card's measurements, as an
    evaluation of a held-out card needs). Raises EvalError for an
    unknown view, PriorError for a prior that does not load, SourceError for an export that is not
    this Emmy's (naming both versions).
    """
    if pools not in VIEWS:
        raise EvalError(f"--pools must be one of {', '.join(VIEWS)}, not {pools[:20]!r}")
    if not isinstance(prior, Prior):
        prior = load_prior(prior)
    if isinstance(dataset_dir, Dataset):
        data = dataset_dir
    else:
        from emmy_core.prior.dataset import read_dataset

        data = read_dataset(dataset_dir, cards_file, progress)
    index = _others_index(data.forks)
    ranker = PriorRanker(prior)
    records: list[dict[str, Any]] = []
    points: dict[str, PricePoints] = {}
    golden, measured = pools in ("golden", "both"), pools in ("measured", "both")
    for i, fork in enumerate(data.forks):
        has_golden = golden and fork.golden is not None
        m = np.flatnonzero(fork.measured)
        has_measured = measured and len(m) > 0
        if not (has_golden or has_measured) or (cards is not None and fork.card_name not in cards):
            continue
        candidates = np.arange(len(fork.knobs)) if has_golden else m
        scores = ranker.rank(RankContext(fork), candidates)
        others = index[(fork.kernel_id, fork.sizes, fork.setting)]
        order = extern_order.get((fork.kernel_id, fork.card_name)) if extern_order is not None else None
        record: dict[str, Any] = {
            "card": fork.card_name, "setting": fork.setting, "kernel": kernel_label(fork),
            "kernel_id": fork.kernel_id, "sizes": fork.sizes, "extern": isinstance(fork.kernel, Extern),
            "family": fork.family,
            "members": len(fork.knobs), "measured_members": len(m), "working_members": int(fork.ok.sum())}
        if has_golden:
            record.update(fg.golden_view(fork, scores, others, order))
        if has_measured:
            record.update(fg.measured_view(fork, scores[m] if has_golden else scores, others, order))
            _price_sample(prior, fork, points.setdefault(group_key(fork), PricePoints()))
        records.append(record)
        if progress is not None and (i + 1) % 100 == 0:
            progress(f"scored {i + 1}/{len(data.forks)} forks")
    records.sort(key=lambda r: (r["card"], r["setting"], r["kernel"], r["kernel_id"], r["sizes"]))
    if progress is not None:
        progress(f"{len(records)} pools evaluated ({pools})")
    prov = prior.info["provenance"]
    return EvalReport(pools, data.digest, prior.source, dict(prov) if isinstance(prov, Mapping) else {},
                      len(data.forks), data.undescribed_pools, list(data.undescribed_cards),
                      extern_order is not None, records, points)
