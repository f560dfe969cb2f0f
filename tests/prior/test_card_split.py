"""The card split and the transfer features: a fit is validated and selected on cards it never saw, and
what other cards measured reaches the model without the predicted card's own rows."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from emmy_core.ir import Extern, kernel_id
from emmy_core.knobs.vocab import schedule_id
from emmy_core.prior import load_prior
from emmy_core.prior.dataset import DatasetFork, read_dataset
from emmy_core.prior.featurize import featurize, transfer_view
from emmy_core.prior.fit import choice_figures, choose_ranking, readable, select_no_evidence
from emmy_core.prior.geometry import knob_features
from emmy_core.prior.ranking import (
    FIRST,
    RANKER,
    SELECT_MARGIN,
    SIGN_LEVEL,
    beats,
    choices,
    combine,
    diversified,
    first_order,
    ranked,
    select,
    selection,
    sign_tail,
    tuned,
)
from emmy_core.prior.training import Params
from emmy_core.prior.transfer import Held, card_split, transfer_column
from emmy_core.prior.transfer_features import TRANSFER_NAMES, TransferTable, read_table
from emmy_core.targets import load_table

KERNEL = Extern("toy", (64, 64), "space")
KNOBS = [{"block": b} for b in (1, 2, 4, 8, 16, 32)]
KERNEL_ID = kernel_id(KERNEL)


def _fork(card: str, times: list[float | None]) -> DatasetFork:
    """A fork of the toy kernel on `card`: member i measured at times[i] (None: not measured; inf: failed)."""
    n = len(KNOBS)
    measured = np.array([i < len(times) and times[i] is not None for i in range(n)])
    ok = np.array([bool(measured[i]) and math.isfinite(times[i]) for i in range(n)])  # type: ignore[arg-type]
    t = np.array([float(times[i]) if ok[i] else math.nan for i in range(n)])  # type: ignore[arg-type]
    described = load_table().get(card)
    return DatasetFork(kernel_id(KERNEL), "", card, "deploy", KERNEL, described, [dict(k) for k in KNOBS],
                [schedule_id(k) for k in KNOBS], measured, ok, t)


def _features(forks: list[DatasetFork], source: list[DatasetFork]) -> list[np.ndarray]:
    featurize(forks + source)
    return [f.features.matrix(TRANSFER_NAMES) for f in transfer_view(forks, source)]


def test_no_card_is_in_both_train_and_validation_of_any_card_fold(small_fit: tuple) -> None:
    result, dataset = small_fit
    assert result.metrics["split"] == "card"
    folds = result.metrics["folds"]
    cards = {f.card_name for f in dataset.forks}
    assert len(folds) == min(len(cards), 3) and len(cards) >= 2  # small_fit: 3 folds, each holding out whole cards
    validated: list[str] = []
    for fold in folds:  # recorded from the index arrays each fold actually trained and validated on
        assert not set(fold["train_cards"]) & set(fold["validation_cards"])
        assert set(fold["train_cards"]) | set(fold["validation_cards"]) == cards
        validated += fold["validation_cards"]
    assert sorted(validated) == sorted(cards)  # every card validated exactly once
    kernel_folds = result.metrics["kernel_folds"]
    for fold in kernel_folds:  # the kernel split beside it
        assert not set(fold["train_kernels"]) & set(fold["validation_kernels"])


def test_card_split_folds_hold_out_whole_cards_in_the_forks_they_score(freeze_export: Path) -> None:
    dataset = read_dataset(freeze_export)
    names = featurize(dataset.forks)
    folds, held = card_split(dataset.forks, names, "both", 5, 0, Params(iterations=10, depth=3))
    for fold in folds:
        scored = {h.fork.card_name for h in held if h.fold == fold["fold"]}
        assert scored == set(fold["validation_cards"]) and not scored & set(fold["train_cards"])


def test_transfer_features_of_a_predicted_card_are_computed_without_that_cards_rows() -> None:
    a = _fork("NVIDIA H200", [1.0, 2.0, 4.0, None, 3.0])
    b = _fork("NVIDIA H100 80GB HBM3", [2.0, 1.0, None, 8.0])
    held = _fork("NVIDIA A100-SXM4-80GB", [8.0, 4.0, 2.0, 1.0, 1.5, 9.0])
    (clean,) = _features([held], [a, b])
    assert not np.isnan(clean[:2]).any()  # members 0 and 1: both other cards measured them
    planted = replace(held, times=held.times[::-1].copy())  # a row of the validation card in the source
    (again,) = _features([held], [a, b, planted])
    np.testing.assert_array_equal(again, clean)
    # the compile path: a table holding the card's own rows leaves them out by the card's name
    table = TransferTable.from_forks([a, b, planted])
    cols = table.columns(held.kernel_id, "", "deploy", held.card.numeric(), held.card_name, held.schedule_ids)
    np.testing.assert_array_equal(cols, clean)
    # and what the features say: member 0 is best/time 1 on H200 and 0.5 on H100
    assert clean[0, 0] == pytest.approx((math.log(1.0) + math.log(0.5)) / 2)
    assert clean[0, 3] == 2 and clean[2, 3] == 1


def test_a_configuration_measured_on_no_other_card_has_missing_transfer_features() -> None:
    a = _fork("NVIDIA H200", [1.0, 2.0, None, None, 3.0])
    held = _fork("NVIDIA H100 80GB HBM3", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    (cols,) = _features([held], [a])
    for member in (2, 3, 5):  # nobody but the held-out card measured these
        assert np.isnan(cols[member]).all(), (member, cols[member])
    for member in (0, 1, 4):
        assert not np.isnan(cols[member]).any()
    assert cols[0, 1] == 0.0 and cols[4, 1] == pytest.approx(2 / 3)  # the rank among the candidates
    lone = _fork("NVIDIA H200", [1.0, 2.0])
    (nothing,) = _features([lone], [lone])  # a card alone: no other card measured anything
    assert np.isnan(nothing).all()


def test_another_card_answers_at_its_nearest_measured_sizes_and_never_the_predicted_card() -> None:
    def fork(card: str, sizes: str, times: list[float]) -> DatasetFork:
        return replace(_fork(card, times), sizes=sizes)

    h200 = [fork("NVIDIA H200", "T=128", [1.0, 2.0, 4.0]), fork("NVIDIA H200", "T=1024", [4.0, 2.0, 1.0])]
    h100 = [fork("NVIDIA H100 80GB HBM3", "T=4096", [2.0, 1.0, 4.0]), fork("NVIDIA H100 80GB HBM3", "B=256", [9.0])]
    held = fork("NVIDIA A100-SXM4-80GB", "T=256", [1.0, 1.0, 1.0])
    table = TransferTable.from_forks([*h200, *h100])
    got = dict(table.others(KERNEL_ID, "T=256", "deploy", held.card_name))
    # the H200 at T=128 (one octave away, nearer than T=1024), the H100 at T=4096: its only T pool
    assert got == {"NVIDIA H200": table.pools[KERNEL_ID, "T=128", "deploy"]["NVIDIA H200"],
                   "NVIDIA H100 80GB HBM3": table.pools[KERNEL_ID, "T=4096", "deploy"]["NVIDIA H100 80GB HBM3"]}
    assert table.has(KERNEL_ID, "T=256", "deploy", held.card_name)
    assert not table.has(KERNEL_ID, "S=256", "deploy", held.card_name)  # other axes say nothing
    exact = TransferTable.from_forks([*h200, fork("NVIDIA H200", "T=256", [3.0, 1.0, 2.0])])
    assert dict(exact.others(KERNEL_ID, "T=256", "deploy", None))["NVIDIA H200"] == exact.pools[
        KERNEL_ID, "T=256", "deploy"]["NVIDIA H200"]  # the same sizes when the card has them
    clean = table.columns(KERNEL_ID, "T=256", "deploy", None, held.card_name, held.schedule_ids)
    assert not np.isnan(clean[:3, 0]).any() and np.isnan(clean[3:]).all()
    planted = TransferTable.from_forks([*h200, *h100, fork(held.card_name, "T=512", [9.0, 1.0, 9.0])])
    np.testing.assert_array_equal(planted.columns(KERNEL_ID, "T=256", "deploy", None, held.card_name,
                                                  held.schedule_ids), clean)  # its own rows, at any size: unread


def test_a_failure_on_another_card_counts_as_the_transfer_baselines_failed_ratio() -> None:
    a = _fork("NVIDIA H200", [1.0, math.inf])
    held = _fork("NVIDIA H100 80GB HBM3", [1.0, 2.0])
    (cols,) = _features([held], [a])
    assert cols[1, 0] == pytest.approx(math.log(1e-3)) and cols[0, 0] == 0.0


HELD_PARAMS = Params(iterations=15, depth=3)


def _held(freeze_export: Path, seed: int) -> list:
    dataset = read_dataset(freeze_export)
    names = featurize(dataset.forks)
    return card_split(dataset.forks, names, "both", 5, seed, HELD_PARAMS)[1]


@pytest.fixture(scope="module")
def freeze_held(freeze_export: Path) -> list:
    """The held-out forks of a quick card split of the freeze (seed 4), shared by the selection's tests."""
    return _held(freeze_export, 4)


