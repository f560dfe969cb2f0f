"""Search strategies: given a pool and what was measured of it so far, the next candidates to measure.

The seam where the search sits beside the cost model (as TVM MetaSchedule keeps a
`SearchStrategy` beside its cost model). A strategy sees a `SearchPool` (the candidates in
the rule's order, the prior's scores, other cards' evidence) and the `Trial`s measured so far
(the time of what was chosen, None for a failure); it never sees a time it did not choose
(`emmy_core.search.replay` holds the times and checks it). Strategies:

- `first`: the rule's order;
- `random`: the seeded sample a tune has always taken (the first option, then a seeded sample
  of the rest, in pool order; `emmy_core.knobs.sample_candidates`);
- `prior`: the prior's order, re-ranked after each measurement with this card's rows as evidence.
  Sources of order: the prior, and each other card that measured the same kernel (the pool's
  `evidence`; a tune's pools have none yet). Each is weighted by how well its order agrees with
  the times measured here so far (Spearman's rank correlation, shrunk over PSEUDO_ROWS rows towards
  its belief, squared): a nearest-card lookup that sharpens as measurements arrive (collaborative
  filtering), so a card unlike this one stops steering. The prior (or the rule's order without one)
  is believed at BELIEF; another card at EVIDENCE_BELIEF, none, beside a prior (BELIEF without).
  So before any row the prior alone orders the pool: it was selected on cards it never saw against
  these lookups, where one card's order, or a mean of their ranks, was not (replayed on the hub's
  unseen cards, evidence credited as the prior moved budget 1 from the prior's own pick's 1.136 to
  1.204, budget 8 from 1.059 to 1.077; the peer replay moved by at most 0.013 either way). The
  blended order stands for a spread of PRIOR_SCALE only as far as the best-trusted source agrees
  with this card's rows (`agreement`): where every source is contradicted, the knob model leads
  (replayed on this CPU's exhaustive tune, 9 pools: budget 8 1.167 → 1.097, budget 32 1.063 →
  1.007, where random reaches 1.123 and 1.031; the peer and hub replays moved by at most 0.014 at
  budget 8 either way). The blended rank, on a logit scale, is the expected -log(time); once
  WARMUP candidates are measured (the first option and the prior's top 3), a tiny on-card model
  adds what the working rows imply per knob value
  (Bayesian linear regression of their residuals on one-hot knob values, KNOB_SPREAD a value's
  prior effect, NOISE a row's) and, where other cards measured the pool, of the knobs working
  together, with the amplitude and decay their rows show (`emmy_core.search.knob_model`: replayed,
  budget 8 on the peer pools 1.057 → 1.038, as a tune runs it 1.061 → 1.057, the hub's unseen
  cards 1.077 → 1.071, this CPU's pools, which no other card measured, unchanged), and the next
  candidate is the one whose expectation plus OPTIMISM standard deviations is highest (an upper
  confidence bound: untried values of a knob keep their doubt, and where the knobs work together,
  candidates far from every row keep more). Candidates sharing a failed candidate's tile shape are
  dropped. On a pool no other card measured (`informed`: no transfer column, no evidence), the
  prior's order is the rule's or the ranker's guess for a card it never saw, its top (spread over
  knob values by the prior: `emmy_core.prior.ranking.diversified`) a guess still: there the WARMUP picks after the warmup also
  count NOVELTY per knob value no row has tried yet, so the knob model learns from rows that differ.
  Replayed, this took budget 8 from 1.515 to 1.289 (budget 16 from 1.256 to 1.108) on an exhaustive
  tune of this AVX2 CPU (7 pools), and from 2.880 to 1.740 on the peer pools stripped of prior and
  evidence; on the peer pools with their evidence nothing changes. With the prior's top spread it still
  earns its place (this AVX-512 CPU's exhaustive tune, 9 pools: budget 8 1.090 with it, 1.208 without);
- `explore`: `prior`, with one measurement in EXPLORE_EVERY spent where the prior is least
  sure: the candidate other cards' measurements (the transfer evidence) rank highest among
  those the prior ranks low; without such evidence, the candidate with the most knob values no
  measurement has tried yet, among the prior's top half (seed 09, limitation 8: a fork no
  bench ever took is silence that reads as health).
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import numpy as np

from emmy_core.search.knob_model import ADDITIVE, Interaction, interaction, knob_codes, knob_design, posterior

STRATEGIES = ("first", "random", "prior", "explore")


def check_tune(budget: int | None, strategy: str | None) -> None:
    """ValueError for an unknown strategy or a budget that is not a positive whole number (None: every candidate)."""
    if strategy is not None and strategy not in STRATEGIES:
        raise ValueError(f"unknown search strategy {strategy!r}; known: {', '.join(STRATEGIES)}")
    if budget is not None and (isinstance(budget, bool) or not isinstance(budget, int) or budget < 1):
        raise ValueError(f"budget {budget!r}: give a positive number of candidates per kernel, or None for all")
SHAPE_KNOBS = frozenset({"block_m", "block_n", "block_k", "block", "tile_m", "tile_n", "tile_k"})
_EXTERN_SHAPE = re.compile(r"extern\.(block_size|tile_size|block|tile)", re.IGNORECASE)
WARMUP = 4  # measurements (the first option and the prior's top 3) before the card's own knob model re-ranks the rest
BELIEF = 0.5  # rank agreement with this card the prior is credited before any row
EVIDENCE_BELIEF = 0.0  # the same for another card's order beside a prior: none until this card's rows agree
PSEUDO_ROWS = 4.0  # how many of this card's rows that credit weighs as
MIN_TRUST = 0.02  # a source that disagrees keeps this much (squared) weight
PRIOR_SCALE = 0.3  # spread of -log(time) the blended order stands for (logit of its rank, as normal quantiles)
LOGIT_TO_NORMAL = 1.7  # the logistic quantile over the normal one
KNOB_SPREAD = 0.1  # prior spread of one knob value's effect on -log(time) on this card
NOISE = 0.05  # spread of a measurement around the model (-log time)
OPTIMISM = 1.0  # standard deviations of the knob model's doubt added to the expectation (where nothing was tried)
NOVELTY = 0.4  # the WARMUP picks after the warmup, on a pool no other card measured: per untried knob value
EXPLORE_EVERY = 4  # explore: every 4th measurement (after the first two) goes where the prior is unsure


@dataclass(frozen=True)
class SearchPool:
    """What a strategy may know of a pool: its candidates, never their times.

    `order`: candidate indices in the rule's order (`order[0]` the first option, when `first` is set);
    `scores`: the prior's score per candidate (higher better), None without a prior;
    `transfer`: other cards' evidence per candidate (higher better, NaN where none measured it), or None;
    `evidence`: the same per other card (log of its best time over the candidate's there, a failure
    there log(1e-3), NaN where that card did not measure it), or None.
    """

    knobs: tuple[Mapping[str, object], ...]
    order: tuple[int, ...]
    first: int | None = None
    scores: np.ndarray | None = None
    transfer: np.ndarray | None = None
    label: str = ""
    evidence: tuple[np.ndarray, ...] | None = None

    def __len__(self) -> int:
        return len(self.knobs)


@dataclass(frozen=True)
class Trial:
    """One measurement a strategy chose: the candidate's index and its time in µs (None: it failed)."""

    index: int
    time_us: float | None

    @property
    def ok(self) -> bool:
        return self.time_us is not None


