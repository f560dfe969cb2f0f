"""The whole chain materializes in-process against a temporary DuckDB and the session's MLflow store;
materialized again with no new input it changes no byte of the freeze, logs a new MLflow run whose
metrics equal the first, gives `tuning_db`, `dataset` and `prior` the same data versions and leaves no
asset stale; the evaluation's check installs a candidate no worse than the installed prior
and refuses one worse beyond the tolerance."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import dagster as dg
import pytest

from pipelines.__main__ import failure_cause
from pipelines.definitions import chain_assets
from pipelines.jobs import CHAIN, run_chain
from tests.pipelines.conftest import copy_freeze, events, make_resources, materialized
from tests.prior.conftest import SMALL

# the chain needs a fitted prior, not the shipped one: two folds and the prior tests' small recipe
FAST_FIT = {"prior": {"config": {"folds": 2, "iterations": SMALL.iterations, "depth": SMALL.depth}}}
REFIT = ("freeze_files", "refreshed_freeze", "tuning_db", "dataset", "prior")
PLOTS = ("price_vs_time.png", "slowdowns.png", "golden_ranks.png")


@dataclass
class Chain:
    root: Path
    resources: dict
    instance: dg.DagsterInstance
    first: dg.ExecuteInProcessResult
    second: dg.ExecuteInProcessResult
    freeze_before: dict[str, str]
    freeze_after_first: dict[str, str]
    freeze_after_second: dict[str, str]
    stale_after_second: dict[str, str]  # asset -> Dagster's stale status right after the second run


def freeze_bytes(root: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted((root / "freezes").iterdir())}


def materialize(assets: list, resources: dict, instance: dg.DagsterInstance,
                keys: tuple[str, ...]) -> dg.ExecuteInProcessResult:
    return run_chain(assets, resources, instance, keys, ops=FAST_FIT if "prior" in keys else None,
                     log_level="WARNING")


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory, mlflow_uri: str) -> Iterator[Chain]:
    root = tmp_path_factory.mktemp("chain")
    copy_freeze(root)
    resources = make_resources(root, mlflow_uri)
    assets = chain_assets(["here"])
    with dg.instance_for_test() as instance:
        before = freeze_bytes(root)
        first = materialize(assets, resources, instance, CHAIN)
        after_first = freeze_bytes(root)
        second = materialize(assets, resources, instance, REFIT)
        stale = stale_statuses(instance, assets)
        yield Chain(root, resources, instance, first, second, before, after_first, freeze_bytes(root), stale)


def stale_statuses(instance: dg.DagsterInstance, assets: list) -> dict[str, str]:
    """Dagster's own verdict on each asset of the chain: FRESH, STALE or MISSING (the UI's 'stale' badge)."""
    from dagster._utils.test.data_versions import get_stale_status_resolver

    resolver = get_stale_status_resolver(instance, assets)
    return {key: resolver.get_status(dg.AssetKey(key)).value for key in CHAIN}


def data_versions(result: dg.ExecuteInProcessResult) -> dict[str, str]:
    """The data version each asset materialized by a run recorded."""
    return {e.asset_key.to_user_string(): e.event_specific_data.materialization.tags[  # type: ignore[union-attr]
        "dagster/data_version"] for e in events(result, "ASSET_MATERIALIZATION") if e.asset_key}


def metadata(result: dg.ExecuteInProcessResult, key: str) -> dict:
    for e in events(result, "ASSET_MATERIALIZATION"):
        if e.asset_key == dg.AssetKey(key):
            return {k: getattr(v, "value", v) for k, v in
                    e.event_specific_data.materialization.metadata.items()}  # type: ignore[union-attr]
    raise AssertionError(f"{key} not materialized")


def test_the_whole_chain_materializes_in_process(chain: Chain) -> None:
    assert chain.first.success, failure_cause(chain.first)
    assert materialized(chain.first) == set(CHAIN) - {"freeze_files"}
    checks = {e.event_specific_data.check_name: e.event_specific_data.passed  # type: ignore[union-attr]
              for e in events(chain.first, "ASSET_CHECK_EVALUATION")}
    assert checks == {"tuning_db_consistent": True, "dataset_consistent": True, "candidate_no_worse": True}
    db = metadata(chain.first, "tuning_db")
    assert db["measurements"] > 1000 and db["goldens"] > 0 and "Intel(R) Xeon(R) Processor AVX-512 x2" in db["cards"]
    assert metadata(chain.first, "dataset")["pools"] > 0
    fit = metadata(chain.first, "prior")
    assert fit["mlflow_run_id"] != "none" and fit["mlflow_tracking_uri"] == chain.resources["mlflow"].tracking_uri
    recipe = json.loads(Path(fit["artifact"]).read_text())["provenance"]["params"]
    assert (recipe["iterations"], recipe["depth"]) == (SMALL.iterations, SMALL.depth)  # the asset's config reached the fit
    ev = metadata(chain.first, "evaluation")
    assert "## golden view" in ev["table"] and "## measured view" in ev["table"]
    assert "| Intel(R) Xeon(R) Processor AVX-512 x2 / deploy" in ev["table"] and "| all pools" in ev["table"]
    assert ev["mlflow_run_id"] == fit["mlflow_run_id"]
    for name in PLOTS:
        assert (chain.root / "data" / "evaluation" / name).stat().st_size > 1000


def test_the_tuning_database_lives_in_the_configured_data_folder(chain: Chain) -> None:
    # the store resource names no path (as the default definitions): moving data_dir moves tune.db with it
    assert Path(metadata(chain.first, "tuning_db")["path"]) == chain.root / "data" / "tune.db"
    assert (chain.root / "data" / "tune.db").is_file()


def test_freezing_the_same_store_twice_changes_no_byte(chain: Chain) -> None:
    assert chain.freeze_before == chain.freeze_after_first == chain.freeze_after_second


def test_a_frozen_snapshot_makes_a_fit_reproducible(chain: Chain) -> None:
    """A second materialization with no new input logs a new MLflow run whose metrics equal the first's."""
    from mlflow.tracking import MlflowClient

    assert chain.second.success, failure_cause(chain.second)
    a, b = metadata(chain.first, "prior")["mlflow_run_id"], metadata(chain.second, "prior")["mlflow_run_id"]
    assert a != b
    client = MlflowClient(tracking_uri=chain.resources["mlflow"].tracking_uri)
    run_a, run_b = client.get_run(a), client.get_run(b)
    fit_a, fit_b = ({k: v for k, v in r.data.metrics.items() if not k.startswith("eval.")} for r in (run_a, run_b))
    assert fit_a and fit_a == fit_b  # the fit's own metrics (the first run also holds its evaluation's figures)
    assert run_a.data.tags["dagster_run_id"] == chain.first.run_id
    assert run_b.data.tags["dagster_run_id"] == chain.second.run_id
    assert run_a.data.tags["code_revision"]


