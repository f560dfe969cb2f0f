"""The per-card tune (`chain.steps.tune`), a job with one static partition per card of the serving matrix (`local`
read as this machine's card); its output, the tune files in the inbox, is the observed asset `tune_files`.

The tune is a job, not an asset: a partition runs only where its card is (elsewhere it fails at once, naming
card and machine), and tune files also arrive from other machines, so the chain depends on the inbox as observed.
"""

import dagster as dg
from pydantic import Field

from assets import GROUP
from assets.resources import EmmyPaths


class TuneConfig(dg.Config):
    """What a tune benches: candidates per kernel (a seeded sample keeping the first option; 0: all), the models,
    shapes (`B=1,S=128`), settings (empty: all), the bench's watchdog and noise limits (`max_busy`: others'
    share of the CPUs above which a timing is measured again, then flagged); `replay_from`: a frozen file of the
    card served instead of benching (`bench.replay_runner`)."""

    budget: int = 32
    seed: int = 0
    models: list[str] = Field(default_factory=list)
    shapes: list[str] = Field(default_factory=list)
    settings: list[str] = Field(default_factory=list)
    timeout_s: float = 120.0
    spread_limit: float = 0.5
    max_busy: float = 0.5
    replay_from: str = ""  # a frozen card file of the partition's card: its rows replayed, no hardware needed


@dg.observable_source_asset(group_name=GROUP, description=(
    "The tune files waiting in the inbox (`_tune/files/`), written by `tune_card` here or copied from other "
    "machines. Its data version is the digest of their names and contents."))
def tune_files(paths: EmmyPaths) -> dg.ObserveResult:
    from emmy_core.chain import steps

    inbox = steps.look(paths.chain()).inbox
    return dg.ObserveResult(data_version=dg.DataVersion(inbox.digest),
                            metadata={"tune files": dg.MetadataValue.json([p.name for p in inbox.files])})


@dg.op(pool="bench", description="The serving matrix tuned on the partition's card into tune files in the inbox.")
def tune(context: dg.OpExecutionContext, config: TuneConfig, paths: EmmyPaths) -> None:
    from emmy_core.bench.harness import BenchError
    from emmy_core.chain import steps

    card = context.partition_key
    try:
        done = steps.tune(paths.chain(), card, **config.model_dump(exclude={"budget"}), budget=config.budget or None,
                          on_setting=lambda s: context.log.info(f"{card}: {s}"))
    except (BenchError, steps.ChainError) as exc:  # the card is not here, the selection or the replayed file is
        raise dg.Failure(description=str(exc), allow_retries=False) from None  # refused: the message is all
    if done.problem():
        raise dg.Failure(description=done.problem())
    context.log_event(dg.AssetObservation(asset_key="tune_files", metadata={"card": card, **{
        k: dg.MetadataValue.json(v) if isinstance(v, dict | list) else v for k, v in done.summary().items()}}))
