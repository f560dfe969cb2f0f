"""`emmy eval search` as one call: an export's measured pools replayed for every strategy and budget, in this
process or as one task per card on a cluster (`emmy_core.compute`), scored as `curves` scores them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from emmy_core.compute import parse_scheduler, task_map
from emmy_core.fileio.urlfolder import shared_location
from emmy_core.prior import load_installed_prior, load_prior
from emmy_core.prior.dataset import read_dataset
from emmy_core.prior.provenance import content_digest
from emmy_core.search.curves import SearchCurves, emmy_search_curves, frozen_pools
from emmy_core.search.replay_tasks import MappedReplay, pools_ref
from emmy_core.search.strategy import STRATEGIES


def evaluate_search(dataset_dir: Any, prior_path: Any | None, strategies: Sequence[str], budgets: Sequence[int],
                    seeds: Sequence[int] = (0, 1, 2, 3, 4), extern_order: Any = None, cards_file: Any = None,
                    with_methodology: bool = True, scheduler: Any = None) -> SearchCurves:
    """`emmy eval search`: every strategy replayed on every measured pool of an export (module docstring).
    `prior_path` None: the installed prior; a strategy that needs a prior without one is refused.
    `scheduler` (`emmy_core.compute`): where the replays run, one task per card (default in this process)."""
    if not strategies:
        raise ValueError(f"no search strategy given; known: {', '.join(STRATEGIES)}")
    if not seeds or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds):
        raise ValueError(f"seeds must be one or more whole numbers, not {list(seeds)}" if seeds else
                         "seeds: none given; give one or more whole numbers")
    unknown = [s for s in strategies if s not in STRATEGIES]
    if unknown:
        raise ValueError(f"unknown strategies {', '.join(unknown)}; known: {', '.join(STRATEGIES)}")
    bad = [b for b in budgets if isinstance(b, bool) or not isinstance(b, int) or b < 1]
    if not budgets:
        raise ValueError("budgets: none given; give one or more positive whole numbers of measurements")
    if bad:
        raise ValueError(f"budgets must be positive whole numbers of measurements, not {bad}")
    prior = load_prior(prior_path) if prior_path is not None else load_installed_prior()
    dataset = read_dataset(dataset_dir, cards_file)
    pools = frozen_pools(dataset, prior, extern_order)
    where = parse_scheduler(scheduler)
    if where.kind == "inprocess":
        return emmy_search_curves(pools, strategies, budgets, seeds, with_methodology)[0]
    ref = pools_ref(shared_location(dataset_dir), dataset.digest,
                    None if prior_path is None else str(Path(prior_path).resolve()), content_digest(prior.doc),
                    None if cards_file is None else str(Path(cards_file).resolve()), extern_order)
    with task_map(where) as run:
        return emmy_search_curves(pools, strategies, budgets, seeds, with_methodology,
                                  replay=MappedReplay(ref, run))[0]