@runtime_checkable
class SearchStrategy(Protocol):
    """One method: the next at most `n` candidates (pool indices, none measured yet) to measure."""

    name: str

    def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
        """Up to `n` unmeasured candidate indices, best first; `budget` is the run's total (failures count)."""
        ...


def shape_key(knobs: Mapping[str, object]) -> tuple[tuple[str, object], ...]:
    """The tile shape of a candidate: its block/tile sizes (empty when it has none)."""
    return tuple(sorted((k, v) for k, v in knobs.items() if k in SHAPE_KNOBS or _EXTERN_SHAPE.match(k)))


def _unmeasured(pool: SearchPool, trials: Sequence[Trial], ranked: Sequence[int]) -> list[int]:
    done = {t.index for t in trials}
    return [int(i) for i in ranked if int(i) not in done]


class FirstStrategy:
    """The rule's order: what a tune without a prior or a sample would measure."""

    name = "first"

    def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
        return _unmeasured(pool, trials, pool.order)[:n]


class RandomStrategy:
    """Today's seeded sample (`sample_candidates`): the first option, then `budget - 1` others in pool order."""

    name = "random"

    def __init__(self, seed: int = 0) -> None:
        self.seed = seed

    def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
        head = [pool.first] if pool.first is not None else []
        rest = [i for i in pool.order if i != pool.first]
        k = max(0, min(len(rest), budget - len(head)))
        picked = sorted(random.Random(self.seed).sample(range(len(rest)), k))
        return _unmeasured(pool, trials, [*head, *(rest[j] for j in picked)])[:n]


