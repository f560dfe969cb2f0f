"""The ordered sources of one compile context (card, setting), and the prior loaded best-effort.

`open_sources(card, setting, freezes=, tuning_db=, prior=)` gives the four tiers in order: the
freeze's goldens, the local tuning database (opened lazily), the prior, the rule. A compile loads
the prior best-effort (seed chapter 8): a missing or refused prior leaves the compile without the
prior tier, and `load_prior_best_effort` says why in one sentence; the caller warns once per compile
(`PriorUnavailableWarning`) and every fork that falls through shows the reason in its record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from emmy_core.evidence.freeze import FreezesArg, golden_source
from emmy_core.evidence.measured import LocalSource
from emmy_core.evidence.sources import PriorSource, RuleSource, Source, Sources, Unavailable
from emmy_core.targets.card import Card

PriorArg = Any  # None (the installed prior), False (none), a path to an artifact, or a loaded prior


class PriorUnavailableWarning(UserWarning):
    """A compile runs without the prior (missing or refused); its forks fall to the rule's first option."""


def load_prior_best_effort(prior: PriorArg = None) -> tuple[Any | None, str, str]:
    """(prior or None, its label, why it is unavailable) for `prior=` as `compile` takes it."""
    if prior is False:
        return None, "", "turned off by the caller (prior=False)"
    if prior is not None and not isinstance(prior, str | Path):
        return prior, str(getattr(prior, "source", type(prior).__name__)), ""
    try:
        from emmy_core.prior import load_installed_prior, load_prior  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, "", f"this installation has no prior ({exc})"
    try:
        if prior is None:
            from emmy_core.prior import installed_prior_path  # type: ignore[attr-defined]

            return load_installed_prior(), str(installed_prior_path()), ""
        return load_prior(prior), str(prior), ""
    except (OSError, ValueError) as exc:  # PriorError is a ValueError naming the file and both versions
        return None, "", f"the prior was refused: {str(exc)[:400]}"


def open_sources(card: Card, setting: str, *, freezes: FreezesArg = None, tuning_db: Path | str | None = None,
                 prior: PriorArg = None, local: bool = True, library: bool = True) -> Sources:
    """The sources of one compile context, in order; `notes` says what was skipped and why. `library=False`:
    matrix products are offered Emmy's kernels only, not torch's own (`knobs.route`)."""
    items: list[Source] = []
    gold, notes = golden_source(card.name, setting, freezes)
    items.append(gold if gold is not None else
                 Unavailable("golden", "; ".join(notes) or f"no freeze file for {card.name}"))
    if local:
        items.append(LocalSource(Path(tuning_db) if tuning_db is not None else None, card.name, setting))
    loaded, label, why = load_prior_best_effort(prior)
    items.append(PriorSource(loaded, label, why))
    items.append(RuleSource())
    if loaded is None:
        notes.append(f"no prior: {why}")
    if not library:
        notes.append("library route off: matrix products choose among Emmy's kernels only (library=False)")
    return Sources(card, setting, tuple(items), notes, library=library)
