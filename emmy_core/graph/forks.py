"""Forks of a lowered model: (kernel, rule, ordered typed options), keyed by `ForkKey`.

Rules (DESIGN section 4), each with its safe default first:
- `schedule`: a `ScheduleOption` (knobs and `schedule_id`) per assignment of
  `emmy_core.knobs.candidates(kernel, card)`; only when a card is given.
- `split`: `StructuralOption.keep(KEEP_WHOLE)`, then one per split in `decisions.legal_splits(kernel)`.
- `cut:<seam>`: `StructuralOption.keep(KEEP_FUSED)`, then the option whose `Decision` has the
  unfused kernels as pieces (`graph.cuts`); offered by the kernels the fusion passes made.
A minted piece is a kernel like any other: `kernel_forks(piece, card)` gives its forks.

A fork is settled for one compile context, its `ForkKey` (kernel identity, canonical sizes,
card name, setting): the same four values key a measurement pool in the store, so the
evidence for a fork is found by this key and nothing else. This module imports without
torch (the evidence layer and the release gate use it on machines that resolve only).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from emmy_core.graph import decisions
from emmy_core.ir.identity import kernel_id
from emmy_core.ir.nodes import Program
from emmy_core.ir.sizes import format_sizes
from emmy_core.knobs.vocab import canonical_knobs, schedule_id_of_text
from emmy_core.targets.card import Card

if TYPE_CHECKING:  # lowering imports torch; forks are listed from a lowered model without importing it
    from emmy_core.graph.lower import Lowered

KEEP_FUSED = "keep fused"
KEEP_WHOLE = "keep whole"
SCHEDULE = "schedule"
SPLIT = "split"


@dataclass(frozen=True)
class ForkKey:
    """The compile context a fork is settled in: exact kernel identity, canonical sizes, card name, setting."""

    kernel_id: str
    sizes: str  # canonical text of the kernel's dynamic axis sizes (`B=8,S=128`; '' when static)
    card: str
    setting: str

    @classmethod
    def of(cls, kernel: Program, sizes: Mapping[str, int], card: str, setting: str) -> ForkKey:
        """The key of `kernel` at `sizes` (only its own dynamic axes are kept) on `card` under `setting`."""
        dyn = {a.name for a in kernel.dynamic_axes}
        return cls(kernel_id(kernel), format_sizes({k: int(v) for k, v in sizes.items() if k in dyn}), card, setting)

    def text(self) -> str:
        return f"{self.kernel_id[:12]} {self.sizes or '-'} on {self.card} ({self.setting})"


@dataclass(frozen=True)
class ScheduleOption:
    """An option of a schedule fork: a knob assignment and its digest (the store's `schedule_id`)."""

    knobs: Mapping[str, object] = field(hash=False)
    schedule_id: str

    @classmethod
    def of(cls, knobs: Mapping[str, object]) -> ScheduleOption:
        copy = dict(knobs)
        return cls(copy, schedule_id_of_text(canonical_knobs(copy)))

    @property
    def label(self) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(self.knobs.items()))


@dataclass(frozen=True)
class StructuralOption:
    """An option of a structural fork: keep the kernel as it is (`decision` None), or a `Decision`."""

    label: str  # KEEP_WHOLE / KEEP_FUSED, or the decision's text (`split:K=2`, `cut:epilogue`)
    decision: decisions.Decision | None = field(default=None, compare=False)

    @classmethod
    def keep(cls, label: str) -> StructuralOption:
        return cls(label, None)

    @classmethod
    def of(cls, decision: decisions.Decision) -> StructuralOption:
        return cls(decision.decision, decision)

    @property
    def keeps(self) -> bool:
        return self.decision is None


ForkOption = ScheduleOption | StructuralOption


