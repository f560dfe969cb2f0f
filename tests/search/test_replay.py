"""The replay of a strategy over a frozen pool: it sees only what it chose, within its budget, failures counted."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import pytest

from emmy_core.knobs import candidates, sample_candidates
from emmy_core.search import (
    FrozenPool,
    ReplayError,
    SearchPool,
    Session,
    Trial,
    check_blind,
    make_strategy,
    replay,
)
from emmy_core.search.strategy import (
    BELIEF,
    EVIDENCE_BELIEF,
    MIN_TRUST,
    STRATEGIES,
    WARMUP,
    PriorStrategy,
    shape_key,
)
from emmy_core.targets import local_card


def toy(n: int = 40, seed: int = 0, fail_every: int = 0) -> FrozenPool:
    """A pool of `n` candidates over two tile knobs and one other, with times, scores and transfer evidence."""
    rng = np.random.default_rng(seed)
    knobs = tuple({"tile_m": 2 ** (i % 5), "tile_n": 2 ** ((i // 5) % 4), "unroll": 1 + i % 3} for i in range(n))
    times = rng.uniform(1.0, 10.0, n)
    if fail_every:
        times[1::fail_every] = np.nan
    pool = SearchPool(knobs, tuple(range(n)), 0, rng.normal(size=n), rng.normal(size=n), "toy")
    return FrozenPool(pool, times)


class Cheater:
    """Finds the frozen pool's times on the call stack and picks the fastest unmeasured candidate."""

    name = "cheater"

    def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
        frame = inspect.currentframe()
        while frame is not None and not isinstance(frame.f_locals.get("frozen"), FrozenPool):
            frame = frame.f_back
        assert frame is not None
        times = np.where(np.isfinite(frame.f_locals["frozen"].times), frame.f_locals["frozen"].times, np.inf)
        done = {t.index for t in trials}
        return [int(i) for i in np.argsort(times) if int(i) not in done][:n]


def test_a_replay_never_reveals_an_unchosen_candidates_time() -> None:
    frozen = toy(fail_every=7)
    assert not any("time" in f for f in SearchPool.__dataclass_fields__)  # a strategy is handed no times at all
    seen: list[tuple[Trial, ...]] = []

    class Recording(PriorStrategy):
        def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
            seen.append(tuple(trials))
            return super().propose(pool, trials, n, budget)

    trials = replay(Recording(), frozen, 12)
    chosen = [t.index for t in trials]
    for history in seen:  # every time it was told is the time of a candidate it chose, and only those
        for t in history:
            assert t.index in chosen
            assert (t.time_us is None) == (not np.isfinite(frozen.times[t.index]))
            assert t.time_us is None or t.time_us == frozen.times[t.index]
    for name in STRATEGIES:  # the honest strategies choose the same whatever the times they did not choose
        check_blind(lambda name=name: make_strategy(name, 3), frozen, 12)


def test_a_cheating_strategy_is_caught() -> None:
    frozen = toy(fail_every=7)
    trials = replay(Cheater(), frozen, 5)
    assert min(t.time_us for t in trials if t.ok) == np.nanmin(frozen.times)  # it did find the best by peeking
    with pytest.raises(ReplayError, match="saw times it was not given"):
        check_blind(Cheater, frozen, 5)


@pytest.mark.parametrize("name", STRATEGIES)
@pytest.mark.parametrize("budget", [1, 3, 8, 39, 40, 100])
def test_budgets_are_honoured_counting_failures(name: str, budget: int) -> None:
    frozen = toy(fail_every=2)  # every other candidate fails
    trials = replay(make_strategy(name, 1), frozen, budget)
    assert len(trials) == min(budget, len(frozen.pool))
    assert len({t.index for t in trials}) == len(trials)
    assert sum(not t.ok for t in trials) >= (1 if budget >= 3 else 0) or name == "first"
    assert trials[0].index == frozen.pool.first  # the first option always measured, first


def test_a_strategy_that_asks_for_more_than_its_share_or_repeats_is_refused() -> None:
    frozen = toy()

    class Greedy:
        name = "greedy"

        def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
            return list(range(1, n + 2))

    class Again:
        name = "again"

        def propose(self, pool: SearchPool, trials: Sequence[Trial], n: int, budget: int) -> list[int]:
            return [0]

    with pytest.raises(ReplayError, match="proposed 2 candidates where 1 were asked"):
        replay(Greedy(), frozen, 5)
    with pytest.raises(ReplayError, match="already measured"):
        replay(Again(), frozen, 5)
    session = Session(make_strategy("first"), frozen.pool, 3)
    with pytest.raises(ReplayError, match="not proposed"):
        session.tell(7, 1.0)


