"""Per-card evaluations as tasks a `TaskMap` runs anywhere: `emmy eval prior --scheduler`, the chain's evaluation.

The pools of one card are scored independently of the other cards' pools: a pool's figures depend on its
fork, the prior, and the other cards' measurements of the same kernel (the baselines), all read from the
export. `CardMap` therefore sends one `EvalTask` per card: the export's location and digest, the prior's
file and content digest, the view, the card's name and that card's extern order (small arguments only).
Each worker reads the export itself (once per worker process; one whose digest changed is refused), loads
the prior (one whose content changed is refused), and scores its card's pools with `scoring.score_pools`.
The records and price points come back and `evaluate` sorts them as it does in process, so the report is
equal to the in-process one.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from emmy_core.compute import TaskMap
from emmy_core.eval.extern_order import FileOrder
from emmy_core.eval.scoring import PricePoints, Progress, Scored, group_key, score_pools
from emmy_core.prior import Prior
from emmy_core.prior.dataset import Dataset
from emmy_core.prior.fold_tasks import DatasetRef

CardOrder = tuple[tuple[tuple[str, str], tuple[tuple[str, int], ...]], ...]
"""One card's entries of a `FileOrder`, as sorted tuples."""


@dataclass(frozen=True)
class EvalTask:
    """The evaluation of one card's pools: where the export and the prior are, and the small arguments."""

    dataset: DatasetRef
    prior: str
    prior_digest: str
    pools: str
    card: str
    extern_order: CardOrder | None


def card_order(order: FileOrder | None, card: str) -> CardOrder | None:
    """`card`'s entries of `order` (None stays None: no extern order was given)."""
    if order is None:
        return None
    return tuple(sorted((k, tuple(sorted(v.items()))) for k, v in order.items() if k[1] == card))


_read: dict[DatasetRef, Dataset] = {}  # one export per worker process, read by its first task


def _dataset_of(ref: DatasetRef) -> Dataset:
    data = _read.get(ref)
    if data is None:
        from emmy_core.prior.worker_reads import read_checked_dataset

        data = read_checked_dataset(ref.path, ref.cards_file, ref.digest, "evaluation")
        _read.clear()
        _read[ref] = data
    return data


def run_eval_task(task: EvalTask) -> Scored:
    """On a worker: the records and price points of one card's pools."""
    from emmy_core.prior.worker_reads import load_checked_prior

    prior = load_checked_prior(task.prior, task.prior_digest, "evaluation")
    order = None if task.extern_order is None else {k: dict(v) for k, v in task.extern_order}
    return score_pools(_dataset_of(task.dataset), prior, task.pools, order, (task.card,))


@dataclass(frozen=True)
class CardMap:
    """`score_pools` with each card's pools scored as one task of `task_map` (see the module's docstring)."""

    dataset: DatasetRef
    task_map: TaskMap
    where: str = "a Dask cluster"

    def __str__(self) -> str:
        return self.where

    def __call__(self, data: Dataset, prior_file: Path | str, prior: Prior, pools: str, extern_order: FileOrder | None,
                 cards: Collection[str] | None, progress: Progress | None = None) -> Scored:
        from emmy_core.prior.provenance import content_digest

        if data.digest != self.dataset.digest:
            raise ValueError(f"dataset {data.digest[:16]} is not the one the workers read ({self.dataset.path}, "
                             f"{self.dataset.digest[:16]})")
        chosen = [c for c in dict.fromkeys(f.card_name for f in data.forks) if cards is None or c in cards]
        digest = content_digest(prior.doc)
        prior_path = str(Path(prior_file).resolve())
        tasks = [EvalTask(self.dataset, prior_path, digest, pools, c, card_order(extern_order, c)) for c in chosen]
        if progress is not None:
            progress(f"evaluating {len(tasks)} cards on the Dask scheduler {self.where}")
        records: list[dict] = []
        merged: dict[str, PricePoints] = {}
        for got, points in self.task_map(run_eval_task, tasks):
            records += got
            merged.update(points)
        order = dict.fromkeys(group_key(f) for f in data.forks)  # the in-process order of the price points
        return records, {k: merged[k] for k in order if k in merged}
