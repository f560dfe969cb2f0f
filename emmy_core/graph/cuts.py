"""Fusion cuts: the unfused kernels a fused kernel splits back into, as `Decision`s.

A cut is a structural decision `cut:<seam>` (DESIGN section 4) built with the same
`Decision` class as a split, so its pieces share the parent's buffer namespace and are
checked the same way. The intermediate a cut introduces is stored in the model's data
type, as the unfused graph would store it.

- `cut:epilogue` (matmul family, from `fuse_epilogue`): the plain product into `mm`,
  then one elementwise kernel that runs the parent's epilogue over `mm` and stores `y`.
  Built from the program alone (its family shape), so any matmul with an epilogue cuts.
- `cut:prologue` (row family, from `fuse_norm`): for an rmsnorm with the residual
  prologue, `h = x + res` (the parent's own output `h`), then the plain rmsnorm of `h`;
  for a softmax with a scale, `xs = x * scale`, then the plain softmax of `xs`.
- `cut:epilogue` of a row kernel (from `fuse_norm`): the norm without its epilogue into
  `yn`, then the epilogue steps as an elementwise kernel into `y`.
"""

from __future__ import annotations

from dataclasses import replace

from emmy_core.graph.decisions import Decision
from emmy_core.graph.kernels import apply_steps
from emmy_core.ir.builders import acc_dtype, kernel_name, to
from emmy_core.ir.check import validate
from emmy_core.ir.errors import IRError
from emmy_core.ir.family import MatmulShape, classify
from emmy_core.ir.nodes import (
    Axis,
    Binary,
    Buffer,
    Cast,
    Const,
    Expr,
    Let,
    Load,
    Loop,
    Program,
    Reduce,
    Ref,
    Stmt,
    Store,
    Unary,
)
from emmy_core.knobs.vocab import format_cut

EPILOGUE = "epilogue"
PROLOGUE = "prologue"


def _rename_expr(e: Expr, names: dict[str, str]) -> Expr:
    if isinstance(e, Load):
        return Load(names.get(e.buffer, e.buffer), e.index)
    if isinstance(e, Cast):
        return Cast(e.dtype, _rename_expr(e.x, names))
    if isinstance(e, Unary):
        return Unary(e.op, _rename_expr(e.x, names))
    if isinstance(e, Binary):
        return Binary(e.op, _rename_expr(e.a, names), _rename_expr(e.b, names))
    return e


def _rename_stmt(s: Stmt, names: dict[str, str]) -> Stmt:
    if isinstance(s, Loop):
        return Loop(s.var, s.axis, tuple(_rename_stmt(x, names) for x in s.body))
    if isinstance(s, Let):
        return Let(s.name, s.dtype, _rename_expr(s.value, names))
    if isinstance(s, Reduce):
        return replace(s, body=_rename_expr(s.body, names))
    return Store(names.get(s.buffer, s.buffer), s.index, _rename_expr(s.value, names))


def rename_buffers(program: Program, names: dict[str, str], name: str) -> Program:
    """`program` with buffers renamed (old -> new) and a new kernel name."""
    buffers = tuple(replace(b, name=names.get(b.name, b.name)) for b in program.buffers)
    body = tuple(_rename_stmt(s, names) for s in program.body)
    out = Program(name, program.axes, buffers, body)
    validate(out)
    return out