class Fork:
    """(kernel, rule, ordered options); a schedule fork may enumerate its options on first use.

    The rule's first option is known without enumerating (`first`); the whole pool is built only
    when something needs it (the prior ranks it; a blocked first option moves to the next).
    """

    __slots__ = ("_enumerate", "_first", "_options", "kernel", "rule")

    def __init__(self, kernel: Program, rule: str, options: tuple[ForkOption, ...] | None = None, *,
                 enumerator: Callable[[], tuple[ForkOption, ...]] | None = None,
                 first: ForkOption | None = None) -> None:
        if options is None and enumerator is None:
            raise ValueError("a fork needs its options or a way to enumerate them")
        self.kernel = kernel
        self.rule = rule
        self._options = options
        self._enumerate = enumerator
        self._first = first

    @property
    def options(self) -> tuple[ForkOption, ...]:
        if self._options is None:
            assert self._enumerate is not None
            self._options = tuple(self._enumerate())
        return self._options

    @property
    def enumerated(self) -> bool:
        return self._options is not None

    @property
    def default(self) -> ForkOption:
        return self._first if self._first is not None and self._options is None else self.options[0]

    @property
    def structural(self) -> bool:
        return self.rule != SCHEDULE

    def option_label(self, i: int) -> str:
        return self.options[i].label

    def key(self, sizes: Mapping[str, int], card: str, setting: str) -> ForkKey:
        return ForkKey.of(self.kernel, sizes, card, setting)

    def __repr__(self) -> str:
        n = len(self._options) if self._options is not None else "?"
        return f"Fork({self.kernel.name}, {self.rule}, {n} options)"


def schedule_fork(kernel: Program, card: Card, lazy: bool = False, library: bool = True) -> Fork:
    """The schedule fork of `kernel` on `card`: its candidates in rule order (first: the safe default).

    A matrix product's first option is the library route (`emmy_core.knobs.route`: the product as torch runs
    it, correct everywhere and never slower than not compiling); Emmy's own candidates follow it in their rule's
    order. `library=False` leaves the library route out (Emmy's own kernels only: to measure or test them).
    `lazy`: the candidates are enumerated only when something reads `options`.
    """
    from emmy_core.knobs import candidate_options, first_option, view
    from emmy_core.knobs.route import library_knobs, routes

    v = view(kernel)
    library = (ScheduleOption.of(library_knobs()),) if library and routes(v) else ()

    def enumerate_() -> tuple[ForkOption, ...]:  # `candidates`, with the canonical text already made
        return library + tuple(ScheduleOption(dict(o.knobs), schedule_id_of_text(o.canonical))
                               for o in candidate_options(kernel, card) if o.problem is None)

    if lazy:
        first = library[0] if library else ScheduleOption.of(first_option(v, card))
        return Fork(kernel, SCHEDULE, enumerator=enumerate_, first=first)
    return Fork(kernel, SCHEDULE, enumerate_())


def emmy_options(fork: Fork) -> tuple[ScheduleOption, ...]:
    """A schedule fork's options that are Emmy's own generated code (the library route left out)."""
    from emmy_core.knobs.route import is_library

    return tuple(o for o in fork.options if isinstance(o, ScheduleOption) and not is_library(o.knobs))


def structural_forks(kernel: Program, cuts: tuple[decisions.Decision, ...] = ()) -> tuple[Fork, ...]:
    """The kernel's split fork (when it offers splits) and one fork per fusion cut it has."""
    out: list[Fork] = []
    splits = decisions.legal_splits(kernel)
    if splits:
        out.append(Fork(kernel, SPLIT, (StructuralOption.keep(KEEP_WHOLE),
                                         *(StructuralOption.of(decisions.apply(kernel, s)) for s in splits))))
    for cut in cuts:
        out.append(Fork(kernel, cut.decision, (StructuralOption.keep(KEEP_FUSED), StructuralOption.of(cut))))
    return tuple(out)


def kernel_forks(kernel: Program, card: Card | None = None,
                 cuts: tuple[decisions.Decision, ...] = ()) -> tuple[Fork, ...]:
    """The forks one kernel offers: its schedule (with a card), its splits, and each fusion cut it has."""
    head = (schedule_fork(kernel, card),) if card is not None else ()
    return head + structural_forks(kernel, cuts)


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
