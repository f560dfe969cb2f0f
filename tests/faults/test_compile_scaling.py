"""Compiling is linear in the model's depth: capture, every graph pass and lowering, four times deeper,
take at most six times longer (sizes compared with sizes in the same run; quadratic work gives 16).
The sizes stay small (a few hundred graph nodes): past the processor's caches every node costs more,
whatever the algorithm, and that would be measured instead of the algorithm's growth."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from emmy_core.graph.capture import capture
from emmy_core.graph.ops import Node, TensorType, toposort
from emmy_core.graph.pipeline import PASSES, compile_module, stand_ins

DEPTH_FACTOR = 4
DEPTH_LIMIT = 6.0


class Layer(nn.Module):
    """One layer that every fusing pass folds into: bias, activation and residual into the matmul; the
    residual add into the norm's prologue; an activation into the norm's epilogue."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(8, 8)
        self.norm = nn.RMSNorm(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x + torch.relu(self.lin(x))
        return torch.relu(self.norm(h + x))


def _chain(depth: int) -> nn.Module:
    return nn.Sequential(*(Layer() for _ in range(depth)))


def _linears(depth: int) -> nn.Module:
    return nn.Sequential(*(nn.Linear(8, 8) for _ in range(depth)))


EXAMPLE = (torch.randn(4, 8),)


def growth(make: Callable[[int], Any], run: Callable[[Any], Any], n: int, factor: int = DEPTH_FACTOR,
           repeats: int = 7) -> float:
    """How many times longer `run` takes on `make(n * factor)` than on `make(n)`: the best of `repeats` runs
    in this thread's processor time (a busy machine's preemptions fall on a long run more than on a short
    one), each with the cycle collector paused (its passes cost what the whole process holds)."""
    small, large = make(n), make(n * factor)

    def best(arg: Any) -> float:
        times = []
        gc.collect()
        gc.disable()
        try:
            for _ in range(repeats):
                t0 = time.thread_time()
                run(arg)
                times.append(time.thread_time() - t0)
        finally:
            gc.enable()
        return min(times)

    return best(large) / max(best(small), 1e-6)


def test_compiling_a_chain_of_linear_layers_is_linear_in_depth() -> None:
    ratio = growth(_linears, lambda m: compile_module(m, EXAMPLE), 16, repeats=3)
    assert ratio < DEPTH_LIMIT, f"{DEPTH_FACTOR}x the layers took {ratio:.1f}x the time to compile"


def test_compiling_a_chain_of_fused_layers_is_linear_in_depth() -> None:
    ratio = growth(_chain, lambda m: compile_module(m, EXAMPLE), 8, repeats=3)
    assert ratio < DEPTH_LIMIT, f"{DEPTH_FACTOR}x the layers took {ratio:.1f}x the time to compile"


def test_every_graph_pass_is_linear_in_depth() -> None:
    """Each pass alone (lowering dominates a whole compile, so a quadratic pass could hide behind it)."""
    small, _ = stand_ins(EXAMPLE)
    graphs = {depth: capture(_chain(depth), small).graph for depth in (15, 15 * DEPTH_FACTOR)}
    for p in PASSES:
        ratio = growth(graphs.__getitem__, p.run, 15)
        assert ratio < DEPTH_LIMIT, f"{p.name}: {DEPTH_FACTOR}x the layers took {ratio:.1f}x the time"
        graphs = {depth: p.run(graph) for depth, graph in graphs.items()}


def test_a_deep_chain_out_of_order_is_sorted_without_recursing() -> None:
    """Sorting a 20,000-node chain given backwards: no RecursionError, and every input comes first."""
    t = TensorType((4,), "f32")
    nodes = [Node("v0", "input", (), t)] + [Node(f"v{i}", "relu", (f"v{i - 1}",), t) for i in range(1, 20_000)]
    ordered = toposort(nodes[::-1])
    assert [n.name for n in ordered] == [n.name for n in nodes]


def test_the_depth_measure_tells_quadratic_work_from_linear() -> None:
    """The guard above can fail: quadratic work, four times larger, takes about 16 times longer."""
    def quadratic(n: int) -> int:
        return sum(1 for i in range(n) for j in range(n) if i == j)

    assert growth(lambda n: n, quadratic, 150, repeats=3) > DEPTH_LIMIT
    assert growth(lambda n: n, lambda n: sum(range(n * 2000)), 150, repeats=3) < DEPTH_LIMIT