def _working(trials: Sequence[Trial]) -> list[Trial]:
    """The trials that measured a working time (a batch's placeholders, infinite, are not evidence)."""
    return [t for t in trials if t.time_us is not None and np.isfinite(t.time_us)]


def percentile_ranks(scores: np.ndarray) -> np.ndarray:
    """Scores as their rank in the pool, 0 (worst) to 1 (best); ties share the lower rank."""
    if len(scores) < 2:
        return np.ones(len(scores))
    ranks = np.argsort(np.argsort(scores, kind="stable"), kind="stable")
    return ranks / (len(scores) - 1)


def rank_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Spearman's rank correlation of two equally long arrays (0 when either is constant)."""
    ra = np.argsort(np.argsort(a, kind="stable"), kind="stable").astype(np.float64)
    rb = np.argsort(np.argsort(b, kind="stable"), kind="stable").astype(np.float64)
    if ra.std() == 0 or rb.std() == 0:
        return 0.0
    return float(np.corrcoef(ra, rb)[0, 1])


def informed(pool: SearchPool) -> bool:
    """Whether another card measured any candidate of the pool (its transfer column or evidence): without,
    the prior's order is the rule's or the ranker's guess for a card it never saw."""
    if pool.transfer is not None and bool(np.isfinite(np.asarray(pool.transfer, dtype=np.float64)).any()):
        return True
    return any(bool(np.isfinite(np.asarray(e, dtype=np.float64)).any()) for e in pool.evidence or ())


def novelty(pool: SearchPool, trials: Sequence[Trial]) -> np.ndarray:
    """Per candidate, how many of its knob values no measured candidate has."""
    tried: dict[str, set[object]] = {}
    for tr in trials:
        for k, v in pool.knobs[tr.index].items():
            tried.setdefault(k, set()).add(repr(v))
    return np.array([sum(repr(v) not in tried.get(k, ()) for k, v in kn.items()) for kn in pool.knobs], dtype=float)


@dataclass
class _Evidence:
    """One pool's sources of order (the prior, each other card), as percentile ranks and as raw values."""

    ranks: list[np.ndarray]
    raw: list[np.ndarray]
    belief: list[float]  # how much each source is trusted before this card's rows say otherwise
    design: np.ndarray | None = None  # knob_design, once this card has rows to fit
    codes: np.ndarray | None = None  # knob_codes, with it
    interaction: Interaction = ADDITIVE  # read from the transfer column, with it
    shapes: list[tuple[tuple[str, object], ...]] | None = None  # shape_key per candidate, once one failed


