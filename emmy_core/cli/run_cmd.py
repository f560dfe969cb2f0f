"""`emmy run`: build a kernel (or a model's kernels) with knob values forced by hand and verify it;
with `--bench`, also time it and record a clean result (source `hand`) through the store's one writer.

A flagged result (wrong, nondeterministic, too noisy, faster than the card allows) is
reported and never recorded, and the command exits non-zero; so does a failure (which
is recorded: failures are data).
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer

from emmy_core.bench.load import DEFAULT_MAX_BUSY
from emmy_core.cli.common import fail, read_source
from emmy_core.cli.options import CardOpt, DbOpt, DtypeOpt, Opt, SettingOpt, shape_of
from emmy_core.cli.tune_cmd import (
    BackendOpt,
    MaxBusyOpt,
    SpreadOpt,
    TimeoutOpt,
    any_card_named,
    db_recorder,
    local_card_named,
    run_bench,
    warn_if_busy,
)


def _units(model: str | None, kernel: Path | None, shape: str, dtype: str) -> list[Any]:
    from emmy_core.bench.harness import Unit
    from emmy_core.ir import IRError, Program, parse

    if (model is None) == (kernel is None):
        fail("give exactly one of --model and --kernel")
    sizes = shape_of(shape, model=model is not None) if shape else {}
    if model is not None:
        from emmy_core.bench.plan import model_units
        from emmy_core.graph.errors import GraphError

        if not shape:
            fail("--model needs --shape (e.g. B=8,S=128)")
        try:
            return model_units(model, sizes, dtype)
        except (GraphError, ValueError) as exc:
            fail(str(exc))
    data, name = read_source(str(kernel))
    try:
        program = parse(data.decode("utf-8", "replace"), name)
        if not isinstance(program, Program):
            fail(f"{name}: an extern kernel has no loop program to build")
        return [Unit(program, sizes, label=name)]
    except IRError as exc:
        fail(f"{name}: {exc}")


def _check_db(db: Path | None) -> None:
    """Refuses a --db that is not a store and cannot become one, before anything is built or timed."""
    from emmy_core.exchange.recorders import check_db_target
    from emmy_core.fileio.errors import FileError

    try:
        check_db_target(db)
    except FileError as exc:
        fail(f"--db: {exc}; nothing was timed")


def run(
    bench_: Annotated[bool, Opt("--bench", help="also time the result and record a clean one (source hand)")] = False,
    model: Annotated[str | None, Opt("--model", help="reference model whose kernels to run")] = None,
    kernel: Annotated[Path | None, Opt("--kernel", help="loop-program file to run")] = None,
    shape: Annotated[str, Opt("--shape", help="sizes: a model's B and S, or the kernel's dynamic "
                                         "axes, e.g. B=8,S=128")] = "",
    dtype: DtypeOpt = "f16",
    knob: Annotated[list[str] | None, Opt("--knob", help="a forced knob value NAME=VALUE (repeatable); knobs "
                                          "not forced keep the kernel's first option")] = None,
    select: Annotated[str, Opt("--select", help="only kernels whose name contains this text")] = "",
    card: CardOpt = "local",
    setting: SettingOpt = "deploy",
    db: DbOpt = None,
    force: Annotated[bool, Opt("--force", help="measure again even when this variant is already "
                                "measured ok")] = False,
    timeout: TimeoutOpt = 120.0,
    spread_limit: SpreadOpt = 0.5,
    max_busy: MaxBusyOpt = DEFAULT_MAX_BUSY,
    backend: BackendOpt = None,
) -> None:
    """Build and verify kernels with forced knob values; with --bench, time them and record clean results."""
    from emmy_core.bench.harness import BenchConfig, BenchError
    from emmy_core.bench.plan import accepts, forced_knobs, hand_variant
    from emmy_core.codegen.backend import SETTINGS
    from emmy_core.knobs import option_problem

    if setting not in SETTINGS:
        fail(f"--setting {setting!r}: known settings: {', '.join(SETTINGS)}")
    if bench_:
        _check_db(db)
    the_card = local_card_named(card) if bench_ else any_card_named(card)
    try:
        forced = forced_knobs(knob or [], the_card.target)
    except ValueError as exc:
        fail(str(exc))
    units = [u for u in _units(model, kernel, shape, dtype)
             if select in u.program.name and accepts(u.program, the_card, forced)]
    if not units:
        fail(f"no kernel{f' named *{select}*' if select else ''} takes the knobs "
             f"{', '.join(sorted(forced)) or '(none)'} on {the_card.target}")
    plan = []
    for u in units:
        try:
            knobs = hand_variant(u.program, the_card, forced)
        except BenchError as exc:
            fail(str(exc))
        # the check the rule's pool passes: a kernel is built once for every size of its dynamic axes, so a tile
        # wider than this run's extent builds (and is masked), as a tune of the same kernel measures it
        problem = option_problem(u.program, the_card, knobs)
        if problem is not None:  # statically unbuildable: not a measurement, not a failure of the kernel
            typer.echo(f"{u.program.name} {u.sizes_text}: skipped, the knobs cannot build it here: {problem}",
                       err=True)
            continue
        plan.append((u, [knobs]))
    if not plan:
        fail("no kernel can be built with these knobs on this card")
    config = BenchConfig(setting=setting, source="hand", timeout_s=timeout, spread_limit=spread_limit,
                         time=bench_, skip_measured=not force, max_busy=max_busy)
    recorder = db_recorder(db, "hand-run") if bench_ else None
    if recorder is not None:
        typer.echo(f"timing {len(plan)} kernel(s) on {the_card.name}, setting {setting}; recording clean results "
                   f"into {recorder.label}")
        warn_if_busy(max_busy)
    report = run_bench(plan, the_card, backend, recorder, config)
    for p in report.planned:
        if not any(o.unit.key == p.unit.key for o in report.outcomes) and report.skipped_known:
            typer.echo(f"{p.unit.program.name} {p.unit.sizes_text}: already measured ok (use --force to "
                       f"measure again)")
    for o in report.outcomes:
        knobs = ",".join(f"{k}={v}" for k, v in sorted(o.knobs.items()))
        head = f"{o.unit.program.name} {o.unit.sizes_text} [{knobs}]"
        if o.status == "ok" and o.stats is not None:
            typer.echo(f"{head}: ok, median {o.stats.median_us:.2f} us (spread {o.stats.spread:.2f}, "
                       f"{o.stats.samples} samples); recorded (source hand)")
        elif o.status == "verified":
            typer.echo(f"{head}: built and verified against the reference")
        elif o.status == "failed":
            typer.echo(f"{head}: failed ({o.failure}): {o.message}" + ("; recorded" if bench_ else ""))
        else:
            typer.echo(f"{head}: FLAGGED ({', '.join(o.flags)}): {o.message}; not recorded")
    for unit, why in report.unit_errors:
        typer.echo(f"{unit.program.name} {unit.sizes_text}: not run: {why}", err=True)
    if report.count("flagged") or report.count("failed") or report.unit_errors:
        raise typer.Exit(1)
