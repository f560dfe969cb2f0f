"""The evaluation folder and the verdict: the candidate prior beside the installed one, judged.

On disk (`ChainPaths.evaluation`, every file written atomically; an output replaces only a file of
its own kind):
- `report.json`: format `emmy-chain-evaluation`, version 1: the candidate's evaluation report and the
  installed prior's (null when there is none or it cannot be used, `unusable` saying why), both
  `EvalReport.to_json()` of the same dataset, and the tolerance. The verdict is not stored: `judge`
  recomputes it from these wherever it is needed (the asset, its check, `emmy fit`, `emmy main`).
- `table.md`: the candidate's tables and the two side by side, for a person (rendered from report.json);
- the plots (`eval.plots.PLOT_NAMES`).
"""

from __future__ import annotations

import dataclasses
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from emmy_core.eval.verdict import DEFAULT_TOLERANCE, Verdict

if TYPE_CHECKING:
    from emmy_core.compute import Scheduler
    from emmy_core.eval.card_tasks import CardMap

EVALUATION_FORMAT = "emmy-chain-evaluation"
EVALUATION_VERSION = 1
TABLE_MARK = "<!-- emmy: the chain's evaluation table (rendered from report.json) -->"
UNMARKED_TABLE = re.compile(rb"\Aprior [^\n]{1,400} \(fitted on dataset [0-9a-f]{6,64}")
"""The table as the chain wrote it before it carried `TABLE_MARK` (the report's markdown, its first line
naming the prior and its dataset): the same output, one version older, so it may be replaced."""
MAX_BYTES = 256 * 1024 * 1024
Progress = Callable[[str], None]


@dataclass(frozen=True)
class Evaluation:
    """An evaluation folder's content: the two reports, why the installed prior was not used, the tolerance."""

    candidate: dict[str, Any]
    installed: dict[str, Any] | None
    unusable: str
    tolerance: float
    report: Any = dataclasses.field(default=None, compare=False, repr=False)
    """The candidate's `EvalReport` when evaluated in this process (its price points draw the plots); not stored."""

    def to_json(self) -> dict[str, Any]:
        return {"format": EVALUATION_FORMAT, "version": EVALUATION_VERSION, "candidate": self.candidate,
                "installed": self.installed, "unusable": self.unusable, "tolerance": self.tolerance}

    def table(self) -> str:
        """The table a person reads: the candidate's report, then the installed prior (A) beside it (B)."""
        from emmy_core.eval.tables import compare_text, report_text

        text = report_text(self.candidate)
        if self.installed is not None:
            text += "\n## the candidate (B) beside the installed prior (A)\n" + compare_text(
                self.installed, self.candidate, "installed", "candidate")
        return text


def judge(evaluation: Evaluation) -> Verdict:
    """Whether the candidate may replace the installed prior (`eval.verdict` at the evaluation's tolerance),
    its reason amended with why the installed prior could not be used, when it could not."""
    from emmy_core.eval.verdict import verdict

    v = verdict(evaluation.candidate, evaluation.installed, evaluation.tolerance)
    if evaluation.unusable:
        v = dataclasses.replace(v, reason=f"{v.reason} (the installed prior cannot be used: "
                                          f"{evaluation.unusable[:300]})")
    return v


def evaluate(dataset: Any, candidate: Path, installed: Path | None, *,
             tolerance: float = DEFAULT_TOLERANCE, progress: Progress | None = None,
             scheduler: str | Scheduler | None = None) -> Evaluation:
    """The candidate and the installed prior (when `installed` exists and loads) evaluated on the same dataset
    (an export folder or its URL, or one already read), both views. A stale or damaged installed prior is
    not used; why is kept in `unusable`. `scheduler` (`emmy_core.compute`): where the cards are evaluated,
    one task per card and prior on one cluster opened for both (default in this process; on Dask `dataset`
    must be the export's folder or URL, which each worker reads)."""
    from emmy_core.compute import parse_scheduler, task_map
    from emmy_core.eval import EvalError
    from emmy_core.prior.dataset import read_dataset

    where = parse_scheduler(scheduler)
    if where.kind != "inprocess" and not isinstance(dataset, str | Path):
        raise EvalError(f"an evaluation on the Dask scheduler {where} needs the dataset's export folder (each "
                        "worker reads it), not a dataset already read")
    data = read_dataset(dataset, None, progress) if isinstance(dataset, str | Path) else dataset
    if where.kind == "inprocess":
        return _judge_both(data, candidate, installed, tolerance, progress, None)
    from emmy_core.eval.card_tasks import CardMap
    from emmy_core.fileio.urlfolder import shared_location
    from emmy_core.prior.fold_tasks import DatasetRef

    with task_map(where) as run:
        cards = CardMap(DatasetRef(shared_location(dataset), None, data.digest), run, str(where))
        return _judge_both(data, candidate, installed, tolerance, progress, cards)


def _judge_both(data: Any, candidate: Path, installed: Path | None, tolerance: float, progress: Progress | None,
                cards: CardMap | None) -> Evaluation:
    from emmy_core.eval import evaluate as evaluate_prior
    from emmy_core.prior import PriorError

    report = evaluate_prior(data, candidate, pools="both", progress=progress, scheduler=cards)
    inst, unusable = None, ""
    if installed is not None and installed.exists():
        try:
            inst = evaluate_prior(data, installed, pools="both", scheduler=cards).to_json()
        except PriorError as exc:
            unusable = str(exc)
    return Evaluation(report.to_json(), inst, unusable, tolerance, report)


