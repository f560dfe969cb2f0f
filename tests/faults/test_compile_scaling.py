"""Compiling is linear in the model's depth: capture, every graph pass and lowering, four times deeper,
cost at most six times more (quadratic work gives 16). The cost is counted in executed Python lines and
calls (`tests/faults/scaling.work`), never timed, so a loaded machine cannot fail it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from emmy_core.graph.capture import capture
from emmy_core.graph.ops import Node, TensorType, toposort
from emmy_core.graph.pipeline import PASSES, compile_module, stand_ins
from tests.faults.scaling import work

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


def growth(make: Callable[[int], Any], run: Callable[[Any], Any], n: int, factor: int = DEPTH_FACTOR) -> float:
    """How many times more work `run` does on `make(n * factor)` than on `make(n)`."""
    small, large = make(n), make(n * factor)
    run(small), run(large)  # warm: one-time costs (lazy imports, first-call caches) belong to neither size
    return work(lambda: run(large)) / max(work(lambda: run(small)), 1)


def test_compiling_a_chain_of_linear_layers_is_linear_in_depth() -> None:
    ratio = growth(_linears, lambda m: compile_module(m, EXAMPLE), 16)
    assert ratio < DEPTH_LIMIT, f"{DEPTH_FACTOR}x the layers took {ratio:.1f}x the work to compile"


def test_compiling_a_chain_of_fused_layers_is_linear_in_depth() -> None:
    ratio = growth(_chain, lambda m: compile_module(m, EXAMPLE), 8)
    assert ratio < DEPTH_LIMIT, f"{DEPTH_FACTOR}x the layers took {ratio:.1f}x the work to compile"


def test_every_graph_pass_is_linear_in_depth() -> None:
    """Each pass alone (lowering dominates a whole compile, so a quadratic pass could hide behind it)."""
    small, _ = stand_ins(EXAMPLE)
    graphs = {depth: capture(_chain(depth), small).graph for depth in (15, 15 * DEPTH_FACTOR)}
    for p in PASSES:
        ratio = growth(graphs.__getitem__, p.run, 15)
        assert ratio < DEPTH_LIMIT, f"{p.name}: {DEPTH_FACTOR}x the layers took {ratio:.1f}x the work"
        graphs = {depth: p.run(graph) for depth, graph in graphs.items()}


def test_a_deep_chain_out_of_order_is_sorted_without_recursing() -> None:
    """Sorting a 20,000-node chain given backwards: no RecursionError, and every input comes first."""
    t = TensorType((4,), "f32")
    nodes = [Node("v0", "input", (), t)] + [Node(f"v{i}", "relu", (f"v{i - 1}",), t) for i in range(1, 20_000)]
    ordered = toposort(nodes[::-1])
    assert [n.name for n in ordered] == [n.name for n in nodes]


def test_the_depth_measure_tells_quadratic_work_from_linear() -> None:
    """The guard above can fail: quadratic work, four times larger, costs about 16 times more."""
    def quadratic(n: int) -> int:
        return sum(1 for i in range(n) for j in range(n) if i == j)

    assert growth(lambda n: n, quadratic, 150) > DEPTH_LIMIT
    assert growth(lambda n: n, lambda n: sum(range(n * 2000)), 150) < DEPTH_LIMIT
