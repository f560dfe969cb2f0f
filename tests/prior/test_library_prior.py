"""The prior and the library route (issue 44): torch's kernel is a featurised candidate, and the prior ranks it
beside Emmy's kernels on a card its fit measured it on, and nowhere else.

Rules, one per test: a fit sees the library on exactly the cards whose pools hold a library row of this torch;
on such a card a matrix product's route is answered by the prior, ranking torch's kernel among Emmy's; on a card
it never saw measured there the route stays with measurement and torch's kernel, the first option.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from emmy_core.compiler import explain
from emmy_core.evidence.sources import busy_at, within_sight
from emmy_core.graph.forks import emmy_options, schedule_fork
from emmy_core.knobs.route import is_library, library_knobs
from emmy_core.prior import load_prior
from emmy_core.targets.card import Card
from tests.evidence.conftest import CARD as OTHER  # a card no freeze measured
from tests.evidence.conftest import Proj


def _library_cards(dataset) -> dict[str, Card]:  # type: ignore[no-untyped-def]
    lib = library_knobs()
    return {f.card_name: f.card for f in dataset.forks if f.card is not None
            and any(m and k == lib for k, m in zip(f.knobs, f.measured, strict=True))}


def test_a_fit_sees_the_library_on_exactly_the_cards_it_measured_it_on(small_fit: tuple) -> None:
    result, dataset = small_fit
    prior = load_prior(result.artifact_path)
    assert "k.library" in prior.features and "k.library_version" not in prior.features
    seen = _library_cards(dataset)
    if not seen:
        pytest.skip("no committed freeze holds a library row of this torch release")
    cards = {f.card_name: f.card for f in dataset.forks if f.card is not None}
    for name, card in cards.items():
        assert prior.sees_library(card) == (name in seen), name
    assert not prior.sees_library(OTHER) and not prior.sees_library(None)


def test_on_a_card_the_fit_measured_the_library_on_the_prior_ranks_torchs_kernel_beside_emmys(
        small_fit: tuple, tmp_path: Path) -> None:
    result, dataset = small_fit
    seen = _library_cards(dataset)
    if not seen:
        pytest.skip("no committed freeze holds a library row of this torch release")
    card = next(iter(seen.values()))
    torch.manual_seed(0)
    module, example = Proj().eval(), (torch.randn(2, 8, 1024),)
    (tmp_path / "freezes").mkdir()
    common = {"freezes": tmp_path / "freezes", "tuning_db": tmp_path / "none.db", "prior": result.artifact_path}
    compiled = explain(module, example, card=card, **common)
    r = next(x for x in compiled.record.resolutions if x.rule == "schedule")
    assert r.tier == "prior" and "top of" in r.evidence
    # the answer is the prior's top among torch's kernel and Emmy's options that it ranks: re-score that pool
    prior = load_prior(result.artifact_path)
    (kernel,) = {k.kernel_id: k.program for k in compiled.lowered.kernels}.values()
    fork = schedule_fork(kernel, card)
    own = within_sight(prior, busy_at(list(emmy_options(fork)), kernel, r.key), fork)
    pool = [fork.options[0], *own]
    assert is_library(pool[0].knobs)
    scores = prior.score(kernel, r.key.sizes, card, "deploy", [dict(o.knobs) for o in pool])
    best = max(range(len(pool)), key=lambda i: (scores[i], -i))
    assert r.choice == pool[best] and r.score == pytest.approx(float(scores[best]))
    assert f"top of {len(pool)}" in r.evidence
    # on a card it never saw the library measured on, the route is not the prior's to settle
    o = next(x for x in explain(module, example, card=OTHER, **common).record.resolutions if x.rule == "schedule")
    assert o.tier == "first" and dict(o.choice.knobs) == library_knobs()  # type: ignore[union-attr]
    assert "never saw torch's kernel measured on this card" in dict(o.tried)["prior"]