def write_evaluation(evaluation: Evaluation, folder: Path) -> list[Path]:
    """Writes report.json, table.md and the plots into `folder` (created); returns the files written.
    The plots need the evaluation as made in this process (`Evaluation.report`); one read back has none.
    Refuses (FileWriteError), before writing anything, a name held by another kind of file."""
    from emmy_core.eval.plots import check_plots_out, write_plots
    from emmy_core.fileio.filekind import check_output
    from emmy_core.fileio.safefile import atomic_write_text, ensure_folder

    report, table = folder / "report.json", folder / "table.md"
    check_output(report, EVALUATION_FORMAT, "the chain's evaluation report")
    check_table(table)
    check_plots_out(folder)
    ensure_folder(folder)
    text = json.dumps(evaluation.to_json(), indent=1, sort_keys=True, allow_nan=False) + "\n"
    atomic_write_text(report, text.encode("utf-8"))
    atomic_write_text(table, f"{TABLE_MARK}\n{evaluation.table()}".encode())
    plots = write_plots(evaluation.report, folder) if evaluation.report is not None else []
    return [report, table, *plots]


def check_table(path: Path) -> None:
    from emmy_core.fileio.safefile import FileWriteError, shown

    if not path.exists() and not path.is_symlink():
        return
    try:
        with path.open("rb") as fh:
            head = fh.read(1024) if path.is_file() else b""
        if head.startswith(TABLE_MARK.encode()) or UNMARKED_TABLE.match(head):
            return
    except OSError:
        pass
    raise FileWriteError(f"refusing to write the evaluation table over {shown(path)}: it is not one; nothing was "
                         "replaced (an output replaces only a file of its own kind)")


def read_evaluation(folder: Path) -> Evaluation | None:
    """The evaluation in `folder`, None when it has none; SourceError naming the file, record and field when
    report.json is not this Emmy's evaluation."""
    from emmy_core.eval.compare import check_report
    from emmy_core.fileio.sourcefile import Fields, load_json_file

    path = folder / "report.json"
    if not path.exists() and not path.is_symlink():
        return None
    name = str(path)
    top = Fields(name, "$", load_json_file(path, MAX_BYTES), "the chain's evaluation")
    if top.obj.get("format") != EVALUATION_FORMAT:
        raise top.fail("format", f"not {EVALUATION_FORMAT} (written by another Emmy, or not an evaluation)")
    if top.obj.get("version") != EVALUATION_VERSION or isinstance(top.obj.get("version"), bool):
        raise top.fail("version", f"version {str(top.obj.get('version'))[:20]}; this Emmy reads version "
                                  f"{EVALUATION_VERSION} (run the chain again)")
    top.only(("format", "version", "candidate", "installed", "unusable", "tolerance"))
    candidate = check_report(top.raw("candidate"), name, "$.candidate")
    raw = top.raw("installed")
    installed = None if raw is None else check_report(raw, name, "$.installed")
    tolerance = top.raw("tolerance")
    if isinstance(tolerance, bool) or not isinstance(tolerance, int | float) or not 0 <= tolerance < 1:
        raise top.fail("tolerance", "must be a number in [0, 1)")
    return Evaluation(candidate, installed, top.text("unusable", 4096, allow_empty=True), float(tolerance))


EVAL_METRICS = ("top1", "top5")
"""The evaluation's figures logged as metrics of the fit's run (the rest is in its report and table files)."""


def headline_metrics(evaluation: Evaluation) -> dict[str, float]:
    """The evaluation's headline as MLflow metrics: each prior's mean top-1 and top-5, `eval.<prior>.<figure>`."""
    out: dict[str, float] = {}
    for who, doc in (("candidate", evaluation.candidate), ("installed", evaluation.installed)):
        for k, v in (doc or {}).get("mean", {}).items() if doc else ():
            if k not in EVAL_METRICS:
                continue
            if isinstance(v, int | float) and not isinstance(v, bool) and v == v and abs(v) != float("inf"):
                out[f"eval.{who}.{k}"] = float(v)
    return out


def log_to_run(uri: str, run_id: str, evaluation: Evaluation, files: list[Path]) -> None:
    """Logs the evaluation into the fit's MLflow run: its files under `evaluation/`, its figures as metrics
    (TrackingError when MLflow refuses)."""
    from emmy_core.eval.tracking import log_evaluation

    log_evaluation(uri, run_id, [f for f in files if f.suffix != ".md"], headline_metrics(evaluation))



def run_url(uri: str, run_id: str) -> str:
    """The fit's run in the MLflow UI (`eval.tracking.run_url`)."""
    from emmy_core.eval.tracking import run_url as url

    return url(uri, run_id)


FIGURES = ("top1", "tau", "golden_rank", "golden_rank_ties")
"""The candidate's mean figures an orchestrator shows as numbers."""


def log_text(evaluation: Evaluation, verdict: Verdict, width: int = 160) -> str:
    """The table and verdict as a log line shows them: 160 columns, since a log line is no terminal."""
    from emmy_core.eval.tables import terminal_text

    return f"the candidate beside the installed prior:\n{terminal_text(evaluation.table(), width)}\n{verdict.reason}"


def candidate_figures(evaluation: Evaluation) -> dict[str, float]:
    """The candidate's headline figures (those it has)."""
    mean = evaluation.candidate["mean"]
    return {k: float(mean[k]) for k in FIGURES if isinstance(mean.get(k), int | float)}


def plots_markdown(pngs: list[Path]) -> str:
    """The plots as Markdown images (inline PNG data), so that a UI showing Markdown shows the pictures."""
    import base64

    return "\n\n".join(f"**{p.stem}**\n\n![{p.stem}](data:image/png;base64,"
                       f"{base64.b64encode(p.read_bytes()).decode('ascii')})" for p in pngs) or "no plots (no data)"
