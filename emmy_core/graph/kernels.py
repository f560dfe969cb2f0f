"""Loop programs the graph needs beyond `emmy_core.ir.builders`, built the same way.

- `broadcast_elementwise`: the elementwise language of the builders over inputs that are
  `full` [B, C], `col` [C] (a vector over the row) or `row` [B] (one value per row);
- `row_reduce`: `sum` or `mean` of each row into `y[B]`;
- `dynamic_row`: a row kernel whose row axis is dynamic (softmax over the sequence),
  from the builder's static program with the row axis made dynamic and renamed;
- `with_row_epilogue`: a row kernel whose stored result goes through elementwise steps
  (activations, scale) before the store: the normalisation epilogue `fuse_norm` folds.
Each returns a validated `Program` named by `builders.kernel_name` from the static
shape only, so identity does not depend on an expected size.
"""

from __future__ import annotations

from dataclasses import replace

from emmy_core.ir.builders import acc_dtype, activation, ew_tag, kernel_name, lower_expr, parse_expr, to
from emmy_core.ir.check import validate
from emmy_core.ir.errors import IRError
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
)

_INDEX = {"full": ("i", "j"), "col": ("j",), "row": ("i",)}
_SHAPE = {"full": ("B", "C"), "col": ("C",), "row": ("B",)}


def broadcast_elementwise(expr: str, kinds: dict[str, str], dtype: str, batch_hint: int, cols: int) -> Program:
    """y[B, C] = expr, each input read as its kind says (full, col or row); computed in f32."""
    t = acc_dtype(dtype)
    tree = parse_expr(expr)
    names: list[str] = []

    def load(name: str) -> Expr:
        kind = kinds.get(name)
        if kind not in _INDEX:
            raise IRError(f"elementwise input {name!r} has no broadcast kind (full, col, row)")
        return to(t, Load(name, _INDEX[kind]), dtype)

    value = lower_expr(tree, load, t, names)
    if "y" in names:
        raise IRError("elementwise: 'y' names the result and cannot be an input")
    buffers = [Buffer(n, "in", dtype, _SHAPE[kinds[n]]) for n in names]
    buffers.append(Buffer("y", "out", dtype, ("B", "C")))
    body = (Loop("i", "B", (Loop("j", "C", (Store("y", ("i", "j"), to(dtype, value, t)),)),)),)
    tag = "_".join(f"{n}{kinds[n][0]}" for n in names if kinds[n] != "full")
    name = kernel_name("ewb", dtype, f"C{cols}", tag, ew_tag(tree))
    prog = Program(name, (Axis("B", None, batch_hint), Axis("C", cols)), tuple(buffers), body)
    validate(prog)
    return prog


def row_reduce(op: str, cols: int, dtype: str, batch_hint: int) -> Program:
    """y[B] = sum (or mean) over C of x[B, C], accumulated in f32."""
    if op not in ("sum", "mean"):
        raise IRError(f"row_reduce takes sum or mean, not {op!r}")
    t = acc_dtype(dtype)
    value: Expr = Ref("s")
    if op == "mean":
        value = Binary("div", value, Const(t, cols))
    body = (Loop("i", "B", (
        Reduce("s", t, "sum", "j", "C", to(t, Load("x", ("i", "j")), dtype)),
        Store("y", ("i",), to(dtype, value, t)),
    )),)
    buffers = (Buffer("x", "in", dtype, ("B", "C")), Buffer("y", "out", dtype, ("B",)))
    prog = Program(kernel_name("rowreduce", op, dtype, f"C{cols}"), (Axis("B", None, batch_hint), Axis("C", cols)),
                   buffers, body)
    validate(prog)
    return prog


def dynamic_row(program: Program, row_axis: str, hint: int, family: str, *tags: object) -> Program:
    """`program` with its static row axis made dynamic (expected size `hint`), renamed from its family and tags.

    Only for kernels whose body never uses the row length as a constant (softmax does not).
    """
    axes = tuple(Axis(a.name, None, hint) if a.name == row_axis else a for a in program.axes)
    name = kernel_name(family, *tags, f"{row_axis}dyn")
    out = replace(program, name=name, axes=axes)
    validate(out)
    return out


ROW_EPILOGUE_STEPS = ("relu", "gelu", "gelu_tanh", "silu")  # and scale:<float>


def _step_expr(step: str, x: Expr, t: str) -> Expr:
    if step.startswith("scale:"):
        return Binary("mul", x, Const(t, float(step[6:])))
    if step not in ROW_EPILOGUE_STEPS:
        raise IRError(f"unknown row epilogue step {step[:40]!r}; known: {', '.join(ROW_EPILOGUE_STEPS)}, scale:<f>")
    return activation(step, x, t)


def apply_steps(x: Expr, steps: tuple[str, ...], t: str) -> Expr:
    """`x` (of type `t`) through the epilogue steps, in order."""
    for step in steps:
        x = _step_expr(step, x, t)
    return x


def _with_epilogue(s: Stmt, out: str, steps: tuple[str, ...], dtype: str, t: str) -> tuple[Stmt, ...]:
    if isinstance(s, Loop):
        body: list[Stmt] = []
        for x in s.body:
            body.extend(_with_epilogue(x, out, steps, dtype, t))
        return (Loop(s.var, s.axis, tuple(body)),)
    if isinstance(s, Store) and s.buffer == out:
        inner = s.value.x if isinstance(s.value, Cast) and dtype != t else s.value
        return (Let("epi", t, inner), Store(s.buffer, s.index, to(dtype, apply_steps(Ref("epi"), steps, t), t)))
    return (s,)


def with_row_epilogue(program: Program, steps: tuple[str, ...]) -> Program:
    """A row kernel whose stored result `y` goes through elementwise `steps` first (computed in f32)."""
    if not steps:
        return program
    dtype = program.buffer("y").dtype
    t = acc_dtype(dtype)
    body: list[Stmt] = []
    for s in program.body:
        body.extend(_with_epilogue(s, "y", steps, dtype, t))
    tags = [f"scale{float(s[6:])!r}" if s.startswith("scale:") else s for s in steps]
    out = Program(kernel_name(program.name, "ep", *tags), program.axes, program.buffers, tuple(body))
    validate(out)
    return out
