"""The lookup's reach: the best that picks taken from other cards' own fastest configurations can do on a
card, and so when a target on an unseen card needs a configuration no other card ranked that high."""

from __future__ import annotations

import math

import numpy as np
import pytest

from emmy_core.ir import Extern, kernel_id
from emmy_core.knobs.vocab import schedule_id
from emmy_core.prior.dataset import DatasetFork
from emmy_core.ranking.baselines import lookup_reach

KERNEL = Extern("toy", (64, 64), "space")
KNOBS = [{"block": b} for b in (1, 2, 4, 8, 16)]


def _fork(card: str, times: list[float], kernel: Extern = KERNEL) -> DatasetFork:
    t = np.array(times, dtype=np.float64)
    ok = ~np.isnan(t)
    return DatasetFork(kernel_id(kernel), "", card, "deploy", kernel, None, [dict(k) for k in KNOBS],
                       [schedule_id(k) for k in KNOBS], np.ones(len(KNOBS), dtype=bool), ok, t)


def test_the_reach_is_the_best_of_the_other_cards_own_top_k_read_on_this_card() -> None:
    here = _fork("new", [10.0, 4.0, 8.0, 2.0, 5.0])
    a = _fork("a", [1.0, 3.0, 2.0, 9.0, 9.0])  # fastest 1, then 3 (block 4), then 2 (block 2)
    b = _fork("b", [9.0, 9.0, 9.0, 9.0, 1.0])  # fastest block 16
    assert lookup_reach(here, [a], 1) == pytest.approx(10.0 / 2.0)
    assert lookup_reach(here, [a], 2) == pytest.approx(8.0 / 2.0)
    assert lookup_reach(here, [a], 3) == pytest.approx(4.0 / 2.0)
    assert lookup_reach(here, [a, b], 1) == pytest.approx(5.0 / 2.0)  # the better of the two cards' bests
    assert lookup_reach(here, [a, b, here], 1) == pytest.approx(5.0 / 2.0)  # the card itself is never evidence


def test_the_reach_skips_what_failed_and_other_kernels_and_is_none_without_evidence() -> None:
    here = _fork("new", [10.0, math.nan, 8.0, 2.0, 5.0])
    a = _fork("a", [math.nan, 1.0, 2.0, 9.0, 9.0])  # its failure is no pick; its best failed here
    assert lookup_reach(here, [a], 1) is None
    assert lookup_reach(here, [a], 2) == pytest.approx(8.0 / 2.0)
    other_kernel = _fork("b", [9.0, 9.0, 9.0, 1.0, 9.0], Extern("other", (64, 64), "space"))
    assert lookup_reach(here, [other_kernel], 5) is None
    with pytest.raises(ValueError, match="one configuration at least"):
        lookup_reach(here, [a], 0)