def test_prior_drops_candidates_that_share_a_failed_candidates_shape() -> None:
    frozen = toy()
    failed = 0
    shape = shape_key(frozen.pool.knobs[failed])
    ranking = PriorStrategy().ranking(frozen.pool, [Trial(failed, None)])
    same = [i for i, k in enumerate(frozen.pool.knobs) if shape_key(k) == shape]
    assert len(same) > 1 and all(ranking[i] == -np.inf for i in same)
    assert np.isfinite(ranking).sum() == len(frozen.pool) - len(same)


def test_prior_measures_the_first_option_then_the_priors_top_before_the_evidence_moves_it() -> None:
    frozen = toy()
    trials = replay(make_strategy("prior"), frozen, 4)
    top = [int(i) for i in np.argsort(-frozen.pool.scores, kind="stable") if i != 0][:3]
    assert [t.index for t in trials] == [0, *top]


def test_random_is_todays_seeded_sample() -> None:
    from emmy_core.ir.builders import rmsnorm

    card = local_card()
    kernel = rmsnorm(hidden=4096, dtype="f16", batch_hint=8)
    pool = [dict(k) for k in candidates(kernel, card)]
    assert len(pool) > 8
    search = SearchPool(tuple(pool), tuple(range(len(pool))), 0)
    for seed in (0, 5):
        trials = replay(make_strategy("random", seed), FrozenPool(search, np.ones(len(pool))), 8)
        assert [pool[t.index] for t in trials] == [dict(k) for k in sample_candidates(kernel, card, 8, seed)]


