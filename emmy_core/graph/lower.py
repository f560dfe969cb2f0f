"""Lowering a fused graph to loop programs: one kernel per compute node, layout as glue.

Each compute node becomes a `KernelStep`: the program (built by `emmy_core.ir.builders`
or `graph.kernels`), which graph value feeds which buffer, and for each dynamic axis of
the kernel the graph dimensions whose product it is (a matmul over tokens has `T = B*S`;
a row kernel has rows `B = B*S` or `B*heads*S`). A graph tensor is handed to a kernel
reshaped to the buffer's shape (row-major, so this is a view of contiguous data).

Layout ops (`reshape`, `transpose`, `permute`) are not kernels: they lower to
`LayoutStep`s that the executor applies with torch between kernels, materialising a
permuted tensor contiguously before the next kernel reads it. This is the simplest
correct path; a transpose feeding a matmul's right operand is already read in place
(`b_transposed`, from `canonicalize`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import torch

from emmy_core.graph import cuts
from emmy_core.graph import kernels as gk
from emmy_core.graph.decisions import Decision
from emmy_core.graph.errors import UnsupportedOp
from emmy_core.graph.ops import LAYOUT_OPS, Dim, Graph, Node
from emmy_core.ir import builders
from emmy_core.ir.builders import Dim as BDim
from emmy_core.ir.check import MAX_EXTENT
from emmy_core.ir.errors import IRError
from emmy_core.ir.ew_expr import parse_expr
from emmy_core.ir.identity import kernel_id
from emmy_core.ir.nodes import Program

STEP_FAMILIES = (  # what KernelStep.family names (ir.family.FAMILIES are the structural families)
    "matmul", "rmsnorm", "layernorm", "softmax", "elementwise", "rowreduce", "cast")


@dataclass(frozen=True)
class KernelStep:
    node: str  # the graph node this kernel computes
    family: str
    program: Program
    inputs: tuple[tuple[str, str], ...]  # (buffer, graph value)
    outputs: tuple[tuple[str, str], ...]  # (buffer, graph value)
    axes: tuple[tuple[str, tuple[Dim, ...]], ...]  # dynamic kernel axis -> graph dims it is the product of
    cuts: tuple[Decision, ...] = ()  # the fusion seams this kernel offers to cut (`cut:<seam>`)
    source: str = ""

    @property
    def kernel_id(self) -> str:
        return kernel_id(self.program)

    def sizes(self, graph_sizes: dict[str, int]) -> dict[str, int]:
        """Sizes of the kernel's dynamic axes when the graph's dynamic axes have `graph_sizes`."""
        return {a: prod(d if isinstance(d, int) else graph_sizes[d] for d in dims) for a, dims in self.axes}


@dataclass(frozen=True)
class LayoutStep:
    node: str
    op: str  # reshape | transpose | permute
    input: str
    attrs: tuple[tuple[str, object], ...]


Step = KernelStep | LayoutStep


@dataclass(frozen=True)
class Lowered:
    graph: Graph  # after the last pass
    stages: tuple[tuple[str, Graph], ...]  # (pass, graph after it), from ("capture", ...)
    steps: tuple[Step, ...]
    weights: dict[str, torch.Tensor] = field(compare=False, repr=False, default_factory=dict)

    @property
    def kernels(self) -> tuple[KernelStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, KernelStep))

    def identities(self) -> dict[str, list[KernelStep]]:
        """kernel_id -> the steps that run that kernel, in graph order (deduped by identity)."""
        out: dict[str, list[KernelStep]] = {}
        for k in self.kernels:
            out.setdefault(k.kernel_id, []).append(k)
        return out


def _hint(dims: tuple[Dim, ...], hints: dict[str, int]) -> int:
    """The expected size of a kernel axis made of graph dims (a hint: capped at the largest extent)."""
    return min(MAX_EXTENT, prod(d if isinstance(d, int) else hints[d] for d in dims))


def _static(d: Dim, node: Node, what: str) -> int:
    if not isinstance(d, int):
        raise UnsupportedOp(node.op, node.source, f"{what} is the dynamic axis {d}; it must be static here")
    return d


def _fresh(d: str, taken: list[str]) -> str:
    """`d` as a kernel axis's name, or `d_2`, `d_3`, ... where the kernel already has an axis of that name: a
    graph size given one symbol for two of a product's axes (`dynamic=True` where batch and length are
    equal at the first call) names two axes, each bound to the size."""
    name, n = d, 1
    while name in taken:
        n += 1
        name = f"{d}_{n}"
    return name


def _lower_matmul(n: Node, index: dict[str, Node], hints: dict[str, int]) -> KernelStep:
    a, b = index[n.inputs[0]].type, index[n.inputs[1]].type
    bt = bool(n.attr("b_transposed"))
    epilogue = tuple(n.attr("epilogue") or ())
    dtype = n.type.dtype
    axes: list[tuple[str, tuple[Dim, ...]]] = []
    if len(b.shape) == 2:  # a weight: every leading axis of a is a token axis
        lead = a.shape[:-1]
        k = _static(a.shape[-1], n, "the reduction axis")
        nn = _static(b.shape[0] if bt else b.shape[1], n, "the output axis")
        if any(isinstance(d, str) for d in lead):
            m: int | BDim = BDim("T", _hint(lead, hints))
            axes.append(("T", lead))
        else:
            m = prod(lead)  # type: ignore[arg-type]
        prog = builders.matmul(m, nn, k, dtype=dtype, epilogue=epilogue, b_transposed=bt)
    else:
        batch = a.shape[:-2]
        if b.shape[:-2] != batch:
            raise UnsupportedOp("matmul", n.source, f"batch axes {a.shape[:-2]} and {b.shape[:-2]} differ")
        dims = (*batch, a.shape[-2], n.type.shape[-1], a.shape[-1])
        bd: list[int | BDim] = []
        for d in dims:
            if isinstance(d, int):
                bd.append(d)
                continue
            name = _fresh(d, [named for named, _ in axes])  # one graph size may be two kernel axes
            axes.append((name, (d,)))
            bd.append(BDim(name, hints[d]))
        prog = builders.matmul(bd[-3], bd[-2], bd[-1], dtype=dtype, epilogue=epilogue, batch=tuple(bd[:-3]),
                               b_transposed=bt)
    reads = ["a", "b"] + [{"bias": "bias", "residual": "residual", "mul": "gate"}[s] for s in epilogue
                          if s in ("bias", "residual", "mul")]
    return KernelStep(n.name, "matmul", prog, tuple(zip(reads, n.inputs, strict=True)), (("y", n.name),),
                      tuple(axes), (cuts.cut_epilogue(prog),) if epilogue else (), n.source)


def _lower_row(n: Node, index: dict[str, Node], hints: dict[str, int], taps: dict[str, str]) -> KernelStep:
    x = index[n.inputs[0]]
    lead, row = x.type.shape[:-1], x.type.shape[-1]
    rows_hint = _hint(lead, hints)
    dtype = n.type.dtype
    axes: list[tuple[str, tuple[Dim, ...]]] = [("B", lead)]
    steps = tuple(str(s) for s in n.attr("epilogue") or ())
    found: list[Decision] = []
    if n.op == "rmsnorm":
        prologue = tuple(n.attr("prologue") or ())
        hidden, eps = _static(row, n, "the normalised axis"), float(n.attr("eps"))  # type: ignore[arg-type]
        rounded = bool(n.attr("weight_after_round"))
        bare = builders.rmsnorm(hidden, dtype, rows_hint, eps, prologue, rounded)
        prog = gk.with_row_epilogue(bare, steps)
        names = ["x", "res", "w"] if prologue else ["x", "w"]
        outs = [("y", n.name)]
        if prologue:
            outs.append(("h", taps.get(n.name, f"{n.name}__h")))
            plain = gk.with_row_epilogue(builders.rmsnorm(hidden, dtype, rows_hint, eps,
                                                          weight_after_round=rounded), steps)
            found.append(cuts.cut_rmsnorm_prologue(prog, plain, dtype))
        ins = tuple(zip(names, n.inputs, strict=True))
    elif n.op == "layernorm":
        bare = builders.layernorm(_static(row, n, "the normalised axis"), dtype, rows_hint,
                                  float(n.attr("eps")))  # type: ignore[arg-type]
        prog = gk.with_row_epilogue(bare, steps)
        ins, outs = tuple(zip(("x", "w", "bias"), n.inputs, strict=True)), [("y", n.name)]
    elif n.op == "softmax":
        scale = n.attr("scale")
        bare = _softmax(row, dtype, rows_hint, hints, scale)  # type: ignore[arg-type]
        prog = gk.with_row_epilogue(bare, steps)
        if not isinstance(row, int):
            axes.append(("C", (row,)))
        if scale is not None:
            plain = gk.with_row_epilogue(_softmax(row, dtype, rows_hint, hints, None), steps)
            found.append(cuts.cut_softmax_scale(prog, plain, dtype, float(scale)))  # type: ignore[arg-type]
        ins, outs = (("x", x.name),), [("y", n.name)]
    else:  # mean / sum over the last axis
        prog = gk.row_reduce(n.op, _static(row, n, "the reduced axis"), dtype, rows_hint)
        return KernelStep(n.name, "rowreduce", prog, (("x", x.name),), (("y", n.name),), tuple(axes), (),
                          n.source)
    if steps:
        found.append(cuts.cut_row_epilogue(prog, bare, steps))
    return KernelStep(n.name, n.op, prog, ins, tuple(outs), tuple(axes), tuple(found), n.source)


def _softmax(row: Dim, dtype: str, rows_hint: int, hints: dict[str, int], scale: float | None) -> Program:
    """The softmax kernel over a static row, or over a dynamic one (the sequence) as a dynamic axis C."""
    if isinstance(row, int):
        return builders.softmax(row, dtype, rows_hint, scale)
    static = builders.softmax(hints[row], dtype, rows_hint, scale)
    return gk.dynamic_row(static, "C", hints[row], "softmax", dtype, "" if scale is None else f"scale{scale!r}")


def split_rows_cols(shape: tuple[Dim, ...], need_last: bool) -> tuple[tuple[Dim, ...], int]:
    """(row dims, cols) viewing `shape` as [rows, cols]: cols the trailing static axes (just the last if asked)."""
    i = len(shape)
    while i > 0 and isinstance(shape[i - 1], int) and (not need_last or i == len(shape)):
        i -= 1
    cols = prod(shape[i:])  # type: ignore[arg-type]
    return shape[:i], int(cols)


def _lower_blocked(n: Node, index: dict[str, Node], hints: dict[str, int], kinds: tuple[str, ...],
                   expr: str) -> KernelStep:
    """An elementwise chain with a `tail` input or halves of the last axis: `[B, M, C]` (`gk.blocked_elementwise`),
    B the axes before the tail inputs' trailing axes, M those trailing axes less the last."""
    names = [f"x{i}" for i in range(len(n.inputs))]
    out = n.type.shape
    if not isinstance(out[-1], int):
        raise UnsupportedOp("elementwise", n.source, "halves or a tail broadcast of a dynamic last axis")
    span = _tail_span(n, index, kinds)
    lead_dims = out[:len(out) - span] if span else out[:-1]
    mid_dims = out[len(out) - span:-1] if span else ()
    axes: list[tuple[str, tuple[Dim, ...]]] = [("B", lead_dims)]
    mid: int | BDim | None = None
    if span:
        if all(isinstance(d, int) for d in mid_dims):
            mid = prod(mid_dims)  # type: ignore[arg-type]
        else:
            mid = BDim("M", _hint(mid_dims, hints))
            axes.append(("M", mid_dims))
    try:
        prog = gk.blocked_elementwise(expr, dict(zip(names, kinds, strict=True)), n.type.dtype,
                                      _hint(lead_dims, hints), mid, out[-1])
    except IRError as exc:
        raise UnsupportedOp("elementwise", n.source, str(exc)) from None
    return KernelStep(n.name, "elementwise", prog, tuple(zip(names, n.inputs, strict=True)), (("y", n.name),),
                      tuple(axes), (), n.source)


