"""The Dagster Definitions of the chain: `dagster dev -m pipelines.definitions` loads `defs`.

`build_definitions` wires the assets, checks, jobs, schedules and the sensor to configured
resources; `defs` is it with the embedded defaults (relative paths under the folder Dagster
runs in, MLflow at `_tune/mlflow.db` unless `MLFLOW_TRACKING_URI` is set when a fit runs).
The tune asset's partitions (one per card of the serving matrix, this machine's included)
are read when the Definitions are built.
"""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from assets.dataset import dataset
from assets.evaluation import evaluation
from assets.freeze import freeze_files, refreshed_freeze
from assets.install import installed_prior
from assets.prior import prior
from assets.resources import ComputeScheduler, DuckDBStore, EmmyPaths, MLflowTracking
from assets.tune import tune_files
from assets.tuning_db import tuning_db
from pipelines.jobs import (
    CHAIN_JOB,
    CHECKS,
    INFO_CONSOLE,
    build_tune_job,
    card_partitions,
    fit_and_evaluate,
    nightly_refresh,
)
from pipelines.schedules import nightly, weekly_fit
from pipelines.sensors import new_tune_files


def chain_assets(cards: Sequence[str] | None = None) -> list[dg.AssetsDefinition | dg.SourceAsset]:
    """Every asset of the chain (none is partitioned: `dagster asset materialize --select '*'` runs them all;
    `cards` is kept for callers that also build the tune job)."""
    return [freeze_files, tune_files, refreshed_freeze, tuning_db, dataset, prior, evaluation, installed_prior]


def build_definitions(*, paths: EmmyPaths | None = None, store: DuckDBStore | None = None,
                      mlflow: MLflowTracking | None = None, cards: Sequence[str] | None = None,
                      compute: ComputeScheduler | None = None) -> dg.Definitions:
    """The Definitions with these resources (each defaults to its embedded configuration)."""
    return dg.Definitions(
        assets=chain_assets(cards),
        asset_checks=list(CHECKS),
        jobs=[CHAIN_JOB, nightly_refresh, fit_and_evaluate, build_tune_job(card_partitions(cards))],
        schedules=[nightly, weekly_fit],
        sensors=[new_tune_files],
        resources={"paths": paths or EmmyPaths(), "store": store or DuckDBStore(),
                   "mlflow": mlflow or MLflowTracking(), "compute": compute or ComputeScheduler()},
        executor=dg.in_process_executor,  # the chain's steps share one DuckDB file and run one after another:
        # a process per step only costs its start (about 45 s each); `tune_card` keeps its own per-card executor
        loggers=INFO_CONSOLE,
    )


defs = build_definitions()
