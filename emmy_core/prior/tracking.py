"""MLflow tracking of fits: one run per fit in experiment `emmy-prior-fits`, and two runs side by side.

The tracking URI is the one given, else `$MLFLOW_TRACKING_URI`, else `sqlite:///_tune/mlflow.db`
with artifacts in `_tune/mlartifacts/` (MLflow 3 refuses a bare file store). A run holds the
fit's parameters, a handful of headline metrics (`HEADLINE`), every other figure and each held-out
card's in two tables (`all_metrics.json`, `per_card.json`), the artifact and `metrics.json`, and tags: feature version, dataset digest, code
revision, plus any tags the caller passes (e.g. the Dagster run id). MLflow is imported here
only (it takes seconds), through a client bound to the URI: no global MLflow state is set.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

EXPERIMENT = "emmy-prior-fits"  # not "emmy-prior": that is the artifact's file format
DEFAULT_URI = "sqlite:///_tune/mlflow.db"


class TrackingError(RuntimeError):
    """The fit was written but could not be tracked; the message says where the fit is and why."""


def resolve_uri(uri: str | None) -> str:
    return uri or os.environ.get("MLFLOW_TRACKING_URI") or DEFAULT_URI


def _artifact_location(uri: str) -> str | None:
    """For a SQLite store, `mlartifacts/` beside the database file; otherwise the server decides."""
    if not uri.startswith("sqlite:///"):
        return None
    db = Path(uri[len("sqlite:///"):])
    db.parent.mkdir(parents=True, exist_ok=True)
    return (db.parent.resolve() / "mlartifacts").as_uri()


HTTP_TIMEOUT_S = 5
"""Seconds an MLflow HTTP request may take before tracking gives up (MLflow's own default is 120 s, with 7
retries backing off for minutes: a fit must not hang on a server that is not there)."""
HTTP_RETRIES = 1


def bound_http(uri: str) -> str:
    """For an http(s) tracking URI, bounds MLflow's request timeout and retries (unless the user set them in
    the environment); returns how long tracking may wait, in words, for a message."""
    if not uri.startswith(("http://", "https://")):
        return ""
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", str(HTTP_TIMEOUT_S))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", str(HTTP_RETRIES))
    os.environ.setdefault("MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR", "1")
    return (f" (tracking gave up: requests time out after {os.environ['MLFLOW_HTTP_REQUEST_TIMEOUT']} s with "
            f"{os.environ['MLFLOW_HTTP_REQUEST_MAX_RETRIES']} retries; set MLFLOW_HTTP_REQUEST_TIMEOUT and "
            "MLFLOW_HTTP_REQUEST_MAX_RETRIES to wait longer)")


def client(uri: str | None) -> Any:
    os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")
    bound_http(resolve_uri(uri))
    from mlflow.tracking import MlflowClient

    resolved = resolve_uri(uri)
    _artifact_location(resolved)
    return MlflowClient(tracking_uri=resolved)


KIND_TAG = ("mlflow.experimentKind", "custom_model_development")
"""MLflow 3's mark of a model-training experiment: without it the UI opens the experiment in its GenAI view
(traces), where a fit's runs do not show."""


def _experiment(c: Any, uri: str) -> str:
    exp = c.get_experiment_by_name(EXPERIMENT)
    if exp is None:
        return str(c.create_experiment(EXPERIMENT, artifact_location=_artifact_location(uri), tags=dict([KIND_TAG])))
    if exp.tags.get(KIND_TAG[0]) != KIND_TAG[1]:
        c.set_experiment_tag(exp.experiment_id, *KIND_TAG)
    return str(exp.experiment_id)


def start_run(uri: str | None, tags: Mapping[str, str]) -> str:
    """Opens a run (status RUNNING) in the fits' experiment before the work it records; returns its id.
    TrackingError when MLflow cannot, before any work is done."""
    resolved = resolve_uri(uri)
    try:
        c = client(resolved)
        return str(c.create_run(_experiment(c, resolved), tags={str(k): str(v)[:5000] for k, v in tags.items()})
                   .info.run_id)
    except Exception as exc:  # MLflow raises its own exception types
        raise TrackingError(f"MLflow at {resolved} could not start a run: {str(exc)[:400]}{bound_http(resolved)}") \
            from exc


def end_run(uri: str | None, run_id: str, failed: bool = False) -> None:
    """Closes a run started by `start_run` (FAILED when the work did not finish); a store that refuses is
    not an error here: the failure that came first is the one reported."""
    try:
        client(uri).set_terminated(run_id, status="FAILED" if failed else "FINISHED")
    except Exception:  # the store that failed may refuse this too
        pass


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for k, v in value.items():
            _flat(f"{prefix}.{k}" if prefix else str(k), v, out)
    else:
        out[prefix] = value


