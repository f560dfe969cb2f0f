"""Forks: one set per distinct kernel, safe default first; cuts and splits are Decisions."""

from __future__ import annotations

from collections import Counter

import pytest

from emmy_core.graph.decisions import Decision
from emmy_core.graph.forks import KEEP_FUSED, KEEP_WHOLE, SCHEDULE, forks
from emmy_core.graph.pipeline import compile_model
from emmy_core.ir import kernel_id
from emmy_core.targets.resolve import resolve_card


@pytest.fixture(scope="module")
def llama():  # type: ignore[no-untyped-def]
    return compile_model("llama_block", {"B": 2, "S": 8})


def test_structural_forks_without_a_card_first_option_keeps_the_kernel(llama) -> None:  # type: ignore[no-untyped-def]
    fks = forks(llama)
    rules = Counter(f.rule for f in fks)
    assert rules == Counter({"cut:epilogue": 4, "split": 1})  # the down projection (K=688) offers split-K
    for f in fks:
        assert f.default == (KEEP_FUSED if f.rule.startswith("cut:") else KEEP_WHOLE)
        assert all(isinstance(o, Decision) and o.parent == f.kernel for o in f.options[1:])
        assert f.options[1].decision == f.rule if f.rule.startswith("cut:") else f.option_label(1) == "split:K=2"


def test_forks_are_offered_once_per_kernel_identity() -> None:
    stack = compile_model("llama_stack", {"B": 1, "S": 4})
    fks = forks(stack)
    keys = [(kernel_id(f.kernel), f.rule) for f in fks]
    assert len(keys) == len(set(keys))
    assert len({k for k, _ in keys}) <= len(stack.identities())


@pytest.mark.parametrize("card", ["local", "NVIDIA H200"])
def test_schedule_fork_per_distinct_kernel_with_a_card(llama, card: str) -> None:  # type: ignore[no-untyped-def]
    fks = [f for f in forks(llama, resolve_card(card)) if f.rule == SCHEDULE]
    assert len(fks) == len(llama.identities())
    assert all(len(f.options) >= 1 and isinstance(f.default, dict) for f in fks)
