"""Fixtures of the prior's tests: the repository freeze as a dataset export, one MLflow store per
session (creating one costs seconds), and a small fit on the freeze shared by the tests that read it."""

from __future__ import annotations

from pathlib import Path

import pytest

from emmy_core.prior.training import Params

ROOT = Path(__file__).resolve().parents[2]
FREEZES = ROOT / "freezes"
SMALL = Params(iterations=60, depth=4)  # a quick fit for tests that need any fitted model


@pytest.fixture(scope="session")
def freeze_export(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The committed freeze imported into a fresh database and exported (what `emmy fit` reads)."""
    from emmy_core.exchange.export import export_db
    from emmy_core.exchange.importer import import_db
    from emmy_core.freezefolder.freeze_names import freeze_folder

    files = freeze_folder(FREEZES).reviewed
    if not files:
        pytest.skip("no freeze committed in freezes/")
    tmp = tmp_path_factory.mktemp("freeze")
    outcomes = import_db(tmp / "freeze.db", files, fresh=True)
    assert all(o.ok for o in outcomes), [o.message for o in outcomes]
    export_db(tmp / "freeze.db", tmp / "dataset")
    return tmp / "dataset"


@pytest.fixture(scope="session")
def mlflow_uri(tmp_path_factory: pytest.TempPathFactory) -> str:
    """One SQLite MLflow store for the whole session."""
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"


@pytest.fixture(scope="session")
def small_fit(freeze_export: Path, mlflow_uri: str, tmp_path_factory: pytest.TempPathFactory) -> tuple:
    """(FitResult, Dataset) of a quick fit on the freeze, tracked in the session's MLflow store."""
    from emmy_core.prior.dataset import read_dataset
    from emmy_core.prior.fit import fit_dataset

    tmp = tmp_path_factory.mktemp("fit")
    dataset = read_dataset(freeze_export)
    result = fit_dataset(dataset, tmp / "prior.json", pools="golden", folds=3, seed=7, params=SMALL,
                         tracking_uri=mlflow_uri, tags={"dagster_run_id": "run-123"}, fits_dir=tmp / "fits")
    return result, dataset