def test_the_blend_selection_is_deterministic_for_a_seed(freeze_export: Path, freeze_held: list) -> None:
    first = choose_ranking(freeze_held)
    assert json.dumps(choose_ranking(_held(freeze_export, 4)), sort_keys=True) == json.dumps(first, sort_keys=True)
    assert [(c["source"], c["weight"]) for c in first["candidates"]] == choices()
    assert (first["source"], first["weight"]) in choices()
    rows = choice_figures(freeze_held, first["no_evidence"])
    winner = rows[select([(r["top1"], r["top5"], r["per_pool"]) for r in rows], [r["model"] for r in rows])]
    assert (first["source"], first["weight"], first["top1"]) == (winner["source"], winner["weight"], winner["top1"])
    assert all("per_pool" not in c for c in first["candidates"])  # recomputed from the held-out pools, not kept
    # the earlier choice (a lookup) stays unless a later one picks better by more than the margin
    assert select([(1.1, 1.0), (1.1, 1.0), (1.2, 1.0)]) == 0
    assert select([(1.1, 1.0), (1.095, 1.0), (1.05, 1.0)]) == 2
    assert select([(1.1, 1.0), (1.1, 0.9)]) == 1  # top-5 settles an equal top-1
    assert select([(None, None), (1.3, None)]) == 1