def _nest(loops: tuple[tuple[str, str], ...], body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    for var, axis in reversed(loops):
        body = (Loop(var, axis, body),)
    return body


def _innermost(program: Program) -> tuple[Stmt, ...]:
    body = program.body
    while len(body) == 1 and isinstance(body[0], Loop):
        body = body[0].body
    return body


def _loads(e: Expr) -> set[str]:
    if isinstance(e, Load):
        return {e.buffer}
    if isinstance(e, Cast | Unary):
        return _loads(e.x)
    if isinstance(e, Binary):
        return _loads(e.a) | _loads(e.b)
    return set()


def cut_epilogue(parent: Program) -> Decision:
    """`cut:epilogue` of a matmul with an epilogue: plain product into `mm`, then the epilogue over `mm`."""
    shape = classify(parent)
    if not isinstance(shape, MatmulShape) or shape.window is not None or shape.parts is not None:
        raise IRError(f"cut:{EPILOGUE} needs an unsplit matmul-family kernel; {parent.name} is not one")
    if not shape.epilogue:
        raise IRError(f"cut:{EPILOGUE} of {parent.name}: it has no epilogue to cut off")
    taken = {b.name for b in parent.buffers}
    mm = next(n for n in ("mm", "mm_out", "mm_tmp") if n not in taken)
    red = next(s for s in _innermost(parent) if isinstance(s, Reduce))
    out = parent.buffer(shape.stores[0].buffer)
    index = shape.stores[0].index
    product = Program(
        kernel_name(parent.name, "cut_mm"), parent.axes,
        (parent.buffer(shape.a), parent.buffer(shape.b), Buffer(mm, "out", out.dtype, out.shape)),
        _nest(shape.loops, (red, Store(mm, index, to(out.dtype, Ref(red.name), red.dtype)))),
    )
    t = red.dtype
    body = (Let(red.name, t, to(t, Load(mm, index), out.dtype)), *shape.epilogue, *shape.stores)
    read = set().union(*(_loads(s.value) for s in body if isinstance(s, Let | Store)))
    buffers = (Buffer(mm, "in", out.dtype, out.shape), *(b for b in parent.inputs if b.name in read),
               *parent.outputs)
    epilogue = Program(kernel_name(parent.name, "cut_ep"), _used_axes(parent, buffers), buffers,
                       _nest(shape.loops, body))
    return Decision(parent, format_cut(EPILOGUE), (validate(product), validate(epilogue)))  # type: ignore[arg-type]


def _used_axes(parent: Program, buffers: tuple[Buffer, ...]) -> tuple[Axis, ...]:
    used = {a for b in buffers for a in b.shape}
    return tuple(a for a in parent.axes if a.name in used)


def cut_rmsnorm_prologue(parent: Program, plain: Program, dtype: str) -> Decision:
    """`cut:prologue` of an rmsnorm with the residual prologue: `h = x + res`, then `plain` (no prologue) of h."""
    if {b.name for b in parent.buffers} != {"x", "res", "w", "y", "h"}:
        raise IRError(f"cut:{PROLOGUE} of {parent.name}: not an rmsnorm with the residual prologue")
    rows, row = parent.axis("B"), parent.axis("H")
    add = Program(
        kernel_name("residual_add", dtype, f"H{row.extent}"), (rows, row),
        (Buffer("x", "in", dtype, ("B", "H")), Buffer("res", "in", dtype, ("B", "H")),
         Buffer("h", "out", dtype, ("B", "H"))),
        _nest((("i", "B"), ("j", "H")), (Store("h", ("i", "j"), Binary("add", Load("x", ("i", "j")),
                                                                      Load("res", ("i", "j")))),)),
    )
    norm = rename_buffers(plain, {"x": "h"}, kernel_name(plain.name, "of_h"))
    return Decision(parent, format_cut(PROLOGUE), (validate(add), norm))  # type: ignore[arg-type]


def cut_row_epilogue(parent: Program, bare: Program, steps: tuple[str, ...]) -> Decision:
    """`cut:epilogue` of a row kernel with epilogue `steps`: `bare` (no epilogue) into `yn`, then the steps."""
    y = parent.buffer("y")
    t = acc_dtype(y.dtype)
    norm = rename_buffers(bare, {"y": "yn"}, kernel_name(bare.name, "to_yn"))
    rows, row = y.shape
    value = to(y.dtype, apply_steps(to(t, Load("yn", ("i", "j")), y.dtype), steps, t), t)
    buffers = (Buffer("yn", "in", y.dtype, y.shape), y)
    ep = Program(kernel_name(parent.name, "cut_ep"), _used_axes(parent, buffers), buffers,
                 _nest((("i", rows), ("j", row)), (Store("y", ("i", "j"), value),)))
    return Decision(parent, format_cut(EPILOGUE), (norm, validate(ep)))  # type: ignore[arg-type]


def cut_softmax_scale(parent: Program, plain: Program, dtype: str, scale: float) -> Decision:
    """`cut:prologue` of a scaled softmax: `xs = x * scale`, then `plain` (the unscaled softmax) of `xs`."""
    rows, cols = parent.axis("B"), parent.axis("C")
    t = acc_dtype(dtype)
    value = to(dtype, Binary("mul", to(t, Load("x", ("i", "j")), dtype), Const(t, scale)), t)
    tag = "Cdyn" if cols.dynamic else f"C{cols.extent}"
    pre = Program(
        kernel_name("scale", dtype, tag, f"{scale!r}"), (rows, cols),
        (Buffer("x", "in", dtype, ("B", "C")), Buffer("xs", "out", dtype, ("B", "C"))),
        _nest((("i", "B"), ("j", "C")), (Store("xs", ("i", "j"), value),)),
    )
    soft = rename_buffers(plain, {"x": "xs"}, kernel_name(plain.name, "of_xs"))
    return Decision(parent, format_cut(PROLOGUE), (validate(pre), soft))  # type: ignore[arg-type]
