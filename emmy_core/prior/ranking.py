"""The one ranking a prior computes: its ranker's scores blended with the transfer score of the pool, or
the rule's own order.

A fit compares, on the split that holds out whole cards, the rule's first-option order (`FIRST`:
what a machine does with no model and no other card), the transfer order alone (weight 1), blends
and the ranker alone (weight 0), and ships the earliest choice no later one clearly beats (`beats`: a
better top-1 by a margin with no worse top-5, and for a `tuned` choice on enough held-out pools to pass
a sign test): never a ranking worse than a lookup it could have been, nor a model over a lookup on a
lucky pick or two. On a pool no rule ordered (an imported cache) the rule's order is judged by a random
order's expected figures (`transfer.Held.figures`).
`Prior.score` computes exactly this (`ranked`):

    score = -position                                       (FIRST: the order given, the rule's)
    score = (1 - w) * ranker + w * TRANSFER_SCALE * transfer  (a blend; w 1: the transfer order)

`transfer` is one of the pool's transfer columns (`SOURCES`): `tr.score`, the log of the geometric
mean of best/time on the other cards, or `tr.sim`, the same weighted by hardware similarity; a
candidate no other card measured takes the pool's lowest transfer score (it ranks with the worst known,
and the ranker decides among them). A pool no other card measured has no transfer evidence: it is
ranked by the fit's `no_evidence` choice, the rule's order (`first`, the safe default: what a machine
does with no model) or the ranker alone (`ranker`), whichever picked better on the held-out cards'
pools without evidence (of the card split and of the kernel split, where no card measured the held-out
kernel); with no such pool to judge on, the rule's order stays (a model earns its place on evidence,
never by default). A pool no rule ordered (an imported Kernel Tuner cache: no first option, its order the
store's) has no rule's order to fall back on, so without evidence the ranker ranks it. At weight 1 the
ranker still breaks ties (1e-9 of it).
TRANSFER_SCALE puts log(best/time) on the ranker's scale: the ranker is fitted to a softmax of
(best/time) ** sharpness, sharpness 4.

The head of the shipped order is spread (`diversified`, where the rows' knob values are given): each of
its first DIVERSE_HEAD places goes to the best-scored candidate that differs from every one placed above
it in at least DIVERSE_KNOBS knob values. An order's top is a run of near neighbours (the same tiles, one
thread count apart), and a neighbour of a poor top is as poor, so the second to eighth pick tell little
that the first did not: spread, they are what a top-5 or a tune's first few measurements should be. The
top-1 is never moved: a compile picks the same, the rule's first option stays first in the rule's
order. Measured on the peer caches left out a card at a time (11 pools) and on the hub's unseen cards
(14), the best of the top 2 / 4 / 5 went from 1.327 / 1.294 / 1.113 to 1.141 / 1.128 / 1.092 (peer)
and from 1.135 / 1.111 / 1.109 to 1.115 / 1.105 / 1.102 (hub); on the rule's order over this machine's
exhaustive CPU tune (9 pools) from 1.247 / 1.245 / 1.245 to 1.247 / 1.213 / 1.211. Three knob values
instead of two did no better on both GPU sets.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

TRANSFER_SCALE = 4.0
WEIGHTS: tuple[float, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)  # the blends a fit compares
SOURCES: tuple[str, ...] = ("tr.score", "tr.sim")  # the transfer columns a blend may read
FIRST = "first"  # the rule's order: the first option first, no model and no transfer
RANKER = "ranker"  # the ranker alone
NO_EVIDENCE: tuple[str, ...] = (FIRST, RANKER)  # what may rank a pool no other card measured, ties to the first
TIE_BREAK = 1e-9
DIVERSE_HEAD = 8  # the places at the top of a shipped order that `diversified` spreads
DIVERSE_KNOBS = 2  # how many knob values a candidate there differs in from every one above it
DIVERSE_WINDOW = 256  # how deep in the order `diversified` looks for them (a bound on its cost in a large pool)


SELECT_MARGIN = 0.01  # a later choice must pick this much better (top-1, relative) to replace an earlier one


def choices() -> list[tuple[str, float]]:
    """Every (source, weight) a fit compares, in the order ties are settled: the rule's first option (it
    needs nothing), the lookups alone (the transfer order, then the similarity-weighted one), then the
    blends, the ranker alone last. A model must earn its place over the lookup it could have been."""
    return [(FIRST, 1.0), *((src, 1.0) for src in SOURCES),
            *((src, w) for src in SOURCES for w in WEIGHTS if 0 < w < 1), (SOURCES[0], 0.0)]


def mode_of(weight: float, source: str = SOURCES[0]) -> str:
    """`first` (the rule's order, weight 1), else `ranker` (0), `transfer` (1) or `blend` (between)."""
    if source == FIRST:
        return FIRST
    return "ranker" if weight <= 0 else "transfer" if weight >= 1 else "blend"


def first_order(n: int, first: int | None = None) -> np.ndarray:
    """Scores that keep `n` candidates in the order given (the rule's), `first` (when told: the rule's
    first option where a pool's order is not the rule's) above every other."""
    out = -np.arange(n, dtype=np.float64)
    if first is not None and 0 <= first < n:
        out[first] = 1.0
    return out


def has_evidence(transfer: np.ndarray | None) -> bool:
    """Whether another card measured any of the pool's candidates (a transfer score that is not NaN)."""
    return transfer is not None and bool((~np.isnan(np.asarray(transfer, dtype=np.float64))).any())


def ranked(source: str, weight: float, ranker: np.ndarray, transfer: np.ndarray | None,
           first: int | None = None, no_evidence: str = RANKER, ordered: bool = True,
           knobs: np.ndarray | None = None, head: int = DIVERSE_HEAD) -> np.ndarray:
    """The shipped score of one pool's candidates for the choice (source, weight): the rule's order for
    FIRST, else the blend (`combine`) of the ranker with the transfer column; a pool without transfer
    evidence (`has_evidence`; None: no other card) is ranked by `no_evidence` (FIRST or RANKER), except a
    pool no rule ordered (`ordered` False: an imported cache's, listed in the store's order), which the
    ranker ranks: there the alternative is an arbitrary order, not a rule's. Given the candidates' `knobs`
    (one row each, a column per knob), the order's first `head` places are spread (`diversified`)."""
    if source == FIRST or (not has_evidence(transfer) and no_evidence == FIRST and ordered):
        order = first_order(len(ranker), first)
    elif not has_evidence(transfer):
        order = np.asarray(ranker, dtype=np.float64)
    else:
        assert transfer is not None
        order = combine(ranker, transfer, weight)
    return diversified(order, knobs, head)


def diversified(scores: np.ndarray, knobs: np.ndarray | None, head: int = DIVERSE_HEAD,
                differ: int = DIVERSE_KNOBS) -> np.ndarray:
    """`scores` with the order's first `head` places spread (module docstring): each goes to the best-scored
    candidate of the first DIVERSE_WINDOW whose row of `knobs` (NaN: unset, equal to unset) differs from
    every row placed above it in at least `differ` values, until none is left that does; the rest follow in
    their order. The scores are permuted, not changed: the top keeps its own, the k-th place takes the k-th
    best score (ties below the top are made strict by a float step), so a score's scale still means what it
    did. Without knobs, or where the order is spread already, `scores` as they are."""
    s = np.asarray(scores, dtype=np.float64)
    if knobs is None or head < 2 or len(s) < 3 or knobs.ndim != 2 or knobs.shape[1] == 0:
        return s
    order = np.argsort(-s, kind="stable")
    rows = np.asarray(knobs, dtype=np.float64)[order[:DIVERSE_WINDOW]]
    rows[np.isnan(rows)] = np.inf  # unset equals unset (no knob value is infinite)
    rows = rows[:, rows.min(axis=0) != rows.max(axis=0)]  # a knob every candidate sets alike tells none apart
    ones = np.ones(rows.shape[1], dtype=np.float32)
    closest = np.full(len(rows), np.float32(rows.shape[1]))  # per place, the fewest values it differs in from a pick
    picks = [0]
    while len(picks) < head:
        np.minimum(closest, (rows != rows[picks[-1]]).astype(np.float32) @ ones, out=closest)  # counts, exact
        far = closest >= differ
        nxt = int(np.argmax(far))
        if not far[nxt]:
            break
        picks.append(nxt)
    if picks == list(range(len(picks))):
        return s
    placed = np.zeros(len(s), dtype=bool)
    placed[picks] = True
    new = np.concatenate([order[picks], order[~placed]])
    values = s[order]
    for k in range(1, len(picks)):
        if values[k] >= values[k - 1]:
            values[k] = np.nextafter(values[k - 1], -np.inf)
    values[len(picks):] = np.minimum(values[len(picks):], np.nextafter(values[len(picks) - 1], -np.inf))
    out = np.empty_like(s)
    out[new] = values
    return out


def combine(ranker: np.ndarray, transfer: np.ndarray, weight: float) -> np.ndarray:
    """The shipped score of one pool's candidates (see the module's docstring)."""
    r = np.asarray(ranker, dtype=np.float64)
    t = np.asarray(transfer, dtype=np.float64)
    known = ~np.isnan(t)
    if weight <= 0 or not known.any():
        return r
    filled = np.where(known, t, t[known].min())
    if weight >= 1:
        return TRANSFER_SCALE * filled + TIE_BREAK * r
    return (1.0 - weight) * r + weight * TRANSFER_SCALE * filled


SIGN_LEVEL = 0.1  # a later choice must win on enough held-out pools that a coin per pool would less often


Figures = tuple[float | None, float | None] | tuple[float | None, float | None, Sequence[float | None]]


def tuned(source: str, weight: float) -> bool:
    """Whether the choice (source, weight) has anything fitted or weighted in it (the similarity-weighted
    transfer order, a blend, the ranker), where the rule's order and the plain transfer order have none."""
    return not (source == FIRST or (source == SOURCES[0] and weight >= 1))


def select(figures: Sequence[Figures], models: Sequence[bool] | None = None) -> int:
    """The index of the choice to ship among figures (top-1, top-5, and optionally each held-out pool's
    top-1, in one order for every choice) listed in `choices()` order: the first with a top-1, replaced by
    a later one only where that one earns it (`beats`; `models`: which choices are `tuned`, all when
    not told); top-5 settles an equal top-1. A selection is a function of its figures alone, and an
    earlier choice (a lookup) is kept unless a later one (a model) clearly beats it on the held-out cards."""
    return selection(figures, models)[0]


def selection(figures: Sequence[Figures], models: Sequence[bool] | None = None) -> tuple[int, list[str | None]]:
    """`select`'s index, and per choice why it did not replace the choice ahead at its turn (`verdict`;
    None for one that did, the first, and one with no top-1)."""
    best: int | None = None
    why: list[str | None] = []
    for i, row in enumerate(figures):
        reason = None
        if row[0] is not None:
            if best is not None:
                reason = verdict(row, figures[best], True if models is None else models[i])
            if reason is None:
                best = i
        why.append(reason)
    return (0 if best is None else best), why


def beats(challenger: Figures, incumbent: Figures, model: bool = True) -> bool:
    """Whether a later choice replaces an earlier one (`verdict` says why not)."""
    return verdict(challenger, incumbent, model) is None


def verdict(challenger: Figures, incumbent: Figures, model: bool = True) -> str | None:
    """None where a later choice replaces an earlier one, else why not, in words. It replaces it with a
    top-1 better by more than SELECT_MARGIN, a top-5 no worse by more than the margin, and, where the
    challenger is `tuned` (`model`) and both give each pool's top-1, better on enough of the pools where
    the two differ that a fair coin per pool would do as well with probability at most SIGN_LEVEL (a
    one-sided sign test); or with an equal top-1 and a better top-5. The plain transfer order replacing
    the rule's order needs no sign test: nothing in either is fitted to the held-out pools' luck, and
    where no rule ordered a pool (an imported cache) its order is an arbitrary one, whose expected pick
    the lookup beats by far on most pools, never on all (two cards' kernels no other card measured).

    Why the guards: the card split's top-1 over a few pools moves by more than the margin when one pick
    flips between near-equal configurations, so a win that two pools carry, or one bought with a worse
    top-5, is luck. Measured: on the peer data the similarity-weighted order beat the plain transfer
    order by 3% on top-1 through two convolution pools, with a top-5 15% worse (1.277 against 1.113);
    on six cards neither had seen (Kernel Tuner's hub) it picked 1.225 against the plain order's 1.162."""
    t1, t5 = challenger[0], challenger[1]
    b1, b5 = incumbent[0], incumbent[1]
    assert t1 is not None and b1 is not None
    if t1 == b1:
        return None if t5 is not None and (b5 is None or t5 < b5) else "the same top-1 and no better top-5"
    if not t1 < b1 * (1 - SELECT_MARGIN):
        return f"top-1 {t1:.3f} is not {SELECT_MARGIN:.0%} better than {b1:.3f}"
    if t5 is not None and b5 is not None and t5 > b5 * (1 + SELECT_MARGIN):
        return f"top-5 {t5:.3f} is more than {SELECT_MARGIN:.0%} worse than {b5:.3f}"
    if model and len(challenger) > 2 and len(incumbent) > 2:
        pairs = [(a, b) for a, b in zip(challenger[2], incumbent[2], strict=True)  # type: ignore[misc]
                 if a is not None and b is not None and a != b]
        wins = sum(a < b for a, b in pairs)
        p = sign_tail(wins, len(pairs))
        if p > SIGN_LEVEL:
            return f"better on {wins} of the {len(pairs)} held-out pools where the two differ (sign test {p:.2f})"
    return None


def sign_tail(wins: int, n: int) -> float:
    """P(at least `wins` heads in `n` tosses of a fair coin): the one-sided sign test's p-value (1 for n 0)."""
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2 ** n if n else 1.0
