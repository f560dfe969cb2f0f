"""The evaluation: the candidate prior beside the installed one on the dataset; its check; the install."""

import dataclasses
import json

import dagster as dg

from assets.dataset import dataset
from assets.prior import prior
from emmy_core.eval.verdict import DEFAULT_TOLERANCE
from pipelines.resources import EmmyPaths, MLflowTracking

GROUP = "prior"
TOLERANCE = DEFAULT_TOLERANCE
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
    "The candidate prior and the installed one judged on the same dataset (`emmy_core.eval.evaluate`, both "
    "views): where each ranks the goldens (strictly, and with ties counted against), what its picks cost on the "
    "measured pools per card and setting, beside the rule's first option, a random pick, the most similar "
    "card and the transfer baseline. Report, table and plots under `_data/evaluation/`, also logged to the "
    "fit's MLflow run."))
def evaluation(context: dg.AssetExecutionContext, paths: EmmyPaths, mlflow: MLflowTracking) -> dg.MaterializeResult:
    from emmy_core.eval import compare_reports, evaluate, verdict
    from emmy_core.eval.plots import write_plots
    from emmy_core.prior import PriorError
    from emmy_core.prior.dataset import read_dataset

    data = read_dataset(paths.dataset, progress=context.log.info)
    candidate = evaluate(data, paths.candidate, pools="both", progress=context.log.info)
    installed, unusable = None, ""
    if paths.installed().exists():
        try:
            installed = evaluate(data, paths.installed(), pools="both")
        except PriorError as exc:  # a stale or damaged installed prior is replaced, and the report says why
            unusable = str(exc)
            context.log.warning(f"the installed prior cannot be used: {unusable}")
    docs = {"candidate": candidate.to_json(), "installed": installed.to_json() if installed is not None else None}
    v = verdict(docs["candidate"], docs["installed"], TOLERANCE)
    if unusable:
        v = dataclasses.replace(v, reason=f"{v.reason} (the installed prior cannot be used: {unusable[:300]})")
    out = paths.evaluation_dir
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps({**docs, "verdict": v.to_json()}, indent=1, sort_keys=True) + "\n",
                                     encoding="utf-8")
    table = candidate.markdown()
    if installed is not None:
        table += "\n## the candidate (B) beside the installed prior (A)\n" + compare_reports(
            installed, candidate, "installed", "candidate")
    (out / "table.md").write_text(table, encoding="utf-8")
    pngs = write_plots(candidate, out)
    run_id = fit_run_id(context)
    if run_id is not None:
        from emmy_core.eval.tracking import log_evaluation

        log_evaluation(mlflow.uri(), run_id, [*pngs, out / "report.json"])
    mean = docs["candidate"]["mean"]
    return dg.MaterializeResult(metadata={
        "table": dg.MetadataValue.md(table),
        "verdict": v.reason,
        "report": dg.MetadataValue.path(str(out / "report.json")),
        **{f"plot {p.stem}": dg.MetadataValue.path(str(p)) for p in pngs},
        **{f"candidate {k}": float(mean[k]) for k in ("top1", "tau", "golden_rank", "golden_rank_ties")
           if isinstance(mean.get(k), int | float)},
        "forks": docs["candidate"]["forks"],
        "mlflow_run_id": run_id or "none",
        "mlflow_tracking_uri": mlflow.uri(),
    })


@dg.asset_check(asset=evaluation, blocking=True, description=(
    f"The candidate against the installed prior: it fails when the candidate's measured top-1 slowdown is "
    f"worse than the installed prior's by more than {TOLERANCE:.0%}; then it is not installed."))
def candidate_no_worse(paths: EmmyPaths) -> dg.AssetCheckResult:
    from emmy_core.eval import verdict

    report = json.loads((paths.evaluation_dir / "report.json").read_text(encoding="utf-8"))
    v = verdict(report["candidate"], report["installed"], TOLERANCE)
    return dg.AssetCheckResult(passed=v.passed, description=v.reason,
                               metadata={"candidate top1": v.candidate if v.candidate is not None else "none",
                                         "installed top1": v.installed if v.installed is not None else "none",
                                         "tolerance": v.tolerance})


@dg.asset(deps=[evaluation], group_name=GROUP, description=(
    "The installed prior: the candidate copied over it (checked to load, written atomically) once the "
    "evaluation's check passed; a candidate of the same content changes no byte of it. A compile loads it."))
def installed_prior(paths: EmmyPaths) -> dg.MaterializeResult:
    from emmy_core.prior import load_prior
    from emmy_core.prior.provenance import content_digest, install_artifact

    candidate = load_prior(paths.candidate)
    target = paths.installed()
    written = install_artifact(candidate.doc, target)
    return dg.MaterializeResult(
        data_version=dg.DataVersion(content_digest(candidate.doc)),
        metadata={"path": dg.MetadataValue.path(str(target)),
                  "written": written,  # False: the installed prior already was this one, byte for byte
                  "provenance": dg.MetadataValue.json(candidate.info["provenance"])})
