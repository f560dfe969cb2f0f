"""Tuning the serving matrix on one card: what a per-card tune partition runs, here or on a bench worker.

`matrix_cards` names every card a per-card tune covers: the serving matrix's cards with
`local` read as this machine's card. `present_card` refuses at once, naming the card and
this machine's, a card that is not this machine's own device (timings come from here only).
`tune_matrix` lowers every model of the matrix at every shape, merges the kernels of all of
them (identical kernels at identical sizes are one unit of work), and benches them once per
setting through one recorder, so that one run leaves one tune file per card.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from emmy_core.bench.harness import BenchConfig, BenchError, BenchReport, Recorder, Unit, bench
from emmy_core.bench.plan import model_units, tune_plan
from emmy_core.graph.serving import ServingMatrix, load_serving_matrix
from emmy_core.targets import LOCAL, Card, local_card


class CardAbsent(BenchError):
    """A tune asked of a card this machine does not have."""


def matrix_cards(matrix: ServingMatrix | None = None, here: Card | None = None) -> tuple[str, ...]:
    """The cards a per-card tune covers: the matrix's, `local` read as this machine's card; sorted, once each."""
    m = matrix or load_serving_matrix()
    local_name = (here or local_card()).name
    return tuple(sorted({local_name if c == LOCAL else c for c in m.cards}))


def present_card(name: str, here: Card | None = None) -> Card:
    """The card called `name` if it is this machine's; else CardAbsent naming both."""
    here = here or local_card()
    if name in (LOCAL, here.name):
        return here
    raise CardAbsent(f"card {name[:120]!r} is not on this machine (this machine's card is {here.name!r}): "
                     "its tune runs on a machine that has it")


@dataclass
class MatrixTuneReport:
    """One tune of the matrix on one card: the bench report of each setting, and what was planned."""

    card: str
    cases: list[str] = field(default_factory=list)  # "model dtype B=..,S=.." lowered
    reports: dict[str, BenchReport] = field(default_factory=dict)  # setting -> report

    @property
    def rows_recorded(self) -> int:
        return sum(r.rows_recorded for r in self.reports.values())

    def count(self, status: str) -> int:
        return sum(r.count(status) for r in self.reports.values())

    @property
    def unit_errors(self) -> list[tuple[Unit, str]]:
        return [e for r in self.reports.values() for e in r.unit_errors]


def matrix_units(matrix: ServingMatrix, models: Sequence[str] = (),
                 shapes: Sequence[str] = ()) -> tuple[list[str], list[Unit]]:
    """Every kernel instance of the matrix's models at its shapes (or only the models and shapes named,
    shapes as `B=1,S=128`), and the cases lowered."""
    known = {m.name for m in matrix.models}
    unknown = [name for name in models if name not in known]
    if unknown:
        raise BenchError(f"model {unknown[0][:60]!r} is not in the serving matrix ({', '.join(sorted(known))})")
    listed = {",".join(f"{k}={v}" for k, v in shape) for m in matrix.models for shape in m.shapes}
    unknown = [s for s in shapes if s not in listed]
    if unknown:
        raise BenchError(f"shape {unknown[0][:60]!r} is not in the serving matrix ({', '.join(sorted(listed))})")
    cases: list[str] = []
    units: list[Unit] = []
    for m in matrix.models:
        if models and m.name not in models:
            continue
        for shape in m.shapes:
            text = ",".join(f"{k}={v}" for k, v in shape)
            if shapes and text not in shapes:
                continue
            cases.append(f"{m.name} {m.dtype} {text}")
            units.extend(model_units(m.name, dict(shape), m.dtype))
    return cases, units


def tune_matrix(card_name: str, recorder_for: Callable[[str], Recorder], *, matrix: ServingMatrix | None = None,
                models: Sequence[str] = (), shapes: Sequence[str] = (), settings: Sequence[str] = (),
                budget: int | None = None,
                seed: int = 0, config: BenchConfig | None = None, backend: str | None = None,
                on_setting: Callable[[str], None] | None = None) -> MatrixTuneReport:
    """Benches the serving matrix (or the models and shapes named) on `card_name`, this machine's card.

    `recorder_for(setting)` gives the recorder of one setting's rows (a tune file holds one card and one
    setting). `budget` candidates per kernel (a seeded sample keeping the first option; None: all);
    `settings` defaults to the matrix's. `config` gives the bench's other settings (its `setting` is replaced).
    `on_setting(setting)` is called before each setting's bench (progress).
    """
    card: Card = present_card(card_name)
    m = matrix or load_serving_matrix()
    chosen = tuple(settings) or m.settings
    bad = [s for s in chosen if s not in m.settings]
    if bad:
        raise BenchError(f"setting {bad[0][:20]!r} is not one of the matrix's ({', '.join(m.settings)})")
    cases, units = matrix_units(m, models, shapes)
    plan = tune_plan(units, card, budget, seed)
    base = config or BenchConfig()
    report = MatrixTuneReport(card.name, cases)
    for setting in chosen:
        if on_setting is not None:
            on_setting(setting)
        report.reports[setting] = bench(plan, card, backend, recorder_for(setting),
                                        replace(base, setting=setting, source="tune"))
    return report
