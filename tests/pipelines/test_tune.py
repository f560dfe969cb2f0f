"""The per-card tune partition: an absent card fails at once naming itself and the machine; the present
card's partition writes a tune file (tiny budget) that the nightly fold takes into the freeze."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg

from assets.freeze import freeze_files, refreshed_freeze
from assets.tune import tune_files
from emmy_core.formats.freeze import card_file_slug
from emmy_core.ir import kernel_id, parse
from emmy_core.targets import local_card
from pipelines.jobs import build_tune_job, card_partitions
from tests.pipelines.conftest import events, make_resources, materialized

TINY = {"ops": {"tune": {"config": {"budget": 1, "models": ["mlp"], "shapes": ["B=1,S=128"], "settings": ["deploy"],
                                    "spread_limit": 100.0, "max_busy": 1.0}}}}


def test_the_partition_of_an_absent_card_fails_naming_it_and_the_machine(root: Path,
                                                                        instance: dg.DagsterInstance) -> None:
    here = local_card().name
    job = build_tune_job(card_partitions([here, "NVIDIA H200"]))
    result = job.execute_in_process(partition_key="NVIDIA H200", instance=instance, raise_on_error=False,
                                    resources=make_resources(root, "sqlite:///unused.db"))
    assert not result.success
    (failure,) = events(result, "STEP_FAILURE")
    message = failure.event_specific_data.error.message  # type: ignore[union-attr]
    assert "'NVIDIA H200' is not on this machine" in message and here in message
    assert not (root / "inbox").exists() or not any((root / "inbox").iterdir())


def test_the_present_card_writes_a_tune_file_the_refresh_folds_in(root: Path, instance: dg.DagsterInstance) -> None:
    here = local_card().name
    job = build_tune_job(card_partitions([here, "NVIDIA H200"]))
    resources = make_resources(root, "sqlite:///unused.db")
    result = job.execute_in_process(partition_key=here, instance=instance, run_config=TINY, resources=resources)
    assert result.success and not materialized(result)
    (file,) = sorted((root / "inbox").iterdir())
    assert file.name.startswith(card_file_slug(here) + ".tune-")
    doc = json.loads(file.read_text())
    rows = [(kernel_id(parse(k["program"])), r["sizes"], r["setting"]) for k in doc["kernels"] for r in k["rows"]]
    assert rows and {r[2] for r in rows} == {"deploy"}
    (seen,) = events(result, "ASSET_OBSERVATION")  # the tune files, as the chain's input sees them
    assert seen.asset_key == dg.AssetKey("tune_files")
    meta = seen.event_specific_data.asset_observation.metadata  # type: ignore[union-attr]
    assert meta["rows recorded"].value == len(rows)

    folded = dg.materialize([freeze_files, tune_files, refreshed_freeze], selection=[refreshed_freeze],
                            instance=instance, resources=resources)
    assert folded.success
    assert not any((root / "inbox").iterdir())
    assert not list((root / "freezes").glob("*.tune-*.json"))
    freeze = json.loads((root / "freezes" / f"{card_file_slug(here)}.json").read_text())
    # by identity: a card frozen before keeps its kernels' text (the dyn hints of the first shape it measured)
    frozen = {(kernel_id(parse(k["program"])), r["sizes"], r["setting"]) for k in freeze["kernels"] for r in k["rows"]}
    assert set(rows) <= frozen
