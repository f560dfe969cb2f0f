"""The head of a shipped order is spread over knob values (`ranking.diversified`): its top never moves, the
next places go to the best-scored candidates that differ from every one above them, and an artifact fitted
before the rule is left as it was."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from emmy_core.ir import Extern, kernel_id
from emmy_core.knobs.vocab import schedule_id
from emmy_core.prior import load_prior, metrics
from emmy_core.prior.dataset import DatasetFork
from emmy_core.prior.featurize import featurize, transfer_view
from emmy_core.prior.fit import spread_head
from emmy_core.prior.geometry import knob_features
from emmy_core.prior.ranking import (
    DIVERSE_HEAD,
    DIVERSE_KNOBS,
    DIVERSE_WINDOW,
    FIRST,
    RANKER,
    SELECT_MARGIN,
    SIGN_LEVEL,
    diversified,
    first_order,
    ranked,
    sign_tail,
)
from emmy_core.prior.transfer import Held, fork_knobs
from emmy_core.targets import load_table

# columns a, b, c; candidate 0 is the top, 1 and 2 differ from it in one value, 3 and 5 in two or more,
# and 4 differs from 3 in one
KNOBS = np.array([[1, 1, 1], [2, 1, 1], [3, 1, 1], [1, 2, 2], [1, 2, 3], [4, 3, 3]], dtype=np.float64)
SCORES = np.array([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])


def order(scores: np.ndarray) -> list[int]:
    return [int(i) for i in np.argsort(-scores, kind="stable")]


def test_the_head_of_a_fitted_order_goes_to_candidates_that_differ_from_every_one_above_in_two_knob_values() -> None:
    assert DIVERSE_KNOBS == 2 and DIVERSE_HEAD == 8
    out = diversified(SCORES, KNOBS)
    assert order(out) == [0, 3, 5, 1, 2, 4]  # then, none left that differs enough: the rest in their order
    assert out[0] == SCORES[0]  # the top never moves, nor its score
    assert sorted(out.tolist()) == sorted(SCORES.tolist())  # the scores are permuted, not changed
    for k, i in enumerate(order(out)[:3]):
        for j in order(out)[:k]:
            assert (KNOBS[i] != KNOBS[j]).sum() >= DIVERSE_KNOBS
    assert order(diversified(SCORES, KNOBS, head=2)) == [0, 3, 1, 2, 4, 5]  # only the head is spread
    assert order(diversified(SCORES, KNOBS, differ=3)) == [0, 5, 1, 2, 3, 4]  # from 0 and 3 alike: 5 only


def test_an_order_spread_already_or_without_knobs_is_left_as_it_is() -> None:
    spread = np.array([[1, 1], [2, 2], [3, 3], [4, 4]], dtype=np.float64)
    s = np.array([3.0, 2.0, 1.0, 0.0])
    assert diversified(s, spread) is not None and diversified(s, spread).tolist() == s.tolist()
    assert diversified(s, None).tolist() == s.tolist()
    assert diversified(s, np.zeros((4, 0))).tolist() == s.tolist()


def test_ties_and_unset_knobs_keep_the_spread_order_strict() -> None:
    tied = np.ones(6)
    out = diversified(tied, KNOBS)
    assert order(out) == [0, 3, 5, 1, 2, 4] and out[0] == 1.0
    assert len(set(out[[0, 3, 5]].tolist())) == 3 and out[[1, 2, 4]].max() < out[5]
    # an unset knob (NaN) equals an unset knob: these differ only in the set one
    unset = np.array([[np.nan, 1], [np.nan, 2], [np.nan, 3], [1, 3]], dtype=np.float64)
    assert order(diversified(np.array([3.0, 2.0, 1.0, 0.0]), unset)) == [0, 3, 1, 2]


def test_every_shipped_order_is_spread_wherever_knobs_are_given_the_rules_with_its_first_option_first() -> None:
    ranker = -SCORES  # the ranker's order is the reverse of the rule's
    np.testing.assert_array_equal(ranked(FIRST, 1.0, ranker, None), first_order(6))
    assert order(ranked(FIRST, 1.0, ranker, None, knobs=KNOBS)) == [0, 3, 5, 1, 2, 4]
    assert order(ranked(FIRST, 1.0, ranker, None, first=4, knobs=KNOBS))[0] == 4  # the first option stays first
    bare = np.full(6, np.nan)
    assert order(ranked("tr.score", 1.0, ranker, bare, None, FIRST, knobs=KNOBS)) == [0, 3, 5, 1, 2, 4]
    ranker = SCORES.copy()
    assert order(ranked("tr.score", 0.0, ranker, bare, knobs=KNOBS)) == [0, 3, 5, 1, 2, 4]
    transfer = -np.arange(6, dtype=np.float64)
    assert order(ranked("tr.score", 1.0, ranker, transfer, knobs=KNOBS)) == [0, 3, 5, 1, 2, 4]
    assert order(ranked("tr.score", 1.0, ranker, transfer)) == [0, 1, 2, 3, 4, 5]
    assert order(ranked("tr.score", 1.0, ranker, transfer, knobs=KNOBS, head=0)) == [0, 1, 2, 3, 4, 5]


def test_a_fit_records_the_spread_and_an_artifact_fitted_before_it_spreads_nothing(
        small_fit: tuple, tmp_path: Path) -> None:
    doc = json.loads(small_fit[0].artifact_path.read_text())
    judged = doc["ranking"]["diverse_top5"]  # the chosen order's top-5 on the held-out cards, spread and not
    # refused only on a clear loss: past the margin, and on enough pools (the sign test, tested above)
    wants = (DIVERSE_HEAD,) if judged["spread"] <= judged["plain"] * (1 + SELECT_MARGIN) else (0, DIVERSE_HEAD)
    assert doc["ranking"]["diverse"] in wants
    assert load_prior(small_fit[0].artifact_path).diverse == doc["ranking"]["diverse"]
    doc["ranking"] = {**doc["ranking"], "source": "tr.score", "weight": 0.0, "mode": "ranker", "no_evidence": "ranker",
                      "diverse": DIVERSE_HEAD}
    f = small_fit[1].forks[0]
    unseen = f.card.__class__(**{**f.card.__dict__, "name": "A CPU the fit never saw"})
    spread_path, old_path = tmp_path / "spread.json", tmp_path / "old.json"
    spread_path.write_text(json.dumps(doc))
    old_doc = {**doc, "ranking": {k: v for k, v in doc["ranking"].items() if k != "diverse"}}
    old_path.write_text(json.dumps(old_doc))
    spread, old = load_prior(spread_path), load_prior(old_path)
    assert old.diverse == 0
    rows = spread.rows(f.kernel, f.sizes, unseen, f.setting, f.knobs)
    own = spread.trees.predict(rows)
    np.testing.assert_array_equal(old.score_rows(rows, unseen), own)
    np.testing.assert_array_equal(spread.score_rows(rows, unseen),
                                  diversified(own, rows[:, knob_features(spread.features)], DIVERSE_HEAD))
    assert order(spread.score_rows(rows, unseen))[0] == order(own)[0]


# two knobs: 1 to 4 share the top's `b` (neighbours), 5 to 7 differ from it and from each other in both
TWO = [{"extern.a": a, "extern.b": b} for a, b in ((1, 1), (2, 1), (3, 1), (4, 1), (5, 1), (2, 2), (3, 3), (4, 4))]


def _held(times: list[float]) -> Held:
    kernel = Extern("two_knobs", (64, 64), "space")
    card = "NVIDIA A100-SXM4-80GB"
    n = len(TWO)
    fork = DatasetFork(kernel_id(kernel), "", card, "deploy", kernel, load_table().get(card), [dict(k) for k in TWO],
                       [schedule_id(k) for k in TWO], np.ones(n, dtype=bool), np.ones(n, dtype=bool),
                       np.array(times, dtype=np.float64), first=0)
    featurize([fork])
    (view,) = transfer_view([fork], [])
    return Held(view, -np.arange(n, dtype=np.float64), {}, 0)  # the ranker's order: 0, 1, 2, ...


CLOSE = [2.0, 3.0, 1.0, 1.0, 3.0, 4.0, 4.0, 4.0]  # the best are the top's neighbours: spread would lose them


@pytest.mark.parametrize("times, pools, head", [
    ([2.0, 3.0, 3.0, 3.0, 3.0, 1.0, 4.0, 4.0], 4, DIVERSE_HEAD),  # the best differs from the top: spread finds it
    (CLOSE, 4, 0),  # a clear loss on every one of four pools (a fair coin: 1 in 16)
    (CLOSE, 3, DIVERSE_HEAD),  # on three (1 in 8): as likely luck as SIGN_LEVEL allows a replacement
    (CLOSE, 1, DIVERSE_HEAD),  # one pool's loss is which pool fell in the split
    ([2.0, 3.0, 1.0, 1.0, 3.0, 1.005, 4.0, 4.0], 4, DIVERSE_HEAD),  # it loses them by half a percent: no clear loss
])
def test_the_fit_spreads_the_head_unless_the_unspread_order_clearly_beats_it_on_the_held_out_top_5(
        times: list[float], pools: int, head: int) -> None:
    held = [_held(times) for _ in range(pools)]
    assert order(diversified(held[0].ranker, fork_knobs(held[0].fork))) == [0, 5, 6, 7, 1, 2, 3, 4]
    spread = metrics.summarize([h.figures("tr.score", 0.0, RANKER) for h in held])["top5"]
    plain = metrics.summarize([h.figures("tr.score", 0.0, RANKER, head=0) for h in held])["top5"]
    margin_loss = plain * (1 + SELECT_MARGIN) < spread
    assert margin_loss == (times is CLOSE)
    assert (head == 0) == (margin_loss and sign_tail(pools, pools) <= SIGN_LEVEL)
    assert spread_head(held, "tr.score", 0.0, RANKER, spread) == (head, {"spread": spread, "plain": plain})
    assert spread_head(held, "tr.score", 0.0, RANKER) == (head, {"spread": spread, "plain": plain})  # computed


def test_the_spread_looks_no_deeper_than_its_window() -> None:
    n = DIVERSE_WINDOW + 50
    knobs = np.array([[i, 1.0] for i in range(n)])  # every candidate a neighbour of every other (one value)
    knobs[-1] = [-1.0, 2.0]  # but the last, which differs from all in both
    scores = -np.arange(n, dtype=np.float64)
    assert order(diversified(scores, knobs)) == list(range(n))  # below the window: not promoted
    inside = np.array(knobs)
    inside[10] = [-1.0, 2.0]
    assert order(diversified(scores, inside))[:3] == [0, 10, 1]
