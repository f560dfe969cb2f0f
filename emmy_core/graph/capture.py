"""Capture an `nn.Module` with example inputs as a graph of ops (`ops.Graph`).

Why torch.fx symbolic tracing and not torch.export: symbolic tracing keeps `nn.Linear`,
`nn.RMSNorm` and `nn.LayerNorm` as leaf module calls with their parameters, so the
graph speaks the vocabulary the compiler lowers (torch.export decomposes them into
ATen ops that differ between torch versions, flattens `linear` into `addmm` over 2-D
views, and needs dynamic-shape specifications); it runs in milliseconds; and with
`record_stack_traces` each node carries the model line that made it, which an
`UnsupportedOp` names. Shape reads (`x.shape`, `x.size()`) are graph nodes under fx,
so the dynamic axes `B` and `S` are propagated symbolically by the rules in
`translate.py`, then checked against `ShapeProp`'s concrete shapes at the example sizes.
"""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import re
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch
import torch.fx as fx
from torch import nn
from torch.fx.passes.shape_prop import ShapeProp

from emmy_core.graph.errors import GraphError, UnsupportedOp
from emmy_core.graph.ops import DYNAMIC_AXES, Graph, TensorType
from emmy_core.graph.translate import Translator, ir_dtype

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ([^\n]+)\n +([^\n]*)')


@dataclass(frozen=True)
class Captured:
    """A captured graph and the weights its `param` nodes name (by parameter path)."""

    graph: Graph
    weights: dict[str, torch.Tensor] = field(compare=False, repr=False)


def source_line(node: fx.Node, fallback: str = "") -> str:
    """`file:line: code` of the innermost model frame that created `node` (`fallback` when none is a model's)."""
    trace = node.stack_trace or node.meta.get("stack_trace") or ""
    frames = [m for m in _FRAME.finditer(trace) if not _in_torch(m.group(1))]
    if not frames:
        return fallback
    path, line, _, code = frames[-1].groups()
    return f"{path}:{line}: {code.strip()}"


def forward_line(module: nn.Module) -> str:
    """`file:line: def forward(...)` of the module's forward, from inspect ('' when it has no source)."""
    try:
        fn = type(module).forward
        path = inspect.getsourcefile(fn) or "<unknown file>"
        lines, start = inspect.getsourcelines(fn)
    except (OSError, TypeError):
        return ""
    return f"{path}:{start}: {lines[0].strip()}"


def _in_torch(path: str) -> bool:
    return os.path.abspath(path).startswith(os.path.dirname(os.path.abspath(torch.__file__)) + os.sep)


def default_dynamic(example_inputs: Sequence[torch.Tensor]) -> list[dict[int, str]]:
    """Dimension 0 of every input of rank >= 2 is `B`; dimension 1 of every input of rank >= 3 is `S`."""
    out: list[dict[int, str]] = []
    for t in example_inputs:
        dims: dict[int, str] = {}
        if t.dim() >= 2:
            dims[0] = "B"
        if t.dim() >= 3:
            dims[1] = "S"
        out.append(dims)
    return out


