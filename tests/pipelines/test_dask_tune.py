"""The tune job under dagster-dask's executor: two card partitions on a cluster of two workers, each placed
on the worker of its card; both tune files reach the inbox and the nightly fold takes both (issue 24).

Worker one offers this machine's card and benches it (tiny budget); worker two offers a card this machine
does not have, served by the replay runner from that card's frozen file, so no hardware is needed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg
import pytest

from assets.resources import EmmyPaths
from emmy_core.compute.placement import card_resource
from emmy_core.formats.freeze import card_file_slug
from emmy_core.targets import local_card
from pipelines.jobs import build_tune_job, card_partitions
from tests.store.test_url_folders import small_tune_file

FROZEN = Path(__file__).resolve().parents[2] / "freezes" / "intel-r-xeon-r-processor-avx-512-x2.json"
OTHER = "Intel(R) Xeon(R) Processor AVX-512 x2"  # the card that frozen file holds
HERE_TUNE = {"budget": 1, "models": ["mlp"], "shapes": ["B=1,S=128"], "settings": ["deploy"],
             "spread_limit": 100.0, "max_busy": 1.0}


def tune_job() -> dg.JobDefinition:
    """The tune job over this machine's card and OTHER, on its card executor (rebuilt on each worker)."""
    defs = dg.Definitions(jobs=[build_tune_job(card_partitions([local_card().name, OTHER]))],
                          resources={"paths": EmmyPaths()})
    return defs.resolve_job_def("tune_card")


@pytest.fixture(scope="module")
def card_cluster() -> Iterator[Any]:
    """Two worker processes, each offering one card's resource."""
    from distributed import Nanny, Scheduler, SpecCluster

    if local_card().name == OTHER:
        pytest.skip("this machine is the frozen file's card")
    workers = {name: {"cls": Nanny, "options": {"nthreads": 1, "resources": {card_resource(card): 1}}}
               for name, card in (("here", local_card().name), ("other", OTHER))}
    with SpecCluster(workers=workers, scheduler={"cls": Scheduler, "options": {"dashboard_address": ":0"}},
                     asynchronous=False) as cluster:
        yield cluster


def test_two_card_partitions_run_on_their_workers_and_the_nightly_fold_takes_both(
        card_cluster: Any, tmp_path: Path) -> None:
    from distributed import Client, get_task_stream

    from emmy_core.freezefolder.fold import fold_tune_files

    freezes, inbox = tmp_path / "freezes", tmp_path / "inbox"
    freezes.mkdir()
    common = {"execution": {"config": {"cluster": {"existing": {"address": card_cluster.scheduler_address}}}},
              "resources": {"paths": {"config": {"tune_inbox": str(inbox), "freeze_dir": str(freezes)}}}}
    frozen, rows = small_tune_file(tmp_path / "cache")  # the other card's first kernel, deploy rows
    ops = {local_card().name: HERE_TUNE, OTHER: {"replay_from": str(frozen), "settings": ["deploy"]}}
    with dg.instance_for_test() as instance, \
            Client(card_cluster.scheduler_address) as client, get_task_stream(client) as stream:
        for card, config in ops.items():
            with dg.execute_job(dg.reconstructable(tune_job), instance, tags={"dagster/partition": card},
                                run_config={**common, "ops": {"tune": {"config": config}}}) as result:
                assert result.success, card
    workers = {w.worker_address: name for name, w in card_cluster.workers.items()}
    placed = [workers[t["worker"]] for t in stream.data if str(t["key"]).startswith("tune_card.")]
    assert placed == ["here", "other"]

    files = sorted(p.name for p in inbox.iterdir())
    assert [f.split(".tune-")[0] for f in files] == sorted([card_file_slug(local_card().name),
                                                            card_file_slug(OTHER)])
    report = fold_tune_files(freezes, inbox)
    assert sorted(p.name for p in report.moved) == files and not any(inbox.iterdir())
    here_freeze = json.loads((freezes / f"{card_file_slug(local_card().name)}.json").read_text())
    assert here_freeze["card"]["name"] == local_card().name and here_freeze["kernels"]
    other = json.loads((freezes / FROZEN.name).read_text())
    assert rows and sum(len(k["rows"]) for k in other["kernels"]) == rows
