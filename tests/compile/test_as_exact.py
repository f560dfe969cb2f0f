"""Rule of the backend's check for a 16-bit group: it stays on Emmy when each output is torch's answer, the f32
answer, or no farther from the f32 answer than torch's own; otherwise it is handed back (`as_exact_as_torch`)."""

from __future__ import annotations

import torch

from emmy_core.compiler.compare import as_exact_as_torch

EXACT = torch.linspace(-4.0, 4.0, 64)


def test_an_output_nearer_the_exact_answer_than_torchs_is_kept_though_it_misses_torchs_by_far() -> None:
    ours, theirs = EXACT + 0.5, EXACT - 0.6  # 1.1 apart: over bf16's tolerance of each other
    assert not as_exact_as_torch([ours], [theirs], [EXACT - 1.0], "bf16")  # torch's nearer: handed back
    assert as_exact_as_torch([ours], [theirs], [EXACT], "bf16")


def test_an_output_within_tolerance_of_torch_or_of_the_exact_answer_is_kept_whatever_the_other_is() -> None:
    assert as_exact_as_torch([EXACT + 0.01], [EXACT], [EXACT + 5.0], "bf16")  # torch's answer
    assert as_exact_as_torch([EXACT + 0.01], [EXACT + 5.0], [EXACT], "bf16")  # the exact one


def test_each_output_is_judged_and_one_farther_than_torchs_by_its_worst_or_its_mean_error_hands_back() -> None:
    spike = EXACT.clone()
    spike[3] += 3.0  # one value far off: a worse worst error, a smaller mean one
    spread = EXACT + 0.9  # every value a little off
    assert not as_exact_as_torch([spike], [spread], [EXACT], "bf16")
    assert not as_exact_as_torch([spread], [spike], [EXACT], "bf16")
    assert not as_exact_as_torch([EXACT, EXACT + 2.0], [EXACT, EXACT + 1.0], [EXACT, EXACT - 0.5], "bf16")


def test_a_non_finite_distance_or_a_count_or_shape_that_differs_hands_back() -> None:
    nan = EXACT.clone()
    nan[0] = float("nan")
    assert not as_exact_as_torch([EXACT + 3.0], [nan], [EXACT], "bf16")
    assert not as_exact_as_torch([EXACT + 3.0], [EXACT + 4.0], [EXACT, EXACT], "bf16")
    assert not as_exact_as_torch([(EXACT + 3.0)[:32]], [(EXACT + 4.0)[:32]], [EXACT], "bf16")
