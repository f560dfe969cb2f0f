"""`emmy tune`: bench every kernel of a model over its candidates on this machine's card, and record.

Thin: lower the model, plan the candidates, run the one harness, print what happened.
Rows go through the store's one writer (`--db`, default the local tuning database) or
into a tune file (`--tune-file`, the store's format). `StoreRecorder` and
`TuneFileRecorder` live here, in the layer allowed to import both the bench and the store.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from emmy_core.bench.harness import BenchConfig, BenchError, BenchReport, Outcome
from emmy_core.cli.common import fail
from emmy_core.graph.forks import ForkKey
from emmy_core.ir import Program, kernel_id
from emmy_core.targets import Card


def card_row(card: Card) -> Any:
    """The store's description of a card (one mapping, the store's own: `CardRow.from_card`)."""
    from emmy_core.store import CardRow

    return CardRow.from_card(card)


def measurement_row(o: Outcome) -> Any:
    """A recordable outcome as the store's MeasurementRow (a failed one gets the store's placeholder)."""
    from emmy_core.store import MeasurementRow

    key = (o.unit.kernel_id, o.unit.sizes_text, o.knobs, o.card, o.setting)
    if o.status == "failed":
        return MeasurementRow.failed(*key, str(o.failure), source=o.source)
    if o.status != "ok" or o.stats is None:
        raise ValueError(f"a {o.status} outcome is not recorded")
    return MeasurementRow.ok(*key, o.stats.median_us, spread=o.stats.spread, samples=o.stats.samples,
                             source=o.source)


class StoreRecorder:
    """Records through the store's one writer; dedupes against what the store holds.

    `store` is an open Store (used as is) or a callable opening one for writing, called per
    operation so that a long tune does not hold the database file's lock between kernels.
    """

    def __init__(self, store: Any, origin: str = "tune") -> None:
        self._open: Callable[[], Any] | None = store if callable(store) and not hasattr(store, "record") else None
        self._store = None if self._open is not None else store
        self.origin = origin
        self.summaries: list[Any] = []

    def _use(self, fn: Callable[[Any], Any]) -> Any:
        if self._open is None:
            return fn(self._store)
        store = self._open()
        try:
            return fn(store)
        finally:
            store.close()

    def measured_ok(self, key: ForkKey) -> set[str]:
        rows = self._use(lambda s: s.measurements(kernel_id=key.kernel_id, card=key.card, setting=key.setting))
        return {m.schedule_id for m in rows if m.sizes == key.sizes and m.status == "ok"}

    def record(self, program: Program, card: Card, outcomes: Sequence[Outcome]) -> None:
        rows = [measurement_row(o) for o in outcomes if o.recordable]
        summary = self._use(lambda s: s.record(rows, kernels=[program], cards=[card_row(card)],
                                               origin=f"{self.origin} {program.name}"))
        self.summaries.append(summary)


class TuneFileRecorder:
    """Writes a tune run's rows to a tune file (the store's format, `write_tune_file`), rewritten atomically
    after every kernel so an interrupted tune leaves whole kernels. No dedupe: a tune file starts empty.

    `path` is the file, or a folder to write `<card-slug>.tune-<stamp>.json` into.
    """

    def __init__(self, path: Path) -> None:
        self.target = Path(path)
        self.path: Path | None = None
        self.kernels: dict[str, Program] = {}
        self.rows: list[Any] = []

    def measured_ok(self, key: ForkKey) -> set[str]:
        return set()

    def record(self, program: Program, card: Card, outcomes: Sequence[Outcome]) -> None:
        from emmy_core.store.tunefile import tune_file_name, write_tune_file

        if self.path is None:
            self.path = self.target / tune_file_name(card.name) if self.target.is_dir() else self.target
        self.kernels.setdefault(kernel_id(program), program)
        self.rows.extend(measurement_row(o) for o in outcomes if o.recordable)
        write_tune_file(self.path, card=card_row(card), kernels=list(self.kernels.values()), measurements=self.rows)


def db_recorder(db: Path | None, origin: str) -> StoreRecorder:
    from emmy_core.store import open_store

    return StoreRecorder(lambda: open_store(db, "w"), origin)


def parse_shape(text: str) -> dict[str, int]:
    from emmy_core.ir import IRError, parse_sizes

    try:
        return parse_sizes(text)
    except IRError as exc:
        fail(f"--shape {text!r}: {exc}")


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


def run_bench(plan: Any, card: Card, backend: str | None, recorder: Any, config: BenchConfig) -> BenchReport:
    """The harness, with its refusals and the store's (a locked or refused write) as CLI errors."""
    from emmy_core.bench.harness import bench
    from emmy_core.store import StoreError

    try:
        return bench(plan, card, backend, recorder, config)
    except BenchError as exc:
        fail(str(exc))
    except StoreError as exc:
        fail(f"recording stopped (kernels recorded before this one are kept): {exc}")


