"""The golden view: where each golden ranks among its candidates, strictly and with ties counted against it,
the plateau between the two, in the compile context of the card the golden was recorded on."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from emmy_core.eval import evaluate
from emmy_core.prior import load_installed_prior
from emmy_core.prior import metrics as m
from emmy_core.prior.dataset import read_dataset
from emmy_core.targets import load_table


def test_a_pool_where_all_scores_tie_has_a_perfect_strict_rank_and_the_worst_tie_counted_rank() -> None:
    figures = m.golden_figures([0.5, 0.5, 0.5, 0.5, 0.5], golden=3)
    assert figures["golden_rank"] == 0.0  # nothing scored strictly better
    assert figures["golden_rank_ties"] == 4.0  # every other candidate ties it: the worst place there is
    assert figures["golden_plateau"] == 4.0 and figures["golden_picked"] == 0.0  # a compile takes candidate 0


def test_the_report_shows_the_plateau_of_a_prior_whose_scores_all_tie(freeze_export: Path,
                                                                     constant_prior: Path) -> None:
    report = evaluate(freeze_export, constant_prior, pools="golden")
    doc = report.to_json()
    pools = doc["per_pool"]
    assert pools and all(r["golden_rank"] == 0.0 for r in pools)
    assert all(r["golden_rank_ties"] == r["golden_plateau"] == r["members"] - 1 for r in pools)
    mean = doc["mean"]
    assert mean["golden_rank"] == 0.0 and mean["golden_plateau"] == mean["golden_rank_ties"] > 100
    assert mean["golden_pools"] == mean["golden_rank_pools"] == len(pools)
    table = report.markdown()
    plateau = f"{mean['golden_plateau']:.1f}·{mean['golden_plateau_max']:.1f} ({len(pools)})"
    assert "plateau (mean·max)" in table and plateau in table


def test_golden_contexts_are_built_for_the_goldens_card_even_when_the_host_is_another_card(
        freeze_export: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import emmy_core.targets as targets
    import emmy_core.targets.resolve as resolve

    host = load_table()["NVIDIA H200"]
    for module in (targets, resolve):
        monkeypatch.setattr(module, "local_card", lambda: host)
        monkeypatch.setattr(module, "probe_cpu", lambda: host)
    prior = load_installed_prior()
    doc = evaluate(freeze_export, prior, pools="golden").to_json()
    forks = {(f.kernel_id, f.sizes, f.card_name, f.setting): f for f in read_dataset(freeze_export).forks}
    recorded_on = {f.card.name for f in forks.values() if f.card is not None}
    assert recorded_on and host.name not in recorded_on  # the freeze's CPUs, never the host
    moved = 0
    for r in doc["per_pool"]:
        fork = forks[(r["kernel_id"], r["sizes"], r["card"], r["setting"])]
        recorded = prior.score(fork.kernel, fork.sizes, fork.card, fork.setting, fork.knobs)
        assert (r["golden_rank"], r["golden_rank_ties"]) == m.golden_rank(recorded, fork.golden)
        on_host = prior.score(fork.kernel, fork.sizes, host, fork.setting, fork.knobs)
        moved += m.golden_rank(on_host, fork.golden) != m.golden_rank(recorded, fork.golden)
    assert moved > 0  # scored for the host, the ranks would differ: the check above can fail


def test_the_baselines_rank_the_goldens_on_the_same_pools(freeze_export: Path) -> None:
    doc = evaluate(freeze_export, load_installed_prior(), pools="golden").to_json()
    forks = {(f.kernel_id, f.sizes, f.card_name, f.setting): f for f in read_dataset(freeze_export).forks}
    cards = {key[2] for key in forks}
    borrowed = 0
    for r in doc["per_pool"]:
        fork = forks[(r["kernel_id"], r["sizes"], r["card"], r["setting"])]
        assert r["first_golden_rank"] == fork.golden  # the golden's place in the rule's own order
        assert r["random_golden_rank"] == (r["members"] - 1) / 2
        if len(cards) == 1:
            assert r.get("similar_golden_rank") is None  # one card in the freeze: no other card to borrow from
        borrowed += r.get("similar_golden_rank") is not None
    assert (borrowed > 0) == (len(cards) > 1)  # with two cards, the same kernels borrow the other's best
    mean = doc["mean"]
    assert mean["first_golden_rank_pools"] == mean["random_golden_rank_pools"] == len(doc["per_pool"])
    assert mean["golden_rank_ties"] < mean["random_golden_rank"]  # the installed prior beats a random order
    assert np.isclose(mean["golden_rank_ties"] - mean["golden_rank"], mean["golden_plateau"])