def _tail_span(n: Node, index: dict[str, Node], kinds: tuple[str, ...]) -> int | None:
    """How many trailing output axes the `tail` inputs of an elementwise node cover (None: no tail input)."""
    spans = set()
    for name, kind in zip(n.inputs, kinds, strict=True):
        if kind == "tail":
            shape = index[name].type.shape
            lead = next(i for i, d in enumerate(shape) if d != 1 or i == len(shape) - 1)
            spans.add(len(shape) - lead)
    if len(spans) > 1:
        raise UnsupportedOp("elementwise", n.source, "tail inputs over different numbers of trailing axes")
    return spans.pop() if spans else None


def _lower_permuted(n: Node, index: dict[str, Node], hints: dict[str, int], kinds: tuple[str, ...],
                    expr: str) -> KernelStep:
    """An elementwise chain reading an input through a permutation: one kernel axis per output axis
    (`gk.permuted_elementwise`), each dynamic one the graph dimension it is."""
    names = [f"x{i}" for i in range(len(n.inputs))]
    out = n.type.shape
    if not isinstance(out[-1], int):
        raise UnsupportedOp("elementwise", n.source, "a permuted read with a dynamic last axis")
    outer: list[int | BDim] = []
    axes: list[tuple[str, tuple[Dim, ...]]] = []
    for i, d in enumerate(out[:-1]):
        if isinstance(d, int):
            outer.append(d)
        else:
            outer.append(BDim(f"D{i}", hints[d]))
            axes.append((f"D{i}", (d,)))
    perms = {names[i]: tuple(p) for i, p in n.attr("perms")}  # type: ignore[union-attr,misc]
    try:
        prog = gk.permuted_elementwise(expr, dict(zip(names, kinds, strict=True)), perms, n.type.dtype,
                                       tuple(outer), out[-1], _tail_span(n, index, kinds) or 0)
    except IRError as exc:
        raise UnsupportedOp("elementwise", n.source, str(exc)) from None
    return KernelStep(n.name, "elementwise", prog, tuple(zip(names, n.inputs, strict=True)), (("y", n.name),),
                      tuple(axes), (), n.source)


