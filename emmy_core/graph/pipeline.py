"""The compile pipeline of the graph layer: one linear list of named passes, then lowering.

    capture -> canonicalize -> match_rmsnorm -> fuse_epilogue -> fuse_norm -> fuse_elementwise -> lower

`compile_graph` keeps the graph after every pass (`Lowered.stages`) so `emmy graph show`
can print how the model got to its kernels. Order matters and is the decision:
RMSNorm is recognised before fusion sees its muls; matmul epilogues take elementwise
ops (and residual adds) before the norms look for prologues; what is left becomes
elementwise kernels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch
from torch import nn

from emmy_core.graph.capture import Captured, capture
from emmy_core.graph.lower import Lowered, lower
from emmy_core.graph.ops import Graph
from emmy_core.graph.passes import (
    Pass,
    canonicalize,
    fuse_elementwise,
    fuse_epilogue,
    fuse_norm,
    match_rmsnorm,
)

PASSES: tuple[Pass, ...] = (
    canonicalize.PASS,
    match_rmsnorm.PASS,
    fuse_epilogue.PASS,
    fuse_norm.PASS,
    fuse_elementwise.PASS,
)


def compile_graph(graph: Graph | Captured, weights: Mapping[str, torch.Tensor] | None = None) -> Lowered:
    """Runs every pass in order, then lowers; the result keeps the graph after each pass."""
    if isinstance(graph, Captured):
        weights = graph.weights if weights is None else weights
        graph = graph.graph
    stages: list[tuple[str, Graph]] = [("capture", graph)]
    for p in PASSES:
        graph = p.run(graph)
        stages.append((p.name, graph))
    return lower(graph, tuple(stages), dict(weights or {}))


def compile_module(module: nn.Module, example_inputs: Sequence[torch.Tensor], name: str | None = None) -> Lowered:
    """Captures `module` at `example_inputs` and compiles the graph."""
    return compile_graph(capture(module, example_inputs, name=name))


def compile_model(name: str, shape: Mapping[str, int], dtype: torch.dtype = torch.float32) -> Lowered:
    """Compiles a reference model of `emmy_core.graph.models` at a (B, S) shape."""
    from emmy_core.graph.models import build_model

    module, inputs = build_model(name, dtype)
    return compile_module(module, inputs(shape), name=name)
