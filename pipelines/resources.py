"""Typed Dagster resources: where the chain reads and writes, the DuckDB store, the MLflow tracking URI.

Each is configured where the Definitions are built (or by a test, or by the main job) and
read nothing from the environment when imported. Relative paths are taken from the folder
the process runs in (the repository root under `dagster dev` and `make run`). The MLflow
URI left empty means `MLFLOW_TRACKING_URI` when that is set at run time, else the local
SQLite store `_tune/mlflow.db`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dagster as dg

from emmy_core.prior.tracking import EXPERIMENT

DEFAULT_TRACKING_URI = "sqlite:///_tune/mlflow.db"


class EmmyPaths(dg.ConfigurableResource):
    """The folders and files of the chain (relative to the working folder unless absolute)."""

    freeze_dir: str = "freezes"
    tune_inbox: str = "_tune/files"
    data_dir: str = "_data"
    fits_dir: str = "_tune/fits"
    installed_prior: str = ""  # empty: the prior installed in the package

    @property
    def freezes(self) -> Path:
        return Path(self.freeze_dir)

    @property
    def inbox(self) -> Path:
        """The inbox as a local folder (a tune into a URL inbox writes here first: `inbox_url`)."""
        from emmy_core.store.urlfolder import is_url, local_path

        if is_url(self.tune_inbox):
            return Path(self.data_dir) / "outbox"
        return local_path(self.tune_inbox)

    @property
    def inbox_source(self) -> Path | str:
        """Where the fold takes tune files from: the URL inbox, else the local one."""
        return self.inbox_url or self.inbox

    @property
    def inbox_url(self) -> str | None:
        """The inbox when it is an fsspec URL (memory://, s3://), else None."""
        from emmy_core.store.urlfolder import is_url

        return self.tune_inbox if is_url(self.tune_inbox) else None

    @property
    def dataset(self) -> Path:
        """The dataset export the fit and the evaluation read."""
        return Path(self.data_dir) / "dataset"

    @property
    def fits(self) -> Path:
        """Where each fit's folder (metrics.json) is written."""
        return Path(self.fits_dir)

    @property
    def candidate(self) -> Path:
        """The prior a fit writes: a candidate until the evaluation's check lets it be installed."""
        return Path(self.fits_dir) / "candidate.json"

    @property
    def evaluation_dir(self) -> Path:
        """The evaluation's report (JSON, Markdown) and plots."""
        return Path(self.data_dir) / "evaluation"

    def installed(self) -> Path:
        """Where the installed prior lives (the package's unless configured)."""
        if self.installed_prior:
            return Path(self.installed_prior)
        from emmy_core.prior import installed_prior_path

        return Path(installed_prior_path())


class DuckDBStore(dg.ConfigurableResource):
    """The chain's tuning database: one DuckDB file, opened per operation and closed at once.

    Assets that write it (or read it while another may write) share the `duckdb` pool, whose
    limit is 1 in `dagster.yaml`: DuckDB allows one writing process per file.
    """

    path: str = "_data/tune.db"
    lock_timeout_s: float = 30.0

    @property
    def file(self) -> Path:
        return Path(self.path)

    def open(self, mode: str = "r") -> Any:
        """An open `emmy_core.store.MeasurementStore` on the file ('r' or 'w'); close it (or use `with`)."""
        from emmy_core.store import open_store

        return open_store(self.file, mode, lock_timeout=self.lock_timeout_s)


class MLflowTracking(dg.ConfigurableResource):
    """Where fits are tracked: a tracking URI (empty: `MLFLOW_TRACKING_URI` at run time, else local SQLite)."""

    tracking_uri: str = ""
    experiment: str = EXPERIMENT

    def uri(self) -> str:
        return self.tracking_uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_TRACKING_URI


class ComputeScheduler(dg.ConfigurableResource):
    """Where offline work runs (`emmy_core.compute`): `inprocess` (the default), `local:N` (a Dask
    LocalCluster of N workers for the duration of the step) or `tcp://HOST:PORT` (a running Dask scheduler:
    a dask-jobqueue or dask-kubernetes cluster). The `prior` asset trains its folds and seed members there."""

    scheduler: str = "inprocess"
