"""The fit's trainings (its folds, its final model, each seed member) as tasks a `TaskMap` can run anywhere.

`card_split`, `kernel_split` and `fit_dataset` hand a `FoldTrainer` the training side of every fold
(indices into the dataset's forks) and take back `(model, training groups)` per fold, or None where the
fold has nothing to train on. `train_here` does it in this process on the forks the caller holds (the
default: one fold in memory at a time). `DaskTrainer` sends each (fold, seed member) as a `TrainTask`:
the export's path, its digest, the fold's indices, the feature names and the parameters; the worker reads
and featurises the export itself (once per worker process), refuses an export whose digest changed, and
trains exactly what this process would have trained. Members of a seed ensemble are summed as `train`
sums them, so the model is the same bit for bit wherever it was fitted.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

import numpy as np

from emmy_core.compute import TaskMap
from emmy_core.prior.dataset import DatasetFork
from emmy_core.prior.featurize import featurize, transfer_view
from emmy_core.prior.training import Params, design, groups_of, train

Fitted = tuple[Any, int] | None  # (model, training groups), None where the fold had no group


class FoldTrainer(Protocol):
    """Trains one model per training side; results in the order of `train_sets`."""

    def __call__(self, forks: Sequence[DatasetFork], names: Sequence[str], pools: str, seed: int, params: Params,
                 train_sets: Sequence[np.ndarray]) -> Iterator[Fitted]: ...


def fit_side(forks: Sequence[DatasetFork], idx: Sequence[int] | np.ndarray, names: Sequence[str], pools: str, seed: int,
             params: Params, tree_seed: int | None = None) -> Fitted:
    """One fold's model: the transfer view of its training forks, their groups (drawn with `seed`), the ranker
    (trees seeded with `tree_seed`, default `seed`)."""

    source = [forks[int(i)] for i in idx]
    train_forks = transfer_view(source, source)
    groups = groups_of(train_forks, pools, seed, params)
    if not groups:
        return None
    rows = design(train_forks, groups, list(names), params.balance, params.residual)
    return train(rows, params, seed if tree_seed is None else tree_seed), len(groups)


def train_here(forks: Sequence[DatasetFork], names: Sequence[str], pools: str, seed: int, params: Params,
               train_sets: Sequence[np.ndarray]) -> Iterator[Fitted]:
    """The default trainer: each fold in turn, in this process."""
    for idx in train_sets:
        yield fit_side(forks, idx, names, pools, seed, params)


@dataclass(frozen=True)
class DatasetRef:
    """Where a worker reads the dataset: the export folder, the card file merged over the table, the digest."""

    path: str
    cards_file: str | None
    digest: str


@dataclass(frozen=True)
class TrainTask:
    """One training of one fold (one seed member of it): only paths and small arguments."""

    dataset: DatasetRef
    train_idx: tuple[int, ...]
    names: tuple[str, ...]
    pools: str
    seed: int
    params: Params
    member: int = 0


_loaded: dict[DatasetRef, list[DatasetFork]] = {}  # one export per worker process, read by its first task


def _forks_of(ref: DatasetRef) -> list[DatasetFork]:
    forks = _loaded.get(ref)
    if forks is None:
        from emmy_core.prior.worker_reads import read_checked_dataset

        dataset = read_checked_dataset(ref.path, ref.cards_file, ref.digest, "fit")
        featurize(dataset.forks)
        _loaded.clear()
        _loaded[ref] = forks = dataset.forks
    return forks


def run_train_task(task: TrainTask) -> tuple[Any, int] | None:
    """On a worker: the model of one seed member of one fold (seed + member, one ranker), and its groups."""
    # the groups are drawn with the fold's seed, as `train` draws them; only the trees take seed + member
    return fit_side(_forks_of(task.dataset), task.train_idx, task.names, task.pools, task.seed,
                    replace(task.params, ensemble=1), tree_seed=task.seed + task.member)


def sum_members(models: Sequence[Any]) -> Any:
    """Seed members as one model whose score is their mean (as `train` sums an ensemble)."""
    if len(models) == 1:
        return models[0]
    from catboost import sum_models

    return sum_models(list(models), weights=[1.0 / len(models)] * len(models))


@dataclass(frozen=True)
class DaskTrainer:
    """A trainer whose folds and seed members run through `task_map` (see the module's docstring)."""

    dataset: DatasetRef
    task_map: TaskMap

    def __call__(self, forks: Sequence[DatasetFork], names: Sequence[str], pools: str, seed: int, params: Params,
                 train_sets: Sequence[np.ndarray]) -> Iterator[Fitted]:
        members = max(1, params.ensemble)
        tasks = [TrainTask(self.dataset, tuple(int(i) for i in idx), tuple(names), pools, seed, params, m)
                 for idx in train_sets for m in range(members)]
        results = self.task_map(run_train_task, tasks)
        for k in range(len(train_sets)):
            got = results[k * members:(k + 1) * members]
            if any(r is None for r in got):
                yield None
            else:
                yield sum_members([r[0] for r in got]), got[0][1]
