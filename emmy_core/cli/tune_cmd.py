"""`emmy tune`: bench every kernel of a model over its candidates on this machine's card, and record.

Thin: lower the model (a reference model, or a user's `package.module:Class` with `--input` specs: the
kernels the emmy backend makes of it, `emmy_core.search.module_tune`), plan the candidates, run the one
harness, print what happened.
Rows go through the store's one writer (`--db`, default the local tuning database) or
into a tune file (`--tune-file`, the store's format), by the recorders of
`emmy_core.exchange.recorders`.
"""

from __future__ import annotations

from collections import Counter
from typing import Annotated, Any

import typer

from emmy_core.bench.harness import BenchConfig, BenchError, BenchReport, Outcome, dedupe
from emmy_core.bench.load import DEFAULT_MAX_BUSY
from emmy_core.cli.common import fail
from emmy_core.cli.options import (
    BenchCardOpt,
    DbOpt,
    DtypeOpt,
    InputOpt,
    ModelOpt,
    Opt,
    SettingOpt,
    ShapeOpt,
    model_at,
)
from emmy_core.exchange.recorders import StoreRecorder, TuneFileRecorder, check_db_target, db_recorder
from emmy_core.targets import Card

__all__ = ["StoreRecorder", "TuneFileRecorder", "db_recorder", "tune"]

DEFAULT_BUDGET = 16  # candidates per kernel by default: a tune of the reference models takes minutes, not hours


def any_card_named(name: str) -> Card:
    """A card Emmy knows (this machine's, or one of the GPU table): enough to build and verify for it."""
    from emmy_core.targets import UnknownCard, resolve_card

    try:
        return resolve_card(name)
    except UnknownCard as exc:
        fail(str(exc))


def local_card_named(name: str) -> Card:
    """The card to bench on: it must be this machine's own device (timings come from here)."""
    from emmy_core.targets import UnknownCard, local_card, resolve_card

    try:
        card = resolve_card(name)
    except UnknownCard as exc:
        fail(str(exc))
    here = local_card()
    if card.name != here.name:
        fail(f"card {card.name!r} is not this machine's ({here.name!r}): benches time the local device only")
    return card


def search_chooser(strategy: str | None, card: Card, setting: str, budget: int, seed: int) -> tuple[Any, str]:
    """The chooser of `--strategy` (default: prior when the installed prior loads, else random) and its name;
    each kernel's best so far against its first option is shown on stderr as it finishes."""
    from emmy_core.search.tune import PRIOR_STRATEGIES, StrategyChooser, strategy_prior

    prior, chosen, why = strategy_prior(strategy)
    if strategy is None and prior is None:
        typer.echo(f"emmy: no prior loads ({why}); strategy random", err=True)
    elif chosen in PRIOR_STRATEGIES and prior is None:
        fail(f"--strategy {chosen} needs a prior: {why}")
    strategy = chosen

    def shown(k: Any) -> None:
        typer.echo(f"  search {strategy}: {k.best_line()}", err=True)

    return StrategyChooser(strategy, card, setting, budget, seed, prior, on_kernel=shown), strategy


def run_bench(plan: Any, card: Card, backend: str | None, recorder: Any, config: BenchConfig,
              chooser: Any = None) -> BenchReport:
    """The harness, with its refusals and the store's (a locked or refused write) as CLI errors; Ctrl-C prints
    what was measured and recorded, and exits 130."""
    from emmy_core.bench.harness import BenchInterrupted, bench
    from emmy_core.fileio.errors import FileError

    try:
        return bench(plan, card, backend, recorder, config, chooser=chooser)
    except BenchInterrupted as stop:
        print_report(stop.report, into=recorder.label)
        typer.echo(f"interrupted: the rows above are recorded into {recorder.label}, including those of the "
                   "kernel it stopped in; a re-run skips them", err=True)
        raise typer.Exit(130) from None
    except BenchError as exc:
        fail(str(exc))
    except FileError as exc:
        fail(f"recording stopped (kernels recorded before this one are kept): {exc}")


MAX_FLAGGED_LINES = 20


def _knobs_text(o: Outcome) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(o.knobs.items()))


