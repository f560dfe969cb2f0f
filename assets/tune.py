"""The per-card tune (`chain.steps.tune`): one static partition per card of the serving matrix (`local` read as
this machine's card); a partition runs where its card is, elsewhere it fails at once naming card and machine."""

import dagster as dg
from pydantic import Field

from assets.resources import EmmyPaths

KEY = dg.AssetKey("tune")


class TuneConfig(dg.Config):
    """What a tune benches: candidates per kernel (a seeded sample keeping the first option; 0: all), the models,
    shapes (`B=1,S=128`), settings (empty: all), the bench's watchdog and noise limits (`max_busy`: others'
    share of the CPUs above which a timing is measured again, then flagged)."""

    budget: int = 32
    seed: int = 0
    models: list[str] = Field(default_factory=list)
    shapes: list[str] = Field(default_factory=list)
    settings: list[str] = Field(default_factory=list)
    timeout_s: float = 120.0
    spread_limit: float = 0.5
    max_busy: float = 0.5


def card_partitions(cards: list[str] | tuple[str, ...] | None = None) -> dg.StaticPartitionsDefinition:
    """One partition per card: those given, else the serving matrix's with `local` read as this machine's."""
    from emmy_core.bench.matrix import matrix_cards

    return dg.StaticPartitionsDefinition(list(cards) if cards is not None else list(matrix_cards()))


def build_tune_asset(partitions: dg.StaticPartitionsDefinition) -> dg.AssetsDefinition:
    """The tune asset over the given card partitions (built when the Definitions are, not at import)."""

    @dg.asset(key=KEY, partitions_def=partitions, group_name="tune", pool="bench", description=(
        "The serving matrix tuned on one card (one partition per card): every kernel of every model and shape benched "
        "over a sample of its candidates, into a tune file in `_tune/files/`. Runs where the card is."))
    def tune(context: dg.AssetExecutionContext, config: TuneConfig, paths: EmmyPaths) -> dg.MaterializeResult:
        from emmy_core.bench.harness import BenchError
        from emmy_core.chain import steps

        card = context.partition_key
        try:
            done = steps.tune(paths.chain(), card, **config.model_dump(exclude={"budget"}),
                              budget=config.budget or None, on_setting=lambda s: context.log.info(f"{card}: {s}"))
        except BenchError as exc:  # the card is not here, or the matrix refuses the selection: the message is all
            raise dg.Failure(description=str(exc), allow_retries=False) from None
        if done.problem():
            raise dg.Failure(description=done.problem())
        r, files = done.report, {s: str(p) for s, p in done.files.items()}
        return dg.MaterializeResult(metadata={"card": card, "tune files": dg.MetadataValue.json(files),
                                              "cases": dg.MetadataValue.json(r.cases), "rows recorded": r.rows_recorded,
                                              **{k: r.count(k) for k in ("ok", "failed")},
                                              "flagged (not recorded)": r.count("flagged")})

    return tune