def test_the_rules_order_is_judged_only_where_its_first_option_was_measured(freeze_held: list) -> None:
    stale = [h for h in freeze_held if h.fork.first is not None and not h.fork.measured[h.fork.first]]
    assert stale, "the freeze holds pools measured before the rule's first option changed"
    judged = [h for h in freeze_held if readable(h)]
    rows = choice_figures(freeze_held, RANKER)
    assert all(len(r["per_pool"]) == len(judged) for r in rows)  # every choice on the same pools
    first = next(r for r in rows if r["source"] == FIRST)
    for h, top1 in zip(judged, first["per_pool"], strict=True):  # the rule's order picks the rule's first option
        if h.fork.first is not None:
            assert top1 == pytest.approx(h.figures(FIRST, 1.0)["first_slowdown"])
    rk = choose_ranking(freeze_held)
    assert (rk["held_pools"], rk["judged_pools"]) == (len(freeze_held), len(judged))


def test_a_model_replaces_the_lookup_only_when_it_wins_on_enough_held_out_pools_without_losing_its_top5() -> None:
    lookup = (1.30, 1.10, [1.0] * 9 + [1.5, 1.6])
    two_lucky_pools = (1.25, 1.10, [1.0] * 9 + [1.0, 1.3])  # 4% better overall, from two pools only
    assert sign_tail(2, 2) == 0.25 > SIGN_LEVEL and select([lookup, two_lucky_pools]) == 0
    assert selection([lookup, two_lucky_pools]) == (0, [None, "better on 2 of the 2 held-out pools where the two "
                                                             "differ (sign test 0.25)"])  # why, as `prior info` says
    four_pools = (1.25, 1.10, [0.99, 0.98, 0.97, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.4, 1.5])
    assert sign_tail(4, 4) == 1 / 16 <= SIGN_LEVEL and select([lookup, four_pools]) == 1
    three_of_four = (1.25, 1.10, [1.01, 0.98, 0.97, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.4, 1.5])
    assert sign_tail(3, 4) == 5 / 16 and select([lookup, three_of_four]) == 0
    worse_top5 = (1.25, 1.10 * (1 + SELECT_MARGIN) + 0.01, four_pools[2])  # top-1 won with a top-5 lost
    assert not beats(worse_top5, lookup) and select([lookup, worse_top5]) == 0
    assert select([lookup, (1.30 * (1 - SELECT_MARGIN) + 1e-6, 1.10, four_pools[2])]) == 0  # within the margin
    assert sign_tail(0, 0) == 1.0 and sign_tail(5, 6) == 7 / 64
    # without each pool's figures the margin and top-5 decide alone (the pools without evidence)
    assert select([(1.30, 1.10), (1.25, 1.10)]) == 1