def _why_no_row(outs: list[Outcome]) -> str:
    """Why a kernel has no clean row: what became of its variants."""
    if not outs:
        return "no variant run (all already measured ok, or not benched)"
    flagged = Counter(f for o in outs if o.status == "flagged" for f in o.flags)
    failed = Counter(str(o.failure) for o in outs if o.status == "failed")
    parts = []
    if flagged:
        parts.append(f"{sum(o.status == 'flagged' for o in outs)} flagged ("
                     + ", ".join(f"{k} {n}" for k, n in sorted(flagged.items())) + ")")
    if failed:
        parts.append(f"{sum(failed.values())} failed (" + ", ".join(f"{k} {n}" for k, n in sorted(failed.items())) + ")")
    return f"no clean row: of {len(outs)} variants, " + ", ".join(parts)


def print_report(report: BenchReport, wall_label: str = "wall", into: str = "") -> None:
    """The summary: counts, flagged variants and why, each kernel's best (or why it has none), rows recorded."""
    instances = sum(p.count for p in report.planned)
    typer.echo(f"kernels: {len(report.planned)} distinct ({instances} instances); variants run: "
               f"{len(report.outcomes)}, skipped (already measured ok): {report.skipped_known}")
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(report.failure_kinds.items())) or "none"
    reasons = ", ".join(f"{k} {n}" for k, n in sorted(report.flag_reasons.items())) or "none"
    typer.echo(f"ok {report.count('ok')}; failed {report.count('failed')} ({kinds}); "
               f"flagged {report.count('flagged')} ({reasons}; not recorded)"
               + (f"; measured again on a busy machine: {report.remeasured}" if report.remeasured else ""))
    flagged = report.flagged
    for o in flagged[:MAX_FLAGGED_LINES]:
        typer.echo(f"  flagged {o.unit.program.name} {o.unit.sizes_text} [{_knobs_text(o)}]: "
                   f"{', '.join(o.flags)}: {o.message}")
    if len(flagged) > MAX_FLAGGED_LINES:
        typer.echo(f"  ... and {len(flagged) - MAX_FLAGGED_LINES} more flagged variants")
    for unit, why in report.unit_errors:
        typer.echo(f"kernel {unit.program.name} at {unit.sizes_text!r} not benched: {why}", err=True)
    by_unit: dict[tuple[str, str], list[Outcome]] = {}
    for o in report.outcomes:
        by_unit.setdefault(o.unit.key, []).append(o)
    for p in report.planned:
        outs = by_unit.get(p.unit.key, [])
        ok = [o for o in outs if o.status == "ok" and o.stats is not None]
        head = f"  {p.unit.program.name:<44} {p.unit.sizes_text:<14} x{p.count:<3} "
        if ok:
            o = min(ok, key=lambda x: x.stats.median_us)  # type: ignore[union-attr]
            typer.echo(f"{head}best {o.stats.median_us:10.2f} us  {_knobs_text(o)}")  # type: ignore[union-attr]
        else:
            typer.echo(f"{head}{_why_no_row(outs)}")
    per_min = len(report.outcomes) / report.wall_s * 60 if report.wall_s > 0 else 0.0
    typer.echo(f"rows recorded: {report.rows_recorded}{f' into {into}' if into else ''}; {wall_label} "
               f"{report.wall_s:.1f} s ({per_min:.1f} variants/min)")


def warn_if_busy(max_busy: float) -> None:
    """A warning on stderr when the machine is busy as a tune or a timed hand-run starts."""
    from emmy_core.bench.load import LoadGuard

    warning = LoadGuard(max_busy=max_busy).warning() if max_busy < 1 else None
    if warning is not None:
        typer.echo(f"emmy: warning: {warning}", err=True)


def parse_budget(text: str) -> int | None:
    """`--budget`: a positive number of candidates per kernel, or `all`."""
    if text.strip().lower() == "all":
        return None
    try:
        value = int(text, 10)
    except ValueError:
        fail(f"--budget {text[:40]!r}: give a positive number of candidates per kernel, or 'all'")
    if value < 1:
        fail(f"--budget {value}: give a positive number of candidates per kernel, or 'all'")
    return value


TimeoutOpt = Annotated[float, Opt("--timeout", min=0.1, help="watchdog seconds per variant")]
SpreadOpt = Annotated[float, Opt("--spread-limit", min=0.0, help="flag a result whose (p90-p10)/median exceeds this")]
ProgressOpt = Annotated[bool, Opt("--progress/--no-progress", help="show progress on stderr: a bar on a "
                                   "terminal, else a line every few seconds")]
MaxBusyOpt = Annotated[float, Opt("--max-busy", min=0.0, help="re-measure, then flag (not record), a variant timed "
                                  "while other processes used more than this share of the CPUs (1: never)")]
