"""`emmy fit`: fit the prior on a dataset export, refit the installed one, or compare two fits' runs."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from emmy_core.cli.common import fail
from emmy_core.prior.tracking import DEFAULT_URI
from emmy_core.prior.training import DEFAULT_POOLS, MAX_DEPTH, MAX_ITERATIONS, Params

MAX_SEED = 2**32 - 1
"""Largest seed: CatBoost and numpy take a seed of 32 bits; a larger one is refused, not wrapped."""


def progress_printer() -> Callable[[str], None]:
    """Progress lines on stderr, each with the seconds since the command started."""
    start = time.monotonic()

    def say(message: str) -> None:
        typer.echo(f"[{time.monotonic() - start:6.1f}s] {message}", err=True)

    return say


def fit(dataset: Annotated[str | None, typer.Argument(help="dataset export folder (emmy db export), or its URL",
                                                      show_default=False)] = None,
        out: Annotated[Path | None, typer.Argument(help="artifact to write (JSON)", show_default=False)] = None,
        pools: Annotated[str, typer.Option("--pools", help="golden | measured | both")] = DEFAULT_POOLS,
        folds: Annotated[int, typer.Option("--folds", min=2, max=50,
                                           help="cross-validation folds, by card and by kernel")] = 5,
        seed: Annotated[int | None, typer.Option("--seed", min=0, max=MAX_SEED,
                                                 help="seed of the sample and the trees (default 0; "
                                                 "with --install, the shipped prior's)")] = None,
        cards: Annotated[Path | None, typer.Option("--cards", help="a card file of the table's format, merged over "
                                                   "the packaged table (as $EMMY_CARDS)")] = None,
        install: Annotated[bool, typer.Option("--install", help="refit the installed prior from the repository "
                                              "freeze and replace it atomically")] = False,
        freeze_dir: Annotated[Path, typer.Option("--freeze-dir", help="freeze folder --install fits on")] = Path(
            "freezes"),
        tracking_uri: Annotated[str | None, typer.Option(
            "--tracking-uri", help=f"MLflow tracking URI (default $MLFLOW_TRACKING_URI, else {DEFAULT_URI};"
                                   " 'off' logs nothing)")] = None,
        compare: Annotated[tuple[str, str] | None, typer.Option(
            "--compare", help="print two MLflow runs' metrics side by side: --compare RUN_A RUN_B")] = None,
        iterations: Annotated[int | None, typer.Option(
            "--iterations", min=1, max=MAX_ITERATIONS, show_default=False,
            help=f"trees of the ranker (default {Params.iterations}, the shipped recipe's; fewer: a quicker trial "
                 "fit, recorded in its provenance)")] = None,
        depth: Annotated[int | None, typer.Option(
            "--depth", min=1, max=MAX_DEPTH, show_default=False,
            help=f"depth of the ranker's trees (default {Params.depth}, the shipped recipe's)")] = None,
        scheduler: Annotated[str, typer.Option(
            "--scheduler", help="where the folds and seed members train and the cards are evaluated: inprocess, "
                                "local:N (a Dask LocalCluster of N workers) or tcp://HOST:PORT (a running Dask "
                                "scheduler)")] = "inprocess",
        ) -> None:
    """Fit the prior (CatBoost ranker, validated on held-out cards and on held-out kernels) and track the run in
    MLflow."""
    from emmy_core.compute import ComputeError, parse_scheduler
    from emmy_core.fileio.errors import FileError
    from emmy_core.prior import PriorError
    from emmy_core.prior.tracking import TrackingError, resolve_uri
    from emmy_core.targets import CardTableError

    if compare is not None:
        if dataset is not None or install:
            fail("--compare takes two run ids and nothing else")
        _compare(tracking_uri, *compare)
        return
    try:
        parse_scheduler(scheduler)
    except ComputeError as exc:
        fail(str(exc))
    from emmy_core.chain import evaluation as ev
    from emmy_core.chain import steps
    from emmy_core.chain.paths import ChainPaths
    from emmy_core.fileio.urlfolder import location

    folder = location(dataset) if dataset is not None else None

    progress = progress_printer()
    verdict = None
    try:
        if install:
            if scheduler != "inprocess":
                fail("--install refits in this process; give no --scheduler")
            if dataset is not None or out is not None:
                fail("--install refits from the repository freeze (--freeze-dir); give no DATASET or OUT")
            if iterations is not None or depth is not None:
                fail("--install refits the shipped recipe; give no --iterations or --depth")
            result = steps.refit_installed(freeze_dir, seed=seed, tracking_uri=tracking_uri, progress=progress)
        else:
            if folder is None or out is None:
                fail("give DATASET and OUT.json (or --install, or --compare RUN_A RUN_B)")
            from emmy_core.fileio.safefile import ensure_folder
            from emmy_core.prior.artifact import check_artifact_out

            check_artifact_out(out)  # before minutes of fitting: a refusal comes first
            ensure_folder(ChainPaths().fits)  # where the fit's record goes: refused now, not after the fit
            result = steps.fit(folder, out, pools=pools, folds=folds, seed=0 if seed is None else seed,
                               cards_file=cards, tracking_uri=tracking_uri, fits_dir=ChainPaths().fits,
                               progress=progress, scheduler=scheduler, params=Params().sized(iterations, depth))
    except (PriorError, FileError, CardTableError, TrackingError, ComputeError, steps.ChainError, ValueError,
            FileNotFoundError) as exc:
        fail(str(exc))
    if folder is not None:
        try:  # the fit is written whatever happens here: a failure is reported, never swallowed
            done = ev.evaluate(folder, result.artifact_path, ChainPaths().installed, progress=progress,
                               scheduler=scheduler)
            files = ev.write_evaluation(done, result.fit_dir / "evaluation")
            verdict = ev.judge(done)
            if result.run_id is not None:
                ev.log_to_run(resolve_uri(tracking_uri), result.run_id, done, files)
        except (PriorError, FileError, TrackingError, ComputeError, ValueError) as exc:
            typer.echo(f"emmy: warning: the fit was written, but its evaluation was not kept: {exc}", err=True)
    from emmy_core.eval.tables import fit_text

    m = result.metrics
    mean = m["mean"]
    typer.echo(f"wrote {result.artifact_path}; metrics in {result.fit_dir / 'metrics.json'}")
    typer.echo(fit_text(m))
    if verdict is not None:
        typer.echo(f"against the installed prior: {'may replace it' if verdict.passed else 'keep the installed'} "
                   f"({verdict.reason}); evaluation in {result.fit_dir / 'evaluation'}")
    typer.echo(json.dumps({"cv": mean, "split": m["split"], "ranking": {k: m["ranking"].get(k) for k in (
                               "mode", "source", "weight", "top1", "vs_first", "vs_ranker", "vs_transfer_order")},
                           "folds": len(m["folds"]), "train_groups": m["train_groups"],
                           "undescribed_pools": m["undescribed_pools"],
                           "mlflow_run": result.run_id}, sort_keys=True))


def _compare(uri: str | None, run_a: str, run_b: str) -> None:
    from emmy_core.prior.tracking import compare_runs

    try:
        rows = compare_runs(uri, run_a, run_b)
    except Exception as exc:  # MLflow raises its own exception types for an unknown run
        fail(f"cannot compare runs {run_a[:40]} and {run_b[:40]}: {str(exc)[:300]}")

    def show(v: float | None) -> str:
        return "-" if v is None else f"{v:.4g}"

    width = max([len("metric"), *(len(k) for k, _, _ in rows)])
    typer.echo(f"{'metric':<{width}}  {run_a[:12]:>12}  {run_b[:12]:>12}  {'change':>8}")
    for name, a, b in rows:
        change = f"{(b - a) / abs(a):+.1%}" if a not in (None, 0) and b is not None else ""
        typer.echo(f"{name:<{width}}  {show(a):>12}  {show(b):>12}  {change:>8}")