def _lower_elementwise(n: Node, index: dict[str, Node], hints: dict[str, int]) -> KernelStep:
    kinds = tuple(str(k) for k in n.attr("bcast") or ())
    expr = str(n.attr("expr"))
    if n.attr("perms"):
        return _lower_permuted(n, index, hints, kinds, expr)
    if "tail" in kinds or gk.uses_halves(parse_expr(expr)):
        return _lower_blocked(n, index, hints, kinds, expr)
    names = [f"x{i}" for i in range(len(n.inputs))]
    broadcast = any(k != "full" for k in kinds)
    if broadcast and not isinstance(n.type.shape[-1], int):
        raise UnsupportedOp("elementwise", n.source, "a broadcast over a dynamic last axis")
    lead, cols = split_rows_cols(n.type.shape, need_last=broadcast)
    rows_hint = _hint(lead, hints)
    if broadcast:
        prog = gk.broadcast_elementwise(expr, dict(zip(names, kinds, strict=True)), n.type.dtype,
                                                rows_hint, cols)
    else:
        prog = builders.elementwise(expr, n.type.dtype, rows_hint, cols)
    return KernelStep(n.name, "elementwise", prog, tuple(zip(names, n.inputs, strict=True)), (("y", n.name),),
                      (("B", lead),), (), n.source)