BackendOpt = Annotated[str | None, Opt("--backend", help="code generator as module:attr (default: the card "
                                       "target's; for testing a backend)")]


def tune(
    model: ModelOpt,
    shape: ShapeOpt,
    dtype: DtypeOpt = "f16",
    card: BenchCardOpt = "local",
    setting: SettingOpt = "deploy",
    budget: Annotated[str, Opt("--budget", help="new candidates measured per kernel (failures count), the first "
                               "option always among them; those already recorded ok are skipped, so a re-run "
                               "measures as many more; or 'all' (hours for a large model)")] = str(DEFAULT_BUDGET),
    strategy: Annotated[str | None, Opt("--strategy", help="which candidates to measure: first (the rule's order), "
                                        "random (a seeded sample), prior (the prior's order, re-ranked as rows "
                                        "come in), explore (prior, part of the budget where it is unsure); "
                                        "default prior when a prior loads, else random")] = None,
    seed: Annotated[int, Opt("--seed", help="seed of the candidate sample and of the inputs")] = 0,
    db: DbOpt = None,
    tune_file: Annotated[str | None, Opt("--tune-file", help="write a tune file instead: a file (only a tune "
                                         "file of this card and setting is written over, its rows merged), or a "
                                         "folder (an existing one, or a path ending with /) for "
                                         "<card>.tune-<stamp>.json")] = None,
    timeout: TimeoutOpt = 120.0,
    spread_limit: SpreadOpt = 0.5,
    progress: ProgressOpt = True,
    max_busy: MaxBusyOpt = DEFAULT_MAX_BUSY,
    backend: BackendOpt = None,
    inputs: InputOpt = None,
) -> None:
    """Tune every kernel of a model at a shape over its candidates; record ok and failed rows.

    By default 16 candidates per kernel (the first option always among them), chosen by the prior
    (`--strategy`), which finishes in minutes; `--budget all` benches every candidate. Each matrix product's
    library route (torch's own kernel) is measured beside them, outside the budget."""
    from emmy_core.bench.plan import tune_plan
    from emmy_core.search import STRATEGIES

    if db is not None and tune_file is not None:
        fail("give --db or --tune-file, not both")
    if strategy is not None and strategy not in STRATEGIES:  # the options are checked before the model is
        fail(f"--strategy {strategy[:40]!r}: known strategies: {', '.join(STRATEGIES)}")  # captured (seconds)
    per_kernel = parse_budget(budget)
    from emmy_core.fileio.errors import FileError

    if tune_file is None:
        try:
            check_db_target(db)  # a database that cannot take the rows is refused before anything is measured
        except FileError as exc:
            fail(f"--db: {exc}; nothing was measured")
    the_card = local_card_named(card)
    _, units = model_at(model, shape, dtype, setting, inputs, the_card)
    chooser, plan = None, tune_plan(units, the_card, None, seed)
    if per_kernel is not None:
        chooser, strategy = search_chooser(strategy, the_card, setting, per_kernel, seed)
        plan = [(u, []) for u in units]
    recorder: Any
    if tune_file is not None:
        try:
            recorder = TuneFileRecorder(tune_file, the_card, setting)
        except FileError as exc:
            fail(str(exc))
    else:
        recorder = db_recorder(db, f"tune {model} {shape}")
    config = BenchConfig(setting=setting, source="tune", timeout_s=timeout, spread_limit=spread_limit, seed=seed,
                         progress=progress, max_busy=max_busy)
    variants = sum(len(p.variants) for p in dedupe(plan))
    if chooser is not None:
        variants = sum(len(p.variants) for p in dedupe(tune_plan(units, the_card, None, seed)))
    sample = f"at most {per_kernel} candidates per kernel chosen by strategy {strategy} (--budget all: every " \
             f"one)" if per_kernel else "every candidate (--budget all)"
    sample += ", and torch's own kernel beside each matrix product"
    typer.echo(f"tuning {model} at {shape} on {the_card.name}, setting {setting}: {variants} variants, "
               f"{sample}; recording into {recorder.label}")
    warn_if_busy(max_busy)
    report = run_bench(plan, the_card, backend, recorder, config, chooser)
    if chooser is not None:
        report.skipped_known += chooser.skipped_known
    print_report(report, into=recorder.label)
    if tune_file is not None and report.rows_recorded:
        typer.echo(f"tune file: {recorder.path}")
    if report.unit_errors:
        raise typer.Exit(1)
