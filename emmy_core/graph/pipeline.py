"""The compile pipeline of the graph layer: one linear list of named passes, then lowering.

    capture -> canonicalize -> match_rmsnorm -> fuse_epilogue -> fuse_norm -> fuse_elementwise -> lower

Capture never runs the model at the sizes asked for: the dynamic axes `B` and `S` are symbolic,
so `compile_module` traces the model on small stand-ins of its example inputs (`CAPTURE_SIZES`
on the dynamic dimensions) and `specialise` then sets the graph's expected sizes to the example's,
lowering again (the kernels and their identities do not depend on the expected sizes; only
the hints printed in their text do). A shape of any size is therefore compiled, resolved and
explained without allocating a tensor of that size.

`compile_graph` keeps the graph after every pass (`Lowered.stages`) so `emmy graph show`
can print how the model got to its kernels. Order matters and is the decision:
RMSNorm is recognised before fusion sees its muls; matmul epilogues take elementwise
ops (and residual adds) before the norms look for prologues; what is left becomes
elementwise kernels.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

import torch
from torch import nn

from emmy_core.graph.capture import Captured, capture, default_dynamic
from emmy_core.graph.errors import GraphError
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
from emmy_core.ir.check import MAX_EXTENT

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


CAPTURE_SIZES = {"B": 2, "S": 5}  # small, and unlike each other, so a dynamic axis used as a constant shows


def stand_ins(example_inputs: Sequence[torch.Tensor]) -> tuple[tuple[torch.Tensor, ...], dict[str, int]]:
    """Small random tensors shaped like `example_inputs` with their dynamic dimensions at `CAPTURE_SIZES`,
    and the example's own sizes of those axes (what the compile specialises to)."""
    small: list[torch.Tensor] = []
    sizes: dict[str, int] = {}
    gen = torch.Generator().manual_seed(0)
    for i, (t, dims) in enumerate(zip(example_inputs, default_dynamic(example_inputs), strict=True)):
        if not isinstance(t, torch.Tensor):
            raise GraphError(f"example input {i} is a {type(t).__name__}, not a tensor")
        if t.device.type == "meta":
            raise GraphError(f"example input {i} is a meta tensor: meta tensors are not supported (a compile runs "
                             "the model on real stand-ins and computes on real memory); give a real tensor")
        shape = list(t.shape)
        for d, axis in dims.items():
            if sizes.setdefault(axis, int(t.shape[d])) != int(t.shape[d]):
                raise GraphError(f"input {i}: axis {axis} is {int(t.shape[d])} here but {sizes[axis]} in another input")
            shape[d] = CAPTURE_SIZES[axis]
        if not t.dtype.is_floating_point:
            raise GraphError(f"example input {i}: data type {t.dtype} is not supported (f32, f16, bf16)")
        small.append(torch.randn(shape, generator=gen).to(dtype=t.dtype, device=t.device))
    return tuple(small), sizes


def specialise(lowered: Lowered, sizes: Mapping[str, int]) -> Lowered:
    """The same compiled model with its dynamic axes expected at `sizes`: no capture, no pass runs again."""
    axes = [k for k, _ in lowered.graph.sizes]
    if sorted(sizes) != sorted(axes):
        raise GraphError(f"{lowered.graph.name} has dynamic axes {', '.join(axes) or 'none'}; sizes give "
                         f"{', '.join(sorted(sizes)) or 'none'}")
    for k, v in sizes.items():
        if isinstance(v, bool) or not isinstance(v, int) or not 1 <= v <= MAX_EXTENT:
            raise GraphError(f"size of {k} must be an integer in 1..{MAX_EXTENT}, got {str(v)[:40]}")
    hints = tuple(sorted((k, int(v)) for k, v in sizes.items()))
    stages = tuple((name, replace(g, sizes=hints)) for name, g in lowered.stages)
    return lower(stages[-1][1], stages, lowered.weights)


def compile_module(module: nn.Module, example_inputs: Sequence[torch.Tensor], name: str | None = None) -> Lowered:
    """Captures `module` on small stand-ins of `example_inputs`, compiles the graph, specialises to the example."""
    small, sizes = stand_ins(tuple(example_inputs))
    return specialise(compile_graph(capture(module, small, name=name)), sizes)


def compile_model(name: str, shape: Mapping[str, int], dtype: torch.dtype = torch.float32) -> Lowered:
    """Compiles a reference model of `emmy_core.graph.models` at a (B, S) shape (never run at that shape)."""
    from emmy_core.graph.models import build_model

    module, inputs = build_model(name, dtype)
    return specialise(compile_graph(capture(module, inputs(CAPTURE_SIZES), name=name)), dict(shape))
