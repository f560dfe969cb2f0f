"""The prior: a candidate ranker fitted on the dataset, tracked as one MLflow run per fit."""

import dagster as dg

from assets.dataset import dataset
from pipelines.resources import EmmyPaths, MLflowTracking

GROUP = "prior"
HEADLINE = ("top1", "top5", "tau", "pick_failed", "golden_rank_strict", "golden_rank_ties")


def code_revision() -> str:
    """The commit the code runs from (`git rev-parse HEAD`), or `unknown` outside a git checkout."""
    import subprocess
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() if out.returncode == 0 else "unknown"


@dg.asset(deps=[dataset], group_name=GROUP, description=(
    "A candidate prior (`_tune/fits/candidate.json`): a CatBoost ranker fitted on the dataset with "
    "cross-validation grouped by kernel; metrics in a fresh folder under `_tune/fits/`; the run, its "
    "parameters, metrics and artifacts in MLflow (experiment `emmy-prior`)."))
def prior(context: dg.AssetExecutionContext, paths: EmmyPaths, mlflow: MLflowTracking) -> dg.MaterializeResult:
    from emmy_core.prior.fit import fit_prior

    result = fit_prior(paths.dataset, paths.candidate, tracking_uri=mlflow.uri(),
                       tags={"dagster_run_id": context.run_id, "code_revision": code_revision()},
                       progress=context.log.info)
    metrics = result.metrics
    headline = {k: metrics[k] for k in metrics if k.split("_pools")[0] in HEADLINE or k in HEADLINE}
    return dg.MaterializeResult(metadata={
        "artifact": dg.MetadataValue.path(str(result.artifact_path)),
        "fit folder": dg.MetadataValue.path(str(result.fit_dir)),
        "headline": dg.MetadataValue.json(headline),
        **{k: v for k, v in headline.items() if isinstance(v, int | float)},
        "mlflow_run_id": result.run_id or "none",
        "mlflow_tracking_uri": mlflow.uri(),
    })
