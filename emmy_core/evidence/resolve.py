"""One resolver: a fork and its key, settled by the first source that answers (DESIGN section 10).

`resolve(fork, key, sources, check=None)` walks `sources.items` in order (as TVM's ordered-union
database does). An answer is checked before it is taken: a schedule that is not one of the
fork's own candidates is checked against the card's limits (`knobs.option_problem`), and
`check(fork, option)` (the compile's: does it build) may refuse any option. A refused option is
blocked, with its reason, and the fork is resolved again from the first source; the resolution
records every blocked option and why each earlier tier did not answer.
"""

from __future__ import annotations

from collections.abc import Callable

from emmy_core.evidence.resolution import Resolution, ResolutionError
from emmy_core.evidence.sources import Answer, Sources, option_id
from emmy_core.graph.forks import Fork, ForkKey, ForkOption, ScheduleOption

MAX_PASSES = 100_000  # a bound that is never reached: the options and measured rows of a fork are finite
Check = Callable[[Fork, ForkOption], str | None]  # why an option cannot be used (None: it can)


def _static_problem(fork: Fork, option: ForkOption, sources: Sources) -> str | None:
    if not isinstance(option, ScheduleOption):
        return None
    own = fork.options if fork.enumerated else (fork.default,)
    if any(isinstance(o, ScheduleOption) and o.schedule_id == option.schedule_id for o in own):
        return None  # the rule's own candidates were checked against the card when enumerated
    from emmy_core.knobs import option_problem

    problem = option_problem(fork.kernel, sources.card, dict(option.knobs))
    return None if problem is None else f"exceeds what {sources.card.name} allows: {problem}"


def resolve(fork: Fork, key: ForkKey, sources: Sources, check: Check | None = None) -> Resolution:
    """The resolution of `fork` at `key`: the first source's checked answer (blocked options resolved again)."""
    blocked: dict[str, str] = {}
    labels: dict[str, str] = {}
    for _ in range(MAX_PASSES):  # every pass blocks one more option, so the rule's options run out
        tried: list[tuple[str, str]] = []
        for source in sources.items:
            why = source.unavailable()
            if why is not None:
                tried.append((source.tier, why))
                continue
            got = source.structural(fork, key, blocked, sources) if fork.structural else \
                source.schedule(fork, key, blocked, sources)
            if not isinstance(got, Answer):
                tried.append((source.tier, got.why))
                continue
            problem = _static_problem(fork, got.option, sources)
            if problem is None and check is not None:
                problem = check(fork, got.option)
            if problem is not None:
                oid = option_id(got.option)
                blocked[oid] = f"{source.tier}: {problem}"
                labels[oid] = got.option.label
                break
            return Resolution(
                key=key, kernel=fork.kernel.name, rule=fork.rule, choice=got.option, tier=source.tier,
                source=source.label, evidence=got.evidence, time_us=got.time_us, score=got.score,
                measurements=got.measurements, runner_up=got.runner_up, margin=got.margin,
                blocked=tuple((labels[o], w) for o, w in blocked.items()), tried=tuple(tried), note=got.note)
        else:
            break
    reasons = "; ".join(f"{labels[o]}: {w}" for o, w in blocked.items()) or "no source answered"
    raise ResolutionError(f"fork {fork.rule} of {fork.kernel.name} at {key.sizes or '-'} on {key.card}: every "
                          f"option is blocked ({reasons[:2000]})")