class PriorStrategy:
    """The prior's order, re-ranked after each measurement with what this card measured (module docstring)."""

    name = "prior"

    def __init__(self, warmup: int = WARMUP, belief: float = BELIEF, pseudo_rows: float = PSEUDO_ROWS,
                 scale: float = PRIOR_SCALE, knob_spread: float = KNOB_SPREAD, noise: float = NOISE,
                 optimism: float = OPTIMISM, novelty: float = NOVELTY, evidence_belief: float = EVIDENCE_BELIEF,
                 interactions: bool = True) -> None:
        self.warmup, self.belief, self.pseudo_rows, self.novelty = warmup, belief, pseudo_rows, novelty
        self.evidence_belief, self.interactions = evidence_belief, interactions
        self.scale, self.knob_spread, self.noise, self.optimism = scale, knob_spread, noise, optimism
        self._pool: SearchPool | None = None
        self._ev: _Evidence | None = None
        self._base: np.ndarray | None = None

    def _start(self, pool: SearchPool) -> np.ndarray:
        """The order before this card measured anything: the prior's percentile ranks (the rule's without one)."""
        if self._pool is not pool:
            ranks, raw, belief = [], [], []
            if pool.scores is not None:
                s = np.asarray(pool.scores, dtype=np.float64)
                ranks.append(percentile_ranks(s))
                raw.append(s)
                belief.append(self.belief)
            else:  # no prior: the rule's order
                base = np.zeros(len(pool))
                base[list(pool.order)] = np.linspace(1.0, 0.0, len(pool.order)) if len(pool.order) > 1 else 1.0
                ranks.append(base)
                raw.append(base)
                belief.append(self.belief)
            for e in pool.evidence or ():
                e = np.asarray(e, dtype=np.float64)
                seen = np.isfinite(e)
                if seen.any():
                    ranks.append(np.where(seen, percentile_ranks(np.where(seen, e, -np.inf)), 0.0))
                    raw.append(np.where(seen, e, np.nan))
                    belief.append(self.evidence_belief if pool.scores is not None else self.belief)
            self._pool, self._ev, self._base = pool, _Evidence(ranks, raw, belief), ranks[0]
        assert self._base is not None
        return self._base

    def weights(self, pool: SearchPool, trials: Sequence[Trial]) -> np.ndarray:
        """Per source (the prior, then each other card), its weight: its rank agreement with this card's working
        rows, shrunk towards its belief (module docstring) by PSEUDO_ROWS rows, squared (a source that disagrees
        falls to almost nothing, MIN_TRUST squared). A source believed at 0 has no weight at all until three
        of this card's rows measure it: it would otherwise settle the prior's near ties before any row."""
        self._start(pool)
        assert self._ev is not None
        ok = _working(trials)
        idx = np.array([t.index for t in ok], dtype=np.int64)
        y = -np.log(np.array([t.time_us for t in ok], dtype=np.float64)) if ok else np.zeros(0)
        out = []
        for raw, belief in zip(self._ev.raw, self._ev.belief, strict=True):
            v = raw[idx]
            seen = np.isfinite(v)
            n = int(seen.sum())
            rho = rank_agreement(v[seen], y[seen]) if n >= 3 else 0.0
            n = n if n >= 3 else 0
            if n == 0 and belief == 0:  # no credit and no row to earn it: no say, not even in a tie
                out.append(0.0)
                continue
            trust = (self.pseudo_rows * belief + n * rho) / (self.pseudo_rows + n)
            out.append(max(trust, MIN_TRUST) ** 2)
        return np.array(out)

    def agreement(self, weights: np.ndarray) -> float:
        """How far the best-trusted source's order holds on this card, 0 to 1: its trust (`weights` are trusts
        squared) over the prior's belief, at most 1. Before three rows it is 1; a card whose rows contradict
        every source shrinks the spread the blended order stands for, and the knob model and its doubt lead."""
        return min(1.0, float(np.sqrt(weights.max())) / self.belief)

    def expected(self, pool: SearchPool, trials: Sequence[Trial]) -> tuple[np.ndarray, np.ndarray]:
        """Per candidate, the expected -log(time) up to a constant, and its standard deviation (module docstring):
        the sources blended by their weights, on a logit scale of their rank, spread by PRIOR_SCALE times
        `agreement`; with WARMUP rows measured, plus what this card's working rows imply of the rest
        (`knob_model.posterior`: per knob value, and, where other cards measured the pool, the knobs' interaction
        `knob_model.interaction` read from their rows; `interactions` False: per knob value only)."""
        self._start(pool)
        assert self._ev is not None
        w = self.weights(pool, trials)
        blend = sum(wi * r for wi, r in zip(w, self._ev.ranks, strict=True)) / w.sum()
        n = len(pool)
        q = percentile_ranks(blend) * (n - 1) / n + 0.5 / n
        mean0 = self.scale * self.agreement(w) * np.log(q / (1 - q)) / LOGIT_TO_NORMAL
        ok = _working(trials)
        if not ok or len(trials) < self.warmup:
            return mean0, np.full(n, self.knob_spread)
        if self._ev.design is None:
            self._ev.design, self._ev.codes = knob_design(pool.knobs), knob_codes(pool.knobs)
            self._ev.interaction = interaction(self._ev.design, self._ev.codes, pool.transfer, self.noise)
        idx = np.array([t.index for t in ok], dtype=np.int64)
        resid = -np.log(np.array([t.time_us for t in ok], dtype=np.float64)) - mean0[idx]
        mean, sd = posterior(self._ev.design, self._ev.codes, idx, resid, self.knob_spread, self.noise,
                             self._ev.interaction if self.interactions else ADDITIVE)
        return mean0 + mean, sd

    def ranking(self, pool: SearchPool, trials: Sequence[Trial]) -> np.ndarray:
        """Every candidate's re-ranked value (higher first; the expected value plus OPTIMISM standard deviations);
        -inf for the measured and the excluded (sharing a failed candidate's tile shape)."""
        mean, sd = self.expected(pool, trials)
        value = mean + self.optimism * sd
        if self.novelty and self.warmup <= len(trials) < 2 * self.warmup and not informed(pool):
            value = value + self.novelty * novelty(pool, trials)
        failed_shapes = {shape_key(pool.knobs[t.index]) for t in trials if not t.ok}
        failed_shapes.discard(())
        if failed_shapes:
            assert self._ev is not None
            if self._ev.shapes is None:
                self._ev.shapes = [shape_key(k) for k in pool.knobs]
            drop = np.array([k in failed_shapes for k in self._ev.shapes])
            if not drop.all():
                value = np.where(drop, -np.inf, value)
        value[[t.index for t in trials]] = -np.inf
        return value

    def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
        value = self.ranking(pool, trials)
        ranked = np.argsort(-value, kind="stable")
        out = [int(i) for i in ranked if np.isfinite(value[i])][:n]
        if len(out) < n:  # only excluded candidates left: measure them after all, in the prior's order
            out += [i for i in _unmeasured(pool, trials, np.argsort(-self._start(pool), kind="stable"))
                    if i not in out][: n - len(out)]
        return out