def print_report(report: BenchReport, wall_label: str = "wall") -> None:
    instances = sum(p.count for p in report.planned)
    typer.echo(f"kernels: {len(report.planned)} distinct ({instances} instances); variants run: "
               f"{len(report.outcomes)}, skipped (already measured ok): {report.skipped_known}")
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(report.failure_kinds.items())) or "none"
    reasons = ", ".join(f"{k} {n}" for k, n in sorted(report.flag_reasons.items())) or "none"
    typer.echo(f"ok {report.count('ok')}; failed {report.count('failed')} ({kinds}); "
               f"flagged {report.count('flagged')} ({reasons}; not recorded)")
    for unit, why in report.unit_errors:
        typer.echo(f"kernel {unit.program.name} at {unit.sizes_text!r} not benched: {why}", err=True)
    best: dict[tuple[str, str], Outcome] = {}
    for o in report.outcomes:
        if o.status == "ok" and o.stats is not None:
            cur = best.get(o.unit.key)
            if cur is None or o.stats.median_us < cur.stats.median_us:  # type: ignore[union-attr]
                best[o.unit.key] = o
    for p in report.planned:
        o = best.get(p.unit.key)
        if o is not None and o.stats is not None:
            knobs = ",".join(f"{k}={v}" for k, v in sorted(o.knobs.items()))
            typer.echo(f"  {p.unit.program.name:<44} {p.unit.sizes_text:<14} x{p.count:<3} "
                       f"best {o.stats.median_us:10.2f} us  {knobs}")
    per_min = len(report.outcomes) / report.wall_s * 60 if report.wall_s > 0 else 0.0
    typer.echo(f"rows recorded: {report.rows_recorded}; {wall_label} {report.wall_s:.1f} s "
               f"({per_min:.1f} variants/min)")


Opt = typer.Option
CardOpt = Annotated[str, Opt("--card", help="card to bench on: 'local' or this machine's card name")]
SettingOpt = Annotated[str, Opt("--setting", help="compile setting: deploy or rank")]
ShapeOpt = Annotated[str, Opt("--shape", help="sizes of the dynamic axes, e.g. B=8,S=128")]
DbOpt = Annotated[Path | None, Opt("--db", help="tuning database to record into (default: the local one)")]
TimeoutOpt = Annotated[float, Opt("--timeout", min=0.1, help="watchdog seconds per variant")]
SpreadOpt = Annotated[float, Opt("--spread-limit", min=0.0, help="flag a result whose (p90-p10)/median exceeds this")]
ProgressOpt = Annotated[bool, Opt("--progress/--no-progress", help="show a progress bar")]
DtypeOpt = Annotated[str, Opt("--dtype", help="data type the model is compiled in: f16 (the serving "
                                "matrix's), bf16 or f32")]
BackendOpt = Annotated[str | None, Opt("--backend", help="code generator as module:attr (default: the card "
                                       "target's; for testing a backend)")]


def tune(
    model: Annotated[str, Opt("--model", help="reference model to tune (llama_block, llama_stack, mlp)")],
    shape: ShapeOpt,
    dtype: DtypeOpt = "f16",
    card: CardOpt = "local",
    setting: SettingOpt = "deploy",
    budget: Annotated[int | None, Opt("--budget", min=1, help="candidates per kernel: a seeded sample that "
                                      "keeps the first option (default: all)")] = None,
    seed: Annotated[int, Opt("--seed", help="seed of the candidate sample and of the inputs")] = 0,
    db: DbOpt = None,
    tune_file: Annotated[Path | None, Opt("--tune-file", help="write a tune file instead (a path, or a folder "
                                          "for <card>.tune-<stamp>.json)")] = None,
    timeout: TimeoutOpt = 120.0,
    spread_limit: SpreadOpt = 0.5,
    progress: ProgressOpt = True,
    backend: BackendOpt = None,
) -> None:
    """Tune every kernel of a model at a shape over its candidates; record ok and failed rows."""
    from emmy_core.bench.plan import model_units, tune_plan
    from emmy_core.codegen.backend import SETTINGS
    from emmy_core.graph.errors import GraphError

    if db is not None and tune_file is not None:
        fail("give --db or --tune-file, not both")
    if setting not in SETTINGS:
        fail(f"--setting {setting!r}: known settings: {', '.join(SETTINGS)}")
    sizes = parse_shape(shape)
    the_card = local_card_named(card)
    try:
        units = model_units(model, sizes, dtype)
    except (GraphError, ValueError) as exc:
        fail(str(exc))
    plan = tune_plan(units, the_card, budget, seed)
    recorder: Any
    if tune_file is not None:
        recorder = TuneFileRecorder(tune_file)
    else:
        recorder = db_recorder(db, f"tune {model} {shape}")
    config = BenchConfig(setting=setting, source="tune", timeout_s=timeout, spread_limit=spread_limit, seed=seed,
                         progress=progress and sys.stderr.isatty())
    report = run_bench(plan, the_card, backend, recorder, config)
    print_report(report)
    if tune_file is not None and report.rows_recorded:
        typer.echo(f"tune file: {recorder.path}")
    if report.unit_errors:
        raise typer.Exit(1)
