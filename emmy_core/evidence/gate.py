"""The release gate: every entry of the serving matrix settled under strict evidence.

For each case (model, dtype, shape, card, setting) the model is compiled at the shape (captured
small, never run) and every fork is resolved by the card's ordered sources. A case passes when
every applied fork was answered by a measured tier (golden or local). This machine's card is
resolved with the build check (`checker`: an option that does not build is blocked); an absent
card is resolved only, nothing built. Recordings whose kernel no longer exists are listed with
the case. Nothing here raises for a failing case: the result says what failed and why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from emmy_core.dtypes import torch_dtype
from emmy_core.evidence.context import PriorArg, open_sources
from emmy_core.evidence.freeze import FreezesArg
from emmy_core.evidence.model import ModelResolver, resolutions_of, stale_recordings
from emmy_core.evidence.resolution import ResolutionError, ResolutionRecord
from emmy_core.evidence.resolve import Check
from emmy_core.evidence.sources import Sources
from emmy_core.graph.errors import GraphError
from emmy_core.ir.errors import IRError
from emmy_core.targets.card import Card

if TYPE_CHECKING:
    from emmy_core.graph.serving import ServingCase, ServingMatrix

Checker = Callable[[Card, str], Check]  # a build check for this machine's card and a setting


@dataclass
class GateCase:
    case: ServingCase
    card: str  # the card's full name ('local' resolved)
    built: bool  # this machine's card: options were build-checked
    record: ResolutionRecord | None = None
    error: str = ""  # the case could not be resolved at all (unknown card, a fork with every option blocked)

    @property
    def shape(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.case.shape)

    @property
    def passed(self) -> bool:
        return not self.error and self.record is not None and not self.record.fell_through()


@dataclass
class GateResult:
    cases: list[GateCase] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.cases)

    def to_json(self) -> dict[str, object]:
        return {"passed": self.passed, "cases": [
            {"model": c.case.model, "dtype": c.case.dtype, "shape": c.shape, "card": c.card,
             "setting": c.case.setting, "built": c.built, "passed": c.passed, "error": c.error,
             "record": c.record.to_json() if c.record is not None else None} for c in self.cases]}


def run_gate(matrix: ServingMatrix, *, tuning_db: Path | str | None = None, freezes: FreezesArg = None,
             prior: PriorArg = None, checker: Checker | None = None,
             progress: Callable[[str], None] | None = None) -> GateResult:
    """Resolves every case of `matrix` under strict evidence; builds only for this machine's card."""
    from emmy_core.graph.pipeline import compile_model
    from emmy_core.targets import UnknownCard, local_card, resolve_card

    here = local_card().name
    contexts: dict[tuple[str, str], tuple[Sources, ModelResolver]] = {}
    result = GateResult()
    for case in matrix.cases():
        shape = dict(case.shape)
        try:
            card = resolve_card(case.card)
        except UnknownCard as exc:
            result.cases.append(GateCase(case, case.card, False, error=str(exc)))
            continue
        present = card.name == here
        gate_case = GateCase(case, card.name, present and checker is not None)
        result.cases.append(gate_case)
        if progress is not None:
            progress(f"{case.model} {gate_case.shape} on {card.name} ({case.setting})")
        ctx = (card.name, case.setting)
        if ctx not in contexts:
            sources = open_sources(card, case.setting, freezes=freezes, tuning_db=tuning_db, prior=prior)
            check = checker(card, case.setting) if present and checker is not None else None
            contexts[ctx] = (sources, ModelResolver(sources, check))
        sources, resolver = contexts[ctx]
        record = ResolutionRecord(case.model, card.name, case.setting, sizes=[gate_case.shape])
        for note in sources.notes:
            record.add_note(note)
        try:
            lowered = compile_model(case.model, shape, torch_dtype(case.dtype))
            plans = resolver.model(lowered, shape)
        except (ResolutionError, GraphError, IRError) as exc:  # the case fails, with its reason
            gate_case.error = f"{type(exc).__name__}: {str(exc)[:500]}"
            continue
        finally:
            for note in sources.close():
                record.add_note(note)
        record.resolutions = resolutions_of(plans)
        record.add_stale(stale_recordings(sources, plans))
        gate_case.record = record
    return result
