"""The Definitions load and validate, with every job, schedule, sensor and check the chain promises."""

from __future__ import annotations

import dagster as dg
import pytest

from pipelines.definitions import defs
from pipelines.jobs import CHAIN


def test_the_definitions_load_and_validate() -> None:
    dg.Definitions.validate_loadable(defs)
    repo = defs.get_repository_def()
    assert set(repo.job_names) >= {"nightly_refresh", "fit_and_evaluate", "tune_card"}
    assert {s.name for s in repo.schedule_defs} == {"nightly", "weekly_fit"}
    assert {s.name for s in repo.sensor_defs} == {"new_tune_files"}


def test_schedules_and_the_sensor_run_by_default() -> None:
    repo = defs.get_repository_def()
    for s in repo.schedule_defs:
        assert s.default_status == dg.DefaultScheduleStatus.RUNNING, s.name
    for s in repo.sensor_defs:
        assert s.default_status == dg.DefaultSensorStatus.RUNNING, s.name


def test_the_nightly_job_is_the_whole_chain_with_its_checks() -> None:
    job = defs.resolve_job_def("nightly_refresh")
    keys = {k.to_user_string() for k in job.asset_layer.selected_asset_keys}
    assert keys == {*CHAIN, "installed_prior"}
    steps = set(job.graph.node_dict)
    assert {"tuning_db_tuning_db_consistent", "dataset_dataset_consistent", "evaluation_candidate_no_worse"} <= steps


def test_duckdb_writers_share_one_pool() -> None:
    specs = {k.to_user_string(): a for a in defs.assets or [] if isinstance(a, dg.AssetsDefinition) for k in a.keys}
    assert specs["tuning_db"].op.pool == specs["dataset"].op.pool == "duckdb"


def test_materializing_every_asset_is_one_run_as_the_readme_says() -> None:
    """`dagster asset materialize -m pipelines.definitions --select '*'`: the CLI builds one implicit job for the
    selection, which Dagster refuses when the assets' partitions differ; no asset of the chain is partitioned
    (the per-card tune is a partitioned job, its output the observed `tune_files`)."""
    repo = defs.get_repository_def()
    keys = dg.AssetSelection.from_coercible(["*"]).resolve(repo.asset_graph)
    assert {k.to_user_string() for k in keys} >= {*CHAIN, "installed_prior"} - {"freeze_files"}
    job = repo.get_implicit_job_def_for_assets(keys)
    assert job is not None and all(job.asset_layer.get(k).partitions_def is None for k in keys)


def test_the_tune_has_one_partition_per_matrix_card_and_this_machine() -> None:
    from emmy_core.targets import local_card

    keys = defs.resolve_job_def("tune_card").partitions_def.get_partition_keys()  # type: ignore[union-attr]
    assert local_card().name in keys and "NVIDIA H200" in keys and "local" not in keys


def test_the_mlflow_uri_is_read_when_a_fit_runs_not_when_the_definitions_are_built(
        monkeypatch: pytest.MonkeyPatch) -> None:
    from emmy_core.prior.tracking import DEFAULT_URI as DEFAULT_TRACKING_URI

    resource = defs.resources["mlflow"]
    assert resource.tracking_uri == ""
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    assert resource.uri() == DEFAULT_TRACKING_URI
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "sqlite:////elsewhere.db")
    assert resource.uri() == "sqlite:////elsewhere.db"


def test_the_chain_fits_by_the_installed_priors_recipe() -> None:
    """`make run` fits a candidate on the committed freeze and gates it against the shipped prior: with
    another recipe (pools, folds, seed, parameters) the gate compares two different fits and may fail."""
    import json

    from assets.prior import FitConfig
    from emmy_core.prior import installed_prior_path
    from emmy_core.prior.training import Params

    shipped = json.loads(installed_prior_path().read_text())["provenance"]
    config = FitConfig()
    assert (config.pools, config.folds, config.seed) == (shipped["pools"], shipped["folds"], shipped["seed"])
    assert Params().to_json() == shipped["params"]


def test_the_dagster_cli_started_in_the_repository_uses_its_instance_not_a_temporary_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`dagster dev` without DAGSTER_HOME makes a temporary home and says it will remove it; the CLI reads the
    `.env` of the folder it starts in (as dagster's own loader reads it), which names the repository."""
    from pathlib import Path

    from dagster._core.secrets.env_file import get_env_var_dict

    root = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("PWD", str(root))  # what a shell sets when the CLI starts in the repository root
    home = Path(get_env_var_dict(str(root))["DAGSTER_HOME"])
    assert home == root and (home / "dagster.yaml").is_file()


def test_the_readmes_asset_graph_figure_is_drawn_from_these_definitions(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """If this fails after a change to the chain: `.venv/bin/python docs/asset_graph.py` redraws the figure."""
    import importlib.util
    import sys
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "docs" / "asset_graph.py"
    spec = importlib.util.spec_from_file_location("asset_graph", path)
    assert spec is not None and spec.loader is not None
    figure = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("asset_graph", figure)  # its dataclass looks its module up
    spec.loader.exec_module(figure)
    placed = figure.layout()
    assert {p.name for p in placed} == {k.to_user_string() for k in defs.resolve_asset_graph().get_all_asset_keys()}
    column = {p.name: p.column for p in placed}
    assert all(column[parent] < p.column for p in placed for parent in p.parents)  # arrows point right
    assert figure.drawn(figure.OUT) == figure.describe(placed), "docs/asset-graph.png shows other definitions"
    figure.draw(placed[:-1], tmp_path / "other.png")  # a figure of another graph is told apart
    assert figure.drawn(tmp_path / "other.png") != figure.describe(placed)


def test_the_store_follows_the_data_folder_unless_it_names_its_own_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from assets.resources import DuckDBStore, EmmyPaths

    paths = EmmyPaths(data_dir=str(tmp_path / "data"))
    assert DuckDBStore().file(paths) == tmp_path / "data" / "tune.db"
    assert DuckDBStore(path=str(tmp_path / "own.db")).file(paths) == tmp_path / "own.db"


def test_python_m_pipelines_keeps_its_runs_where_dagster_home_says(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """As the `dagster` CLI does: DAGSTER_HOME when set, else the repository's dagster.yaml, else a throwaway
    instance; a DAGSTER_HOME that is no folder is refused by name, not replaced by a temporary home."""
    from pathlib import Path

    from pipelines.__main__ import InstanceError, repository_instance

    home = tmp_path / "home"
    home.mkdir()
    (tmp_path / "repo").mkdir()
    with repository_instance(tmp_path / "repo", str(home)) as instance:
        assert Path(instance.root_directory) == home and not instance.is_ephemeral
    with repository_instance(tmp_path / "repo", "") as instance:
        assert instance.is_ephemeral
    root = Path(__file__).resolve().parents[2]
    with repository_instance(root, "") as instance:
        assert not instance.is_ephemeral and Path(instance.root_directory).name == ".dagster"
    with pytest.raises(InstanceError, match="is not a folder"):
        with repository_instance(root, str(tmp_path / "missing")):
            pass
