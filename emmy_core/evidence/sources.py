"""The sources of evidence a fork is settled by, tried in order (DESIGN sections 1 and 10).

1. `measured.GoldenSource`: the reviewed choices (goldens) of a freeze, held in a `MemoryStore`;
2. `measured.LocalSource`: the local tuning database, opened read-only and lazily at the first fork
   that reaches it, skipped with a note when it is missing, locked or of another version;
3. `PriorSource`: the learned prior's scores (schedule forks) and prices (structural forks);
4. `RuleSource`: the rule's first option that is not blocked.

A source answers a fork (`Answer`) or says why it does not (`Miss`). Measured sources match by
the fork's key only (kernel identity, sizes, card, setting): no feature takes part. `Sources` is
the ordered list of one compile context, with the schedule forks it has enumerated.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emmy_core.evidence.resolution import MEASURED_TIERS, Measured
from emmy_core.graph.forks import (
    Fork,
    ForkKey,
    ForkOption,
    ScheduleOption,
    StructuralOption,
    emmy_options,
    schedule_fork,
)
from emmy_core.ir.identity import kernel_id
from emmy_core.ir.nodes import Program
from emmy_core.knobs.parallel import SIZE_DECIDED_KNOBS, suited
from emmy_core.knobs.route import is_library
from emmy_core.prior.geometry import knob_columns
from emmy_core.targets.card import Card


@dataclass(frozen=True)
class Answer:
    """A source's answer to a fork: the option and the evidence for it."""

    option: ForkOption
    evidence: str
    time_us: float | None = None
    score: float | None = None
    measurements: tuple[Measured, ...] = ()
    runner_up: str | None = None
    margin: float | None = None
    note: str = ""


@dataclass(frozen=True)
class Miss:
    """Why a source did not answer a fork."""

    why: str


def option_id(option: ForkOption) -> str:
    """What blocks an option: its schedule id, or its label (structural)."""
    return option.schedule_id if isinstance(option, ScheduleOption) else option.label


def sizes_of(key: ForkKey) -> dict[str, int]:
    """The key's sizes as a mapping (made by `format_sizes`, so no check; a product may pass 2**31)."""
    return {name: int(value) for name, value in (item.split("=") for item in key.sizes.split(",") if item)}


def piece_key(piece: Program, key: ForkKey) -> ForkKey:
    """The key of a decision's piece: its identity at the parent's sizes of its own dynamic axes."""
    return ForkKey.of(piece, sizes_of(key), key.card, key.setting)


def option_kernels(fork: Fork, option: StructuralOption) -> tuple[Program, ...]:
    """The kernels an option of a structural fork runs: the kernel itself, or the decision's pieces."""
    return (fork.kernel,) if option.decision is None else option.decision.pieces


def relative(runner: float | None, chosen: float | None) -> float | None:
    if runner is None or chosen is None or chosen <= 0:
        return None
    return runner / chosen - 1.0


@dataclass
class Sources:
    """The ordered sources of a compile context (card and setting), and the notes they left."""

    card: Card
    setting: str
    items: tuple[Source, ...]
    notes: list[str] = field(default_factory=list)
    library: bool = True  # a matrix product's fork offers torch's own kernel first (`knobs.route`)
    _schedule_forks: dict[str, Fork] = field(default_factory=dict, repr=False)

    def schedule_fork(self, kernel: Program) -> Fork:
        """The kernel's schedule fork on this card, enumerated lazily and kept by identity (pools ignore sizes)."""
        kid = kernel_id(kernel)
        if kid not in self._schedule_forks:
            self._schedule_forks[kid] = schedule_fork(kernel, self.card, lazy=True, library=self.library)
        return self._schedule_forks[kid]

    def emmy_only(self) -> Sources:
        """The same sources offering Emmy's kernels only (`library=False`): what the group race's own contender
        settles with; the sources themselves are shared (one prior loaded, one database opened)."""
        return Sources(self.card, self.setting, self.items, list(self.notes), library=False)

    def measured(self) -> tuple[Source, ...]:
        return tuple(s for s in self.items if s.tier in MEASURED_TIERS)

    def measured_price(self, kernel: Program, key: ForkKey) -> Measured | None:
        """The first measured source's price of `kernel` at `key` (what a priced sum takes from measurements)."""
        for s in self.measured():
            if s.unavailable() is None:
                m = s.price(kernel, key, self.library)
                if m is not None:
                    return m
        return None

    def forget(self, kernel_ids: Sequence[str]) -> None:
        """Every source drops what it read of these kernels (`Source.forget`)."""
        for s in self.items:
            s.forget(kernel_ids)

    def close(self) -> list[str]:
        """Releases what the sources hold open (the database's lock); returns why any source was skipped."""
        skipped = []
        for s in self.items:
            why = getattr(s, "skipped", None)
            if why:
                skipped.append(why)
            s.close()
        return skipped