def test_the_plain_transfer_order_replaces_an_order_no_rule_chose_on_its_margin_without_a_sign_test() -> None:
    assert [tuned(*c) for c in choices()][:3] == [False, False, True]  # the rule's, transfer; similarity weighted
    assert all(tuned(*c) for c in choices()[2:])  # every blend and the ranker alone are fitted
    # the held-out pools of an imported cache: the rule's "order" is the store's, its figure a random pick's
    # expectation; the transfer order halves it, though two pools whose kernel no other card measured lose
    store_order = (3.6, 2.0, [3.5, 4.1, 3.3, 1.9, 1.5, 1.2, 54.0, 3.6])
    transfer = (1.85, 1.4, [4.2, 1.2, 1.4, 1.6, 1.6, 1.1, 6.2, 1.0])
    assert sign_tail(6, 8) > SIGN_LEVEL
    assert select([store_order, transfer], [False, False]) == 1  # a lookup over the store's order: the margin
    assert select([store_order, transfer], [False, True]) == 0  # a fitted choice must also pass the sign test
    assert select([store_order, transfer]) == 0  # every choice counts as fitted when not told
    # the rule's order on such a pool is judged as what it is: any order's expected top-1 and top-5
    fork = _fork("NVIDIA A100-SXM4-80GB", [8.0, 4.0, 2.0, 1.0, 3.0, 6.0])
    featurize([fork])
    (view,) = transfer_view([fork], [])
    figures = Held(view, np.zeros(6), {}, 0).figures(FIRST, 1.0)
    assert figures["top1"] == pytest.approx(np.mean([8.0, 4.0, 2.0, 1.0, 3.0, 6.0]))
    assert figures["top5"] == pytest.approx(1.0 * 5 / 6 + 2.0 * 1 / 6)  # the fastest is left out once in six
    ordered = Held(replace(view, first=0), np.zeros(6), {}, 0).figures(FIRST, 1.0)
    assert ordered["top1"] == 8.0  # with a rule's first option: its pick
    from emmy_core.eval.tables import first_label  # and the fit's report says which it stood for

    unordered = choose_ranking([Held(view, np.zeros(6), {}, 0)])
    assert unordered["first_pools"] == 0 and "random pick" in first_label(unordered)
    assert first_label(choose_ranking([Held(replace(view, first=0), np.zeros(6), {}, 0)])) == "the rule's first option"


