"""Settling every fork of a lowered model at one size: structural forks first, then the schedule of what runs.

For each kernel (once per `ForkKey`), its structural forks (splits, fusion cuts) are resolved;
when one or more choose a decision, the one answered by the highest tier (then the cheapest)
is applied and the others are kept in the record as superseded. A decision's pieces are kernels
like any other and are settled the same way, recursively (to `max_depth`); a decision whose
pieces cannot be settled is blocked and its fork resolved again. A kernel that runs whole has
its schedule fork resolved, every option checked by the caller's `check` (the compile builds it).
The result is a `KernelPlan` tree per kernel step; the record is the resolutions of the plans.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from emmy_core.evidence.measured import GoldenSource
from emmy_core.evidence.resolution import TIERS, Resolution, ResolutionError, StaleRecording
from emmy_core.evidence.resolve import Check, resolve
from emmy_core.evidence.sources import Sources
from emmy_core.graph.decisions import Decision
from emmy_core.graph.forks import (
    Fork,
    ForkKey,
    ForkOption,
    ScheduleOption,
    StructuralOption,
    structural_forks,
)
from emmy_core.ir.identity import kernel_id
from emmy_core.ir.nodes import Program
from emmy_core.ir.sizes import format_sizes, size_bucket

if TYPE_CHECKING:
    from emmy_core.graph.lower import Lowered

MAX_DEPTH = 2  # decisions on pieces of decisions; deeper pieces keep their whole form


@dataclass(frozen=True)
class KernelPlan:
    """How one kernel runs at its sizes: whole with a schedule, or as a decision's pieces."""

    key: ForkKey
    program: Program
    sizes: dict[str, int]  # the kernel's dynamic axis sizes
    schedule: ScheduleOption | None
    decision: Decision | None
    pieces: tuple[KernelPlan, ...]
    resolutions: tuple[Resolution, ...]  # this kernel's forks: structural ones, then its schedule
    bucket_of: str = ""  # the sizes of the settle whose choices it takes (`resized`); "" where settled itself

    def walk(self) -> Iterator[KernelPlan]:
        yield self
        for p in self.pieces:
            yield from p.walk()


def _own_sizes(program: Program, sizes: Mapping[str, int]) -> dict[str, int]:
    return {a.name: int(sizes[a.name]) for a in program.dynamic_axes}


def resized(plan: KernelPlan, sizes: Mapping[str, int], card: str, setting: str, why: str,
            key: ForkKey | None = None) -> KernelPlan:
    """`plan` (settled at other sizes) at `sizes`: the same choices, keys and sizes of the new ones, each
    resolution noting `why` (a pool depends on the kernel and the card only, so every choice is an option here).
    `key`: the plan's key at `sizes` where the caller has it."""
    own = _own_sizes(plan.program, sizes)
    if key is None:
        key = ForkKey.of(plan.program, own, card, setting)
    notes = tuple(r.at(key, why) for r in plan.resolutions)
    pieces = tuple(resized(p, own, card, setting, why) for p in plan.pieces)
    return KernelPlan(key, plan.program, own, plan.schedule, plan.decision, pieces, notes,
                      plan.bucket_of or plan.key.sizes)


