"""The evaluation of a fit kept in the fit's MLflow run: its report and plots, under `evaluation/`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

ARTIFACT_DIR = "evaluation"


def log_evaluation(uri: str | None, run_id: str, files: Sequence[Path | str]) -> list[str]:
    """Logs `files` into run `run_id` under `evaluation/`; returns the artifact paths. TrackingError
    (naming the run and the store) when MLflow refuses, so a caller reports it rather than losing it."""
    from emmy_core.prior.tracking import TrackingError, client, resolve_uri

    c = client(uri)
    out = []
    try:
        for f in files:
            c.log_artifact(run_id, str(f), artifact_path=ARTIFACT_DIR)
            out.append(f"{ARTIFACT_DIR}/{Path(f).name}")
    except Exception as exc:  # MLflow raises its own exception types for an unknown run or a store error
        raise TrackingError(f"logging the evaluation into run {run_id[:40]} at {resolve_uri(uri)} failed: "
                            f"{str(exc)[:300]}") from exc
    return out


def evaluate_fit(dataset_dir: Path | str, artifact: Path | str, fit_dir: Path | str, run_id: str | None,
                 uri: str | None, *, cards_file: Path | str | None = None,
                 progress: Callable[[str], None] | None = None) -> list[Path]:
    """A fit evaluated on its own dataset (both views), written into `<fit_dir>/evaluation/` (report and
    plots) and logged into the fit's run when it has one; returns the files written."""
    from emmy_core.eval.plots import write_plots
    from emmy_core.eval.report import evaluate, write_json

    report = evaluate(dataset_dir, artifact, pools="both", cards_file=cards_file, progress=progress)
    out = Path(fit_dir) / ARTIFACT_DIR
    files = [write_json(report.to_json(), out / "report.json"), *write_plots(report, out)]
    if run_id is not None:
        log_evaluation(uri, run_id, files)
    return files