def test_prior_weights_other_cards_by_how_well_their_times_agree_with_this_cards_rows() -> None:
    rng = np.random.default_rng(4)
    n = 60
    knobs = tuple({"tile_m": 2 ** (i % 6), "unroll": i // 6} for i in range(n))
    times = rng.uniform(1.0, 10.0, n)
    alike = -np.log(times) + rng.normal(0, 0.05, n)  # a card whose times order like this one's
    unlike = np.log(times)  # a card that orders them the other way round
    flat = np.zeros(n)  # a prior with no opinion
    pool = SearchPool(knobs, tuple(range(n)), None, flat, None, "two cards", (unlike, alike))
    strategy = PriorStrategy()
    measured = [Trial(int(i), float(times[i])) for i in rng.choice(n, 6, replace=False)]
    w = strategy.weights(pool, measured)
    assert w[2] > 0.3 > w[0] and w[1] < 0.01  # the agreeing card steers, the disagreeing one barely counts
    # under 3 rows: as believed, the prior at BELIEF, another card beside a prior at EVIDENCE_BELIEF (none)
    assert EVIDENCE_BELIEF == 0
    assert strategy.weights(pool, measured[:2]).tolist() == pytest.approx([BELIEF ** 2, 0.0, 0.0])
    assert strategy.weights(pool, measured[:3]).min() >= MIN_TRUST ** 2  # measured: a floor, as any source
    ordered = replace(pool, scores=-np.arange(n, dtype=np.float64))  # a prior whose top is candidate 0
    assert int(np.argmax(alike)) != 0 and PriorStrategy().propose(ordered, [], 1, 10) == [0]  # before any row
    no_prior = replace(pool, scores=None)  # without a prior, the rule's order and the other cards start alike
    assert PriorStrategy().weights(no_prior, measured[:2]).tolist() == pytest.approx([BELIEF ** 2] * 3)
    pick = strategy.propose(pool, measured, 1, 10)[0]
    done = {t.index for t in measured}
    assert times[pick] == min(times[i] for i in range(n) if i not in done)


def test_another_cards_order_settles_no_tie_of_the_priors_before_three_rows_measure_it() -> None:
    n = 1000  # on a large pool, neighbouring places of the prior's order are a hair apart in rank
    knobs = tuple({"tile_m": 2 ** (i % 5), "unroll": i // 5} for i in range(n))
    prior = -np.arange(n, dtype=np.float64)  # candidate 0 first, 1 second
    other = np.zeros(n)
    other[1] = 1.0  # another card's top is the prior's second
    pool = SearchPool(knobs, tuple(range(n)), None, prior, None, "a large pool", (other,))
    assert PriorStrategy().propose(pool, [], 4, 8) == [0, 1, 2, 3]  # the prior's order, untouched
    rows = [Trial(0, 2.0), Trial(1, 1.0), Trial(2, 3.0)]  # three rows: now the other card earns its say
    assert PriorStrategy().weights(pool, rows)[1] > 0


def test_the_priors_order_stands_for_less_spread_as_far_as_this_cards_rows_contradict_it() -> None:
    n = 40
    knobs = tuple({"tile_m": 2 ** (i % 5), "unroll": i // 5} for i in range(n))
    scores = -np.arange(n, dtype=np.float64)  # the prior: candidate 0 first, 39 last
    pool = SearchPool(knobs, tuple(range(n)), 0, scores, None, "one card")
    strategy = PriorStrategy(warmup=n)  # no knob model: the expectation is the blended order alone
    spread = float(np.ptp(strategy.expected(pool, [])[0]))
    agree = [Trial(i, 1.0 + i) for i in (0, 10, 20, 30, 39)]  # this card orders them as the prior does
    contradict = [Trial(i, 40.0 - i) for i in (0, 10, 20, 30, 39)]  # the other way round
    assert strategy.agreement(strategy.weights(pool, [])) == 1.0  # before any row: the prior's whole spread
    assert float(np.ptp(strategy.expected(pool, agree)[0])) == pytest.approx(spread)
    shrunk = float(np.ptp(strategy.expected(pool, contradict)[0]))
    assert shrunk < 0.1 * spread  # contradicted (trust at its floor): the order stands for almost nothing
    # the order itself is kept, so the warmup still measures the prior's top
    assert np.argmax(strategy.expected(pool, contradict)[0]) == 0


def test_prior_knob_model_moves_away_from_a_knob_value_this_card_measured_slow() -> None:
    n = 48
    knobs = tuple({"tile_m": 2 ** (i % 4), "vec": (1, 2, 4)[(i // 4) % 3], "unroll": i // 12} for i in range(n))
    times = np.array([10.0 if k["vec"] == 4 else 1.0 + 0.01 * i for i, k in enumerate(knobs)])
    scores = np.array([2.0 if k["vec"] == 4 else 0.0 for k in knobs]) + np.linspace(0, 0.1, n)  # the prior likes vec=4
    frozen = FrozenPool(SearchPool(knobs, tuple(range(n)), 0, scores, None, "slow vec"), times)  # first: vec=1
    trials = replay(make_strategy("prior"), frozen, 8)
    first4 = [frozen.pool.knobs[t.index]["vec"] for t in trials[:WARMUP]]
    after = [frozen.pool.knobs[t.index]["vec"] for t in trials[WARMUP:]]
    assert first4 == [1] + [4] * (WARMUP - 1)  # the first option, then the prior's top
    assert 4 not in after[:3]  # then the rows say vec=4 (or unroll=3, tried with it only) is slow here: left
    assert min(t.time_us for t in trials[WARMUP:] if t.ok) < 2.0


def test_on_a_pool_no_other_card_measured_the_picks_after_the_warmup_prefer_knob_values_no_row_has_tried() -> None:
    from emmy_core.search.strategy import NOVELTY, SearchPool, Trial, informed, novelty

    knobs = tuple({"x": x, "y": y, "z": z, "w": w} for x in (1, 2) for y in (1, 2) for z in (1, 2) for w in (1, 2))
    scores = -np.arange(16, dtype=np.float64)  # the prior's order is the rule's: neighbours first
    bare = SearchPool(knobs, tuple(range(16)), 0, scores)
    warm = PriorStrategy().propose(bare, [], WARMUP, 16)
    assert warm == [0, 1, 2, 3]  # the warmup is the first option and the prior's top 3, as ever
    trials = [Trial(i, t) for i, t in zip(warm, (10.0, 12.0, 9.0, 11.0), strict=True)]
    open_ = np.arange(4, 16)

    def bonus(pool: SearchPool, rows: list[Trial]) -> np.ndarray:
        return (PriorStrategy().ranking(pool, rows) - PriorStrategy(novelty=0.0).ranking(pool, rows))[open_]

    assert not informed(bare) and novelty(bare, trials)[4] == 1 and novelty(bare, trials)[15] == 2
    np.testing.assert_allclose(bonus(bare, trials), NOVELTY * novelty(bare, trials)[open_])
    np.testing.assert_allclose(bonus(bare, trials[:3]), 0.0)  # the warmup itself follows the prior
    known = SearchPool(knobs, tuple(range(16)), 0, scores, np.array([0.0, -0.1] + [np.nan] * 14))
    assert informed(known)
    np.testing.assert_allclose(bonus(known, trials), 0.0)  # another card's evidence: the prior's order stands
