"""C text of loop-program expressions: data types, exact constants, casts and operators.

Every IR name reaches C only with a prefix (`n_` axis extent, `b_` buffer, `i_` loop
variable, `v_` value), and only from a program that passed `validate`; data types and
operators are looked up in closed tables here, so nothing outside them can be printed.
Code the generator adds itself uses the `em_` prefix, which no prefixed IR name starts with.

Arithmetic follows the IR: every operation is computed in its declared type. f32, f64,
i32 and i64 are native (integer add/sub/mul wrap, computed unsigned so C has no overflow).
f16 is stored as `_Float16` and bf16 as `uint16_t` bits; an operation on either converts
its operands to float, computes there and rounds the result back to nearest even, which
is exact for add/sub/mul/div/sqrt (float has more than 2p+2 bits) and how torch computes
them on the CPU. A double goes to bf16 by round-to-odd to float, then nearest-even, so it
is rounded once. Constants print exactly: hex floats, INFINITY for an infinity, bf16 as
its rounded bit pattern computed here.
"""

from __future__ import annotations

import math
import struct
from fractions import Fraction

from emmy_core.codegen.backend import BuildError
from emmy_core.ir.nodes import Binary, Cast, Const, Expr, Extent, Load, Program, Ref, Unary

C_TYPES: dict[str, str] = {
    "f16": "_Float16", "bf16": "uint16_t", "f32": "float", "f64": "double", "i32": "int32_t", "i64": "int64_t",
}
# The type an operation on a value of the key type is computed in.
COMPUTE: dict[str, str] = {"f16": "f32", "bf16": "f32", "f32": "f32", "f64": "f64", "i32": "i32", "i64": "i64"}
INT_RANGE: dict[str, tuple[int, int]] = {"i32": (-(2**31), 2**31 - 1), "i64": (-(2**63), 2**63 - 1)}

PRELUDE = r"""#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

static inline float em_h2f(_Float16 x) { return (float)x; }
static inline _Float16 em_f2h(float x) { return (_Float16)x; }
static inline _Float16 em_d2h(double x) { return (_Float16)x; }
static inline float em_bf2f(uint16_t x) { uint32_t u = (uint32_t)x << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t em_f2bf(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)0x7fc0u;
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}
static inline uint16_t em_d2bf(double d) {
  /* round to odd into float (keeps a sticky bit), then to nearest even into bf16: one rounding */
  if (d != d) return (uint16_t)0x7fc0u;
  float f = (float)d;
  if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
  if ((double)f != d) { uint32_t u; memcpy(&u, &f, 4); u |= 1u; memcpy(&f, &u, 4); }
  return em_f2bf(f);
}
static inline float em_maxf(float a, float b) { return (b != b || b > a) ? b : a; }
static inline float em_minf(float a, float b) { return (b != b || b < a) ? b : a; }
static inline double em_maxd(double a, double b) { return (b != b || b > a) ? b : a; }
static inline double em_mind(double a, double b) { return (b != b || b < a) ? b : a; }
static inline float em_reluf(float x) { return x < 0.0f ? 0.0f : x; }
static inline double em_relud(double x) { return x < 0.0 ? 0.0 : x; }
static inline int32_t em_add_i32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
static inline int32_t em_sub_i32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a - (uint32_t)b); }
static inline int32_t em_mul_i32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a * (uint32_t)b); }
static inline int64_t em_add_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t em_sub_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static inline int64_t em_mul_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static inline int64_t em_min64(int64_t a, int64_t b) { return a < b ? a : b; }
"""


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


