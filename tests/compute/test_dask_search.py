"""`emmy eval search` with its replays on a Dask cluster: the same curves as in process (issue 24)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from emmy_core.search.evaluate import evaluate_search


def test_dask_search_replays_equal_in_process_replays(toy_export: Path, cluster: Any) -> None:
    """One task per card and replay; the curves (every strategy, budget and card) are equal bit for bit."""
    args = (toy_export, None, ["first", "random", "prior", "explore"], [1, 2, 4, 8], [0, 1, 2])
    here = evaluate_search(*args, with_methodology=False)
    there = evaluate_search(*args, with_methodology=False, scheduler=cluster.scheduler_address)
    assert json.dumps(there.to_json(), sort_keys=True) == json.dumps(here.to_json(), sort_keys=True)
    assert len(here.per_card) == 3


def test_a_replay_worker_refuses_a_prior_that_changed_under_the_search(toy_export: Path) -> None:
    """The worker's cache is keyed by the prior's content digest, which it checks: a prior rewritten at the
    same path is never replayed from a stale cache, nor read silently."""
    import pytest

    from emmy_core.prior import installed_prior_path, load_prior
    from emmy_core.prior.dataset import read_dataset
    from emmy_core.prior.provenance import content_digest
    from emmy_core.search.replay_tasks import ReplayTask, pools_ref, run_replay_task

    data = read_dataset(toy_export)
    prior = str(installed_prior_path())
    digest = content_digest(load_prior(prior).doc)
    card = data.forks[0].card_name
    ok = pools_ref(str(toy_export), data.digest, prior, digest, None, None)
    assert run_replay_task(ReplayTask(ok, card, "first", 2, (0,), True))
    stale = pools_ref(str(toy_export), data.digest, prior, "f" * 64, None, None)
    assert stale != ok  # another cache key
    with pytest.raises(RuntimeError, match=f"prior {prior}: its content digest is {digest[:16]}"):
        run_replay_task(ReplayTask(stale, card, "first", 2, (0,), True))