def capture(
    module: nn.Module,
    example_inputs: Sequence[torch.Tensor],
    dynamic: Sequence[Mapping[int, str]] | None = None,
    name: str | None = None,
) -> Captured:
    """Traces `module`, names its dynamic axes, and translates every node; raises `UnsupportedOp`."""
    example_inputs = tuple(example_inputs)
    for i, t in enumerate(example_inputs):
        if not isinstance(t, torch.Tensor):
            raise GraphError(f"example input {i} is a {type(t).__name__}, not a tensor")
    dyn = [dict(d) for d in dynamic] if dynamic is not None else default_dynamic(example_inputs)
    if len(dyn) != len(example_inputs):
        raise GraphError(f"dynamic names {len(dyn)} inputs but there are {len(example_inputs)} example inputs")
    hints: dict[str, int] = {}
    for i, (t, dims) in enumerate(zip(example_inputs, dyn, strict=True)):
        for d, axis in dims.items():
            if axis not in DYNAMIC_AXES:
                raise GraphError(f"input {i}: dynamic axis {axis!r} is not one of {', '.join(DYNAMIC_AXES)}")
            if not 0 <= d < t.dim():
                raise GraphError(f"input {i}: dimension {d} out of range for rank {t.dim()}")
            size = int(t.shape[d])
            if hints.setdefault(axis, size) != size:
                raise GraphError(f"input {i}: axis {axis} is {size} here but {hints[axis]} in another input")

    if not isinstance(module, nn.Module):
        raise GraphError(f"the model must be a torch.nn.Module, got {type(module).__name__}")
    tracer = fx.Tracer()
    tracer.record_stack_traces = True
    try:
        fx_graph = tracer.trace(module)
    except torch.fx.proxy.TraceError as exc:
        raise GraphError(f"cannot trace {type(module).__name__}: {exc}") from exc
    except GraphError:
        raise
    except (Exception, SystemExit) as exc:  # the model's own forward, run on stand-ins: named, not traced back
        raise GraphError(f"{name or type(module).__name__}: forward {_raised(exc)}") from None
    gm = fx.GraphModule(tracer.root, fx_graph)
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad(), contextlib.redirect_stderr(io.StringIO()):  # ShapeProp prints a traceback first
            ShapeProp(gm).propagate(*example_inputs)
    except SystemExit as exc:
        raise GraphError(f"{name or type(module).__name__}: forward {_raised(exc)}") from None
    except Exception as exc:  # ShapeProp wraps the model's own error (any type) in a RuntimeError
        raise GraphError(_does_not_run(module, hints, exc)) from None
    finally:
        module.train(was_training)

    tr = Translator(gm, hints)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        raise GraphError(f"forward takes {len(placeholders)} inputs; {len(example_inputs)} example inputs given")
    for n, t, dims in zip(placeholders, example_inputs, dyn, strict=True):
        shape = tuple(dims.get(d, int(s)) for d, s in enumerate(t.shape))
        tr.add_input(n.name, TensorType(shape, ir_dtype(t.dtype, n.name)))
        tr.env[n] = n.name
    outputs: tuple[str, ...] = ()
    fallback = forward_line(module)  # where no frame of the trace is the model's (a torch module traced whole)
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            continue
        src = source_line(n, fallback)
        if n.op == "output":
            outputs = tr.outputs(n.args[0], src)
            continue
        tr.translate(n, src)
        _check_shape(tr, n, src)
    graph = Graph(
        name=name or type(module).__name__,
        nodes=tuple(tr.nodes),
        outputs=outputs,
        sizes=tuple(sorted(hints.items())),
    )
    return Captured(graph=graph, weights=tr.weights)


def _raised(exc: BaseException) -> str:
    """What the model's code did: `raised ValueError: text` or `called sys.exit(7)`."""
    if isinstance(exc, SystemExit):
        return f"called sys.exit({repr(exc.code)[:60]})"
    text = str(exc).strip().splitlines()
    return f"raised {type(exc).__name__}: {text[0][:300]}" if text else f"raised {type(exc).__name__}"


def _does_not_run(module: nn.Module, hints: Mapping[str, int], exc: Exception) -> str:
    """The model's own error (not ShapeProp's wrapper), at the model line that raised it."""
    real = exc.__cause__ if isinstance(exc.__cause__, Exception) else exc
    made = [m for m in _FRAME.finditer(str(exc)) if not _in_torch(m.group(1))]  # the node's model line
    ran = [f for f in traceback.extract_tb(real.__traceback__) if not _in_torch(f.filename)]
    if made:
        where = f" at {made[-1].group(1)}:{made[-1].group(2)}: {made[-1].group(4).strip()}"
    else:
        where = f" at {ran[-1].filename}:{ran[-1].lineno}: {(ran[-1].line or '').strip()}" if ran else ""
    text = str(real).strip()
    first = f"{type(real).__name__}: {text.splitlines()[0][:300]}" if text else type(real).__name__
    return (f"{type(module).__name__} does not run on stand-ins of its example inputs with dynamic axes at "
            f"{dict(hints)}{where}: {first} (a dynamic axis used as a constant?)")


def _check_shape(tr: Translator, n: fx.Node, src: str) -> None:
    """The symbolic shape at the example sizes must be the shape torch computed."""
    value = tr.env.get(n)
    meta = n.meta.get("tensor_meta")
    if not isinstance(value, str) or meta is None or not hasattr(meta, "shape"):
        return
    node = tr.node(value)
    got = node.type.concrete(tr.hints)
    if got != tuple(meta.shape):
        raise UnsupportedOp(
            tr.describe(n), src, f"shape {node.type.text()} at {tr.hints} is {got} but torch computed "
            f"{tuple(meta.shape)} (a dynamic axis used as a constant?)"
        )
    dtype = ir_dtype(meta.dtype, n.name)
    if dtype != node.type.dtype:
        raise UnsupportedOp(tr.describe(n), src, f"computes {dtype} where the graph expects {node.type.dtype}")
