"""The evaluation of a fit kept in the fit's MLflow run: its report and plots under `evaluation/`, its figures
as metrics."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

ARTIFACT_DIR = "evaluation"


def log_evaluation(uri: str | None, run_id: str, files: Sequence[Path | str],
                   metrics: Mapping[str, float] | None = None) -> list[str]:
    """Logs `files` into run `run_id` under `evaluation/` and `metrics` (the evaluation's figures) as the run's
    metrics; returns the artifact paths. TrackingError (naming the run and the store) when MLflow refuses, so
    a caller reports it rather than losing it."""
    from mlflow.entities import Metric

    from emmy_core.prior.tracking import TrackingError, client, resolve_uri

    c = client(uri)
    out = []
    try:
        if metrics:
            c.log_batch(run_id, metrics=[Metric(k, float(v), 0, 0) for k, v in sorted(metrics.items())])
        for f in files:
            c.log_artifact(run_id, str(f), artifact_path=ARTIFACT_DIR)
            out.append(f"{ARTIFACT_DIR}/{Path(f).name}")
    except Exception as exc:  # MLflow raises its own exception types for an unknown run or a store error
        raise TrackingError(f"logging the evaluation into run {run_id[:40]} at {resolve_uri(uri)} failed: "
                            f"{str(exc)[:300]}") from exc
    return out



TRAINING_VIEW = "workflowType=machine_learning"
"""MLflow 3's UI opens in its GenAI mode (traces, empty here) whatever the experiment's kind; a link with this
query opens the model-training view, where a fit's runs and metrics are."""
LOCAL_UI = "http://127.0.0.1:5000"
"""Where `mlflow ui` serves a local SQLite store (the command `emmy main` prints)."""


def run_url(uri: str, run_id: str) -> str:
    """The run's page in the MLflow UI: on the tracking server for an http(s) URI, else on the local UI."""
    from emmy_core.prior.tracking import client

    experiment = client(uri).get_run(run_id).info.experiment_id
    base = uri.rstrip("/") if uri.startswith(("http://", "https://")) else LOCAL_UI
    return f"{base}/#/experiments/{experiment}/runs/{run_id}?{TRAINING_VIEW}"
