"""Builders of the day-one kernel families as loop programs.

Families (DESIGN section 3): matrix products with a fused epilogue (`matmul`), row
reductions with their normalisation (`rmsnorm`, `softmax`, `layernorm`) and
elementwise chains (`elementwise`). Every builder returns a validated `Program`
whose name is a deterministic function of the family and the static shape (never of
an expected size), so identical kernels share one identity.

Axis convention. A size is either an `int` (a static axis) or a `Dim`:
`Dim("S", 128)` is a dynamic axis `S` with expected size 128; `Dim("H", extent=12)`
names a static axis. A plain `str` also names a dynamic axis when `hints` gives its
expected size (`matmul(m="B", n=64, k=64, hints={"B": 8})`). Unnamed static axes of
a matmul are called M, N, K (batch axes G0, G1, ...). Row kernels have rows on the
dynamic axis `B` (expected size `batch_hint`) and the row on a static axis.

Arithmetic: inputs are cast to f32 (f64 stays f64), everything is computed in that
accumulator type, and the result is cast back to `dtype` on the store. Buffers: the
result is always `y`; matmul reads `a`, `b` (+ `bias`, `residual`, `gate`), the row
kernels `x` (+ `res`), `w`, `bias`; an elementwise kernel reads the names its expression uses.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from emmy_core.ir.check import validate
from emmy_core.ir.errors import IRError
from emmy_core.ir.ew_expr import EW_FUNCTIONS, HALF_FUNCTIONS, EwTree, ew_tag, parse_expr
from emmy_core.ir.names import name_problem
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
from emmy_core.ir.vocab import FLOAT_DTYPES

EPILOGUE_STEPS = ("bias", "relu", "gelu", "gelu_tanh", "silu", "residual", "scale", "mul")
ROW_PROLOGUES = ("residual",)
MAX_NAME = 64
SQRT1_2 = 1.0 / math.sqrt(2.0)
GELU_TANH_C = math.sqrt(2.0 / math.pi)


@dataclass(frozen=True)
class Dim:
    """A named axis: dynamic with an expected size `hint`, or static with `extent`."""

    name: str
    hint: int | None = None
    extent: int | None = None

    def axis(self) -> Axis:
        if (self.hint is None) == (self.extent is None):
            raise IRError(f"axis {self.name!r}: give exactly one of an expected size or an extent")
        return Axis(self.name, self.extent, self.hint)


Size = int | str | Dim


def kernel_name(*parts: object) -> str:
    """A valid kernel name from parts, deterministic; a long one keeps a prefix and a digest of the rest."""
    raw = "_".join(str(p) for p in parts if str(p) != "")
    text = re.sub(r"[^A-Za-z0-9_]", "", raw.replace(".", "p").replace("-", "m").replace(":", "_"))
    if not text or not (text[0].isalpha()):
        text = "k_" + text
    text = re.sub(r"_+", "_", text)
    if len(text) > MAX_NAME:
        digest = hashlib.sha256(raw.encode("utf-8")).hexdigest()[:12]
        text = f"{text[:MAX_NAME - 13].rstrip('_')}_{digest}"
    problem = name_problem(text)
    if problem is not None:
        raise IRError(f"cannot make a kernel name from {raw[:80]!r}: {problem}")
    return text


def _float_dtype(dtype: str) -> str:
    if dtype not in FLOAT_DTYPES:
        raise IRError(f"data type {str(dtype)[:20]!r} is not a floating type: {', '.join(sorted(FLOAT_DTYPES))}")
    return dtype


def acc_dtype(dtype: str) -> str:
    """The type a kernel of `dtype` computes in: f64 for f64, f32 otherwise."""
    return "f64" if dtype == "f64" else "f32"


def to(dtype: str, e: Expr, from_dtype: str) -> Expr:
    """`e` (of `from_dtype`) as `dtype`; no cast when they agree."""
    return e if dtype == from_dtype else Cast(dtype, e)


def c(dtype: str, value: float) -> Const:
    return Const(dtype, value)


def _axis_of(size: Size, default_name: str, hints: Mapping[str, int] | None, what: str) -> Axis:
    if isinstance(size, bool):
        raise IRError(f"{what}: a size is an int, a str or a Dim, not a bool")
    if isinstance(size, int):
        return Axis(default_name, size)
    if isinstance(size, Dim):
        return size.axis()
    if isinstance(size, str):
        if not hints or size not in hints:
            raise IRError(f"{what}: dynamic axis {size!r} needs its expected size in hints={{{size!r}: N}}")
        return Axis(size, None, hints[size])
    raise IRError(f"{what}: a size is an int, a str or a Dim, not {type(size).__name__}")


def _declare(axes: list[Axis], ax: Axis) -> None:
    for have in axes:
        if have.name == ax.name:
            if have != ax:
                raise IRError(f"axis {ax.name!r} is given twice with different sizes")
            return
    axes.append(ax)


def _axis_tag(ax: Axis) -> str:
    return f"{ax.name}{ax.extent}" if ax.extent is not None else f"{ax.name}dyn"


def _nest(vars_axes: list[tuple[str, str]], body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    for var, axis in reversed(vars_axes):
        body = (Loop(var, axis, body),)
    return body


# ---- activations, shared by the epilogue and the elementwise language ------------------------------


def activation(name: str, x: Expr, t: str) -> Expr:
    """An activation of `x` (type `t`): relu, gelu (erf), gelu_tanh, silu, sigmoid, or a unary op."""
    if name == "relu":
        return Unary("relu", x)
    if name == "silu":
        return Binary("mul", x, Unary("sigmoid", x))
    if name == "gelu":
        inner = Binary("add", c(t, 1.0), Unary("erf", Binary("mul", x, c(t, SQRT1_2))))
        return Binary("mul", Binary("mul", c(t, 0.5), x), inner)
    if name == "gelu_tanh":
        cube = Binary("mul", Binary("mul", x, x), x)
        arg = Binary("mul", c(t, GELU_TANH_C), Binary("add", x, Binary("mul", c(t, 0.044715), cube)))
        return Binary("mul", Binary("mul", c(t, 0.5), x), Binary("add", c(t, 1.0), Unary("tanh", arg)))
    return Unary(name, x)


# ---- matmul --------------------------------------------------------------------------------------


def _parse_epilogue(epilogue: tuple[str, ...] | list[str]) -> list[tuple[str, float | None]]:
    if isinstance(epilogue, str):
        raise IRError("epilogue is a tuple of steps, not one string")
    steps: list[tuple[str, float | None]] = []
    seen: set[str] = set()
    for step in epilogue:
        if not isinstance(step, str):
            raise IRError(f"epilogue step must be text, got {type(step).__name__}")
        if step.startswith("scale:"):
            try:
                value = float(step[6:])
            except ValueError:
                raise IRError(f"epilogue step {step[:40]!r}: scale needs a number") from None
            if not math.isfinite(value):
                raise IRError(f"epilogue step {step[:40]!r}: scale must be finite")
            steps.append(("scale", value))
            continue
        if step not in EPILOGUE_STEPS or step == "scale":
            raise IRError(f"unknown epilogue step {step[:40]!r}; known: {', '.join(EPILOGUE_STEPS)} (scale:<float>)")
        if step in ("bias", "residual", "mul") and step in seen:
            raise IRError(f"epilogue step {step!r} reads an input and can appear once")
        seen.add(step)
        steps.append((step, None))
    return steps


def matmul(m: Size, n: Size, k: Size, dtype: str = "f16", epilogue: tuple[str, ...] = (),
           batch: tuple[Size, ...] = (), b_transposed: bool = False, name: str | None = None,
           hints: Mapping[str, int] | None = None) -> Program:
    """y[batch.., m, n] = epilogue(sum_k a[batch.., m, k] * b[batch.., k, n]) accumulated in f32.

    `b_transposed` stores b as [batch.., n, k]. Epilogue steps, in order: bias (+ bias[n]), relu,
    gelu (erf form), gelu_tanh, silu, residual (+ residual[batch.., m, n]), scale:<float>, mul
    (* gate[batch.., m, n], the SwiGLU gate product).
    """
    _float_dtype(dtype)
    t = acc_dtype(dtype)
    axes: list[Axis] = []
    batch_axes = [_axis_of(s, f"G{i}", hints, f"batch axis {i}") for i, s in enumerate(batch)]
    ax_m = _axis_of(m, "M", hints, "m")
    ax_n = _axis_of(n, "N", hints, "n")
    ax_k = _axis_of(k, "K", hints, "k")
    for ax in (*batch_axes, ax_m, ax_n, ax_k):
        _declare(axes, ax)
    if len({a.name for a in batch_axes}) != len(batch_axes) or {a.name for a in batch_axes} & {
        ax_m.name, ax_n.name, ax_k.name
    }:
        raise IRError("batch axes must be distinct from each other and from m, n, k")
    steps = _parse_epilogue(epilogue)
    bn = [a.name for a in batch_axes]
    bv = [f"g{i}" for i in range(len(batch_axes))]
    buffers = [
        Buffer("a", "in", dtype, (*bn, ax_m.name, ax_k.name)),
        Buffer("b", "in", dtype, (*bn, ax_n.name, ax_k.name) if b_transposed else (*bn, ax_k.name, ax_n.name)),
    ]
    out_shape = (*bn, ax_m.name, ax_n.name)
    b_index = (*bv, "j", "k") if b_transposed else (*bv, "k", "j")
    prod = Binary("mul", to(t, Load("a", (*bv, "i", "k")), dtype), to(t, Load("b", b_index), dtype))
    stmts: list[Stmt] = [Reduce("acc", t, "sum", "k", ax_k.name, prod)]
    cur: Expr = Ref("acc")
    tags: list[str] = []
    for idx, (step, value) in enumerate(steps):
        if step == "bias":
            buffers.append(Buffer("bias", "in", dtype, (ax_n.name,)))
            e: Expr = Binary("add", cur, to(t, Load("bias", ("j",)), dtype))
        elif step == "residual":
            buffers.append(Buffer("residual", "in", dtype, out_shape))
            e = Binary("add", cur, to(t, Load("residual", (*bv, "i", "j")), dtype))
        elif step == "mul":
            buffers.append(Buffer("gate", "in", dtype, out_shape))
            e = Binary("mul", cur, to(t, Load("gate", (*bv, "i", "j")), dtype))
        elif step == "scale":
            assert value is not None
            e = Binary("mul", cur, c(t, value))
        else:
            e = activation(step, cur, t)
        stmts.append(Let(f"e{idx}", t, e))
        cur = Ref(f"e{idx}")
        tags.append(f"scale{value!r}" if step == "scale" else step)
    buffers.append(Buffer("y", "out", dtype, out_shape))
    stmts.append(Store("y", (*bv, "i", "j"), to(dtype, cur, t)))
    loops = [*zip(bv, bn, strict=True), ("i", ax_m.name), ("j", ax_n.name)]
    if name is None:
        shape_tag = "_".join(_axis_tag(a) for a in (*batch_axes, ax_m, ax_n, ax_k))
        name = kernel_name("matmul", dtype, shape_tag, "bt" if b_transposed else "", *tags)
    prog = Program(name, tuple(axes), tuple(buffers), _nest(loops, tuple(stmts)))
    validate(prog)
    return prog


# ---- row reductions ------------------------------------------------------------------------------


def _row_axes(hidden: int, batch_hint: int, row_name: str) -> tuple[Axis, Axis]:
    if not isinstance(hidden, int) or isinstance(hidden, bool):
        raise IRError(f"the row length must be a static int, got {type(hidden).__name__}")
    return Axis("B", None, batch_hint), Axis(row_name, hidden)


def _finite(value: float, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise IRError(f"{what} must be a finite number")
    return float(value)


def rmsnorm(hidden: int, dtype: str = "f16", batch_hint: int = 8, eps: float = 1e-6,
            prologue: tuple[str, ...] = (), weight_after_round: bool = False) -> Program:
    """y[B, H] = x * rsqrt(mean(x^2) + eps) * w, reduced in f32.

    prologue ("residual",): x is `x + res` (added in `dtype`, as the model does), and that sum is
    also written to the second out buffer `h` (the residual stream the next layer reads).
    weight_after_round: the normalised row is rounded to `dtype` before the weight multiplies it, and the
    product rounded again, as Hugging Face's `LlamaRMSNorm` does in f16 (`w * (x.float() * inv).to(f16)`);
    otherwise `x * inv * w` is rounded once. Meaningless (and refused) when `dtype` is the f32 it computes in.
    """
    _float_dtype(dtype)
    t = acc_dtype(dtype)
    eps = _finite(eps, "eps")
    if tuple(prologue) not in ((), ("residual",)):
        raise IRError(f"rmsnorm prologue must be () or ('residual',), got {tuple(prologue)!r}"[:120])
    rows, row = _row_axes(hidden, batch_hint, "H")
    buffers = [Buffer("x", "in", dtype, ("B", "H"))]
    xv: Expr = Load("x", ("i", "j"))
    if prologue:
        buffers.append(Buffer("res", "in", dtype, ("B", "H")))
        xv = Binary("add", xv, Load("res", ("i", "j")))
    buffers += [Buffer("w", "in", dtype, ("H",)), Buffer("y", "out", dtype, ("B", "H"))]
    if prologue:
        buffers.append(Buffer("h", "out", dtype, ("B", "H")))
    if weight_after_round and dtype == t:
        raise IRError(f"rmsnorm: weight_after_round rounds to {dtype}, the type it computes in; nothing to round")
    xf = to(t, xv, dtype)
    normed: Expr = Binary("mul", xf, Ref("inv"))
    if weight_after_round:
        normed = Cast(t, Cast(dtype, normed))
    inner: list[Stmt] = [
        Store("y", ("i", "j"), to(dtype, Binary("mul", normed, to(t, Load("w", ("j",)), dtype)), t))
    ]
    if prologue:
        inner.append(Store("h", ("i", "j"), xv))
    body: tuple[Stmt, ...] = (
        Reduce("ss", t, "sum", "j", "H", Binary("mul", xf, xf)),
        Let("inv", t, Unary("rsqrt", Binary("add", Binary("div", Ref("ss"), c(t, hidden)), c(t, eps)))),
        Loop("j", "H", tuple(inner)),
    )
    name = kernel_name("rmsnorm", dtype, f"H{hidden}", f"eps{eps!r}", "res" if prologue else "",
                       "roundw" if weight_after_round else "")
    prog = Program(name, (rows, row), tuple(buffers), _nest([("i", "B")], body))
    validate(prog)
    return prog


def softmax(cols: int, dtype: str = "f16", batch_hint: int = 8, scale: float | None = None) -> Program:
    """y[B, C] = softmax(scale * x) along C: a max reduce, a sum-of-exp reduce, then the store."""
    _float_dtype(dtype)
    t = acc_dtype(dtype)
    rows, row = _row_axes(cols, batch_hint, "C")
    xf: Expr = to(t, Load("x", ("i", "j")), dtype)
    if scale is not None:
        xf = Binary("mul", xf, c(t, _finite(scale, "scale")))
    ex = Unary("exp", Binary("sub", xf, Ref("mx")))
    body: tuple[Stmt, ...] = (
        Reduce("mx", t, "max", "j", "C", xf),
        Reduce("se", t, "sum", "j", "C", ex),
        Let("inv", t, Unary("recip", Ref("se"))),
        Loop("j", "C", (Store("y", ("i", "j"), to(dtype, Binary("mul", ex, Ref("inv")), t)),)),
    )
    buffers = (Buffer("x", "in", dtype, ("B", "C")), Buffer("y", "out", dtype, ("B", "C")))
    name = kernel_name("softmax", dtype, f"C{cols}", "" if scale is None else f"scale{float(scale)!r}")
    prog = Program(name, (rows, row), buffers, _nest([("i", "B")], body))
    validate(prog)
    return prog


def layernorm(hidden: int, dtype: str = "f16", batch_hint: int = 8, eps: float = 1e-5) -> Program:
    """y[B, H] = (x - mean) * rsqrt(var + eps) * w + bias, two-pass mean and variance in f32."""
    _float_dtype(dtype)
    t = acc_dtype(dtype)
    eps = _finite(eps, "eps")
    rows, row = _row_axes(hidden, batch_hint, "H")
    xf = to(t, Load("x", ("i", "j")), dtype)
    d = Binary("sub", xf, Ref("mean"))
    normed = Binary("mul", Binary("mul", d, Ref("rstd")), to(t, Load("w", ("j",)), dtype))
    body: tuple[Stmt, ...] = (
        Reduce("s", t, "sum", "j", "H", xf),
        Let("mean", t, Binary("div", Ref("s"), c(t, hidden))),
        Reduce("v", t, "sum", "j", "H", Binary("mul", d, d)),
        Let("rstd", t, Unary("rsqrt", Binary("add", Binary("div", Ref("v"), c(t, hidden)), c(t, eps)))),
        Loop("j", "H", (
            Store("y", ("i", "j"), to(dtype, Binary("add", normed, to(t, Load("bias", ("j",)), dtype)), t)),
        )),
    )
    buffers = (
        Buffer("x", "in", dtype, ("B", "H")), Buffer("w", "in", dtype, ("H",)),
        Buffer("bias", "in", dtype, ("H",)), Buffer("y", "out", dtype, ("B", "H")),
    )
    name = kernel_name("layernorm", dtype, f"H{hidden}", f"eps{eps!r}")
    prog = Program(name, (rows, row), buffers, _nest([("i", "B")], body))
    validate(prog)
    return prog


# ---- elementwise ---------------------------------------------------------------------------------

def lower_expr(tree: EwTree, load: Callable[[str], Expr], t: str, names: list[str]) -> Expr:
    """The IR expression of a parsed tree in type `t`; input names are collected in first-use order."""
    if tree[0] == "in":
        if tree[1] not in names:
            names.append(tree[1])
        return load(tree[1])
    if tree[0] == "num":
        return c(t, tree[1])
    if tree[0] in HALF_FUNCTIONS:
        raise IRError(f"elementwise: {tree[0]}() reads halves of the last axis; only the halves kernel "
                      "(emmy_core.graph.kernels.blocked_elementwise) computes it")
    args = [lower_expr(sub, load, t, names) for sub in tree[1:]]
    if len(args) == 2:
        return Binary(tree[0], args[0], args[1])
    return activation(tree[0], args[0], t)


def elementwise(expr: str, dtype: str = "f16", batch_hint: int = 8, cols: int = 1024) -> Program:
    """y[B, C] = expr over inputs [B, C] named in `expr` (the language above `parse_expr`), in f32."""
    _float_dtype(dtype)
    t = acc_dtype(dtype)
    tree = parse_expr(expr)
    names: list[str] = []
    value = lower_expr(tree, lambda n: to(t, Load(n, ("i", "j")), dtype), t, names)
    rows, row = _row_axes(cols, batch_hint, "C")
    buffers = [Buffer(n, "in", dtype, ("B", "C")) for n in names]
    if "y" in names:
        raise IRError("elementwise: 'y' names the result and cannot be an input")
    buffers.append(Buffer("y", "out", dtype, ("B", "C")))
    body = _nest([("i", "B"), ("j", "C")], (Store("y", ("i", "j"), to(dtype, value, t)),))
    name = kernel_name("ew", dtype, f"C{cols}", ew_tag(tree))
    prog = Program(name, (rows, row), tuple(buffers), body)
    validate(prog)
    return prog


__all__ = [
    "EPILOGUE_STEPS", "EW_FUNCTIONS", "Dim", "acc_dtype", "activation", "day_one_kernels", "elementwise",
    "kernel_name", "layernorm", "matmul", "parse_expr", "rmsnorm", "softmax",
]


def day_one_kernels() -> list[tuple[str, Program]]:
    """One representative of each day-one family at small but realistic sizes, labelled."""
    S = Dim("S", 128)
    return [
        ("matmul f16 T x 1024 x 1024 +bias gelu", matmul(Dim("T", 512), 1024, 1024, epilogue=("bias", "gelu"))),
        ("matmul f16 gate-up silu*mul", matmul(Dim("T", 512), 2816, 1024, epilogue=("silu", "mul"))),
        ("matmul f16 down +residual", matmul(Dim("T", 512), 1024, 2816, epilogue=("residual",))),
        ("attention scores q@k^T *scale", matmul(S, S, Dim("D", extent=64), batch=(Dim("B", 4), Dim("NH", extent=16)),
                                                  b_transposed=True, epilogue=("scale:0.125",))),
        ("attention softmax", softmax(128, batch_hint=8192)),
        ("rmsnorm f16 H=1024", rmsnorm(hidden=1024, dtype="f16", batch_hint=512)),
        ("rmsnorm f16 H=1024 +residual", rmsnorm(hidden=1024, dtype="f16", batch_hint=512, prologue=("residual",))),
        ("layernorm f16 H=1024", layernorm(1024, batch_hint=512)),
        ("softmax f32 C=4096", softmax(4096, dtype="f32", batch_hint=64)),
        ("elementwise silu(a)*b", elementwise("silu(a)*b", batch_hint=512, cols=2816)),
        ("elementwise a+b bf16", elementwise("a+b", dtype="bf16", batch_hint=512, cols=1024)),
    ]
