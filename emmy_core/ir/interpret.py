"""A reference interpreter of loop programs over numpy arrays: slow, exact, for small sizes.

Loop iterations are vectorised: every loop variable in scope is one array dimension
(in nesting order), so a value computed at depth d is an array of d dimensions,
each either the variable's extent or 1 (broadcast). A reduction adds a dimension
and reduces it; a windowed reduction keeps the lanes `start <= v < start + length`
(clipped to the axis by construction) and gives the others the op's identity.

Data types: every operation is computed in its declared type. f16 uses numpy's
float16, f32 float32, f64 float64, i32/i64 the integers (wrapping); bf16 is carried
in float32 arrays rounded to bfloat16 (round to nearest even) after every operation.
A reduction accumulates in its declared type (numpy's pairwise order; a bf16 sum is
accumulated in f32 and rounded once). `erf` is math.erf per element in float64.

Inputs are checked strictly: every `in` buffer exactly once, nothing else, shape and
dtype exact (a bf16 input is a float32 array holding bfloat16 values). Out buffers are
freshly allocated, filled with NaN (floats) or the type's minimum (integers) so that an
element a program never writes shows up. Stores run in statement order over whole loops:
when one element is written at several iterations of a loop it does not index, the last
iteration wins, as in sequential execution.
"""

from __future__ import annotations

import math

import numpy as np

from emmy_core.ir.check import validate
from emmy_core.ir.errors import IRError
from emmy_core.ir.nodes import (
    Binary,
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
)
from emmy_core.ir.sizes import extents

NUMPY_DTYPES: dict[str, type[np.generic]] = {
    "f16": np.float16, "bf16": np.float32, "f32": np.float32, "f64": np.float64, "i32": np.int32, "i64": np.int64,
}
_erf = np.vectorize(math.erf, otypes=[np.float64])


def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 values rounded to the nearest bfloat16 (ties to even), carried as float32."""
    x = np.asarray(x, dtype=np.float32)
    bits = x.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    return np.where(np.isnan(x), x, rounded).astype(np.float32)


def as_dtype(x: np.ndarray, dtype: str) -> np.ndarray:
    out = np.asarray(x).astype(NUMPY_DTYPES[dtype], copy=False)
    return round_bf16(out) if dtype == "bf16" else out


def reduce_identity(op: str, dtype: str) -> float | int:
    if op == "sum":
        return 0
    if dtype.startswith("i"):
        info = np.iinfo(NUMPY_DTYPES[dtype])
        return info.min if op == "max" else info.max
    return -math.inf if op == "max" else math.inf


def apply_unary(op: str, x: np.ndarray) -> np.ndarray:
    """A unary operator on an array, in the array's own numpy type (round with `as_dtype` after)."""
    if op == "erf":
        return _erf(x.astype(np.float64))
    one = np.asarray(1, dtype=x.dtype)
    table = {
        "neg": np.negative, "exp": np.exp, "log": np.log, "sqrt": np.sqrt, "abs": np.abs, "tanh": np.tanh,
        "rsqrt": lambda v: one / np.sqrt(v), "recip": lambda v: one / v,
        "sigmoid": lambda v: one / (one + np.exp(-v)), "relu": lambda v: np.maximum(v, np.zeros_like(one)),
    }
    return table[op](x)


_BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide, "max": np.maximum,
           "min": np.minimum, "pow": np.power}