def test_the_blend_ranks_unmeasured_candidates_with_the_worst_known_and_the_ranker_alone_without_any() -> None:
    ranker = np.array([0.0, 1.0, 2.0, 3.0])
    transfer = np.array([0.0, -1.0, np.nan, np.nan])
    np.testing.assert_array_equal(combine(ranker, transfer, 0.0), ranker)
    assert list(np.argsort(-combine(ranker, transfer, 1.0), kind="stable")) == [0, 3, 2, 1]
    np.testing.assert_array_equal(combine(ranker, np.full(4, np.nan), 0.5), ranker)


def test_a_pool_without_transfer_evidence_is_ranked_by_the_fits_no_evidence_choice() -> None:
    ranker = np.array([0.0, 3.0, 1.0, 2.0])
    bare = np.full(4, np.nan)
    np.testing.assert_array_equal(ranked("tr.score", 0.5, ranker, bare, None, FIRST), first_order(4))
    np.testing.assert_array_equal(ranked("tr.score", 0.5, ranker, None, 2, FIRST), first_order(4, 2))
    np.testing.assert_array_equal(ranked("tr.score", 0.0, ranker, bare, None, RANKER), ranker)
    some = np.array([np.nan, -1.0, 0.0, np.nan])  # evidence on two members: the blend, whatever no_evidence says
    np.testing.assert_array_equal(ranked("tr.score", 0.5, ranker, some, None, FIRST), combine(ranker, some, 0.5))


def _bare_held(card: str, times: list[float | None], ranker: list[float], source: list[DatasetFork]) -> Held:
    fork = replace(_fork(card, times), first=0)
    featurize([fork, *source])
    (view,) = transfer_view([fork], source)
    return Held(view, np.array(ranker), {}, 0)