def test_two_chain_runs_over_an_unchanged_freeze_give_the_same_data_versions_and_leave_nothing_stale(
        chain: Chain) -> None:
    first, second = data_versions(chain.first), data_versions(chain.second)
    for key in ("refreshed_freeze", "tuning_db", "dataset", "prior"):
        assert first[key] == second[key], f"{key} got a new data version from an unchanged freeze"
    assert second["dataset"] == metadata(chain.second, "dataset")["digest"]
    assert second["tuning_db"] == metadata(chain.second, "tuning_db")["digest"]
    assert chain.stale_after_second == {key: "FRESH" for key in CHAIN}  # evaluation too: its prior is the same


def test_the_evaluation_plot_is_an_artifact_of_the_fit_run(chain: Chain) -> None:
    from mlflow.tracking import MlflowClient

    run_id = metadata(chain.first, "prior")["mlflow_run_id"]
    client = MlflowClient(tracking_uri=chain.resources["mlflow"].tracking_uri)
    names = {f.path for f in client.list_artifacts(run_id, "evaluation")}
    assert names == {f"evaluation/{n}" for n in (*PLOTS, "report.json")}


def test_the_fit_run_is_opened_around_the_fit_in_a_model_training_experiment_and_holds_the_evaluations_figures(
        chain: Chain) -> None:
    """MLflow 3 opens an unmarked experiment in its GenAI view (no runs shown): the experiment is marked as model
    training; the run starts before the artifact is written (it records the fit, not 94 ms after it); the
    evaluation's figures are its metrics; the evaluation asset links the run and shows its plots as pictures."""
    from mlflow.tracking import MlflowClient

    from emmy_core.prior.tracking import KIND_TAG

    run_id = metadata(chain.first, "prior")["mlflow_run_id"]
    client = MlflowClient(tracking_uri=chain.resources["mlflow"].tracking_uri)
    run = client.get_run(run_id)
    assert client.get_experiment(run.info.experiment_id).tags[KIND_TAG[0]] == KIND_TAG[1]
    artifact = Path(metadata(chain.first, "prior")["artifact"])
    fit_dir = Path(metadata(chain.first, "prior")["fit folder"])
    assert run.info.start_time <= (fit_dir / "metrics.json").stat().st_mtime * 1000 <= run.info.end_time
    assert artifact.is_file() and run.info.status == "FINISHED"
    ev = metadata(chain.first, "evaluation")
    assert run.data.metrics["eval.candidate.top1"] == pytest.approx(ev["candidate top1"])
    assert f"/runs/{run_id}?workflowType=machine_learning" in ev["mlflow_run"]  # the model-training view
    assert ev["plots"].count("](data:image/png;base64,") == len(PLOTS)