def _bf16_bits(value: float) -> int:
    """The bfloat16 bit pattern nearest to `value` (ties to even), computed exactly."""
    sign = 0x8000 if math.copysign(1.0, value) < 0 else 0
    mag = abs(value)
    if math.isinf(mag):
        return sign | 0x7F80
    if mag == 0:
        return sign
    exp = max(math.frexp(mag)[1] - 1, -126)  # bf16 shares float's exponent range
    quantum = Fraction(2) ** (exp - 7)
    steps = Fraction(mag) / quantum
    n = math.floor(steps)
    rest = steps - n
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and n % 2 == 1):
        n += 1
    rounded = n * quantum
    if rounded >= Fraction(2) ** 128:
        return sign | 0x7F80
    bits = struct.unpack("<I", struct.pack("<f", float(rounded)))[0]  # exact: a bf16 value is a float
    return sign | (bits >> 16)


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
    if c.dtype == "bf16":
        return f"((uint16_t)0x{_bf16_bits(v):04x}u)"
    text = ("-INFINITY" if v < 0 else "INFINITY") if math.isinf(v) else float.hex(v)
    if c.dtype == "f64":
        return f"((double)({text}))"
    if c.dtype == "f32":
        return f"((float)({text}))"
    return f"em_d2h({text})"  # f16: one rounding from the double


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
    if dst == "f32" and src in ("f16", "bf16"):
        return to_compute(code, src)
    if dst in ("f32", "f64"):
        return f"(({C_TYPES[dst]}){to_compute(code, src)})"
    if dst in INT_RANGE:  # truncation toward zero, as torch's .to(int)
        return f"(({C_TYPES[dst]}){to_compute(code, src)})"
    wide = code if src == "f64" else f"((double){to_compute(code, src)})"
    if src == "f32":
        return f"em_f2h({code})" if dst == "f16" else f"em_f2bf({code})"
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
    if op in ("exp", "log", "sqrt", "tanh", "erf"):
        return f"{op}{s}({x})"
    if op == "abs":
        return f"fabs{s}({x})"
    if op == "rsqrt":
        return f"({one} / sqrt{s}({x}))"
    if op == "recip":
        return f"({one} / ({x}))"
    if op == "sigmoid":
        return f"({one} / ({one} + exp{s}(-({x}))))"
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


def offset_c(program: Program, buffer: str, index: tuple[str, ...]) -> str:
    """Row-major element offset of `buffer[index]` (contiguous storage)."""
    shape = program.buffer(buffer).shape
    code = var_c(index[0])
    for var, axis in zip(index[1:], shape[1:], strict=True):
        code = f"({code} * {axis_c(axis)} + {var_c(var)})"
    return code


class ExprC:
    """Translates expressions of one program; `values` maps each value name in scope to its data type."""

    def __init__(self, program: Program) -> None:
        self.program = program
        self.values: dict[str, str] = {}

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

    def code(self, e: Expr) -> str:
        """C text of `e`, a value of its storage type."""
        if isinstance(e, Load):
            return f"{buffer_c(e.buffer)}[{offset_c(self.program, e.buffer, e.index)}]"
        if isinstance(e, Ref):
            return value_c(e.name)
        if isinstance(e, Const):
            return const_c(e)
        if isinstance(e, Extent):
            return axis_c(e.axis)
        if isinstance(e, Cast):
            return cast_c(self.code(e.x), self.dtype(e.x), e.dtype)
        if isinstance(e, Unary):
            t = self.dtype(e)
            return from_compute(unary_c(e.op, to_compute(self.code(e.x), t), COMPUTE[t]), t)
        if isinstance(e, Binary):
            t = self.dtype(e)
            a, b = to_compute(self.code(e.a), t), to_compute(self.code(e.b), t)
            return from_compute(binary_c(e.op, a, b, COMPUTE[t]), t)
        raise BuildError(f"not an expression: {type(e).__name__}")

    def combine(self, op: str, acc: str, x: str, dtype: str) -> str:
        """One step of a reduction: `acc` op `x`, both of storage type `dtype`, rounded into it."""
        ct = COMPUTE[dtype]
        step = "add" if op == "sum" else op
        return from_compute(binary_c(step, to_compute(acc, dtype), to_compute(x, dtype), ct), dtype)
