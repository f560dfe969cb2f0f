"""A tune driven by a search strategy: the harness asks, kernel by kernel, which candidates to measure next.

`StrategyChooser` is the bench harness's `Chooser` for `emmy tune --strategy S --budget N`:
per kernel it enumerates the candidates on the card (the rule's order), leaves out those the
recorder already holds measured ok (never measured twice), scores the rest with the prior,
and runs a `Session` of the strategy within the budget. A matrix product's library route (torch's own
kernel, `knobs.route`) is measured first and outside the budget: it is what Emmy's kernels must beat.
The rule's first option is always measured next; a failed or flagged variant costs its budget and tells
the strategy it failed.
As each kernel finishes, `on_kernel` is told its best so far against its first option.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emmy_core.bench.harness import Outcome, Planned
from emmy_core.knobs import candidates
from emmy_core.knobs.route import is_library, with_library
from emmy_core.knobs.vocab import schedule_id
from emmy_core.search.replay import Session
from emmy_core.search.strategy import SearchPool, SearchStrategy, make_strategy
from emmy_core.targets import Card

PRIOR_STRATEGIES = frozenset({"prior", "explore"})


def default_strategy(prior: Any | None) -> str:
    """`prior` when a prior loaded, else `random` (today's seeded sample)."""
    return "prior" if prior is not None else "random"


def strategy_prior(strategy: str | None) -> tuple[Any | None, str, str]:
    """(the installed prior or None, the strategy to run, why no prior loaded): the prior is loaded when
    `strategy` needs it or is left to the default (`default_strategy`)."""
    from emmy_core.prior import PriorError, load_installed_prior

    prior, why = None, ""
    if strategy is None or strategy in PRIOR_STRATEGIES:
        try:
            prior = load_installed_prior()
        except PriorError as exc:
            why = str(exc)
    return prior, strategy if strategy is not None else default_strategy(prior), why


def card_pool(prior: Any | None, program: Any, sizes: Mapping[str, int], card: Card, setting: str,
              knobs: Sequence[Mapping[str, object]], first: int | None, label: str) -> SearchPool:
    """The search pool of `knobs` (in the rule's order) for one kernel on `card`, as a tune and `emmy suggest`
    see it: with a prior, its scores and its table's transfer column (`tr.score`: what other cards measured
    of each candidate, NaN where none did); without one, the rule's order alone."""
    scores = transfer = None
    if prior is not None:
        scores = np.asarray(prior.score(program, dict(sizes), card, setting, knobs), dtype=np.float64)
        cols = prior.transfer(program, dict(sizes), card, setting, knobs)
        transfer = None if cols is None else cols[:, 0]
        scores = _regime_first(program, sizes, knobs, scores)
    return SearchPool(tuple(knobs), tuple(range(len(knobs))), first, scores, transfer, label)


def _regime_first(program: Any, sizes: Mapping[str, int], knobs: Sequence[Mapping[str, object]],
                  scores: np.ndarray) -> np.ndarray:
    """The prior's scores with the options that do not suit the sizes (`knobs.parallel.suited`, as the prior tier
    ranks them: every thread busy, no micro-kernel taller than the rows, and at a few rows the tallest streaming
    ones) moved below every option that does, each side in the prior's own order: the prior never saw a streaming
    option measured, so a tune measures the regime's first and the rest only with budget to spare."""
    from emmy_core.knobs.parallel import suited

    inside = np.zeros(len(knobs), dtype=bool)
    inside[suited(program, sizes, knobs)] = True
    if inside.all() or not inside.any() or not np.isfinite(scores).any():
        return scores
    span = float(np.nanmax(scores) - np.nanmin(scores)) + 1.0
    return np.where(inside, scores, scores - span)


@dataclass
class KernelSearch:
    """One kernel's search: its pool, the session, and what became of its first option and its best."""

    name: str
    pool: SearchPool
    session: Session
    told: int = 0
    first_us: float | None = None
    first_measured: bool = False
    library: list[dict[str, object]] = field(default_factory=list)  # measured before the session, off its budget
    library_us: float | None = None
    library_measured: bool = False

    def best_line(self) -> str:
        best = self.session.best
        n = len(self.session.trials)
        if best is None:
            return f"{self.name}: {n} measured, none working"
        head = f"{self.name}: {n} measured, best {best.time_us:.2f} us"
        if self.library_us is not None:
            head += f", torch's kernel {self.library_us:.2f} us ({self.library_us / best.time_us:.2f}x)"
        if self.first_us is not None and best.time_us:
            return f"{head}, first option {self.first_us:.2f} us ({self.first_us / best.time_us:.2f}x)"
        return head + (", first option failed" if self.first_measured else ", first option measured before")


class StrategyChooser:
    """The harness's chooser for one strategy, budget and prior (module docstring)."""

    def __init__(self, strategy: str, card: Card, setting: str, budget: int, seed: int = 0, prior: Any | None = None,
                 on_kernel: Callable[[KernelSearch], None] | None = None,
                 make: Callable[[str, int], SearchStrategy] = make_strategy) -> None:
        if strategy in PRIOR_STRATEGIES and prior is None:
            raise ValueError(f"strategy {strategy!r} needs a prior, and none is loaded")
        self.strategy, self.card, self.setting, self.budget, self.seed = strategy, card, setting, budget, seed
        self.prior = prior
        self.on_kernel = on_kernel
        self.make = make
        self.kernels: dict[tuple[str, str], KernelSearch] = {}
        self.skipped_known = 0

    def start(self, planned: Planned, known: set[str]) -> int:
        unit = planned.unit
        every = [dict(k) for k in candidates(unit.program, self.card)]
        keep = [k for k in every if schedule_id(k) not in known]
        self.skipped_known += len(every) - len(keep)
        if not keep:
            return 0
        first = 0 if every and schedule_id(every[0]) not in known else None
        pool = card_pool(self.prior if self.strategy in PRIOR_STRATEGIES else None, unit.program, unit.sizes,
                         self.card, self.setting, keep, first, f"{unit.program.name} {unit.sizes_text}")
        session = Session(self.make(self.strategy, self.seed), pool, self.budget)
        route = with_library(unit.program, [])
        library = [k for k in route if schedule_id(k) not in known]
        self.skipped_known += len(route) - len(library)
        self.kernels[unit.key] = KernelSearch(unit.program.name, pool, session, library=library)
        return session.budget + len(library)

    def next(self, planned: Planned, outcomes: Sequence[Outcome]) -> list[dict[str, object]]:
        k = self.kernels[planned.unit.key]
        index = {schedule_id(dict(kn)): i for i, kn in enumerate(k.pool.knobs)}
        if len(outcomes) < len(k.library):  # torch's kernel first, outside the session
            return [k.library[len(outcomes)]]
        for o in outcomes[k.told:]:
            if is_library(o.knobs):
                k.library_us = o.median_us if o.status == "ok" else None
                k.library_measured = True
                continue
            i = index[schedule_id(o.knobs)]
            t = o.median_us if o.status == "ok" else None
            if i == k.pool.first:
                k.first_us, k.first_measured = t, True
            k.session.tell(i, t)
        k.told = len(outcomes)
        picks = k.session.next(1)
        if not picks and self.on_kernel is not None:
            self.on_kernel(k)
        return [dict(k.pool.knobs[i]) for i in picks]

    def measured(self, key: tuple[str, str]) -> list[dict[str, object]]:
        """The candidates measured for a kernel (unit key), in order."""
        k = self.kernels[key]
        return [dict(k.pool.knobs[t.index]) for t in k.session.trials]
