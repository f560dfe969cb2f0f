"""C text of loop-program expressions: data types, exact constants, casts and operators.

Every IR name reaches C only with a prefix (`n_` axis extent, `b_` buffer, `i_` loop
variable, `v_` value), and only from a program that passed `validate`; data types and
operators are looked up in closed tables here, so nothing outside them can be printed.
Code the generator adds itself uses the `em_` prefix, which no prefixed IR name starts with.

Arithmetic follows the IR: every operation is computed in its declared type. f32, f64,
i32 and i64 are native (integer add/sub/mul wrap, computed unsigned so C has no overflow).
f16 and bf16 are stored as `uint16_t` bits; an operation on either converts its operands
to float (exactly, in integer operations), computes there and rounds the result back to
nearest even, which is exact for add/sub/mul/div/sqrt (float has more than 2p+2 bits) and
how torch computes them on the CPU. Whole runs convert with `em_h2f_run` / `em_f2h_run`
(F16C, eight or sixteen at a time, where the build targets it: the same values) and
their bf16 forms; `Staged` reads and writes buffers through such runs. No multiply-add is
fused (builds pass -ffp-contract=off) except where the source asks (the matmul's
micro-kernel). exp, log, pow, tanh and erf come from <math.h> (on x86-64 glibc, the
vector loops call libmvec's forms: a few ulp, as torch's own vector math; exp below its zero cut is 0 without
the call, see `c_prelude`). A double goes
to f16 or bf16 by round-to-odd to float, then nearest-even, so it is rounded once. Constants print exactly: hex floats, INFINITY for an
infinity, f16 and bf16 as their rounded bit patterns computed here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

from emmy_core.codegen.backend import BuildError
from emmy_core.ir.nodes import Binary, Cast, Const, Expr, Extent, Load, Program, Ref, Unary

C_TYPES: dict[str, str] = {
    "f16": "uint16_t", "bf16": "uint16_t", "f32": "float", "f64": "double", "i32": "int32_t", "i64": "int64_t",
}
# The type an operation on a value of the key type is computed in.
COMPUTE: dict[str, str] = {"f16": "f32", "bf16": "f32", "f32": "f32", "f64": "f64", "i32": "i32", "i64": "i64"}
INT_RANGE: dict[str, tuple[int, int]] = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1)}

# ---- names ---------------------------------------------------------------------------------------


def axis_c(name: str) -> str:
    return f"n_{name}"


def buffer_c(name: str) -> str:
    return f"b_{name}"


def var_c(name: str) -> str:
    return f"i_{name}"


def value_c(name: str) -> str:
    return f"v_{name}"


# ---- constants -----------------------------------------------------------------------------------


def _round_bits(value: float, mant: int, min_exp: int, exp_bias: int) -> int:
    """Bits of the nearest binary16-style value (ties to even): `mant` stored mantissa bits."""
    sign = 0x8000 if math.copysign(1.0, value) < 0 else 0
    inf = ((1 << (15 - mant)) - 1) << mant
    mag = abs(value)
    if math.isinf(mag):
        return sign | inf
    if mag == 0:
        return sign
    exp = max(math.frexp(mag)[1] - 1, min_exp)
    quantum = Fraction(2) ** (exp - mant)
    steps = Fraction(mag) / quantum
    n = math.floor(steps)
    rest = steps - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    if n == 0:
        return sign
    if n >= 2 ** (mant + 1):  # carried into the next binade
        n //= 2
        exp += 1
    if exp > exp_bias:
        return sign | inf
    if n < 2**mant:  # subnormal
        return sign | n
    return sign | ((exp + exp_bias) << mant) | (n - 2**mant)


def _bf16_bits(value: float) -> int:
    """The bfloat16 bit pattern nearest to `value` (ties to even), computed exactly."""
    return _round_bits(value, 7, -126, 127)


def _f16_bits(value: float) -> int:
    """The IEEE binary16 bit pattern nearest to `value` (ties to even), computed exactly."""
    return _round_bits(value, 10, -14, 15)


def const_c(c: Const) -> str:
    """An exact C literal of a constant in its storage type."""
    if c.dtype in INT_RANGE:
        lo, hi = INT_RANGE[c.dtype]
        v = int(c.value)
        if not lo <= v <= hi:
            raise BuildError(f"constant {v} does not fit {c.dtype}")
        if v == lo:
            return f"(({C_TYPES[c.dtype]})({lo + 1}LL - 1))"
        return f"(({C_TYPES[c.dtype]}){v}LL)"
    v = float(c.value)
    if c.dtype in ("bf16", "f16"):
        bits = _bf16_bits(v) if c.dtype == "bf16" else _f16_bits(v)
        return f"((uint16_t)0x{bits:04x}u)"
    text = ("-INFINITY" if v < 0 else "INFINITY") if math.isinf(v) else float.hex(v)
    if c.dtype == "f64":
        return f"((double)({text}))"
    return f"((float)({text}))"


def reduce_init(op: str, dtype: str) -> str:
    """The identity of a reduction, as a constant of its accumulator type."""
    if op == "sum":
        return const_c(Const(dtype, 0))
    if dtype in INT_RANGE:
        lo, hi = INT_RANGE[dtype]
        return const_c(Const(dtype, lo if op == "max" else hi))
    return const_c(Const(dtype, -math.inf if op == "max" else math.inf))


# ---- conversions ---------------------------------------------------------------------------------


def to_compute(code: str, dtype: str) -> str:
    """`code` (a value of `dtype`) in the type it is computed in."""
    if dtype == "f16":
        return f"em_h2f({code})"
    if dtype == "bf16":
        return f"em_bf2f({code})"
    return code


def from_compute(code: str, dtype: str) -> str:
    """`code` (a value of COMPUTE[dtype]) rounded into `dtype`."""
    if dtype == "f16":
        return f"em_f2h({code})"
    if dtype == "bf16":
        return f"em_f2bf({code})"
    return code


def cast_c(code: str, src: str, dst: str) -> str:
    """`code` of type `src` converted to `dst`, rounded once (nearest even) for floats."""
    if src == dst:
        return code
    return cast_computed(to_compute(code, src), src, dst)


def cast_computed(cc: str, src: str, dst: str) -> str:
    """A value of `src`, given as `cc` in its compute type, converted to `dst` (src != dst)."""
    if dst == "f32" and src in ("f16", "bf16"):
        return cc
    if dst in ("f32", "f64"):
        return f"(({C_TYPES[dst]}){cc})"
    if dst in INT_RANGE:  # truncation toward zero, as torch's .to(int)
        return f"(({C_TYPES[dst]}){cc})"
    if src == "f32":
        return f"em_f2h({cc})" if dst == "f16" else f"em_f2bf({cc})"
    wide = cc if src == "f64" else f"((double){cc})"
    if dst == "f16":
        return f"em_d2h({wide})"
    return f"em_d2bf({wide})"


# ---- operators -----------------------------------------------------------------------------------


def unary_c(op: str, x: str, ct: str) -> str:
    """`op` of `x` in the compute type `ct` (f32 or f64)."""
    s = "f" if ct == "f32" else ""
    one = "1.0f" if ct == "f32" else "1.0"
    if op == "neg":
        return f"(-({x}))"
    if op == "exp":
        return f"em_exp{s or 'd'}({x})"
    if op in ("log", "sqrt", "tanh", "erf"):
        return f"{op}{s}({x})"
    if op == "abs":
        return f"fabs{s}({x})"
    if op == "rsqrt":
        return f"({one} / sqrt{s}({x}))"
    if op == "recip":
        return f"({one} / ({x}))"
    if op == "sigmoid":
        return f"em_sigmoid{s or 'd'}({x})"
    if op == "relu":
        return f"em_relu{s or 'd'}({x})"
    raise BuildError(f"unary operator {op[:20]!r} has no C form")


_ARITH = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def binary_c(op: str, a: str, b: str, ct: str) -> str:
    """`op` of `a` and `b` in the compute type `ct`."""
    if ct in INT_RANGE:
        if op in ("add", "sub", "mul"):
            return f"em_{op}_{ct}({a}, {b})"
        if op in ("max", "min"):
            cmp = ">" if op == "max" else "<"
            return f"(({a}) {cmp} ({b}) ? ({a}) : ({b}))"
        raise BuildError(f"binary operator {op[:20]!r} has no C form on {ct}")
    if op in _ARITH:
        return f"(({a}) {_ARITH[op]} ({b}))"
    s = "f" if ct == "f32" else "d"
    if op in ("max", "min"):
        return f"em_{op}{s}({a}, {b})"
    if op == "pow":
        return f"pow{'f' if ct == 'f32' else ''}({a}, {b})"
    raise BuildError(f"binary operator {op[:20]!r} has no C form")


# ---- expressions ---------------------------------------------------------------------------------


def offset_c(program: Program, buffer: str, index: tuple[str | int, ...]) -> str:
    """Row-major element offset of `buffer[index]` (contiguous storage); a constant position is a literal."""
    return offset_of(program, buffer, tuple(f"INT64_C({v})" if isinstance(v, int) else var_c(v) for v in index))


def offset_of(program: Program, buffer: str, positions: tuple[str, ...]) -> str:
    """Row-major element offset of `buffer` at the given C index expressions, one per axis."""
    shape = program.buffer(buffer).shape
    code = positions[0]
    for pos, axis in zip(positions[1:], shape[1:], strict=True):
        code = f"({code} * {axis_c(axis)} + {pos})"
    return code


HALF_RUNS = {"f16": ("em_h2f_run", "em_f2h_run"), "bf16": ("em_bf2f_run", "em_f2bf_run")}


@dataclass(frozen=True)
class Staged:
    """A 16-bit buffer read or written through a run of f32 scratch converted all at once.

    A load (store) of the buffer whose index, less its last variable, is `prefix` reads
    (writes) `scratch[position]`, where `position` is C text, or None for the last index
    variable itself. The run holds exactly the values the buffer holds (a widening is
    exact); a written run holds values whose rounding is what the store would write.
    """

    prefix: tuple[str, ...]
    scratch: str
    position: str | None = None

    def at(self, index: tuple[str, ...]) -> str | None:
        if index[:-1] != self.prefix:
            return None
        return f"{self.scratch}[{self.position or var_c(index[-1])}]"


class ExprC:
    """Translates expressions of one program; `values` maps each value name in scope to its data type.

    `staged` maps 16-bit buffers to the f32 runs their loads read instead (`Staged`);
    `reuse` maps expressions already computed into a scratch run (f32/f64 values) to the C
    text that reads them back, so an expression a reduction computed per element is not
    computed again by the loop after it.
    """

    def __init__(self, program: Program) -> None:
        self.program = program
        self.values: dict[str, str] = {}
        self.staged: dict[str, Staged] = {}
        self.reuse: dict[Expr, str] = {}

    def dtype(self, e: Expr) -> str:
        if isinstance(e, Load):
            return self.program.buffer(e.buffer).dtype
        if isinstance(e, Ref):
            return self.values[e.name]
        if isinstance(e, Const | Cast):
            return e.dtype
        if isinstance(e, Extent):
            return "i64"
        if isinstance(e, Unary):
            return self.dtype(e.x)
        if isinstance(e, Binary):
            return self.dtype(e.a)
        raise BuildError(f"not an expression: {type(e).__name__}")

    def _staged_at(self, e: Expr) -> str | None:
        if isinstance(e, Load) and e.buffer in self.staged:
            return self.staged[e.buffer].at(e.index)
        return None

    def compute(self, e: Expr) -> str:
        """C text of `e` in the type it is computed in (a staged load reads its f32 run; an f32 value rounded
        to f16 and read back as f32 is rounded in float arithmetic, `em_f2h2f`, the same bits)."""
        run = self._staged_at(e)
        if run is not None:
            return run
        if isinstance(e, Cast) and e.dtype == "f16" and e not in self.reuse and self.dtype(e.x) == "f32":
            return f"em_f2h2f({self.compute(e.x)})"
        return to_compute(self.code(e), self.dtype(e))

    def _operation(self, e: Unary | Binary) -> str:
        """An operator's result in its compute type, before rounding into the storage type."""
        t = self.dtype(e)
        if isinstance(e, Unary):
            return unary_c(e.op, self.compute(e.x), COMPUTE[t])
        return binary_c(e.op, self.compute(e.a), self.compute(e.b), COMPUTE[t])

    def code(self, e: Expr) -> str:
        """C text of `e`, a value of its storage type."""
        if e in self.reuse:
            return self.reuse[e]
        if isinstance(e, Load):
            run = self._staged_at(e)
            if run is not None:
                return from_compute(run, self.dtype(e))
            return f"{buffer_c(e.buffer)}[{offset_c(self.program, e.buffer, e.index)}]"
        if isinstance(e, Ref):
            return value_c(e.name)
        if isinstance(e, Const):
            return const_c(e)
        if isinstance(e, Extent):
            return axis_c(e.axis)
        if isinstance(e, Cast):
            src = self.dtype(e.x)
            return self.code(e.x) if src == e.dtype else cast_computed(self.compute(e.x), src, e.dtype)
        if isinstance(e, Unary | Binary):
            return from_compute(self._operation(e), self.dtype(e))
        raise BuildError(f"not an expression: {type(e).__name__}")

    def unrounded(self, e: Expr, dtype: str) -> str:
        """f32 C text whose rounding into `dtype` (f16 or bf16) is the value of `e` stored as `dtype`."""
        if isinstance(e, Cast) and e.dtype == dtype and e not in self.reuse:
            src = self.dtype(e.x)
            if src == "f32":
                return self.compute(e.x)
            if src == "f64":
                return f"em_d2odd({self.code(e.x)})"  # em_d2h/em_d2bf round this way, then to 16 bits
        if isinstance(e, Unary | Binary) and self.dtype(e) == dtype and e not in self.reuse:
            return self._operation(e)
        return self.compute(e)

    def combine(self, op: str, acc: str, x: str, dtype: str) -> str:
        """One step of a reduction: `acc` op `x`, both of storage type `dtype`, rounded into it."""
        ct = COMPUTE[dtype]
        step = "add" if op == "sum" else op
        return from_compute(binary_c(step, to_compute(acc, dtype), to_compute(x, dtype), ct), dtype)
