"""The evaluation: the candidate prior beside the installed one on the dataset; its check; the install."""

import json

import dagster as dg

from assets.dataset import dataset
from assets.prior import prior
from pipelines.resources import EmmyPaths, MLflowTracking

GROUP = "prior"
TOLERANCE = 0.02
"""How much slower (geometric mean of measured top-1 slowdowns) a candidate may be than the installed prior."""


def fit_run_id(context: dg.AssetExecutionContext) -> str | None:
    """The MLflow run of the latest fit, as the prior's materialization recorded it."""
    event = context.instance.get_latest_materialization_event(dg.AssetKey("prior"))
    if event is None or event.asset_materialization is None:
        return None
    value = event.asset_materialization.metadata.get("mlflow_run_id")
    text = getattr(value, "value", value)
    return str(text) if text and text != "none" else None


@dg.asset(deps=[prior, dataset], group_name=GROUP, description=(
    "The candidate prior and the installed one judged on the same dataset, side by side: where each ranks "
    "the goldens (strictly, and with ties counted against), what its picks cost on the measured pools per "
    "card and setting, beside the rule's first option and a random pick. Report and plot under "
    "`_data/evaluation/`, the plot also logged to the fit's MLflow run."))
def evaluation(context: dg.AssetExecutionContext, paths: EmmyPaths, mlflow: MLflowTracking) -> dg.MaterializeResult:
    from emmy_core.eval.side_by_side import by_card_table, markdown_table, plot, side_by_side, verdict

    report = side_by_side(paths.candidate, paths.installed(), paths.dataset, progress=context.log.info)
    v = verdict(report, TOLERANCE)
    report["verdict"] = {"passed": v.passed, "reason": v.reason, "tolerance": v.tolerance}
    out = paths.evaluation_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    table = markdown_table(report)
    (out / "table.md").write_text(table, encoding="utf-8")
    png = plot(report, out / "top1_by_card.png")
    run_id = fit_run_id(context)
    if run_id is not None:
        from mlflow.tracking import MlflowClient

        client = MlflowClient(tracking_uri=mlflow.uri())
        client.log_artifact(run_id, str(png), artifact_path="evaluation")
        client.log_artifact(run_id, str(out / "report.json"), artifact_path="evaluation")
    return dg.MaterializeResult(metadata={
        "table": dg.MetadataValue.md(table),
        "by card": dg.MetadataValue.md(by_card_table(report)),
        "verdict": v.reason,
        "report": dg.MetadataValue.path(str(out / "report.json")),
        "plot": dg.MetadataValue.path(str(png)),
        "forks": report["forks"],
        "mlflow_run_id": run_id or "none",
        "mlflow_tracking_uri": mlflow.uri(),
    })


@dg.asset_check(asset=evaluation, blocking=True, description=(
    f"The candidate against the installed prior: it fails when the candidate's measured top-1 slowdown is "
    f"worse than the installed prior's by more than {TOLERANCE:.0%}; then it is not installed."))
def candidate_no_worse(paths: EmmyPaths) -> dg.AssetCheckResult:
    from emmy_core.eval.side_by_side import verdict

    report = json.loads((paths.evaluation_dir / "report.json").read_text(encoding="utf-8"))
    v = verdict(report, TOLERANCE)
    return dg.AssetCheckResult(passed=v.passed, description=v.reason,
                               metadata={"candidate top1": v.candidate if v.candidate is not None else "none",
                                         "installed top1": v.installed if v.installed is not None else "none",
                                         "tolerance": v.tolerance})


@dg.asset(deps=[evaluation], group_name=GROUP, description=(
    "The installed prior: the candidate copied over it (checked to load, written atomically) once the "
    "evaluation's check passed. A compile loads it."))
def installed_prior(paths: EmmyPaths) -> dg.MaterializeResult:
    from emmy_core.prior import load_prior
    from emmy_core.prior.artifact import write_artifact

    candidate = load_prior(paths.candidate)
    target = write_artifact(candidate.doc, paths.installed())
    return dg.MaterializeResult(metadata={"path": dg.MetadataValue.path(str(target)),
                                          "provenance": dg.MetadataValue.json(candidate.info["provenance"])})