def _lower_cast(n: Node, index: dict[str, Node], hints: dict[str, int]) -> KernelStep:
    """A conversion between float types: one pass over the tensor viewed as [rows, cols]."""
    x = index[n.inputs[0]]
    lead, cols = split_rows_cols(n.type.shape, need_last=False)
    try:
        prog = gk.cast(x.type.dtype, n.type.dtype, _hint(lead, hints), cols)
    except IRError as exc:
        raise UnsupportedOp("cast", n.source, str(exc)) from None
    return KernelStep(n.name, "cast", prog, (("x", x.name),), (("y", n.name),), (("B", lead),), (), n.source)


def lower(graph: Graph, stages: tuple[tuple[str, Graph], ...] = (), weights: dict | None = None) -> Lowered:
    """Kernels and layout steps for a graph that went through the pipeline's passes.

    A node like one lowered before (same operator, attributes and types: a model's repeated layers)
    reuses that kernel, its axes and its cuts, with its own values bound: building and checking a
    loop program costs milliseconds, and a deep model repeats a handful of them.
    """
    index, hints = graph.index(), graph.hints()
    taps = {n.inputs[0]: n.name for n in graph.nodes if n.op == "tap"}
    steps: list[Step] = []
    seen: dict[tuple, KernelStep] = {}
    for n in graph.compute():
        if n.op == "tap":
            continue
        if n.op in LAYOUT_OPS:
            steps.append(LayoutStep(n.name, n.op, n.inputs[0], n.attrs))
            continue
        key = (n.op, n.attrs, n.type, tuple(index[i].type for i in n.inputs))
        like = seen.get(key)
        if like is not None:
            steps.append(_bound_to(like, n, taps))
            continue
        if n.op == "matmul":
            step = _lower_matmul(n, index, hints)
        elif n.op in ("rmsnorm", "layernorm", "softmax", "mean", "sum"):
            step = _lower_row(n, index, hints, taps)
        elif n.op == "elementwise":
            step = _lower_elementwise(n, index, hints)
        elif n.op == "cast":
            step = _lower_cast(n, index, hints)
        else:
            raise UnsupportedOp(n.op, n.source, "no kernel lowers it (run the pipeline's passes first)")
        if _positional(step, n, taps):
            seen[key] = step
        steps.append(step)
    return Lowered(graph, stages or (("capture", graph),), tuple(steps), dict(weights or {}))