def log_fit(uri: str | None, doc: Mapping[str, Any], report: Mapping[str, Any], artifact: Path, metrics_path: Path,
            tags: Mapping[str, str], run_id: str | None = None) -> str:
    """Logs one fit, into `run_id` when a run was opened around the fit (`start_run`; it is closed here), else
    into a new run; returns the run id. TrackingError (naming the artifact) when tracking fails."""
    from mlflow.entities import Metric, Param, RunTag

    resolved = resolve_uri(uri)
    try:
        c = client(resolved)
        prov = doc["provenance"]
        run_tags = {"feature_version": str(doc["feature_version"]), "dataset_digest": str(prov["dataset_digest"]),
                    "code_revision": str(prov["code_revision"]), "mlflow.runName": f"fit-{metrics_path.parent.name}",
                    **{str(k): str(v)[:5000] for k, v in tags.items()}}
        if run_id is None:
            run_id = c.create_run(_experiment(c, resolved), tags=run_tags).info.run_id
        else:
            for k, v in run_tags.items():
                c.set_tag(run_id, k, v)
    except Exception as exc:
        raise TrackingError(f"the prior was written to {artifact} (it is kept), but MLflow at {resolved} could "
                            f"not start a run: {str(exc)[:400]}{bound_http(resolved)}") from exc
    try:
        params: dict[str, Any] = {}
        _flat("", {"pools": prov["pools"], "folds": prov["folds"], "seed": prov["seed"], **prov["params"]}, params)
        flat = all_figures(report)
        headline = [Metric(k, float(flat[k]), 0, 0) for k in HEADLINE if _number(flat.get(k))]
        c.log_batch(run_id, metrics=headline, params=[Param(k, str(v)[:6000]) for k, v in sorted(params.items())],
                    tags=[RunTag("forks", str(report["forks"]))])
        c.log_table(run_id, data=_columns([{"metric": k, "value": float(v)} for k, v in sorted(flat.items())
                                           if _number(v)], ("metric", "value")), artifact_file=ALL_METRICS)
        c.log_table(run_id, data=_columns(per_card_rows(report), PER_CARD_COLUMNS), artifact_file=PER_CARD)
        c.log_artifact(run_id, str(artifact))
        c.log_artifact(run_id, str(metrics_path))
    except Exception as exc:
        try:
            c.set_terminated(run_id, status="FAILED")
        except Exception:  # the store that failed may refuse this too; the error below says what failed first
            pass
        raise TrackingError(f"the prior was written to {artifact} (it is kept), but logging run {run_id} to "
                            f"{resolved} failed: {str(exc)[:400]}{bound_http(resolved)}") from exc
    c.set_terminated(run_id)
    return str(run_id)


HEADLINE = ("cv.top1", "cv.top5", "cv.tau", "cv.first_slowdown", "cv.random_slowdown", "cv.similar_slowdown",
            "cv.transfer_top1", "cv.reach_top1", "cv.reach_top5")
"""The run's metrics: the held-out cards' top-1 and top-5 slowdowns, the order's tau, the baselines (first option,
random, most similar card, transfer) and the lookup's reach. Every other figure, counts included, is in the
tables `ALL_METRICS` and `PER_CARD` (a chart per figure buried the headline among 180 others)."""
ALL_METRICS = "all_metrics.json"
PER_CARD = "per_card.json"
PER_CARD_COLUMNS = ("card", "split", "top1", "top1_pools", "top5", "tau", "first_slowdown", "random_slowdown",
                    "similar_slowdown", "transfer_top1", "reach_top1", "reach_top1_pools", "golden_rank",
                    "golden_rank_pools")


def all_figures(report: Mapping[str, Any]) -> dict[str, Any]:
    """Every figure of a fit's report by dotted name (`cv.top1`, `kernel_cv.tau`, `ranking.top5`, `fold.3.top1`)."""
    flat: dict[str, Any] = {}
    _flat("cv", report["mean"], flat)  # the headline: the card split (a card the fit never saw)
    _flat("kernel_cv", report.get("kernel_mean", {}), flat)
    _flat("ranking", {k: v for k, v in report.get("ranking", {}).items() if k in (
        "weight", "top1", "top5", "vs_first", "vs_ranker", "vs_transfer_order", "vs_transfer_baseline",
        "diverse", "diverse_top5")}, flat)
    _flat("in_sample", report["in_sample"], flat)
    flat["undescribed_pools"] = report["undescribed_pools"]
    for fold in report["folds"]:
        _flat(f"fold.{fold['fold']}", {k: v for k, v in fold.items() if k != "fold" and _number(v)}, flat)
    return flat


def per_card_rows(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One row per held-out card of the card split (the fold that held it out), with its pool counts."""
    rows = []
    for fold in report["folds"]:
        for card in fold.get("validation_cards") or [f"fold {fold['fold']}"]:
            rows.append({"card": str(card), "split": f"fold {fold['fold']}",
                         **{k: fold.get(k) for k in PER_CARD_COLUMNS[2:]}})
    return rows


def _columns(rows: list[dict[str, Any]], names: tuple[str, ...]) -> dict[str, list[Any]]:
    """Rows as the columns `log_table` takes (a missing or non-finite figure is None)."""
    return {n: [r.get(n) if not isinstance(r.get(n), float) or math.isfinite(r[n]) else None for r in rows]
            for n in names}


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def compare_runs(uri: str | None, run_a: str, run_b: str) -> list[tuple[str, float | None, float | None]]:
    """(metric, A, B) for every metric either run logged, sorted by name (a metric one lacks is None).
    Reads only: tracking 'off' holds no run, and a SQLite store that does not exist is not created."""
    resolved = resolve_uri(uri)
    if resolved == "off":
        raise TrackingError("--tracking-uri off tracks nothing, so it holds no run to compare: give the store "
                            "the fits were tracked in")
    if resolved.startswith("sqlite:///") and not Path(resolved[len("sqlite:///"):]).is_file():
        raise TrackingError(f"no MLflow store at {resolved[len('sqlite:///'):]}: no run to compare there")
    c = client(uri)
    a, b = (c.get_run(r).data.metrics for r in (run_a, run_b))
    return [(k, a.get(k), b.get(k)) for k in sorted(set(a) | set(b))]
