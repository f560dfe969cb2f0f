"""Fixtures of the pipeline tests: a copy of the repository freeze, resources over a temporary folder,
one MLflow SQLite store per test session (creating one costs seconds), and a Dagster instance per test."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from assets.resources import ComputeScheduler, DuckDBStore, EmmyPaths, MLflowTracking

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


def make_resources(root: Path, mlflow_uri: str) -> dict[str, dg.ConfigurableResource]:
    """Resources over `root` (a freeze copy in root/freezes), the installed prior at root/installed.json."""
    return {"paths": EmmyPaths(freeze_dir=str(root / "freezes"), tune_inbox=str(root / "inbox"),
                               data_dir=str(root / "data"), fits_dir=str(root / "fits"),
                               installed_prior=str(root / "installed.json")),
            "store": DuckDBStore(),  # tune.db in data_dir, as the default resources place it
            "mlflow": MLflowTracking(tracking_uri=mlflow_uri), "compute": ComputeScheduler()}


def copy_freeze(root: Path) -> Path:
    """A copy of the repository freeze (its JSON files) under root/freezes."""
    out = root / "freezes"
    out.mkdir(parents=True)
    for p in sorted((ROOT / "freezes").glob("*.json")):
        shutil.copy2(p, out / p.name)
    return out


@pytest.fixture
def root(tmp_path: Path) -> Path:
    copy_freeze(tmp_path)
    return tmp_path


@pytest.fixture
def instance() -> Iterator[dg.DagsterInstance]:
    with dg.instance_for_test() as inst:
        yield inst


def events(result: dg.ExecuteInProcessResult, kind: str) -> list[dg.DagsterEvent]:
    return [e for e in result.all_events if e.event_type_value == kind]


def materialized(result: dg.ExecuteInProcessResult) -> set[str]:
    return {e.asset_key.to_user_string() for e in events(result, "ASSET_MATERIALIZATION") if e.asset_key}