class ModelResolver:
    """Settles kernels in one compile context; plans are shared by key across steps and sizes.

    With `buckets`, a kernel at a size of a bucket (`ir.sizes.size_bucket`) where it was settled before, and where
    no measurement speaks of this exact size, takes that settle's choices instead of settling again: what keeps a
    server's every new prompt length cheap (the backend's groups). A measured row at the size is settled as ever.
    Such a plan is kept for the one `model` call that made it, not in `plans`: it is the bucket's, made again in
    microseconds, and a server meets thousands of lengths.
    """

    def __init__(self, sources: Sources, check: Check | None = None, max_depth: int = MAX_DEPTH,
                 buckets: bool = False) -> None:
        self.sources = sources
        self.check = check
        self.max_depth = max_depth
        self.buckets = buckets
        self.plans: dict[ForkKey, KernelPlan] = {}
        self._bucketed: dict[tuple[str, tuple[tuple[str, int], ...]], KernelPlan] = {}  # first settle per bucket
        self._resized: dict[ForkKey, KernelPlan] = {}  # the bucket's plans made for the current `model` call
        self._forks: dict[str, tuple[Fork, tuple[Fork, ...]]] = {}  # per identity: options do not depend on sizes
        self._ran: dict[tuple[int, str], list[KernelPlan] | None] = {}  # `_ran_at`, per lowered model and sizes

    def forks_of(self, program: Program, cuts: tuple[Decision, ...], depth: int) -> tuple[Fork, tuple[Fork, ...]]:
        """The kernel's schedule fork (enumerated lazily) and its structural forks, once per identity."""
        kid = kernel_id(program)
        if kid not in self._forks:
            self._forks[kid] = (self.sources.schedule_fork(program),
                                structural_forks(program, cuts) if depth < self.max_depth else ())
        return self._forks[kid]

    def _checker(self, depth: int, sizes: dict[str, int]) -> Check:
        def check(fork: Fork, option: ForkOption) -> str | None:
            if isinstance(option, StructuralOption):
                if option.decision is None:
                    return None
                try:
                    for piece in option.decision.pieces:
                        self.kernel(piece, sizes, (), depth + 1)
                except ResolutionError as exc:
                    return f"a piece cannot be settled: {str(exc)[:400]}"
                return None
            return self.check(fork, option) if self.check is not None else None

        return check

    def kernel(self, program: Program, sizes: Mapping[str, int], cuts: tuple[Decision, ...] = (),
               depth: int = 0) -> KernelPlan:
        """The plan of `program` at `sizes` (a superset of its dynamic axes is fine)."""
        own = _own_sizes(program, sizes)
        key = ForkKey.of(program, own, self.sources.card.name, self.sources.setting)
        bucket = (key.kernel_id, size_bucket(own))
        if key in self.plans:  # settled here, or handed in settled (`Compiled._build_ahead`): its bucket's too
            plan = self.plans[key]
            if self.buckets and own:
                self._bucketed.setdefault(bucket, plan)
            return plan
        if key in self._resized:
            return self._resized[key]
        if self.buckets and own and bucket in self._bucketed and not self._measured_at(program, key):
            first = self._bucketed[bucket]
            plan = resized(first, own, key.card, key.setting,
                           f"as settled at {first.key.sizes} (the same size bucket)", key)
            self._resized[key] = plan
            return plan
        check = self._checker(depth, own)
        sched, structural = self.forks_of(program, cuts, depth)
        results = [resolve(fork, key, self.sources, check) for fork in structural]
        decided = [r for r in results if isinstance(r.choice, StructuralOption) and r.choice.decision is not None]
        chosen: Resolution | None = None
        if decided:
            chosen = min(decided, key=lambda r: (TIERS.index(r.tier), r.time_us if r.time_us is not None
                                                 else math.inf))
            results = [r if r is chosen or r not in decided else
                       replace(r, applied=False, note=f"superseded by {chosen.label} ({chosen.tier})")
                       for r in results]
        if chosen is not None:
            decision = chosen.choice.decision  # type: ignore[union-attr]
            assert decision is not None
            pieces = tuple(self.kernel(p, own, (), depth + 1) for p in decision.pieces)
            plan = KernelPlan(key, program, own, None, decision, pieces, tuple(results))
        else:
            res = resolve(sched, key, self.sources, check)
            assert isinstance(res.choice, ScheduleOption)
            plan = KernelPlan(key, program, own, res.choice, None, (), (*results, res))
        self.plans[key] = plan
        self._bucketed.setdefault(bucket, plan)
        return plan

    def takes_bucket(self, lowered: Lowered, graph_sizes: Mapping[str, int], first: Mapping[str, int]) -> bool:
        """Whether at `graph_sizes` every kernel of `lowered` would take the very choices it took at `first` (a size
        settled here): each kernel's size bucket there was first settled by the plan `first` ran, and no measurement
        speaks of these exact sizes. Then what was made for `first` computes at `graph_sizes` too."""
        if not self.buckets:
            return False
        made = self._ran_at(lowered, first)
        if made is None:
            return False
        at = dict(graph_sizes)
        card, setting = self.sources.card.name, self.sources.setting
        for step, plan in zip(lowered.kernels, made, strict=True):
            own = _own_sizes(step.program, step.sizes(at))
            if not own:  # a kernel without dynamic axes has one plan at every size
                continue
            if self._bucketed.get((plan.key.kernel_id, size_bucket(own))) is not plan:
                return False
            key = ForkKey.of(step.program, own, card, setting)
            if key in self.plans:
                if self.plans[key] is not plan:  # settled at these sizes with choices of their own
                    return False
            elif self._measured_at(step.program, key):
                return False
        return True

    def _ran_at(self, lowered: Lowered, first: Mapping[str, int]) -> list[KernelPlan] | None:
        """Per kernel step, the plan whose choices it ran with at `first` (its bucket's first settle), or None where
        one had choices of its own there or was not settled. Kept once found: plans are only ever added, and a
        bucket's first settle stays its first."""
        at = dict(first)
        text = (id(lowered), format_sizes(at))
        if text in self._ran:
            return self._ran[text]
        made: list[KernelPlan] = []
        for step in lowered.kernels:
            own = _own_sizes(step.program, step.sizes(at))
            key = ForkKey.of(step.program, own, self.sources.card.name, self.sources.setting)
            plan = self._bucketed.get((key.kernel_id, size_bucket(own))) if own else self.plans.get(key)
            if plan is None:  # not settled yet: asked again later
                return None
            if key in self.plans and self.plans[key] is not plan:  # choices of its own: never the bucket's
                self._ran[text] = None
                return None
            made.append(plan)
        self._ran[text] = made
        return made

    def _measured_at(self, program: Program, key: ForkKey) -> bool:
        """Whether a measured source (golden, local) has a row of `program` at exactly the key's sizes."""
        return self.sources.measured_price(program, key) is not None

    def model(self, lowered: Lowered, graph_sizes: Mapping[str, int]) -> list[KernelPlan]:
        """One plan per kernel step of `lowered` at the model's sizes (steps of one kernel share a plan)."""
        self._resized.clear()
        try:
            return [self.kernel(step.program, step.sizes(dict(graph_sizes)), step.cuts) for step in lowered.kernels]
        finally:
            self._resized.clear()


