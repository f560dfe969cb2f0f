"""The reference a variant is verified against: the loop program itself, evaluated in float64.

The reference interpreter (`emmy_core.ir.interpret`) computes a program in its declared
types; a kernel's own rounding is not what it must reproduce, so the harness evaluates
the program with every floating type promoted to f64 (integers stay as they are), on the
very input values the kernel receives (drawn in the kernel's types, then widened). A
large kernel is evaluated in slices of its outermost loop, so the interpreter's
broadcast arrays stay small. Comparison is magnitude-aware: an element passes when
|out - ref| <= rtol * (|ref| + rms(ref)), with `rtol` set by the narrowest float type the
program computes in. A NaN where the reference has a number (the poison the harness
pre-fills outputs with, left unwritten) never passes.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from emmy_core.ir import (
    Axis,
    Binary,
    Buffer,
    Cast,
    Const,
    Expr,
    Extent,
    Let,
    Load,
    Loop,
    Program,
    Reduce,
    Ref,
    Stmt,
    Store,
    Unary,
    extents,
)
from emmy_core.ir.interpret import random_inputs, run
from emmy_core.ir.vocab import FLOAT_DTYPES

# Relative tolerance by the narrowest float type a program computes in.
RTOL: dict[str, float] = {"f64": 1e-9, "f32": 1e-4, "bf16": 3e-2, "f16": 1e-2}
_WIDTH_ORDER = ("bf16", "f16", "f32", "f64")  # narrowest (by mantissa) first
MAX_ELEMENTS = 1 << 22  # largest broadcast array one interpreter slice may build


def _t(dtype: str) -> str:
    return "f64" if dtype in FLOAT_DTYPES else dtype


def _expr(e: Expr) -> Expr:
    if isinstance(e, Load | Ref | Extent):
        return e
    if isinstance(e, Const):
        return Const(_t(e.dtype), e.value)
    if isinstance(e, Cast):
        return Cast(_t(e.dtype), _expr(e.x))
    if isinstance(e, Unary):
        return Unary(e.op, _expr(e.x))
    if isinstance(e, Binary):
        return Binary(e.op, _expr(e.a), _expr(e.b))
    raise TypeError(f"not an expression: {type(e).__name__}")


def _stmt(s: Stmt) -> Stmt:
    if isinstance(s, Loop):
        return Loop(s.var, s.axis, tuple(_stmt(x) for x in s.body))
    if isinstance(s, Let):
        return Let(s.name, _t(s.dtype), _expr(s.value))
    if isinstance(s, Reduce):
        return replace(s, dtype=_t(s.dtype), body=_expr(s.body))
    if isinstance(s, Store):
        return Store(s.buffer, s.index, _expr(s.value))
    raise TypeError(f"not a statement: {type(s).__name__}")


def promote_f64(program: Program) -> Program:
    """The same program with every floating type (buffers, lets, reductions, casts, constants) f64."""
    buffers = tuple(Buffer(b.name, b.role, _t(b.dtype), b.shape) for b in program.buffers)
    return Program(program.name, program.axes, buffers, tuple(_stmt(s) for s in program.body))


def _dtypes_in(program: Program) -> set[str]:
    found = {b.dtype for b in program.buffers}

    def expr(e: Expr) -> None:
        if isinstance(e, Const | Cast):
            found.add(e.dtype)
        if isinstance(e, Cast | Unary):
            expr(e.x)
        elif isinstance(e, Binary):
            expr(e.a)
            expr(e.b)

    def stmt(s: Stmt) -> None:
        if isinstance(s, Loop):
            for x in s.body:
                stmt(x)
        elif isinstance(s, Let):
            found.add(s.dtype)
            expr(s.value)
        elif isinstance(s, Reduce):
            found.add(s.dtype)
            expr(s.body)
        elif isinstance(s, Store):
            expr(s.value)

    for s in program.body:
        stmt(s)
    return found


def tolerance(program: Program) -> float:
    """Relative tolerance for `program`: set by the narrowest float type it computes in."""
    floats = _dtypes_in(program) & FLOAT_DTYPES
    for dtype in _WIDTH_ORDER:
        if dtype in floats:
            return RTOL[dtype]
    return 0.0  # integers only: exact


def make_inputs(program: Program, sizes: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    """Fresh normal random inputs (never zeros) in the kernel's own types."""
    return random_inputs(program, sizes, seed=seed)


# ---- evaluation in slices of the outermost loop ---------------------------------------------------


def _axes_used(body: tuple[Stmt, ...], out: list[str]) -> None:
    for s in body:
        if isinstance(s, Loop):
            out.append(s.axis)
            _axes_used(s.body, out)
        elif isinstance(s, Reduce):
            out.append(s.axis)


def _mentions_extent(body: tuple[Stmt, ...], axis: str) -> bool:
    def expr(e: Expr) -> bool:
        if isinstance(e, Extent):
            return e.axis == axis
        if isinstance(e, Cast | Unary):
            return expr(e.x)
        if isinstance(e, Binary):
            return expr(e.a) or expr(e.b)
        return False

    for s in body:
        if isinstance(s, Loop) and _mentions_extent(s.body, axis):
            return True
        if (isinstance(s, Let) and expr(s.value)) or (isinstance(s, Reduce) and expr(s.body)):
            return True
        if isinstance(s, Store) and expr(s.value):
            return True
    return False


