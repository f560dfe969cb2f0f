"""`emmy db check` is a blocking check: on a planted corruption the chain stops and nothing downstream
materializes."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from pipelines.definitions import CHECKS, chain_assets
from tests.pipelines.conftest import events, make_resources, materialized

DOWNSTREAM = ["dataset", "prior", "evaluation", "installed_prior"]


def test_a_corrupt_tuning_db_stops_the_chain_before_the_export(root: Path, instance: dg.DagsterInstance) -> None:
    import duckdb

    resources = make_resources(root, "sqlite:///unused.db")
    assets = [*chain_assets(["here"]), *CHECKS]
    first = dg.materialize(assets, selection=["freeze_files", "refreshed_freeze", "tuning_db"], instance=instance,
                           resources=resources)
    assert first.success and materialized(first) == {"refreshed_freeze", "tuning_db"}
    (check,) = events(first, "ASSET_CHECK_EVALUATION")
    assert check.event_specific_data.passed  # type: ignore[union-attr]

    con = duckdb.connect(str(root / "data" / "tune.db"))  # a schedule whose knobs no longer match its digest
    con.execute("UPDATE schedules SET knobs = '{\"threads\":1}' WHERE schedule_id = (SELECT min(schedule_id) "
                "FROM schedules)")
    con.close()

    rerun = dg.materialize(assets, instance=instance, resources=resources, raise_on_error=False,
                           selection=dg.AssetSelection.checks_for_assets("tuning_db") | dg.AssetSelection.assets(*DOWNSTREAM))
    assert not rerun.success
    (check,) = events(rerun, "ASSET_CHECK_EVALUATION")
    data = check.event_specific_data
    assert not data.passed and "schedule_digest 1" in (data.description or "")  # type: ignore[union-attr]
    assert materialized(rerun) == set()
    assert not (root / "data" / "dataset").exists()
    assert not (root / "fits").exists()