class Source(ABC):
    """One tier of evidence."""

    tier: str = ""
    label: str = ""

    def unavailable(self) -> str | None:
        """Why this source cannot answer anything now (None: it can)."""
        return None

    def price(self, kernel: Program, key: ForkKey, library: bool = False) -> Measured | None:
        """The measured price of `kernel` at `key` in this source (None: not measured here)."""
        return None

    @abstractmethod
    def schedule(self, fork: Fork, key: ForkKey, blocked: Mapping[str, str], sources: Sources) -> Answer | Miss: ...

    @abstractmethod
    def structural(self, fork: Fork, key: ForkKey, blocked: Mapping[str, str],
                   sources: Sources) -> Answer | Miss: ...

    def forget(self, kernel_ids: Sequence[str]) -> None:  # noqa: B027 - most sources cache no rows
        """Drops what was read of these kernels, so that rows recorded since are seen (a tune during a compile)."""

    def close(self) -> None:  # noqa: B027 - most sources hold nothing open
        """Releases what the source holds open (a database connection)."""


class Unavailable(Source):
    """A tier that has nothing to offer in this context (no freeze for the card), saying why."""

    def __init__(self, tier: str, why: str) -> None:
        self.tier = tier
        self.label = ""
        self.why = why

    def unavailable(self) -> str | None:
        return self.why

    def schedule(self, fork: Fork, key: ForkKey, blocked: Mapping[str, str], sources: Sources) -> Answer | Miss:
        return Miss(self.why)

    def structural(self, fork: Fork, key: ForkKey, blocked: Mapping[str, str],
                   sources: Sources) -> Answer | Miss:
        return Miss(self.why)


# ---- the prior and the rule ------------------------------------------------------------------


def within_sight(prior: Any, options: list[ScheduleOption], fork: Fork) -> list[ScheduleOption]:
    """The options that agree with the rule's first option on every knob the prior has no feature for (a knob
    appended after its fit, as the CPU matmul's `dot`): what it cannot see it cannot rank, so the rule decides
    it (scored blind, an AMX option of a bf16 product lost to an fma one the trees liked for other knobs); the
    first option alone where it sets such a knob (an instruction the prior never saw). All of them where none
    agrees (the first blocked) or the prior sees every knob. Whether B is streamed (`prefetch_l2`) the sizes
    decide (`busy_at`), not the first option, which is one of a pool for every size."""
    unseen = getattr(prior, "unseen_knobs", frozenset)() - SIZE_DECIDED_KNOBS  # those `busy_at` decided
    first = next((o for o in fork.options if isinstance(o, ScheduleOption) and "library" not in o.knobs), None)
    if not unseen or first is None:
        return options
    if any(k in first.knobs for k in unseen) and first in options:  # (where it keeps the threads busy: busy_at)
        # the first option names an instruction the prior never saw (`dot=dpbf16`, `amx`): how every other knob
        # plays with it is unseen too, so the rule's option stands until a measurement says otherwise (ranked
        # among dpbf16 options by what it learned of fma ones, it chose a 256-deep pass: 4.1-4.4 ms a bf16 MLP
        # product at 128 x 4864 x 896 on a Zen 4 EPYC, against the rule's 3.2)
        return [first]
    want = {k: first.knobs.get(k) for k in unseen}
    kept = [o for o in options if all(o.knobs.get(k) == v for k, v in want.items())]
    return kept or options


