"""The evaluation: the candidate prior beside the installed one on the dataset, and its blocking check."""

import dagster as dg

from assets import GROUP
from assets.dataset import dataset
from assets.prior import prior
from assets.resources import ComputeScheduler, EmmyPaths, MLflowTracking
from emmy_core.eval.verdict import DEFAULT_TOLERANCE as TOLERANCE


def fit_run_id(context: dg.AssetExecutionContext) -> str | None:
    """The MLflow run of the latest fit, as the prior's materialization recorded it."""
    event = context.instance.get_latest_materialization_event(dg.AssetKey("prior"))
    value = event.asset_materialization.metadata.get("mlflow_run_id") if event and event.asset_materialization else None
    text = getattr(value, "value", value)
    return str(text) if text and text != "none" else None


@dg.asset(deps=[prior, dataset], group_name=GROUP, description=(
    "The candidate prior and the installed one judged on the same dataset (`chain.evaluation`, both views), beside "
    "the first option, a random pick, the most similar card and the transfer baseline, one card per task where "
    "`compute` says. Report, table and plots under `_data/evaluation/`, also logged to the fit's MLflow run (files, "
    "and the figures as metrics)."))
def evaluation(context: dg.AssetExecutionContext, paths: EmmyPaths, mlflow: MLflowTracking,
               compute: ComputeScheduler) -> dg.MaterializeResult:
    from emmy_core.chain import evaluation as ev

    chain = paths.chain(mlflow.uri())
    done = ev.evaluate(chain.dataset, chain.candidate, chain.installed, tolerance=TOLERANCE, progress=context.log.info,
                       scheduler=compute.scheduler)
    files = ev.write_evaluation(done, chain.evaluation)
    run_id = fit_run_id(context)
    if run_id is not None:
        ev.log_to_run(chain.tracking(), run_id, done, files)
    context.log.info(ev.log_text(done, verdict := ev.judge(done)))
    return dg.MaterializeResult(metadata={
        "table": dg.MetadataValue.md(done.table()), "verdict": verdict.reason,
        "report": dg.MetadataValue.path(str(chain.evaluation / "report.json")),
        "plots": dg.MetadataValue.md(ev.plots_markdown([f for f in files if f.suffix == ".png"])),
        **{f"candidate {k}": float(v) for k, v in ev.candidate_figures(done).items()},
        "forks": done.candidate["forks"], "mlflow_run_id": run_id or "none", "mlflow_tracking_uri": chain.tracking(),
        **({"mlflow_run": dg.MetadataValue.url(ev.run_url(chain.tracking(), run_id))} if run_id else {})})


@dg.asset_check(asset=evaluation, blocking=True, description=(
    f"The candidate against the installed prior (`chain.evaluation.judge`): it fails when the candidate's measured "
    f"top-1 slowdown is worse than the installed prior's by more than {TOLERANCE:.0%}; then it is not installed."))
def candidate_no_worse(paths: EmmyPaths) -> dg.AssetCheckResult:
    from emmy_core.chain import evaluation as ev

    done = ev.read_evaluation(paths.chain().evaluation)
    if done is None:
        return dg.AssetCheckResult(passed=False, description="no evaluation was written")
    v = ev.judge(done)
    return dg.AssetCheckResult(passed=v.passed, description=v.reason, metadata={
        "candidate top1": v.candidate if v.candidate is not None else "none",
        "installed top1": v.installed if v.installed is not None else "none", "tolerance": v.tolerance})
