"""Tuning the serving matrix per card: which cards, which kernels, and the refusal of an absent card."""

from __future__ import annotations

import pytest

from emmy_core.bench.harness import BenchError
from emmy_core.bench.matrix import CardAbsent, matrix_cards, matrix_units, present_card, tune_matrix
from emmy_core.graph.serving import load_serving_matrix
from emmy_core.targets import local_card


def test_the_tune_covers_the_matrix_cards_with_local_read_as_this_machine() -> None:
    here = local_card()
    cards = matrix_cards()
    assert here.name in cards and "local" not in cards
    assert {"NVIDIA H200", "NVIDIA H100 80GB HBM3"} <= set(cards)
    assert list(cards) == sorted(set(cards))


def test_an_absent_card_is_refused_at_once_naming_the_card_and_the_machine() -> None:
    here = local_card()
    assert present_card(here.name) == here and present_card("local") == here
    with pytest.raises(CardAbsent) as err:
        present_card("NVIDIA H200", here)
    assert "NVIDIA H200" in str(err.value) and here.name in str(err.value)
    with pytest.raises(CardAbsent):  # before anything is lowered or benched
        tune_matrix("NVIDIA H200", recorder_for=None)  # type: ignore[arg-type]


def test_the_matrix_units_are_every_model_at_every_shape() -> None:
    m = load_serving_matrix()
    cases, units = matrix_units(m, ["mlp"])
    assert cases == ["mlp f16 B=1,S=128", "mlp f16 B=8,S=256", "mlp f16 B=32,S=64", "mlp f16 B=1,S=16"]
    assert units and all(u.label.startswith("mlp:") for u in units)
    assert matrix_units(m, ["mlp"], ["B=8,S=256"])[0] == ["mlp f16 B=8,S=256"]
    with pytest.raises(BenchError, match="not in the serving matrix"):
        matrix_units(m, ["resnet"])
    with pytest.raises(BenchError, match="shape 'B=2,S=2' is not in the serving matrix"):
        matrix_units(m, [], ["B=2,S=2"])
