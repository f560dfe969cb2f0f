"""`emmy eval prior|compare`: where the prior is wrong and what a wrong choice costs; two reports side by side."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from emmy_core.cli.common import fail
from emmy_core.cli.fit_cmd import progress_printer

app = typer.Typer(help="Evaluate a prior on a dataset export; compare two evaluations.", no_args_is_help=True)


def extern_orders(files: list[Path] | None, cards: list[str] | None) -> dict | None:
    """The first-option order of `--extern-order`'s caches, `--extern-card` naming the card of any whose
    device_name is empty; None without caches. A card named for no given cache is refused."""
    from emmy_core.eval.extern_order import cache_files, card_names, file_order
    from emmy_core.fileio.sourcefile import SourceError

    if not files:
        if cards:
            fail("--extern-card names the card of an --extern-order cache: give the caches with --extern-order")
        return None
    try:
        named = card_names(cards or [])
    except ValueError as exc:
        fail(f"--extern-card {exc}")
    unknown = sorted(set(named) - {Path(p).name for p in cache_files(files)})
    if unknown:
        fail(f"--extern-card {unknown[0][:200]!r} is not among the --extern-order caches")
    try:
        return file_order(files, named)
    except SourceError as exc:
        hint = " (here: --extern-card FILE=CARD)" if exc.field == "device_name" and "empty" in exc.problem else ""
        fail(f"{exc}{hint}")


@app.command("prior")
def prior(dataset: Annotated[str, typer.Argument(help="dataset export folder (emmy db export), or its URL",
                                                 show_default=False)],
          pools: Annotated[str, typer.Option("--pools", help="golden (where each golden ranks) | measured (what "
                                             "a pick costs on fully measured pools) | both")] = "golden",
          offline_file: Annotated[Path | None, typer.Option(
              "--offline-file", help="a candidate prior artifact to score instead of the installed one")] = None,
          cards: Annotated[Path | None, typer.Option("--cards", help="a card file of the table's format, merged "
                                                     "over the packaged table (as $EMMY_CARDS)")] = None,
          json_out: Annotated[Path | None, typer.Option("--json", help="write the report as JSON (the shape of a "
                                                        "fit's metrics.json)")] = None,
          plots: Annotated[Path | None, typer.Option("--plots", help="write PNG plots into this folder")] = None,
          extern_order: Annotated[list[Path] | None, typer.Option(
              "--extern-order", help="Kernel Tuner caches (files or folders; repeatable): the first configuration "
                                     "of each file is its extern kernel's first-option baseline")] = None,
          extern_card: Annotated[list[str] | None, typer.Option(
              "--extern-card", help="FILE=CARD: the card of an --extern-order cache whose device_name is empty "
                                    "(as `db import --card`; repeatable)")] = None,
          scheduler: Annotated[str, typer.Option(
              "--scheduler", help="where the cards are evaluated (one task per card): inprocess, local:N (a Dask "
                                  "LocalCluster of N workers) or tcp://HOST:PORT")] = "inprocess",
          ) -> None:
    """Judge a prior on a dataset: golden ranks or measured slowdowns per card and setting, beside baselines."""
    from emmy_core.compute import ComputeError, parse_scheduler
    from emmy_core.eval import EvalError, evaluate
    from emmy_core.eval.plots import check_plots_out
    from emmy_core.eval.report import check_report_out, write_json
    from emmy_core.fileio.errors import FileError
    from emmy_core.fileio.urlfolder import location
    from emmy_core.prior import PriorError, installed_prior_path
    from emmy_core.targets import CardTableError

    progress = progress_printer()
    try:
        parse_scheduler(scheduler)  # refused before any work
        if json_out is not None:
            check_report_out(json_out)  # refused before the evaluation, not after
        if plots is not None:
            check_plots_out(plots)
        order = extern_orders(extern_order, extern_card)
        report = evaluate(location(dataset), offline_file if offline_file is not None else installed_prior_path(),
                          pools=pools, cards_file=cards, extern_order=order, progress=progress, scheduler=scheduler)
        doc = report.to_json()
        if json_out is not None:
            write_json(doc, json_out)
            progress(f"wrote {json_out}")
        if plots is not None:
            from emmy_core.eval.plots import write_plots

            for path in write_plots(report, plots):
                progress(f"wrote {path}")
    except (EvalError, PriorError, FileError, CardTableError, ComputeError, OSError) as exc:
        fail(str(exc))
    typer.echo(report.markdown(), nl=False)


@app.command("compare")
def compare(a: Annotated[Path, typer.Argument(help="report A (emmy eval prior --json)", show_default=False)],
            b: Annotated[Path, typer.Argument(help="report B", show_default=False)]) -> None:
    """Print two evaluation reports side by side, per card and setting, with the change from A to B."""
    from emmy_core.eval import compare_reports
    from emmy_core.fileio.sourcefile import SourceError

    try:
        text = compare_reports(a, b)
    except SourceError as exc:
        fail(str(exc))
    typer.echo(text, nl=False)


@app.command("search")
def search(dataset: Annotated[str, typer.Argument(help="dataset export folder (emmy db export), or its URL",
                                                  show_default=False)],
           strategies: Annotated[str, typer.Option("--strategies", help="comma-separated: first, random, prior, "
                                                   "explore")] = "first,random,prior,explore",
           budgets: Annotated[str, typer.Option("--budgets", help="comma-separated measurement budgets")] =
           "1,2,4,8,16,32",
           offline_file: Annotated[Path | None, typer.Option(
               "--offline-file", help="a candidate prior artifact to search with instead of the installed one")] = None,
           seeds: Annotated[str, typer.Option("--seeds", help="seeds of the stochastic strategies (random)")] =
           "0,1,2,3,4",
           cards: Annotated[Path | None, typer.Option("--cards", help="a card file of the table's format, merged "
                                                      "over the packaged table (as $EMMY_CARDS)")] = None,
           json_out: Annotated[Path | None, typer.Option("--json", help="write the curves as JSON")] = None,
           plots: Annotated[Path | None, typer.Option("--plots", help="write PNG curves into this folder")] = None,
           extern_order: Annotated[list[Path] | None, typer.Option(
               "--extern-order", help="Kernel Tuner caches (files or folders; repeatable): each file's first "
                                      "configuration is its extern kernel's first option")] = None,
           extern_card: Annotated[list[str] | None, typer.Option(
               "--extern-card", help="FILE=CARD: the card of an --extern-order cache whose device_name is empty "
                                     "(as `db import --card`; repeatable)")] = None,
           scheduler: Annotated[str, typer.Option(
               "--scheduler", help="where the replays run (one task per card): inprocess, local:N (a Dask "
                                   "LocalCluster of N workers) or tcp://HOST:PORT")] = "inprocess",
           ) -> None:
    """Replay search strategies on every measured pool: per budget, best found / pool best (geomean), per card."""
    from emmy_core.compute import ComputeError, parse_scheduler
    from emmy_core.fileio.errors import FileError
    from emmy_core.fileio.urlfolder import location
    from emmy_core.prior import PriorError
    from emmy_core.search.curves import check_curves_out, check_plots_out, plot_curves, write_curves
    from emmy_core.search.evaluate import evaluate_search
    from emmy_core.targets import CardTableError

    def numbers(text: str, what: str) -> list[int]:
        try:
            values = [int(x, 10) for x in text.split(",") if x.strip()]
        except ValueError:
            fail(f"{what} {text[:60]!r}: give comma-separated whole numbers")
        if not values:
            fail(f"{what} {text[:60]!r}: give at least one whole number (comma-separated)")
        return values

    progress = progress_printer()
    try:
        parse_scheduler(scheduler)  # refused before any work
        if json_out is not None:
            check_curves_out(json_out)  # refused before the replays, not after
        if plots is not None:
            check_plots_out(plots)  # the overall plot's name; every card's is checked again before writing
        order = extern_orders(extern_order, extern_card)
        curves = evaluate_search(location(dataset), offline_file, [s.strip() for s in strategies.split(",") if s.strip()],
                                 numbers(budgets, "--budgets"), numbers(seeds, "--seeds"), order, cards,
                                 scheduler=scheduler)
        if json_out is not None:
            progress(f"wrote {write_curves(curves, json_out)}")
        if plots is not None:
            for path in plot_curves(curves, plots):
                progress(f"wrote {path}")
    except (ValueError, PriorError, FileError, CardTableError, ComputeError, OSError) as exc:
        fail(str(exc))
    typer.echo(curves.markdown(), nl=False)
