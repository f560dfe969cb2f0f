"""What is most worth measuring next: per fork of a model at a shape, on a card, and the forks nothing covers.

For a performance engineer bringing up a card, before a tune. Per distinct kernel of the
model (a fork: kernel, sizes, card, setting) it reads the rows a tuning database holds for
it, and ranks the candidates not measured yet the way `emmy tune --strategy prior` would next
(`PriorStrategy.ranking`: the first option first while it has no row, then the prior's
order, candidates sharing a failed tile shape left out, re-ranked by what the fork's rows
imply once it has a few; the pool is the tune's, `tune.card_pool`, with the prior's transfer column),
adding the `explore` strategy's pick where the prior is least sure. Each suggestion says why:
the prior's score and its percentile in the pool, how many of its knob values no row has tried
(the uncertainty: nothing measured near it), that it has no row yet. A fork with no row at all
is listed as uncovered (seed 09, limitation 8: a fork no bench ever took is silence).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emmy_core.knobs import candidates
from emmy_core.knobs.vocab import schedule_id
from emmy_core.search.strategy import ExploreStrategy, PriorStrategy, Trial, novelty, percentile_ranks
from emmy_core.search.tune import card_pool
from emmy_core.targets import Card

Row = tuple[str, str, float | None]  # (schedule_id, status, median µs or None for a failure)


@dataclass(frozen=True)
class Suggestion:
    knobs: dict[str, object]
    score: float | None
    percentile: float | None
    untried_values: int
    why: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {"knobs": self.knobs, "prior_score": self.score, "prior_percentile": self.percentile,
                "untried_values": self.untried_values, "why": list(self.why)}


@dataclass
class ForkSuggestions:
    kernel: str
    kernel_id: str
    sizes: str
    candidates: int
    rows: int
    ok_rows: int
    best_us: float | None
    suggestions: list[Suggestion] = field(default_factory=list)

    @property
    def uncovered(self) -> bool:
        return self.rows == 0

    def to_json(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "kernel_id": self.kernel_id, "sizes": self.sizes, "candidates": self.candidates,
                "rows": self.rows, "ok_rows": self.ok_rows, "best_us": self.best_us, "uncovered": self.uncovered,
                "suggestions": [s.to_json() for s in self.suggestions]}


def fork_suggestions(program: Any, sizes: Mapping[str, int], sizes_text: str, kernel_id: str, card: Card,
                     setting: str, prior: Any | None, rows: Sequence[Row], top: int) -> ForkSuggestions:
    """The `top` candidates of one fork most worth measuring next, and why (module docstring)."""
    pool_knobs = [dict(k) for k in candidates(program, card)]
    index = {schedule_id(k): i for i, k in enumerate(pool_knobs)}
    trials = [Trial(index[sid], t if status == "ok" else None) for sid, status, t in rows if sid in index]
    pool = card_pool(prior, program, sizes, card, setting, pool_knobs, 0 if pool_knobs else None,
                     f"{program.name} {sizes_text}")
    scores = pool.scores
    ok = [t.time_us for t in trials if t.time_us is not None]
    out = ForkSuggestions(program.name, kernel_id, sizes_text, len(pool_knobs), len(rows),
                          sum(1 for _, s, _ in rows if s == "ok"), min(ok) if ok else None)
    if not pool_knobs:
        return out
    strategy = PriorStrategy()
    value = strategy.ranking(pool, trials)
    measured = {t.index for t in trials}
    ranked = [int(i) for i in np.argsort(-value, kind="stable") if np.isfinite(value[i])]
    if 0 not in measured:
        ranked = [0, *(i for i in ranked if i != 0)]
    picks = ranked[:top]
    open_ = value.copy()
    open_[0] = -np.inf  # a tune measures the first option anyway: never the place it explores
    explore, unsure = ExploreStrategy().uncertain_why(pool, trials, open_) if top > 1 and len(ranked) > top else (None, "")
    if explore is not None and explore not in picks:
        picks = [*picks[: top - 1], explore]
    pct = percentile_ranks(scores) if scores is not None else None
    untried = novelty(pool, trials).astype(int)
    best = min((t for t in trials if t.ok), key=lambda t: t.time_us or 0.0, default=None)
    for rank, i in enumerate(picks):
        why = ["no row yet"]
        if i == 0:
            why.append("the rule's first option (a tune always measures it)")
        if i == explore:
            why.append(f"explore: the prior is least sure here ({unsure})")
        elif scores is not None:
            why.append(f"prior's #{rank + 1} after the rows (score {scores[i]:.3f}, top {100 * (1 - pct[i]):.1f}%)")  # type: ignore[index]
        if best is not None and i != 0:
            shared = sum(pool_knobs[i].get(k) == v for k, v in pool_knobs[best.index].items())
            if shared:
                why.append(f"shares {shared} knob values with the best row ({best.time_us:.2f} us)")
        out.suggestions.append(Suggestion(pool_knobs[i], None if scores is None else float(scores[i]),
                                          None if pct is None else float(pct[i]), int(untried[i]), tuple(why)))
    return out


def read_rows(db: Any, card: str, setting: str) -> dict[tuple[str, str], list[Row]]:
    """The rows of a tuning database for one card and setting, per (kernel_id, sizes); {} when it does not exist."""
    from pathlib import Path

    from emmy_core.store import open_store

    if db is None or not Path(db).exists():
        return {}
    out: dict[tuple[str, str], list[Row]] = {}
    with open_store(db, "r") as store:
        for r in store.measurements(card=card, setting=setting):
            out.setdefault((r.kernel_id, r.sizes), []).append(
                (r.schedule_id, r.status, float(r.median_us) if r.status == "ok" else None))
    return out


def suggest(units: Sequence[Any], card: Card, setting: str, prior: Any | None,
            rows: Mapping[tuple[str, str], Sequence[Row]], top: int = 5) -> list[ForkSuggestions]:
    """Per distinct kernel of `units` (bench `Unit`s), its suggestions (`fork_suggestions`)."""
    seen: set[tuple[str, str]] = set()
    out = []
    for u in units:
        if u.key in seen:
            continue
        seen.add(u.key)
        out.append(fork_suggestions(u.program, u.sizes, u.sizes_text, u.kernel_id, card, setting, prior,
                                    rows.get(u.key, ()), top))
    return out


def render(forks: Sequence[ForkSuggestions], card: str, setting: str, db_label: str) -> str:
    """The text a person reads: uncovered forks first, then per fork its suggestions and why."""
    lines = [f"suggestions on {card}, setting {setting}, from the rows of {db_label}"]
    uncovered = [f for f in forks if f.uncovered]
    lines.append(f"forks no measurement covers: {len(uncovered)} of {len(forks)}")
    lines += [f"  uncovered: {f.kernel} {f.sizes} ({f.candidates} candidates)" for f in uncovered]
    for f in forks:
        best = f"best {f.best_us:.2f} us" if f.best_us is not None else "no working row"
        lines.append(f"{f.kernel} {f.sizes}: {f.rows} rows ({f.ok_rows} ok, {best}), {f.candidates} candidates")
        for k, s in enumerate(f.suggestions, 1):
            knobs = ",".join(f"{n}={v}" for n, v in sorted(s.knobs.items()))
            lines.append(f"  {k}. {knobs}  untried values {s.untried_values}: {'; '.join(s.why)}")
    return "\n".join(lines) + "\n"