def _outputs(n: Node, taps: dict[str, str], buffers: tuple[str, ...]) -> tuple[tuple[str, str], ...]:
    """The values a kernel of node `n` writes: its result, and the residual sum of a prologue ("h")."""
    values = {"y": n.name, "h": taps.get(n.name, f"{n.name}__h")}
    return tuple((b, values[b]) for b in buffers)


def _positional(step: KernelStep, n: Node, taps: dict[str, str]) -> bool:
    """Whether `step` binds the i-th input buffer to `n`'s i-th input and writes y (and h) of `n` (then a
    node like `n` may reuse it with its own values)."""
    outs = tuple(b for b, _ in step.outputs)
    return (all(v == n.inputs[i] for i, (_, v) in enumerate(step.inputs)) and set(outs) <= {"y", "h"} and
            step.outputs == _outputs(n, taps, outs))


def _bound_to(like: KernelStep, n: Node, taps: dict[str, str]) -> KernelStep:
    """`like`'s kernel, axes and cuts, bound to node `n`'s values."""
    return KernelStep(n.name, like.family, like.program, tuple((b, n.inputs[i]) for i, (b, _) in enumerate(like.inputs)),
                      _outputs(n, taps, tuple(b for b, _ in like.outputs)), like.axes, like.cuts, n.source)