class ExploreStrategy(PriorStrategy):
    """`prior`, with every EXPLORE_EVERY-th measurement where the prior is least sure (module docstring)."""

    name = "explore"

    def __init__(self, every: int = EXPLORE_EVERY) -> None:
        super().__init__()
        self.every = every

    def uncertain(self, pool: SearchPool, trials: Sequence[Trial], value: np.ndarray) -> int | None:
        """The candidate where the prior is least sure, among those `value` leaves open (None: none)."""
        return self.uncertain_why(pool, trials, value)[0]

    def uncertain_why(self, pool: SearchPool, trials: Sequence[Trial], value: np.ndarray) -> tuple[int | None, str]:
        """`uncertain`, and why a person should measure it: other cards' rows rank it above the prior, or knob
        values no row has tried."""
        open_ = np.isfinite(value)
        if not open_.any():
            return None, ""
        base = self._start(pool)
        if pool.transfer is not None and np.isfinite(pool.transfer).any():
            t = np.asarray(pool.transfer, dtype=np.float64)
            seen = np.isfinite(t)
            gap = np.where(seen & open_, percentile_ranks(np.where(seen, t, -np.inf)) - base, -np.inf)
            if np.isfinite(gap).any() and gap.max() > 0:
                return int(np.argmax(gap)), "other cards' rows rank it well above the prior's place for it"
        top_half = base >= np.median(base)
        pick = np.where(open_ & top_half, novelty(pool, trials) + base, -np.inf)
        if not np.isfinite(pick).any():
            return None, ""
        return int(np.argmax(pick)), "knob values no row has tried"

    def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
        out: list[int] = []
        seen = list(trials)
        while len(out) < n:
            step = len(seen)
            value = self.ranking(pool, seen)
            pick: int | None = None
            if step >= 2 and (step - 2) % self.every == self.every - 1:
                pick = self.uncertain(pool, seen, value)
            if pick is None:
                more = PriorStrategy.propose(self, pool, seen, 1, budget)
                if not more:
                    break
                pick = more[0]
            out.append(pick)
            seen.append(Trial(pick, float("inf")))  # a placeholder, never the best: one batch's picks differ
        return out


def make_strategy(name: str, seed: int = 0) -> SearchStrategy:
    """The strategy called `name` (one of STRATEGIES); ValueError naming the known ones."""
    if name == "first":
        return FirstStrategy()
    if name == "random":
        return RandomStrategy(seed)
    if name == "prior":
        return PriorStrategy()
    if name == "explore":
        return ExploreStrategy()
    raise ValueError(f"unknown search strategy {name!r}; known: {', '.join(STRATEGIES)}")
