"""The prior: a candidate ranker fitted on the dataset, tracked as one MLflow run per fit."""

import dagster as dg

from assets import GROUP
from assets.dataset import dataset
from assets.resources import ComputeScheduler, EmmyPaths, MLflowTracking
from emmy_core.prior.fit import HEADLINE_FIGURES
from emmy_core.prior.training import DEFAULT_POOLS, Params


class FitConfig(dg.Config):
    """How the prior is fitted: validation folds (grouped by card, the headline, and by kernel), seed, and the
    pools it learns from (`golden`: the goldens first among their candidates; `measured`: also the measured
    order); the ranker's number of trees and their depth (defaults: the shipped recipe, `Params`; fewer or
    shallower trees make a quicker trial fit, and the artifact's provenance records them)."""

    folds: int = 5
    seed: int = 0
    pools: str = DEFAULT_POOLS
    iterations: int = Params.iterations
    depth: int = Params.depth


@dg.asset(deps=[dataset], group_name=GROUP, description=(
    "A candidate prior (`_tune/fits/candidate.json`, `chain.steps.fit`): a CatBoost ranker fitted on the dataset, "
    "validated on held-out cards (the headline) and held-out kernels, its folds trained where `compute` says; "
    "metrics in a fresh folder under `_tune/fits/`; the run in MLflow (experiment `emmy-prior-fits`). Its data "
    "version is the artifact's content digest."))
def prior(context: dg.AssetExecutionContext, config: FitConfig, paths: EmmyPaths,
          mlflow: MLflowTracking, compute: ComputeScheduler) -> dg.MaterializeResult:
    from emmy_core.chain import steps
    from emmy_core.prior.fit import code_revision

    chain = paths.chain(mlflow.uri())
    result = steps.fit(chain.dataset, chain.candidate, pools=config.pools, folds=config.folds, seed=config.seed,
                       tracking_uri=chain.tracking(), fits_dir=chain.fits, progress=context.log.info,
                       tags={"dagster_run_id": context.run.run_id, "code_revision": code_revision()},
                       scheduler=compute.scheduler, params=Params().sized(config.iterations, config.depth))
    cv = result.metrics["mean"]  # metrics.json: the held-out cards' figures (the card split)
    digest = steps.content_digest(result.artifact_path)
    return dg.MaterializeResult(data_version=dg.DataVersion(digest), metadata={
        "content digest": digest, "artifact": dg.MetadataValue.path(str(result.artifact_path)),
        "fit folder": dg.MetadataValue.path(str(result.fit_dir)),
        **{f"cv {k}": float(cv[k]) for k in HEADLINE_FIGURES if isinstance(cv.get(k), int | float)},
        "folds": len(result.metrics["folds"]), "train groups": result.metrics["train_groups"],
        "mlflow_run_id": result.run_id or "none", "mlflow_tracking_uri": chain.tracking()})
