"""Forks of a lowered model: (kernel, rule, ordered options), one set per distinct kernel.

Rules (DESIGN section 4), each with its safe default first:
- `schedule`: the knob assignments of `emmy_core.knobs.candidates(kernel, card)`;
  only when a card is given.
- `split`: `KEEP_WHOLE`, then a `Decision` per split in `decisions.legal_splits(kernel)`.
- `cut:<seam>`: `KEEP_FUSED`, then the `Decision` whose pieces are the unfused kernels
  (`graph.cuts`); offered by the kernels the fusion passes made.
A minted piece is a kernel like any other: `kernel_forks(piece, card)` gives its forks.
"""

from __future__ import annotations

from dataclasses import dataclass

from emmy_core.graph import decisions
from emmy_core.graph.lower import Lowered
from emmy_core.ir.identity import kernel_id
from emmy_core.ir.nodes import Program
from emmy_core.targets.card import Card

KEEP_FUSED = "keep fused"
KEEP_WHOLE = "keep whole"
SCHEDULE = "schedule"
SPLIT = "split"

ForkOption = object  # a knob dict (schedule), KEEP_FUSED / KEEP_WHOLE, or a decisions.Decision


@dataclass(frozen=True)
class Fork:
    kernel: Program
    rule: str  # schedule | split | cut:<seam>
    options: tuple[ForkOption, ...]

    @property
    def default(self) -> ForkOption:
        return self.options[0]

    def option_label(self, i: int) -> str:
        opt = self.options[i]
        if isinstance(opt, decisions.Decision):
            return opt.decision
        if isinstance(opt, dict):
            return ",".join(f"{k}={v}" for k, v in sorted(opt.items()))
        return str(opt)


def kernel_forks(kernel: Program, card: Card | None = None,
                 cuts: tuple[decisions.Decision, ...] = ()) -> tuple[Fork, ...]:
    """The forks one kernel offers: its schedule (with a card), its splits, and each fusion cut it has."""
    out: list[Fork] = []
    if card is not None:
        from emmy_core.knobs import candidates

        out.append(Fork(kernel, SCHEDULE, tuple(candidates(kernel, card))))
    splits = decisions.legal_splits(kernel)
    if splits:
        out.append(Fork(kernel, SPLIT, (KEEP_WHOLE, *(decisions.apply(kernel, s) for s in splits))))
    for cut in cuts:
        out.append(Fork(kernel, cut.decision, (KEEP_FUSED, cut)))
    return tuple(out)


def forks(lowered: Lowered, card: Card | None = None) -> tuple[Fork, ...]:
    """Every fork of the lowered model, once per distinct kernel identity, in graph order."""
    seen: set[str] = set()
    out: list[Fork] = []
    for step in lowered.kernels:
        kid = kernel_id(step.program)
        if kid in seen:
            continue
        seen.add(kid)
        out.extend(kernel_forks(step.program, card, step.cuts))
    return tuple(out)
