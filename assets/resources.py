"""Typed Dagster resources: the chain's paths, the DuckDB store, the MLflow tracking URI, where offline work runs.

They live beside the assets (which never import `pipelines`, where they are wired into Definitions) and read
nothing from the environment when imported. Defaults are `ChainPaths`'s: relative to the working folder; an empty
MLflow URI means `MLFLOW_TRACKING_URI` when set at run time, else the local SQLite store.
"""

from pathlib import Path

import dagster as dg

from emmy_core.chain.paths import DATA, FITS, FREEZES, INBOX, ChainPaths, inbox_at
from emmy_core.prior.tracking import resolve_uri


class EmmyPaths(dg.ConfigurableResource):
    """The folders and files of the chain (relative to the working folder unless absolute)."""

    freeze_dir: str = str(FREEZES)
    tune_inbox: str = str(INBOX)
    data_dir: str = str(DATA)
    fits_dir: str = str(FITS)
    installed_prior: str = ""  # empty: the prior installed in the package

    def chain(self, tracking_uri: str = "") -> ChainPaths:
        """These paths as the library takes them (`tune_inbox` may be an fsspec URL: `chain.paths.inbox_at`)."""
        inbox, url = inbox_at(self.tune_inbox, Path(self.data_dir))
        return ChainPaths(freezes=Path(self.freeze_dir), inbox=inbox, data=Path(self.data_dir),
                          fits=Path(self.fits_dir), inbox_url=url, tracking_uri=tracking_uri,
                          installed_prior=Path(self.installed_prior) if self.installed_prior else None)


class DuckDBStore(dg.ConfigurableResource):
    """The chain's tuning database: one DuckDB file, opened per operation and closed at once (by default `tune.db`
    in `EmmyPaths.data_dir`). Assets that write it share the `duckdb` pool: one writing process per file."""

    path: str = ""  # empty: tune.db in the paths' data folder
    lock_timeout_s: float = 30.0

    def file(self, paths: EmmyPaths) -> Path:
        """The database file: `path` when set, else the chain's `tune_db` under `paths`' data folder."""
        return Path(self.path) if self.path else paths.chain().tune_db


class MLflowTracking(dg.ConfigurableResource):
    """Where fits are tracked: a tracking URI (empty: `MLFLOW_TRACKING_URI` at run time, else local SQLite)."""

    tracking_uri: str = ""

    def uri(self) -> str:
        return resolve_uri(self.tracking_uri or None)


class ComputeScheduler(dg.ConfigurableResource):
    """Where the `prior` asset trains its folds and seed members and the `evaluation` asset evaluates its cards
    (`emmy_core.compute`): `inprocess` (default), `local:N` (a Dask LocalCluster of N workers for the step) or
    `tcp://HOST:PORT` (a running Dask scheduler)."""

    scheduler: str = "inprocess"