def test_a_candidate_no_worse_is_installed_and_one_worse_beyond_the_tolerance_is_not(chain: Chain) -> None:
    from emmy_core.prior import load_prior
    from emmy_core.prior.artifact import write_artifact

    paths = chain.resources["paths"].chain()
    installed = Path(paths.installed_prior)
    assert not installed.exists()
    assets = chain_assets(["here"])
    ok = materialize(assets, chain.resources, chain.instance, ("evaluation", "installed_prior"))
    assert ok.success and materialized(ok) == {"evaluation", "installed_prior"}
    good = installed.read_bytes()
    assert load_prior(installed).info["provenance"] == load_prior(paths.candidate).info["provenance"]

    # A real but bad candidate: the good model with its scores reversed (it now ranks the slowest first).
    doc = load_prior(paths.candidate).doc
    scale, bias = doc["model"]["scale_and_bias"]
    doc["model"]["scale_and_bias"] = [-scale, bias]
    write_artifact(doc, paths.candidate)
    bad = materialize(assets, chain.resources, chain.instance, ("evaluation", "installed_prior"))
    assert not bad.success
    (check,) = events(bad, "ASSET_CHECK_EVALUATION")
    data = check.event_specific_data
    assert not data.passed and "beyond the tolerance of 2.0%" in (data.description or "")  # type: ignore[union-attr]
    assert materialized(bad) == {"evaluation"}
    assert installed.read_bytes() == good


def test_an_installed_prior_that_no_longer_loads_is_replaced_and_the_verdict_says_why(chain: Chain) -> None:
    from emmy_core.prior import load_prior

    paths = chain.resources["paths"].chain()
    installed = Path(paths.installed_prior)
    stale = json.loads(Path(paths.candidate).read_text())
    stale["feature_version"] += 1  # written by another Emmy: refused on load, naming both versions
    installed.write_text(json.dumps(stale))
    result = materialize(chain_assets(["here"]), chain.resources, chain.instance, ("evaluation", "installed_prior"))
    assert result.success and materialized(result) == {"evaluation", "installed_prior"}
    verdict = metadata(result, "evaluation")["verdict"]
    assert "no installed prior to compare against" in verdict and "cannot be used" in verdict
    assert load_prior(installed).info["provenance"] == load_prior(paths.candidate).info["provenance"]
