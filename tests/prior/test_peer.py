"""On the peer data (real Kernel Tuner measurements, skipped when absent): a leave-one-card-out fit and
score runs end to end, from the caches through import, export, features and the fit, beside the baselines."""

from __future__ import annotations

from emmy_core.prior.dataset import read_dataset
from emmy_core.prior.featurize import featurize
from emmy_core.prior.training import Params
from emmy_core.prior.transfer import leave_one_card_out
from tests.conftest import PeerStore

HELD_OUT = "NVIDIA RTX A6000"


def test_a_leave_one_card_out_fit_and_score_runs_end_to_end(peer_store: PeerStore) -> None:
    assert peer_store.files and all(o.ok for o in peer_store.outcomes)  # imported fresh and exported
    dataset = read_dataset(peer_store.export)
    cards = {f.card_name for f in dataset.forks}
    assert HELD_OUT in cards and len(cards) >= 3 and dataset.undescribed_pools == 0
    names = featurize(dataset.forks)
    figures = leave_one_card_out(dataset.forks, names, HELD_OUT, Params(iterations=40, max_group=128), seed=0)
    held = [f for f in dataset.forks if f.card_name == HELD_OUT]
    assert len(figures) == len(held) >= 1
    for f in figures:
        assert f["card"] == HELD_OUT and f["members"] > 1000
        assert 1.0 <= f["top5"] <= f["top1"] < f["random_slowdown"]  # better than picking blindly
        assert f["transfer_top1"] is not None and f["similar_slowdown"] is not None and f["tau"] is not None
