"""Run a lowered model: every kernel through the reference interpreter, in graph order.

Graph values live as torch tensors; a kernel receives each one reshaped to its
buffer's shape as a numpy array (bf16 carried in float32, as the interpreter wants),
and its outputs come back reshaped to the graph's shape. Layout steps are applied
with torch between kernels. The sizes of `B` and `S` are read from the inputs. A kernel
may be run as the pieces of a structural decision (a cut or a split) instead.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from math import prod

import numpy as np
import torch

from emmy_core.dtypes import torch_dtype
from emmy_core.graph.decisions import Decision, run_pieces
from emmy_core.graph.errors import GraphError
from emmy_core.graph.lower import KernelStep, LayoutStep, Lowered
from emmy_core.graph.ops import Graph, TensorType
from emmy_core.ir import interpret
from emmy_core.ir.sizes import extents


def graph_sizes(graph: Graph, inputs: Sequence[torch.Tensor]) -> dict[str, int]:
    """Sizes of the dynamic axes read from the inputs; static axes and data types are checked."""
    nodes = [n for n in graph.nodes if n.op == "input"]
    if len(nodes) != len(inputs):
        raise GraphError(f"{graph.name} takes {len(nodes)} inputs, got {len(inputs)}")
    sizes: dict[str, int] = {}
    for n, t in zip(nodes, inputs, strict=True):
        if not isinstance(t, torch.Tensor) or t.dim() != len(n.type.shape):
            raise GraphError(f"input {n.name} must be a tensor of rank {len(n.type.shape)} ({n.type.text()})")
        if t.dtype != torch_dtype(n.type.dtype):
            raise GraphError(f"input {n.name} is {t.dtype}, the graph expects {n.type.dtype}")
        for d, s in zip(n.type.shape, t.shape, strict=True):
            if (isinstance(d, int) and d != s) or (isinstance(d, str) and sizes.setdefault(d, int(s)) != s):
                raise GraphError(f"input {n.name} has shape {tuple(t.shape)}, the graph expects {n.type.text()}")
    return sizes


def to_numpy(t: torch.Tensor, dtype: str) -> np.ndarray:
    if dtype == "bf16":
        return t.detach().float().contiguous().numpy()
    return t.detach().contiguous().numpy()


def from_numpy(a: np.ndarray, type_: TensorType, sizes: dict[str, int]) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(a)).to(torch_dtype(type_.dtype)).reshape(type_.concrete(sizes))


def run_kernel(step: KernelStep, env: dict[str, torch.Tensor], sizes: dict[str, int],
               decision: Decision | None = None) -> dict[str, np.ndarray]:
    """Runs one kernel step on the values in `env` at graph sizes `sizes` (as `decision`'s pieces if given)."""
    prog = step.program
    dyn = step.sizes(sizes)
    ext = extents(prog, dyn)
    arrays: dict[str, np.ndarray] = {}
    for buf_name, value in step.inputs:
        buf = prog.buffer(buf_name)
        shape = tuple(ext[a] for a in buf.shape)
        t = env[value]
        if t.numel() != prod(shape):
            raise GraphError(f"{step.node}: value {value} {tuple(t.shape)} does not fit buffer {buf_name} {shape}")
        arrays[buf_name] = to_numpy(t.reshape(shape), buf.dtype)
    if decision is not None:
        if decision.parent != prog:
            raise GraphError(f"{step.node}: decision {decision.decision} is for {decision.parent.name}, not {prog.name}")
        return run_pieces(decision, arrays, dyn)
    return interpret.run(prog, arrays, dyn)


def run_lowered(lowered: Lowered, inputs: Sequence[torch.Tensor],
                decisions: Mapping[str, Decision] | None = None) -> torch.Tensor | tuple[torch.Tensor, ...]:
    """What the lowered model computes on `inputs` (one tensor, or a tuple for several outputs).

    `decisions` maps a kernel identity to a structural decision on it (a cut or a split): every
    occurrence of that kernel then runs as the decision's pieces.
    """
    decisions = dict(decisions or {})
    graph = lowered.graph
    sizes = graph_sizes(graph, tuple(inputs))
    index = graph.index()
    env: dict[str, torch.Tensor] = {}
    inputs_iter = iter(inputs)
    for n in graph.nodes:
        if n.op == "input":
            env[n.name] = next(inputs_iter)
        elif n.op == "param":
            path = str(n.attr("path"))
            if path not in lowered.weights:
                raise GraphError(f"no weight for parameter {path}")
            env[n.name] = lowered.weights[path]
    for step in lowered.steps:
        if isinstance(step, LayoutStep):
            x = env[step.input]
            attrs = dict(step.attrs)
            if step.op == "reshape":
                env[step.node] = x.reshape(index[step.node].type.concrete(sizes))
            else:
                env[step.node] = x.permute(*attrs["perm"]).contiguous()  # type: ignore[misc]
            continue
        outs = run_kernel(step, env, sizes, decisions.get(step.kernel_id))
        for buf_name, value in step.outputs:
            if value in index:
                env[value] = from_numpy(outs[buf_name], index[value].type, sizes)
    result = tuple(env[o] for o in graph.outputs)
    return result[0] if len(result) == 1 else result