def apply_binary(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A binary operator on two arrays of one numpy type."""
    return _BINARY[op](a, b)


class _Run:
    def __init__(self, program: Program, ext: dict[str, int], arrays: dict[str, np.ndarray]) -> None:
        self.program = program
        self.ext = ext
        self.arrays = arrays
        self.vars: list[tuple[str, str]] = []  # loop variables in scope, outermost first
        self.values: dict[str, tuple[np.ndarray, str]] = {}

    def _index(self, var: str | int) -> np.ndarray:
        if isinstance(var, int):  # a constant position
            return np.asarray(var, dtype=np.int64)
        depth = len(self.vars)
        for pos, (v, axis) in enumerate(self.vars):
            if v == var:
                shape = [1] * depth
                shape[pos] = self.ext[axis]
                return np.arange(self.ext[axis]).reshape(shape)
        raise IRError(f"{self.program.name}: {var!r} is not a loop variable in scope")

    def _lift(self, x: np.ndarray) -> np.ndarray:
        depth = len(self.vars)
        return x.reshape(x.shape + (1,) * (depth - x.ndim)) if x.ndim < depth else x

    def expr(self, e: Expr) -> tuple[np.ndarray, str]:
        if isinstance(e, Load):
            buf = self.program.buffer(e.buffer)
            idx = tuple(self._index(v) for v in e.index)
            return self.arrays[e.buffer][idx], buf.dtype
        if isinstance(e, Ref):
            value, dtype = self.values[e.name]
            return self._lift(value), dtype
        if isinstance(e, Const):
            return as_dtype(np.asarray(e.value, dtype=np.float64 if isinstance(e.value, float) else np.int64),
                        e.dtype), e.dtype
        if isinstance(e, Extent):
            return np.asarray(self.ext[e.axis], dtype=np.int64), "i64"
        if isinstance(e, Cast):
            x, _ = self.expr(e.x)
            return as_dtype(x, e.dtype), e.dtype
        if isinstance(e, Unary):
            x, t = self.expr(e.x)
            return as_dtype(apply_unary(e.op, x), t), t
        if isinstance(e, Binary):
            a, t = self.expr(e.a)
            b, _ = self.expr(e.b)
            return as_dtype(apply_binary(e.op, a, b), t), t
        raise IRError(f"{self.program.name}: not an expression: {type(e).__name__}")

    def reduce(self, s: Reduce) -> np.ndarray:
        n = self.ext[s.axis]
        depth = len(self.vars)
        start = None
        if s.window is not None:
            start = np.asarray(s.window.start.offset, dtype=np.int64)
            for var, coef in s.window.start.terms:
                start = start + coef * self._index(var)
            start = start.reshape(start.shape + (1,) * (depth + 1 - start.ndim))
        self.vars.append((s.var, s.axis))
        try:
            body, _ = self.expr(s.body)
            body = self._lift(as_dtype(body, s.dtype))
            shape = list(body.shape) if body.ndim else [1] * (depth + 1)
            shape[-1] = n
            body = np.ascontiguousarray(np.broadcast_to(body, shape))  # one summation order per row
            if start is not None:
                lanes = self._index(s.var)
                keep = (lanes >= start) & (lanes < start + s.window.length)  # type: ignore[union-attr]
                body = np.where(keep, body, np.asarray(reduce_identity(s.op, s.dtype), dtype=body.dtype))
        finally:
            self.vars.pop()
        acc = NUMPY_DTYPES[s.dtype]
        if s.op == "sum":
            out = np.sum(body, axis=-1, dtype=acc)
        elif s.op == "max":
            out = np.max(body, axis=-1)
        else:
            out = np.min(body, axis=-1)
        return as_dtype(out, s.dtype)

    def store(self, s: Store, outs: dict[str, np.ndarray]) -> None:
        value, _ = self.expr(s.value)
        depth = len(self.vars)
        value = self._lift(np.asarray(value))
        full = [self.ext[a] for _, a in self.vars]
        value = np.broadcast_to(value, full) if depth else value
        # Variables the store does not index: sequential execution leaves the last iteration's value.
        keep = tuple(slice(None) if v in s.index else slice(-1, None) for v, _ in self.vars)
        value = value[keep] if depth else value
        idx = []
        for v in s.index:
            if isinstance(v, int):  # a constant position
                idx.append(np.asarray(v, dtype=np.int64))
                continue
            pos = next(p for p, (w, _) in enumerate(self.vars) if w == v)
            shape = [1] * depth
            shape[pos] = full[pos]
            idx.append(np.arange(full[pos]).reshape(shape))
        outs[s.buffer][tuple(idx)] = value

    def stmts(self, body: tuple[Stmt, ...], outs: dict[str, np.ndarray]) -> None:
        declared: list[str] = []
        for s in body:
            if isinstance(s, Loop):
                self.vars.append((s.var, s.axis))
                try:
                    self.stmts(s.body, outs)
                finally:
                    self.vars.pop()
            elif isinstance(s, Let):
                value, _ = self.expr(s.value)
                self.values[s.name] = (np.asarray(as_dtype(value, s.dtype)), s.dtype)
                declared.append(s.name)
            elif isinstance(s, Reduce):
                self.values[s.name] = (np.asarray(self.reduce(s)), s.dtype)
                declared.append(s.name)
            elif isinstance(s, Store):
                self.store(s, outs)
        for name in declared:
            self.values.pop(name, None)


def check_inputs(program: Program, inputs: dict[str, np.ndarray], ext: dict[str, int]) -> dict[str, np.ndarray]:
    """The inputs as exact arrays; IRError naming the buffer at fault."""
    if not isinstance(inputs, dict):
        raise IRError(f"{program.name}: inputs must be a dict of buffer name -> array")
    want = {b.name: b for b in program.inputs}
    missing = sorted(set(want) - set(inputs))
    extra = sorted(str(k) for k in set(inputs) - set(want))
    if missing:
        raise IRError(f"{program.name}: missing input buffer(s): {', '.join(missing)}")
    if extra:
        raise IRError(f"{program.name}: not input buffers of this kernel: {', '.join(extra)[:200]}")
    arrays: dict[str, np.ndarray] = {}
    for name, buf in want.items():
        arr = inputs[name]
        if not isinstance(arr, np.ndarray):
            raise IRError(f"{program.name}: input {name!r} must be a numpy array, not {type(arr).__name__}")
        shape = tuple(ext[a] for a in buf.shape)
        if arr.shape != shape:
            raise IRError(f"{program.name}: input {name!r} has shape {arr.shape}, expected {shape} {list(buf.shape)}")
        if arr.dtype != np.dtype(NUMPY_DTYPES[buf.dtype]):
            raise IRError(f"{program.name}: input {name!r} has dtype {arr.dtype}, expected {buf.dtype} "
                          f"({np.dtype(NUMPY_DTYPES[buf.dtype])})")
        if buf.dtype == "bf16":
            same = (round_bf16(arr) == arr) | np.isnan(arr)
            if not bool(np.all(same)):
                raise IRError(f"{program.name}: input {name!r} (bf16) holds float32 values that are not bfloat16")
        arrays[name] = arr
    return arrays


def run(program: Program, inputs: dict[str, np.ndarray], sizes: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """Runs `program` on `inputs` at `sizes` (dynamic axes; default their expected sizes); returns the outs."""
    if not isinstance(program, Program):
        raise IRError(f"only loop programs can be interpreted, not {type(program).__name__}")
    validate(program)
    for name, size in (sizes or {}).items():
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            raise IRError(f"{program.name}: size of {name!r} must be a positive integer, got {str(size)[:20]}")
    ext = extents(program, sizes)
    arrays = check_inputs(program, inputs, ext)
    outs: dict[str, np.ndarray] = {}
    for b in program.outputs:
        np_t = NUMPY_DTYPES[b.dtype]
        fill = np.iinfo(np_t).min if b.dtype.startswith("i") else np.nan
        outs[b.name] = np.full(tuple(ext[a] for a in b.shape), fill, dtype=np_t)
    with np.errstate(all="ignore"):
        _Run(program, ext, arrays).stmts(program.body, outs)
    return outs


def random_inputs(program: Program, sizes: dict[str, int] | None = None, seed: int = 0,
                  scale: float = 1.0) -> dict[str, np.ndarray]:
    """Fresh normal random inputs (never zeros) of the right shape and dtype for every `in` buffer."""
    rng = np.random.default_rng(seed)
    ext = extents(program, sizes)
    out: dict[str, np.ndarray] = {}
    for b in program.inputs:
        shape = tuple(ext[a] for a in b.shape)
        if b.dtype.startswith("i"):
            out[b.name] = rng.integers(-8, 9, size=shape).astype(NUMPY_DTYPES[b.dtype])
        else:
            out[b.name] = as_dtype(rng.standard_normal(shape) * scale, b.dtype)
    return out