def busy_at(options: list[ScheduleOption], kernel: Program, key: ForkKey) -> list[ScheduleOption]:
    """The options that keep every thread busy at the key's sizes, whose micro-kernel is no taller than its rows,
    and that stream B where the rows are few enough, else not (`knobs.parallel`): one that leaves a thread idle
    runs as a finer one would with fewer threads, one taller than the rows computes rows that do not exist, and
    the prior has no feature for the stream (`prefetch_l2`), so the rule's regime decides it rather than leave it
    unlearnt."""
    if not options:
        return options
    sizes = sizes_of(key)
    return [options[i] for i in suited(kernel, sizes, [o.knobs for o in options])]


class PriorSource(Source):
    """Tier 3: the prior ranks a schedule fork's options and prices a structural fork's kernels.

    A structural option is priced as the sum over its kernels of the first measured source's
    price, else the prior's price of the kernel's top-ranked schedule (seed limitation 4: where
    nothing measured prices a piece, the prior does).
    """

    tier = "prior"

    def __init__(self, prior: Any | None, label: str, reason: str = "") -> None:
        self.prior = prior
        self.label = label
        self.reason = reason
        self._prices: dict[ForkKey, tuple[float, str]] = {}
        # a pool's feature rows and scores, built once per key (pricing its top reuses the row)
        # (scores, rows, the trees' own scores where the prior gives them: `Prior.scored`)
        self._scored: dict[tuple[ForkKey, tuple[str, ...]], tuple[list[float], np.ndarray, np.ndarray | None]] = {}
        self._knobs: dict[tuple[str, ...], dict[str, np.ndarray]] = {}

    def unavailable(self) -> str | None:
        return None if self.prior is not None else f"no prior: {self.reason}"

    def _scored_pool(self, kernel: Program, key: ForkKey, options: Sequence[ScheduleOption],
                     card: Card) -> tuple[list[float], np.ndarray, np.ndarray | None]:
        ids = tuple(o.schedule_id for o in options)
        memo = (key, ids)
        if memo not in self._scored:
            candidates = [dict(o.knobs) for o in options]
            if ids not in self._knobs:  # the pool's knobs encoded once, for every size it is scored at
                self._knobs[ids] = knob_columns(candidates)
            rows = self.prior.rows(kernel, sizes_of(key), card, key.setting, candidates, self._knobs[ids])
            both = getattr(self.prior, "scored", None)  # a prior of another make may score only
            shipped, own = both(rows, card) if both is not None else (self.prior.score_rows(rows, card), None)
            out = [float(s) for s in shipped]
            if len(out) != len(options):
                raise ValueError(f"the prior gave {len(out)} scores for {len(options)} candidates")
            self._scored[memo] = (out, rows, own)
        return self._scored[memo]

    def _scores(self, kernel: Program, key: ForkKey, options: Sequence[ScheduleOption], card: Card) -> list[float]:
        return self._scored_pool(kernel, key, options, card)[0]

    def schedule(self, fork: Fork, key: ForkKey, blocked: Mapping[str, str], sources: Sources) -> Answer | Miss:
        library: list[ScheduleOption] = []
        if is_library(fork.default.knobs if isinstance(fork.default, ScheduleOption) else {}) \
                and option_id(fork.default) not in blocked:
            if not getattr(self.prior, "sees_library", lambda _card: False)(sources.card):
                # whether Emmy's kernel beats torch's own on this card was never measured here nor learnt on this
                # card (`Prior.sees_library`): without a measurement the product runs as torch runs it
                return Miss("the prior never saw torch's kernel measured on this card: the library route is "
                            "settled by measurement")
            assert isinstance(fork.default, ScheduleOption)
            library = [fork.default]  # ranked beside Emmy's: the prior learnt where the library wins here
        options = [o for o in emmy_options(fork) if o.schedule_id not in blocked]
        options = library + within_sight(self.prior, busy_at(options, fork.kernel, key), fork)
        if not options:
            return Miss("every option is blocked")
        scores = self._scores(fork.kernel, key, options, sources.card)
        order = sorted(range(len(options)), key=lambda i: (-scores[i], i))
        top = order[0]
        runner = order[1] if len(order) > 1 else None
        return Answer(options[top], f"prior score {scores[top]:.4g} (top of {len(options)})", None, scores[top], (),
                      options[runner].label if runner is not None else None,
                      scores[top] - scores[runner] if runner is not None else None)

    def _prior_price(self, kernel: Program, key: ForkKey, sources: Sources) -> tuple[float, str]:
        if key not in self._prices:
            options = list(emmy_options(sources.schedule_fork(kernel)))
            if not options:
                raise ValueError(f"{kernel.name} has no schedule options on {sources.card.name}")
            options = within_sight(self.prior, busy_at(options, kernel, key), sources.schedule_fork(kernel))
            scores, rows, own = self._scored_pool(kernel, key, options, sources.card)
            top = max(range(len(options)), key=lambda i: (scores[i], -i))
            if own is None:
                price = self.prior.price_rows(kernel, sources.card, rows[top:top + 1], np.array([scores[top]]))
            else:  # the trees' own score of the top row, kept from scoring the pool
                price = self.prior.price_rows(kernel, sources.card, rows[top:top + 1], np.array([scores[top]]),
                                              own=own[top:top + 1])
            self._prices[key] = (float(price[0]), options[top].label)
        return self._prices[key]

    def structural(self, fork: Fork, key: ForkKey, blocked: Mapping[str, str],
                   sources: Sources) -> Answer | Miss:
        first = sources.schedule_fork(fork.kernel).default
        if isinstance(first, ScheduleOption) and is_library(first.knobs):
            # kept whole, torch would run this product; the prior prices Emmy's kernels only, so a split or a cut
            # that trades torch's kernel for Emmy's is settled by measurement, like the route itself
            return Miss("the prior prices Emmy's kernels, not torch's: a product torch would run is split or cut "
                        "only on measurement")
        priced: list[tuple[float, int, StructuralOption, tuple[Measured, ...], int]] = []
        for i, o in enumerate(fork.options):
            if not isinstance(o, StructuralOption) or o.label in blocked:
                continue
            total, rows, guessed = 0.0, [], 0
            for k in option_kernels(fork, o):
                kk = key if o.decision is None else piece_key(k, key)
                m = sources.measured_price(k, kk)
                if m is not None:
                    total += m.median_us
                    rows.append(m)
                else:
                    total += self._prior_price(k, kk, sources)[0]
                    guessed += 1
            priced.append((total, i, o, tuple(rows), guessed))
        if not priced:
            return Miss("every option is blocked")
        priced.sort(key=lambda p: (p[0], p[1]))
        total, _, option, rows, guessed = priced[0]
        runner = priced[1] if len(priced) > 1 else None
        ev = f"priced {total:.4g} us ({guessed} kernel(s) by the prior, {len(rows)} measured)"
        return Answer(option, ev, total, None, rows, runner[2].label if runner else None,
                      relative(runner[0] if runner else None, total))


class RuleSource(Source):
    """Tier 4: the rule's first option (the safe default), or the next one when it is blocked."""

    tier = "first"
    label = "rule"

    def _first(self, fork: Fork, blocked: Mapping[str, str]) -> Answer | Miss:
        if option_id(fork.default) not in blocked:  # known without enumerating the pool
            return Answer(fork.default, "the rule's first option (the safe default)")
        for i, o in enumerate(fork.options):
            if option_id(o) not in blocked:
                what = "the rule's first option (the safe default)" if i == 0 else \
                    f"the rule's option {i + 1} (the ones before it are blocked)"
                return Answer(o, what)
        return Miss("every option is blocked")

    def schedule(self, fork: Fork, key: ForkKey, blocked: Mapping[str, str], sources: Sources) -> Answer | Miss:
        return self._first(fork, blocked)

    def structural(self, fork: Fork, key: ForkKey, blocked: Mapping[str, str],
                   sources: Sources) -> Answer | Miss:
        return self._first(fork, blocked)
