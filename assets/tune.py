"""The per-card tune: the serving matrix benched on the card that is present, into a tune file.

One static partition per card the serving matrix names (`local` read as this machine's card).
A partition runs only on a machine that has its card: elsewhere it fails at once, naming
the card and the machine. On a pool of bench machines each worker runs the partitions of
its own card and writes tune files; the nightly refresh folds them into the freeze.
"""

from collections.abc import Sequence

import dagster as dg
from pydantic import Field

from pipelines.resources import EmmyPaths

GROUP = "tune"
KEY = dg.AssetKey("tune")


class TuneConfig(dg.Config):
    """What a tune benches: candidates per kernel (a seeded sample keeping the first option; 0: all),
    the models, shapes (`B=1,S=128`) and settings of the matrix (empty: all), and the bench's watchdog
    and noise limits."""

    budget: int = 32
    seed: int = 0
    models: list[str] = Field(default_factory=list)
    shapes: list[str] = Field(default_factory=list)
    settings: list[str] = Field(default_factory=list)
    timeout_s: float = 120.0
    spread_limit: float = 0.5
    max_busy: float = 0.5  # others' share of the CPUs above which a timing is measured again, then flagged
    replay_from: str = ""  # a frozen card file of the partition's card: its rows replayed, no hardware needed


def card_partitions(cards: Sequence[str] | None = None) -> dg.StaticPartitionsDefinition:
    """One partition per card: those given, else the serving matrix's with `local` read as this machine's."""
    from emmy_core.bench.matrix import matrix_cards

    return dg.StaticPartitionsDefinition(list(cards) if cards is not None else list(matrix_cards()))


def build_tune_asset(partitions: dg.StaticPartitionsDefinition) -> dg.AssetsDefinition:
    """The tune asset over the given card partitions (built when the Definitions are, not at import)."""

    @dg.asset(key=KEY, partitions_def=partitions, group_name=GROUP, pool="bench", description=(
        "The serving matrix tuned on one card (one partition per card): every kernel of every model and "
        "shape benched over a sample of its candidates, ok and failed rows written to a tune file in "
        "`_tune/files/`. Runs only where the card is present."))
    def tune(context: dg.AssetExecutionContext, config: TuneConfig, paths: EmmyPaths) -> dg.MaterializeResult:
        return run_tune(context, config, paths)

    return tune


def run_tune(context: dg.AssetExecutionContext, config: TuneConfig, paths: EmmyPaths) -> dg.MaterializeResult:
    """Benches the matrix on the partition's card into a tune file in the inbox."""
    from emmy_core.bench.harness import BenchConfig, BenchError
    from emmy_core.bench.matrix import tune_matrix
    from emmy_core.store.recorders import TuneFileRecorder

    card = context.partition_key
    if config.replay_from:
        return replay_card(card, config, paths)
    paths.inbox.mkdir(parents=True, exist_ok=True)
    recorders: dict[str, TuneFileRecorder] = {}

    def recorder_for(setting: str) -> TuneFileRecorder:
        return recorders.setdefault(setting, TuneFileRecorder(paths.inbox))

    bench = BenchConfig(timeout_s=config.timeout_s, spread_limit=config.spread_limit, seed=config.seed,
                        max_busy=config.max_busy)
    try:
        report = tune_matrix(card, recorder_for, models=config.models, shapes=config.shapes,
                             settings=config.settings, budget=config.budget or None, seed=config.seed, config=bench,
                             on_setting=lambda s: context.log.info(f"benching the serving matrix on {card}, {s}"))
    except BenchError as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    if report.unit_errors:
        unit, why = report.unit_errors[0]
        raise dg.Failure(description=f"{len(report.unit_errors)} kernels not benched; first: {unit.program.name} "
                                     f"at {unit.sizes_text}: {why[:300]}")
    files = {s: str(r.path) for s, r in recorders.items() if r.path}
    if paths.inbox_url is not None:
        files = delivered(files, paths.inbox_url)
    return dg.MaterializeResult(metadata={
        "card": card,
        "tune files": dg.MetadataValue.json(files),
        "cases": dg.MetadataValue.json(report.cases),
        "rows recorded": report.rows_recorded,
        "ok": report.count("ok"), "failed": report.count("failed"),
        "flagged (not recorded)": report.count("flagged"),
    })


def replay_card(card: str, config: TuneConfig, paths: EmmyPaths) -> dg.MaterializeResult:
    """The partition's card served from a frozen cache (`emmy_core.bench.replay_runner`) into the inbox."""
    from emmy_core.bench.replay_runner import replay_tune
    from emmy_core.store.errors import StoreError
    from emmy_core.store.sourcefile import SourceError

    try:
        report = replay_tune(card, config.replay_from, paths.inbox, config.settings)
    except (StoreError, SourceError) as exc:
        raise dg.Failure(description=str(exc), allow_retries=False) from None
    files = {s: str(p) for s, p in report.files.items()}
    if paths.inbox_url is not None:
        files = delivered(files, paths.inbox_url)
    return dg.MaterializeResult(metadata={
        "card": card, "replayed from": config.replay_from,
        "tune files": dg.MetadataValue.json(files),
        "rows recorded": sum(report.rows.values())})


def delivered(files: dict[str, str], url: str) -> dict[str, str]:
    """The finished tune files moved into the URL inbox (`emmy_core.store.urlfolder.deliver`), then removed
    from the local outbox; setting -> key."""
    from pathlib import Path

    from emmy_core.store.urlfolder import deliver

    local = [Path(f) for f in files.values()]
    keys = deliver(local, url)
    for f in local:
        f.unlink()
    return dict(zip(files, keys, strict=True))
