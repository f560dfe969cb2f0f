"""Typed Dagster resources: where the chain reads and writes, the DuckDB store, the MLflow tracking URI.

They live beside the assets that use them (the assets never import `pipelines`, which wires them
into Definitions). Each is configured where the Definitions are built (or by a test, or by the main
job) and reads nothing from the environment when imported. The defaults are `ChainPaths`'s: relative
paths are taken from the folder the process runs in; the MLflow URI left empty means
`MLFLOW_TRACKING_URI` when set at run time, else the local SQLite store.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from emmy_core.chain.paths import DATA, FITS, FREEZES, INBOX, ChainPaths


class EmmyPaths(dg.ConfigurableResource):
    """The folders and files of the chain (relative to the working folder unless absolute)."""

    freeze_dir: str = str(FREEZES)
    tune_inbox: str = str(INBOX)
    data_dir: str = str(DATA)
    fits_dir: str = str(FITS)
    installed_prior: str = ""  # empty: the prior installed in the package

    def chain(self, tracking_uri: str = "") -> ChainPaths:
        """These paths as the library takes them."""
        return ChainPaths(freezes=Path(self.freeze_dir), inbox=Path(self.tune_inbox), data=Path(self.data_dir),
                          fits=Path(self.fits_dir),
                          installed_prior=Path(self.installed_prior) if self.installed_prior else None,
                          tracking_uri=tracking_uri)


class DuckDBStore(dg.ConfigurableResource):
    """The chain's tuning database: one DuckDB file, opened per operation and closed at once.

    Assets that write it (or read it while another may write) share the `duckdb` pool, whose
    limit is 1 in `dagster.yaml`: DuckDB allows one writing process per file.
    """

    path: str = str(ChainPaths().tune_db)
    lock_timeout_s: float = 30.0

    @property
    def file(self) -> Path:
        return Path(self.path)


class MLflowTracking(dg.ConfigurableResource):
    """Where fits are tracked: a tracking URI (empty: `MLFLOW_TRACKING_URI` at run time, else local SQLite)."""

    tracking_uri: str = ""

    def uri(self) -> str:
        from emmy_core.prior.tracking import resolve_uri

        return resolve_uri(self.tracking_uri or None)
