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
