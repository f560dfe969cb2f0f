"""The jobs: the nightly refresh, the fit and evaluation, the per-card tune; and the chain `make run` runs."""

from __future__ import annotations

from collections.abc import Sequence

import dagster as dg

from assets.dataset import dataset_consistent
from assets.evaluation import candidate_no_worse
from assets.tune import tune
from assets.tuning_db import tuning_db_consistent
from pipelines.card_executor import card_dask_executor

CHAIN = ("freeze_files", "refreshed_freeze", "tuning_db", "dataset", "prior", "evaluation")
"""What `make run` materializes: tune files -> freeze -> import -> export -> fit -> evaluation (no install)."""

CHECKS = (tuning_db_consistent, dataset_consistent, candidate_no_worse)
"""The asset checks that run with the assets they check (a failed blocking check stops what follows)."""

NIGHTLY = (*CHAIN, "installed_prior")
FIT_AND_EVALUATE = ("tuning_db", "dataset", "prior", "evaluation", "installed_prior")


def selection(keys: tuple[str, ...]) -> dg.AssetSelection:
    """The assets named, with their checks."""
    return dg.AssetSelection.assets(*keys)


nightly_refresh = dg.define_asset_job(
    "nightly_refresh", selection=selection(NIGHTLY),
    description="Fold the waiting tune files into the freeze, import it, export the dataset, fit a candidate "
                "prior, evaluate it beside the installed one, install it when the check allows.")

fit_and_evaluate = dg.define_asset_job(
    "fit_and_evaluate", selection=selection(FIT_AND_EVALUATE),
    description="Import the freeze as it stands, export, fit, evaluate, and install when the check allows.")

INFO_CONSOLE = {"console": dg.colored_console_logger.configured({"log_level": "INFO"})}
"""The console a job logs to from the `dagster` CLI: the steps' progress and errors, not Dagster's DEBUG stream."""

CHAIN_JOB = dg.define_asset_job(
    "chain", selection=selection(CHAIN),
    description="What `make run` runs: fold the waiting tune files into the freeze, import it, export the dataset, "
                "fit a candidate prior and evaluate it beside the installed one; it installs nothing.")


def card_partitions(cards: Sequence[str] | None = None) -> dg.StaticPartitionsDefinition:
    """One partition per card: those given, else the serving matrix's with `local` read as this machine's."""
    from emmy_core.bench.matrix import matrix_cards

    return dg.StaticPartitionsDefinition(list(cards) if cards is not None else list(matrix_cards()))


def build_tune_job(partitions: dg.StaticPartitionsDefinition) -> dg.JobDefinition:
    """`tune_card` over the given card partitions (built when the Definitions are, not at import), on the card
    executor: each partition's step runs on a Dask worker offering that card's resource (`pipelines.card_executor`)."""

    @dg.job(name="tune_card", partitions_def=partitions, executor_def=card_dask_executor, logger_defs=INFO_CONSOLE,
            description=(
        "Tune the serving matrix on one card (one partition per card; runs where the card is: on a Dask worker "
        "offering that card's resource) into tune files in the inbox, which the nightly refresh folds into the "
        "freeze. `replay_from` serves the card from a frozen file instead (no hardware)."))
    def tune_card() -> None:
        tune()

    return tune_card


def run_chain(assets: list, resources: dict, instance: dg.DagsterInstance, keys: tuple[str, ...] = CHAIN, *,
              ops: dict | None = None, log_level: str = "INFO", name: str = "chain") -> dg.ExecuteInProcessResult:
    """Materializes `keys` (default the chain `make run` runs) with their checks, in this process, as the job
    `name` (so the run is listed under it, not as Dagster's ephemeral asset job); failures are in the result.
    `ops` configures assets (`{"prior": {"config": {"folds": 2}}}`).

    The console shows the assets' own progress lines (INFO) and any error, not Dagster's event stream.
    """
    job = dg.define_asset_job(name, selection=dg.AssetSelection.assets(*keys), description=CHAIN_JOB.description)
    defs = dg.Definitions(assets=[*assets], asset_checks=list(CHECKS), jobs=[job], resources=resources,
                          executor=dg.in_process_executor)
    return defs.resolve_job_def(name).execute_in_process(
        instance=instance, raise_on_error=False,
        run_config={"ops": ops or {}, "loggers": {"console": {"config": {"log_level": log_level}}}})