def _work(body: tuple[Stmt, ...], ext: dict[str, int]) -> int:
    """Largest number of points any statement's broadcast array spans (loops times reduction axis)."""
    best = 1
    for s in body:
        if isinstance(s, Loop):
            best = max(best, ext[s.axis] * _work(s.body, ext))
        elif isinstance(s, Reduce):
            best = max(best, ext[s.axis])
    return best


def slice_axes(program: Program) -> list[str]:
    """Axes the program can be evaluated in slices of: those of its outermost chain of single loops
    that no other loop, reduction or extent uses and that every output is indexed by."""
    chain: list[str] = []
    body = program.body
    while len(body) == 1 and isinstance(body[0], Loop):
        chain.append(body[0].axis)
        body = body[0].body
    used: list[str] = []
    _axes_used(program.body, used)
    return [a for a in chain if used.count(a) == 1 and not _mentions_extent(program.body, a)
            and all(a in b.shape for b in program.outputs)]


def _evaluate(program: Program, inputs: dict[str, np.ndarray], sizes: dict[str, int],
              max_elements: int) -> dict[str, np.ndarray]:
    ext = extents(program, sizes)
    total = _work(program.body, ext)
    axis = next((a for a in slice_axes(program) if ext[a] > 1), None)
    if axis is None or total <= max_elements:
        return run(program, inputs, sizes)
    step = max(1, max_elements // max(1, total // ext[axis]))
    rest = {k: v for k, v in sizes.items() if k != axis}
    parts: dict[str, list[np.ndarray]] = {b.name: [] for b in program.outputs}
    for start in range(0, ext[axis], step):
        stop = min(ext[axis], start + step)
        axes = tuple(Axis(a.name, stop - start) if a.name == axis else a for a in program.axes)
        piece = Program(program.name, axes, program.buffers, program.body)
        sub = {}
        for b in program.inputs:
            idx = tuple(slice(start, stop) if d == axis else slice(None) for d in b.shape)
            sub[b.name] = np.ascontiguousarray(inputs[b.name][idx])
        outs = _evaluate(piece, sub, rest, max_elements)  # a slice still too large is sliced further in
        for b in program.outputs:
            parts[b.name].append(outs[b.name])
    return {b.name: np.concatenate(parts[b.name], axis=b.shape.index(axis)) for b in program.outputs}


def reference(program: Program, inputs: dict[str, np.ndarray], sizes: dict[str, int],
              max_elements: int = MAX_ELEMENTS) -> dict[str, np.ndarray]:
    """Outputs of `program` on `inputs` (its own types) computed in f64 (integer outputs exact)."""
    wide = promote_f64(program)
    wide_inputs = {n: (a.astype(np.float64) if a.dtype.kind == "f" else a) for n, a in inputs.items()}
    return _evaluate(wide, wide_inputs, dict(sizes), max_elements)


def mismatch(out: np.ndarray, ref: np.ndarray, rtol: float, out_dtype: str) -> str | None:
    """Why `out` (the kernel's, any type) does not match `ref` (f64 or exact ints), or None when it does."""
    if out.shape != ref.shape:
        return f"shape {out.shape} differs from the reference's {ref.shape}"
    if ref.dtype.kind != "f":
        bad = out != ref
        n = int(np.count_nonzero(bad))
        return None if n == 0 else f"{n} of {out.size} elements differ from the reference (exact integers)"
    o = out.astype(np.float64)
    finite_ref = np.isfinite(ref)
    scale = float(np.sqrt(np.mean(np.square(ref[finite_ref])))) if finite_ref.any() else 1.0
    scale = scale if scale > 0 and math.isfinite(scale) else 1.0
    with np.errstate(invalid="ignore", over="ignore"):
        ok = np.abs(o - ref) <= rtol * (np.abs(ref) + scale)
        ok |= np.isnan(ref) & np.isnan(o)
        # a value beyond the output type's range rounds to an infinity of the same sign
        if out_dtype in ("f16", "bf16", "f32"):
            limit = {"f16": 65504.0, "bf16": 3.3895e38, "f32": 3.4028e38}[out_dtype]
            ok |= np.isinf(o) & (np.abs(ref) > limit) & (np.sign(o) == np.sign(ref))
        ok |= np.isinf(ref) & (o == ref)
    if bool(ok.all()):
        return None
    bad = ~ok
    unwritten = int(np.count_nonzero(bad & np.isnan(o) & ~np.isnan(ref)))
    err = np.abs(o - ref)[bad & np.isfinite(o) & finite_ref]
    worst = f", worst abs error {float(err.max()):.3g} (scale {scale:.3g}, rtol {rtol:g})" if err.size else ""
    first = tuple(int(i) for i in np.argwhere(bad)[0])
    return (f"{int(np.count_nonzero(bad))} of {out.size} elements differ from the reference"
            f" ({unwritten} left unwritten: NaN poison){worst}; first at index {first}")