def test_the_rules_order_ranks_pools_without_evidence_unless_the_ranker_beat_it_on_such_held_out_pools() -> None:
    other = _fork("NVIDIA H200", [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    slow_first = [8.0, 4.0, 2.0, 1.0, 3.0, 6.0]  # the rule's first option is 8x the best
    good_ranker = [0.0, 1.0, 2.0, 5.0, 3.0, 4.0]  # the ranker's top is the best
    card = "NVIDIA A100-SXM4-80GB"
    held = [_bare_held(card, slow_first, good_ranker, []) for _ in range(4)]  # nobody else measured the pools
    assert not held[0].evidence
    assert select_no_evidence(held) == RANKER  # it earned its place where evidence was missing: 4 pools of 4
    assert select_no_evidence(held[:2]) == FIRST  # two pools are luck a sign test does not take
    assert select_no_evidence([], held) == RANKER  # the kernel split's pools judge it as well (a kernel no card
    assert select_no_evidence(held[:2], held[2:]) == RANKER  # measured in its fold), and the two splits add up
    good_first = [1.0, 4.0, 2.0, 8.0, 3.0, 6.0]
    held = [_bare_held(card, good_first, good_ranker, []) for _ in range(4)]
    assert select_no_evidence(held) == FIRST
    # a pool whose first option was not measured cannot judge the rule's order: it is not counted
    unread = [_bare_held(card, [None, 4.0, 2.0, 1.0, 3.0, 6.0], [5.0, 0.0, 1.0, 4.0, 2.0, 3.0], [])
              for _ in range(4)]
    assert select_no_evidence(unread) == FIRST
    # pools that all had evidence say nothing about pools without: the rule's order stays
    seen = [_bare_held(card, slow_first, good_ranker, [other]) for _ in range(4)]
    assert seen[0].evidence and select_no_evidence(seen) == FIRST
    doc = choose_ranking(seen)
    assert doc["no_evidence"] == FIRST and all(r["top1"] is None for r in doc["no_evidence_candidates"])
    doc = choose_ranking(seen, [_bare_held(card, slow_first, good_ranker, []) for _ in range(4)])
    assert doc["no_evidence"] == RANKER
    assert [(r["pools"], r["card_pools"], r["kernel_pools"]) for r in doc["no_evidence_candidates"]] == [(4, 0, 4)] * 2


def test_a_pool_no_rule_ordered_is_ranked_by_the_ranker_where_no_other_card_measured_it(small_fit: tuple) -> None:
    ranker = np.array([0.0, 3.0, 1.0, 2.0])
    bare = np.full(4, np.nan)
    np.testing.assert_array_equal(ranked("tr.score", 1.0, ranker, bare, None, FIRST), first_order(4))
    np.testing.assert_array_equal(ranked("tr.score", 1.0, ranker, bare, None, FIRST, ordered=False), ranker)
    # a held-out pool of an imported cache (no first option: its order is the store's): the ranker's pick
    slow_first = [8.0, 4.0, 2.0, 1.0, 3.0, 6.0]
    good_ranker = np.array([0.0, 1.0, 2.0, 5.0, 3.0, 4.0])
    fork = _fork("NVIDIA A100-SXM4-80GB", slow_first)
    featurize([fork])
    (view,) = transfer_view([fork], [])
    assert view.first is None
    assert Held(view, good_ranker, {}, 0).figures("tr.score", 1.0, FIRST)["top1"] == 1.0
    assert Held(replace(view, first=0), good_ranker, {}, 0).figures("tr.score", 1.0, FIRST)["top1"] == 8.0
    # the same through an artifact that ships the transfer order with the rule's order where nothing transfers
    doc = json.loads(small_fit[0].artifact_path.read_text())
    doc["ranking"] = {**doc["ranking"], "source": "tr.score", "weight": 1.0, "mode": "transfer", "no_evidence": FIRST}
    path = small_fit[0].artifact_path.with_name("transfer-first.json")
    path.write_text(json.dumps(doc))
    prior = load_prior(path)
    f = small_fit[1].forks[0]
    unseen = replace(f.card, name="A CPU the fit never saw")
    rows = prior.rows(f.kernel, f.sizes, unseen, f.setting, f.knobs[:6])
    rows[:, [prior.features.index(n) for n in TRANSFER_NAMES]] = np.nan  # a kernel no card measured
    knobs = rows[:, knob_features(prior.features)]
    np.testing.assert_array_equal(prior.score_rows(rows, unseen), diversified(first_order(6), knobs, prior.diverse))
    spread = diversified(prior.trees.predict(rows), knobs, prior.diverse)
    np.testing.assert_array_equal(prior.score_rows(rows, unseen, ordered=False), spread)  # the ranker's order
    # `emmy eval prior` and the search replay pass a fork's missing first option on as an unordered pool
    from emmy_core.ranking import RankContext
    from emmy_core.ranking.rankers import PriorRanker

    toy = replace(_fork("NVIDIA A100-SXM4-80GB", [8.0, 4.0, 2.0, 1.0, 3.0, 6.0]), card=unseen)
    members = np.arange(6)
    trees = prior.trees.predict(prior.rows(toy.kernel, toy.sizes, unseen, toy.setting, toy.knobs))
    np.testing.assert_array_equal(PriorRanker(prior).rank(RankContext(toy), members), trees)
    np.testing.assert_array_equal(PriorRanker(prior).rank(RankContext(replace(toy, first=0)), members), first_order(6))


def test_the_artifact_carries_its_transfer_table_and_ranking_and_score_computes_that_blend(small_fit: tuple) -> None:
    result, dataset = small_fit
    prior = load_prior(result.artifact_path)
    doc = json.loads(result.artifact_path.read_text())
    assert doc["ranking"]["mode"] in ("first", "ranker", "blend", "transfer") and doc["ranking"]["split"] == "card"
    assert (prior.blend, prior.weight) == (doc["ranking"]["source"], doc["ranking"]["weight"])
    assert sorted(prior.table.cards) == sorted({f.card_name for f in dataset.forks})
    assert read_table(doc["transfer"], "$.transfer").pools == prior.table.pools
    featurize(dataset.forks)
    shared = 0
    for fork in dataset.forks:
        assert prior.seen(fork.card)  # a card the fit measured: the model alone
        rows = prior.rows(fork.kernel, fork.sizes, fork.card, fork.setting, fork.knobs)
        np.testing.assert_array_equal(prior.score(fork.kernel, fork.sizes, fork.card, fork.setting, fork.knobs),
                                      prior.trees.predict(rows))
        unseen = replace(fork.card, name="A CPU the fit never saw")  # the same hardware under a new name
        assert not prior.seen(unseen)
        rows = prior.rows(fork.kernel, fork.sizes, unseen, fork.setting, fork.knobs)
        t = None if prior.blend == FIRST else rows[:, prior.features.index(prior.blend)]
        shared += int((~np.isnan(rows[:, prior.features.index("tr.score")])).any())
        want = ranked(prior.blend, prior.weight, prior.trees.predict(rows), t, None, prior.no_evidence,
                      knobs=rows[:, knob_features(prior.features)], head=prior.diverse)
        np.testing.assert_array_equal(prior.score(fork.kernel, fork.sizes, unseen, fork.setting, fork.knobs), want)
    assert shared > 0, "the freeze's cards share pools: an unseen card must read their measurements"


@pytest.mark.parametrize("field, value, message", [
    ("transfer", {"version": 9, "cards": {}, "pools": []}, r"transfer table version"),
    ("ranking", {"weight": 0.5, "mode": "ranker", "source": "tr.score"}, r"\$\.ranking\.mode"),
    ("ranking", {"weight": 2, "mode": "transfer", "source": "tr.score"}, r"\$\.ranking\.weight"),
    ("ranking", {"weight": 1, "mode": "transfer", "source": "k.tile"}, r"\$\.ranking\.source"),
    ("ranking", {"weight": 0.5, "mode": "first", "source": "first"}, r"\$\.ranking\.weight must be 1"),
    ("ranking", {"weight": 1, "mode": "transfer", "source": "first"}, r"\$\.ranking\.mode must be 'first'"),
    ("ranking", {"weight": 1, "mode": "transfer", "source": "tr.score", "no_evidence": "random"},
     r"\$\.ranking\.no_evidence"),
    ("ranking", {"weight": 1, "mode": "transfer", "source": "tr.score", "diverse": -1}, r"\$\.ranking\.diverse"),
    ("ranking", {"weight": 1, "mode": "transfer", "source": "tr.score", "diverse": True}, r"\$\.ranking\.diverse"),
    ("ranking", {"weight": 1, "mode": "transfer", "source": "tr.score", "diverse": 1000}, r"\$\.ranking\.diverse"),
])
def test_a_malformed_transfer_table_or_ranking_is_refused_naming_the_field(
        small_fit: tuple, tmp_path: Path, field: str, value: object, message: str) -> None:
    from emmy_core.prior import PriorError

    doc = json.loads(small_fit[0].artifact_path.read_text())
    doc[field] = value
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(PriorError, match=message):
        load_prior(path)


def test_the_fit_reports_the_card_split_as_its_headline_beside_the_baselines(small_fit: tuple) -> None:
    result, dataset = small_fit
    m = result.metrics
    assert m["mean"]["top1"] is not None and "transfer_top1" in m["mean"] and "similar_slowdown" in m["mean"]
    pools: dict[str, set[tuple[str, str, str]]] = {}
    for f in dataset.forks:
        pools.setdefault(f.card_name, set()).add((f.kernel_id, f.sizes, f.setting))
    for card, summary in m["by_card"].items():
        # a transfer figure where another card measured one of its pools (a card alone at its sizes has none)
        shares = any(pools[card] & other for name, other in pools.items() if name != card)
        assert summary["top1_pools"] > 0 and ("transfer_top1" in summary) == shares, card
        assert ("similar_slowdown" in summary) == shares, card
    assert sum(1 for c in pools if any(pools[c] & o for n, o in pools.items() if n != c)) >= 2
    assert set(m["by_family"]) <= {"matmul", "row", "elementwise", "extern"} and m["by_family"]
    assert m["kernel_mean"]["top1"] is not None
    assert transfer_column is not None
    bare = m["ranking"]["no_evidence_candidates"]  # judged on both splits' pools no card measured in their fold
    assert bare[0]["kernel_pools"] > 0 and all(r["pools"] == r["card_pools"] + r["kernel_pools"] for r in bare)


def test_the_selection_compares_the_rules_first_option_and_keeps_it_unless_a_model_beats_it(
        freeze_held: list) -> None:
    assert choices()[0] == (FIRST, 1.0)  # the order a machine has with no model: settled first on a tie
    np.testing.assert_array_equal(first_order(4), [0.0, -1.0, -2.0, -3.0])
    assert int(np.argmax(first_order(4, first=2))) == 2  # a pool whose order is not the rule's: its first on top
    assert int(np.argmax(ranked(FIRST, 1.0, np.array([0.0, 9.0, 1.0]), np.array([-5.0, 0.0, -1.0])))) == 0
    held = freeze_held
    for h in held:  # the first option's ranking picks exactly the rule's first option
        figures = h.figures(FIRST, 1.0)
        if figures.get("first_slowdown") is not None:
            assert figures["top1"] == pytest.approx(figures["first_slowdown"])
    rk = choose_ranking(held)
    first = next(c for c in rk["candidates"] if c["source"] == FIRST)
    assert first["mode"] == FIRST and rk["vs_first"] == pytest.approx(rk["top1"] / first["top1"] - 1)
    rows = choice_figures(held, rk["no_evidence"])
    shipped = next(r for r in rows if (r["source"], r["weight"]) == (rk["source"], rk["weight"]))
    for r in rows[rows.index(shipped) + 1:]:  # every later choice failed to earn its place over the shipped one
        assert r["top1"] is None or not beats((r["top1"], r["top5"], r["per_pool"]),
                                              (shipped["top1"], shipped["top5"], shipped["per_pool"]), r["model"])
    runner = rk["runner_up"]  # which won and by how much: the best choice of another mode
    assert runner["mode"] != rk["mode"] and runner["margin"] == pytest.approx(rk["top1"] / runner["top1"] - 1)


def test_a_prior_that_ships_the_first_option_keeps_the_rules_order_on_an_unseen_card_and_prices_by_its_trees(
        small_fit: tuple, tmp_path: Path) -> None:
    doc = json.loads(small_fit[0].artifact_path.read_text())
    doc["ranking"] = {**doc["ranking"], "source": FIRST, "weight": 1.0, "mode": FIRST}
    path = tmp_path / "first.json"
    path.write_text(json.dumps(doc))
    prior = load_prior(path)
    fork = small_fit[1].forks[0]
    unseen = replace(fork.card, name="A CPU the fit never saw")
    knobs = fork.knobs[:6]
    rows = prior.rows(fork.kernel, fork.sizes, unseen, fork.setting, knobs)
    rule = diversified(first_order(len(knobs)), rows[:, knob_features(prior.features)], prior.diverse)
    np.testing.assert_array_equal(prior.score(fork.kernel, fork.sizes, unseen, fork.setting, knobs), rule)
    assert int(np.argmax(rule)) == 0  # the rule's first option first
    np.testing.assert_array_equal(prior.score(fork.kernel, fork.sizes, fork.card, fork.setting, knobs),
                                  prior.trees.predict(prior.rows(fork.kernel, fork.sizes, fork.card, fork.setting,
                                                                 knobs)))  # a card it measured: the model
    trees = load_prior(small_fit[0].artifact_path)  # the same trees and curves, whatever ranking ships
    np.testing.assert_allclose(prior.price(fork.kernel, fork.sizes, unseen, fork.setting, knobs),
                               trees.price_rows(fork.kernel, unseen, rows, trees.trees.predict(rows)))
