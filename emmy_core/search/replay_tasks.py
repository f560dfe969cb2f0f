"""`emmy eval search`'s replays as tasks a `TaskMap` runs anywhere: one task per card of each replay.

`emmy_search_curves` asks for the runs of one strategy at one budget over every pool (`replay_runs`).
`MappedReplay` answers the same question by sending one `ReplayTask` per card (the export's path and
digest, the prior's path, the strategy, budget and seeds: small arguments only); each worker reads the
export and scores its pools itself (once per worker process), replays the pools of its card, and the runs
come back merged in the pools' own order, so the curves are the same bit for bit as in process (a replay of
one pool depends on that pool and the seed alone).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from emmy_core.compute import TaskMap
from emmy_core.search.curves import frozen_pools, replay_runs
from emmy_core.search.replay import FrozenPool
from emmy_core.search.strategy import SearchStrategy, make_strategy


@dataclass(frozen=True)
class PoolsRef:
    """Where a worker builds the frozen pools: export folder, its digest, prior artifact (None: installed)
    and its content digest (part of the worker's cache key, and checked there), card file, the extern
    kernels' first options."""

    dataset: str
    digest: str
    prior: str | None
    prior_digest: str
    cards_file: str | None
    extern_order: tuple[tuple[tuple[str, str], tuple[tuple[str, int], ...]], ...] | None


@dataclass(frozen=True)
class ReplayTask:
    pools: PoolsRef
    card: str
    strategy: str
    budget: int
    seeds: tuple[int, ...]
    first_always: bool


def pools_ref(dataset: str, digest: str, prior: str | None, prior_digest: str, cards_file: str | None,
              extern_order: Mapping[tuple[str, str], Mapping[str, int]] | None) -> PoolsRef:
    order = None if extern_order is None else tuple(
        sorted((k, tuple(sorted(v.items()))) for k, v in extern_order.items()))
    return PoolsRef(dataset, digest, prior, prior_digest, cards_file, order)


_built: dict[PoolsRef, list[tuple[str, FrozenPool]]] = {}  # one export's pools per worker process


def _pools_of(ref: PoolsRef) -> list[tuple[str, FrozenPool]]:
    pools = _built.get(ref)
    if pools is None:
        from emmy_core.prior.worker_reads import load_checked_prior, read_checked_dataset

        dataset = read_checked_dataset(ref.dataset, ref.cards_file, ref.digest, "search")
        prior = load_checked_prior(ref.prior, ref.prior_digest, "search")
        order = None if ref.extern_order is None else {k: dict(v) for k, v in ref.extern_order}
        pools = frozen_pools(dataset, prior, order)
        _built.clear()
        _built[ref] = pools
    return pools


def run_replay_task(task: ReplayTask) -> dict[str, list[list[float | None]]]:
    """On a worker: the runs of one strategy at one budget over the pools of one card."""
    mine = [(c, p) for c, p in _pools_of(task.pools) if c == task.card]
    return replay_runs(mine, task.strategy, task.budget, task.seeds, make_strategy, task.first_always)


@dataclass(frozen=True)
class MappedReplay:
    """`replay_runs` with each card's pools replayed as one task of `task_map`."""

    pools: PoolsRef
    task_map: TaskMap

    def __call__(self, pools: Sequence[tuple[str, FrozenPool]], strategy: str, budget: int, seeds: Sequence[int],
                 make: Callable[[str, int], SearchStrategy] = make_strategy,
                 first_always: bool = True) -> dict[str, list[list[float | None]]]:
        if make is not make_strategy:
            raise ValueError("a search replayed on a cluster takes the packaged strategies only")
        cards = list(dict.fromkeys(c for c, _ in pools))
        tasks = [ReplayTask(self.pools, c, strategy, budget, tuple(seeds), first_always) for c in cards]
        merged: dict[str, Any] = {}
        for runs in self.task_map(run_replay_task, tasks):
            merged.update(runs)
        missing = [p.pool.label for _, p in pools if p.pool.label not in merged]
        if missing:
            raise RuntimeError(f"the workers built other pools than this process: {missing[0]!r} did not come back")
        return {p.pool.label: merged[p.pool.label] for _, p in pools}
