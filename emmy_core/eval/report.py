"""`evaluate`: a prior judged on a dataset export, per card and setting, and the report that says so.

Seed 09, "Finding out where the prior is wrong". Every fork of the export (kernel, sizes, card,
setting) is scored by the prior in the compile context of the card it was recorded on: the
export's own description of that card (`emmy_core.prior.dataset`), never the machine running
the evaluation. The golden view covers forks with a golden, the measured view forks with
measured members (`emmy_core.eval.figures`); `both` computes the two from one scoring
(`eval.scoring.score_pools`), in this process or one task per card on a Dask cluster (`eval.card_tasks`).

The report keeps one record per pool, summarizes them per "card / setting" and over every
pool (`metrics.summarize`: slowdowns by geometric mean, the rest by mean, each with the count
of pools behind it; the golden ranks and the top-1 slowdown also with their median, 90th
percentile and maximum), and serializes in the shape of a fit's `metrics.json` (`mean` over
every pool), so two reports compare by diff or with `compare_reports`.
"""

from __future__ import annotations

import json
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emmy_core.eval import figures as fg
from emmy_core.eval.extern_order import FileOrder
from emmy_core.eval.scoring import PricePoints, Progress, Scored, score_pools
from emmy_core.prior import FEATURE_VERSION, Prior, load_prior, metrics
from emmy_core.prior.dataset import Dataset

if TYPE_CHECKING:
    from emmy_core.compute import Scheduler
    from emmy_core.eval.card_tasks import CardMap

REPORT_FORMAT = "emmy-eval"
REPORT_VERSION = 2  # 2: by_family
VIEWS = ("golden", "measured", "both")
SPREAD = ("golden_rank", "golden_rank_ties", "golden_plateau", "top1")  # figures also reported as distributions


class EvalError(ValueError):
    """An evaluation that cannot be made or a report that cannot be read; the message says which and why."""


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
    from emmy_core.fileio.filekind import check_output

    check_output(Path(out), REPORT_FORMAT, "an evaluation report")


def write_json(doc: Mapping[str, Any], out: Path | str) -> Path:
    """Writes a report through a temporary file beside `out` and a rename (`emmy_core.fileio.safefile`): an
    older report there stays whole until the new one is complete; any other kind of file is refused."""
    from emmy_core.fileio.safefile import atomic_write_text

    out = Path(out)
    check_report_out(out)
    atomic_write_text(out, json.dumps(doc, indent=1, sort_keys=True, allow_nan=False) + "\n")
    return out


def evaluate(dataset_dir: Path | str | Dataset, prior: Prior | Path | str, *, pools: str = "golden",
             cards_file: Path | str | None = None, extern_order: FileOrder | None = None,
             cards: Collection[str] | None = None, progress: Progress | None = None,
             scheduler: str | Scheduler | CardMap | None = None) -> EvalReport:
    """Judges `prior` on a dataset export (`pools`: golden, measured or both views).

    `dataset_dir` is an export folder or its URL (or a Dataset already read); `cards_file` a user card
    file merged for cards the export does not describe; `extern_order` the cache files' order of extern
    kernels (`extern_order.file_order`), for their first-option baseline; `cards` the cards whose pools
    are evaluated (default every card; the baselines still read every card's measurements, as an
    evaluation of a held-out card needs). `scheduler` (`emmy_core.compute`): where the cards are
    evaluated, one task per card (`eval.card_tasks`; default in this process), or a `CardMap` already
    open (the chain judges two priors on one cluster); on Dask the prior must be a file and the dataset a
    folder (each worker reads both), and the report is the same. Raises EvalError for an unknown view,
    PriorError for a prior that does not load, SourceError for an export that is not this Emmy's (naming
    both versions), ComputeError for a scheduler that does not parse or a task that failed.
    """
    from emmy_core.compute import parse_scheduler
    from emmy_core.eval.card_tasks import CardMap

    if pools not in VIEWS:
        raise EvalError(f"--pools must be one of {', '.join(VIEWS)}, not {pools[:20]!r}")
    where = scheduler if isinstance(scheduler, CardMap) else parse_scheduler(scheduler)
    opened = not isinstance(where, CardMap) and where.kind != "inprocess"  # a cluster opened for this evaluation
    on_dask = opened or isinstance(where, CardMap)
    if on_dask and (isinstance(prior, Prior) or (opened and isinstance(dataset_dir, Dataset))):
        raise EvalError(f"an evaluation on the Dask scheduler {where} needs the prior's file and the dataset's "
                        "export folder (each worker reads them), not a prior or a dataset already read")
    prior_file = prior
    if not isinstance(prior, Prior):
        prior = load_prior(prior)
    if isinstance(dataset_dir, Dataset):
        data = dataset_dir
    else:
        from emmy_core.prior.dataset import read_dataset

        data = read_dataset(dataset_dir, cards_file, progress)
    if isinstance(where, CardMap):
        assert not isinstance(prior_file, Prior)
        records, points = where(data, prior_file, prior, pools, extern_order, cards, progress)
    elif opened:
        assert not isinstance(prior_file, Prior) and not isinstance(dataset_dir, Dataset)
        records, points = _score_on(where, dataset_dir, cards_file, data, prior_file, prior, pools,
                                    extern_order, cards, progress)
    else:
        records, points = score_pools(data, prior, pools, extern_order, cards, progress)
    records.sort(key=lambda r: (r["card"], r["setting"], r["kernel"], r["kernel_id"], r["sizes"]))
    if progress is not None:
        progress(f"{len(records)} pools evaluated ({pools})")
    prov = prior.info["provenance"]
    return EvalReport(pools, data.digest, prior.source, dict(prov) if isinstance(prov, Mapping) else {},
                      len(data.forks), data.undescribed_pools, list(data.undescribed_cards),
                      extern_order is not None, records, points)


def _score_on(where: Scheduler, dataset_dir: Path | str, cards_file: Path | str | None, data: Dataset,
              prior_file: Path | str, prior: Prior, pools: str, extern_order: FileOrder | None,
              cards: Collection[str] | None, progress: Progress | None) -> Scored:
    """`score_pools` as one task per card on the Dask cluster `where`, opened for this evaluation."""
    from emmy_core.compute import task_map
    from emmy_core.eval.card_tasks import CardMap
    from emmy_core.fileio.urlfolder import shared_location
    from emmy_core.prior.fold_tasks import DatasetRef

    ref = DatasetRef(shared_location(dataset_dir), None if cards_file is None else str(Path(cards_file).resolve()),
                     data.digest)
    with task_map(where) as run:
        return CardMap(ref, run, str(where))(data, prior_file, prior, pools, extern_order, cards, progress)
