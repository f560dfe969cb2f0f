"""The prior: a candidate ranker fitted on the dataset, tracked as one MLflow run per fit."""

import dagster as dg

from assets.dataset import dataset
from emmy_core.prior.fit import HEADLINE_FIGURES
from emmy_core.prior.training import DEFAULT_POOLS
from pipelines.resources import ComputeScheduler, EmmyPaths, MLflowTracking

GROUP = "prior"


class FitConfig(dg.Config):
    """How the prior is fitted: validation folds (grouped by card, the headline, and by kernel), seed, and the
    pools it learns from (`golden`: the goldens first among their candidates; `measured`: also the measured
    order)."""

    folds: int = 5
    seed: int = 0
    pools: str = DEFAULT_POOLS


@dg.asset(deps=[dataset], group_name=GROUP, description=(
    "A candidate prior (`_tune/fits/candidate.json`): a CatBoost ranker fitted on the dataset, validated "
    "on held-out cards (the headline) and held-out kernels; metrics in a fresh folder under `_tune/fits/`; the run, its "
    "parameters, metrics and artifacts in MLflow (experiment `emmy-prior-fits`). Its data version is the "
    "artifact's content digest: the same dataset and recipe fit the same prior."))
def prior(context: dg.AssetExecutionContext, config: FitConfig, paths: EmmyPaths,
          mlflow: MLflowTracking, compute: ComputeScheduler) -> dg.MaterializeResult:
    from emmy_core.compute import parse_scheduler, task_map
    from emmy_core.prior import load_prior
    from emmy_core.prior.dataset import read_dataset
    from emmy_core.prior.fit import code_revision, fit_dataset
    from emmy_core.prior.fold_tasks import DaskTrainer, DatasetRef
    from emmy_core.prior.provenance import content_digest

    data = read_dataset(paths.dataset, progress=context.log.info)
    where = parse_scheduler(compute.scheduler)
    with task_map(where) as run:
        trainer = None if where.kind == "inprocess" else DaskTrainer(
            DatasetRef(str(paths.dataset.resolve()), None, data.digest), run)
        result = fit_dataset(data, paths.candidate, pools=config.pools, folds=config.folds, seed=config.seed,
                             tracking_uri=mlflow.uri(), fits_dir=paths.fits,
                             tags={"dagster_run_id": context.run.run_id, "code_revision": code_revision()},
                             progress=context.log.info, trainer=trainer)
    cv = result.metrics["mean"]  # metrics.json: the held-out cards' figures (the card split)
    digest = content_digest(load_prior(result.artifact_path).doc)
    return dg.MaterializeResult(data_version=dg.DataVersion(digest), metadata={
        "content digest": digest,
        "artifact": dg.MetadataValue.path(str(result.artifact_path)),
        "fit folder": dg.MetadataValue.path(str(result.fit_dir)),
        **{f"cv {k}": float(cv[k]) for k in HEADLINE_FIGURES if isinstance(cv.get(k), int | float)},
        "folds": len(result.metrics["folds"]),
        "train groups": result.metrics["train_groups"],
        "mlflow_run_id": result.run_id or "none",
        "mlflow_tracking_uri": mlflow.uri(),
    })
