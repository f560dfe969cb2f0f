"""Forks: one set per distinct kernel, safe default first; cuts and splits are Decisions."""

from __future__ import annotations

from collections import Counter

import pytest

from emmy_core.graph.decisions import Decision
from emmy_core.graph.forks import (
    KEEP_FUSED,
    KEEP_WHOLE,
    SCHEDULE,
    ForkKey,
    ScheduleOption,
    StructuralOption,
    forks,
)
from emmy_core.graph.pipeline import compile_model
from emmy_core.ir import format_sizes, kernel_id
from emmy_core.targets.resolve import resolve_card


@pytest.fixture(scope="module")
def llama():  # type: ignore[no-untyped-def]
    return compile_model("llama_block", {"B": 2, "S": 8})


def test_structural_forks_without_a_card_first_option_keeps_the_kernel(llama) -> None:  # type: ignore[no-untyped-def]
    fks = forks(llama)
    rules = Counter(f.rule for f in fks)
    assert rules == Counter({"cut:epilogue": 4, "split": 1})  # the down projection (K=688) offers split-K
    for f in fks:
        assert f.default == StructuralOption.keep(KEEP_FUSED if f.rule.startswith("cut:") else KEEP_WHOLE)
        assert f.default.keeps and f.structural
        for o in f.options[1:]:
            assert isinstance(o, StructuralOption) and isinstance(o.decision, Decision)
            assert o.decision.parent == f.kernel and o.label == o.decision.decision
        assert f.options[1].label == f.rule if f.rule.startswith("cut:") else f.option_label(1) == "split:K=2"


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
    for f in fks:
        assert len(f.options) >= 1 and all(isinstance(o, ScheduleOption) for o in f.options)
        assert len({o.schedule_id for o in f.options}) == len(f.options)


def test_schedule_option_carries_the_stores_schedule_id() -> None:
    from emmy_core.store import Schedule

    knobs = {"vec": 8, "threads": 2, "unroll": 1}
    assert ScheduleOption.of(knobs).schedule_id == Schedule(knobs).schedule_id
    assert ScheduleOption.of(knobs).label == "threads=2,unroll=1,vec=8"


def test_fork_key_keeps_only_the_kernels_own_dynamic_axes(llama) -> None:  # type: ignore[no-untyped-def]
    step = llama.kernels[0]
    key = ForkKey.of(step.program, {**step.sizes({"B": 4, "S": 16}), "Z": 3}, "some card", "deploy")
    assert key.kernel_id == kernel_id(step.program)
    assert key.sizes == format_sizes(step.sizes({"B": 4, "S": 16})) != ""
    assert key == ForkKey(key.kernel_id, key.sizes, "some card", "deploy")
    assert hash(key) == hash(ForkKey(key.kernel_id, key.sizes, "some card", "deploy"))


def test_forks_module_imports_without_torch() -> None:
    import subprocess
    import sys

    script = (
        "import importlib.abc, sys\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'torch':\n"
        "            raise ImportError('blocked torch')\n"
        "sys.meta_path.insert(0, Block())\n"
        "from emmy_core.graph.forks import ForkKey, schedule_fork, structural_forks\n"
        "assert 'torch' not in sys.modules\n"
        "print(ForkKey('k', 'B=1', 'c', 'deploy').text())\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
