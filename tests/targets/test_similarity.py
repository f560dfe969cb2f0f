"""One distance between cards, read by the transfer column `tr.sim` and the most-similar-card baseline:
their numbers, and their vendor."""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest

from emmy_core.ir import Extern, kernel_id
from emmy_core.knobs.vocab import schedule_id
from emmy_core.prior.dataset import DatasetFork
from emmy_core.prior.transfer_features import TRANSFER_NAMES, TransferTable
from emmy_core.ranking.baselines import card_distance, most_similar_scores
from emmy_core.targets import load_table
from emmy_core.targets.similarity import FLAG_FIELDS, VENDOR_DISTANCE, hardware_distance

KERNEL = Extern("toy", (64, 64), "space")
KNOBS = [{"block": b} for b in (1, 2, 4)]


def _fork(card: str, times: list[float]) -> DatasetFork:
    n = len(KNOBS)
    return DatasetFork(kernel_id(KERNEL), "", card, "deploy", KERNEL, load_table().get(card), [dict(k) for k in KNOBS],
                       [schedule_id(k) for k in KNOBS], np.ones(n, dtype=bool), np.ones(n, dtype=bool),
                       np.array(times, dtype=np.float64))


def test_a_card_of_another_vendor_is_farther_than_one_of_the_same_vendor_with_the_same_numbers() -> None:
    cards = load_table()
    nvidia = cards["NVIDIA RTX A6000"].numeric()
    amd = {**nvidia, "is_amd": 1.0}  # the same numbers, another vendor
    near = {**nvidia, "sms": nvidia["sms"] * 2}  # the same vendor, twice the units
    assert hardware_distance(nvidia, amd) == pytest.approx(VENDOR_DISTANCE)
    quantities = [k for k in nvidia if k not in FLAG_FIELDS]
    assert hardware_distance(nvidia, near) == pytest.approx(math.log(2) ** 2 / len(quantities))
    assert hardware_distance(nvidia, near) < hardware_distance(nvidia, amd)
    # the packaged cards: the MI250X's numbers sit nearer the A6000 than the W6600, and its vendor turns that
    mi250x, w6600 = cards["AMD Instinct MI250X"].numeric(), cards["AMD Radeon PRO W6600"].numeric()
    numbers_only = {k: v for k, v in mi250x.items() if k != "is_amd"}
    assert hardware_distance(numbers_only, nvidia) < hardware_distance(numbers_only, w6600)
    assert hardware_distance(mi250x, w6600) < hardware_distance(mi250x, nvidia)


def test_flags_are_not_quantities_and_never_enter_the_mean() -> None:
    a = {"sms": 100.0, "mem_bw_gbs": 1000.0, "has_mma": 1.0, "has_wgmma": 1.0, "is_amd": 0.0}
    b = {"sms": 50.0, "mem_bw_gbs": 1000.0, "has_mma": 1.0, "has_wgmma": 0.0, "is_amd": 0.0}
    assert hardware_distance(a, b) == pytest.approx(math.log(2) ** 2 / 2)  # sms and bandwidth only
    assert {"is_amd", "has_mma", "has_wgmma", "has_mfma", "has_wmma"} == FLAG_FIELDS


def test_cards_that_share_no_quantity_are_infinitely_far_and_a_vendor_alone_is_no_quantity() -> None:
    assert math.isinf(hardware_distance({"sms": 10.0}, {"cores": 8.0}))
    assert math.isinf(hardware_distance({"is_amd": 1.0}, {"is_amd": 0.0}))
    assert math.isinf(hardware_distance(None, {"sms": 1.0}))
    cpu = {"cores": 8.0, "simd_bits": 256.0}  # CPUs carry no vendor flag: their numbers alone
    assert hardware_distance(cpu, {**cpu, "simd_bits": 512.0}) == pytest.approx(math.log(2) ** 2 / 2)


def test_the_similarity_weighted_transfer_leans_on_the_card_of_the_same_vendor() -> None:
    # The MI250X reads an A6000 that likes block 1 and a W6600 that likes block 4: tr.sim follows the W6600,
    # where the numbers alone would follow the A6000; the plain transfer score weighs both alike.
    a6000 = _fork("NVIDIA RTX A6000", [1.0, 2.0, 4.0])
    w6600 = _fork("AMD Radeon PRO W6600", [4.0, 2.0, 1.0])
    held = _fork("AMD Instinct MI250X", [1.0, 1.0, 1.0])
    table = TransferTable.from_forks([a6000, w6600])
    sim = TRANSFER_NAMES.index("tr.sim")
    cols = table.columns(held.kernel_id, "", "deploy", held.card.numeric(), held.card_name, held.schedule_ids)
    assert cols[2, sim] > cols[0, sim]
    assert cols[2, 0] == pytest.approx(cols[0, 0])  # tr.score: the two cards count alike
    numbers_only = {k: v for k, v in held.card.numeric().items() if k != "is_amd"}
    blind = table.columns(held.kernel_id, "", "deploy", numbers_only, held.card_name, held.schedule_ids)
    assert blind[0, sim] > blind[2, sim]
    # the most-similar-card baseline reads the same distance: the W6600's order for the MI250X
    assert card_distance(held.card, w6600.card) < card_distance(held.card, a6000.card)
    np.testing.assert_array_equal(np.argsort(-most_similar_scores(held, [a6000, w6600])), [2, 1, 0])
    undescribed = most_similar_scores(replace(held, card=None), [a6000, w6600])  # nothing compares: first by name
    assert np.argmax(undescribed) == 2 and np.argmax(most_similar_scores(replace(held, card=None), [a6000])) == 0