def resolutions_of(plans: list[KernelPlan]) -> list[Resolution]:
    """Every resolution of the plans (pieces included), each key and rule once, in plan order."""
    seen: set[tuple[ForkKey, str]] = set()
    out: list[Resolution] = []
    for top in plans:
        for plan in top.walk():
            for r in plan.resolutions:
                if (r.key, r.rule) not in seen:
                    seen.add((r.key, r.rule))
                    out.append(r)
    return out


def stale_recordings(sources: Sources, plans: list[KernelPlan]) -> list[StaleRecording]:
    """Goldens of the freeze whose kernel this compile no longer makes (same name, new identity).

    A golden is evidence only for its exact identity; when the compiler changes a kernel's loop
    program, the recording is left behind. Naming it (with what replaced it) is what lets a
    person restamp or re-measure it instead of silently deploying on the prior.
    """
    current: dict[str, str] = {}  # kernel name -> identity this compile made
    for top in plans:
        for plan in top.walk():
            current.setdefault(plan.program.name, plan.key.kernel_id)
    ids = set(current.values())
    out: list[StaleRecording] = []
    for source in sources.measured():
        if not isinstance(source, GoldenSource) or source.unavailable() is not None:
            continue
        for kid, name, sizes, choice in source.recordings():
            if kid in ids or name not in current:
                continue
            out.append(StaleRecording(kid, name, sizes, sources.setting, choice, source.label,
                                      f"no longer made: this compiler makes {name} as {current[name][:12]}"))
    return out
