"""IR expressions -> Triton (`tl.*`) code lines, with common subexpressions emitted once per scope.

The templates in `triton_templates.py` decide what each loop variable is in generated
code (a scalar program index, a vector of lanes, a tile row or column) and hand this
module a `Scope`; every expression of the loop program (loads, refs, constants, casts,
extents, unary and binary ops) is then translated here, never hand-copied per kernel.

Names. Every identifier that comes from the IR appears in generated source only with a
prefix: buffers `p_`, dynamic extents `ext_`, loop variables `v_`, let/reduce values
`val_`, the kernel `k_`. Names the generator makes itself (`t3`, `pid`, `offs`, ...) never
start with one of those prefixes, so the two can never collide. Callers validate the
program first (`emmy_core.ir.validate`), so a name is always a checked identifier.

Constants print exactly: a float as its shortest round-trip `repr`, infinities as
`float("inf")`; an IR constant becomes a 0-d tensor of its own data type.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from emmy_core.ir import Binary, Cast, Const, Expr, Extent, Load, Program, Ref, Unary
from emmy_core.ir.vocab import FLOAT_DTYPES

TL_DTYPES = {
    "f16": "tl.float16", "bf16": "tl.bfloat16", "f32": "tl.float32", "f64": "tl.float64",
    "i32": "tl.int32", "i64": "tl.int64",
}
# Ops computed in at least f32: half-precision inputs are widened, and the result narrowed back.
_WIDEN = frozenset({"exp", "log", "sqrt", "rsqrt", "tanh", "erf", "sigmoid"})
_TL_UNARY = {"exp": "tl.exp", "log": "tl.log", "sqrt": "tl.sqrt", "rsqrt": "tl.rsqrt", "abs": "tl.abs",
             "erf": "tl.erf", "sigmoid": "tl.sigmoid"}
_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def buf_name(name: str) -> str:
    return f"p_{name}"


def ext_name(axis: str) -> str:
    return f"ext_{axis}"


def var_name(var: str) -> str:
    return f"v_{var}"


def val_name(name: str) -> str:
    return f"val_{name}"


def kernel_fn_name(name: str) -> str:
    return f"k_{name}"


def float_literal(value: float) -> str:
    """Exact Python text of a float: shortest round-trip repr; infinities as float("inf")."""
    if math.isnan(value):
        raise ValueError("a NaN constant has no literal")
    if math.isinf(value):
        return 'float("inf")' if value > 0 else '-float("inf")'
    return repr(float(value))


def const_literal(dtype: str, value: float | int) -> str:
    if dtype in FLOAT_DTYPES:
        return float_literal(float(value))
    return str(int(value))


def init_literal(op: str, dtype: str) -> str:
    """The identity of a reduction op in `dtype`, as Python text."""
    if op == "sum":
        return "0.0" if dtype in FLOAT_DTYPES else "0"
    big = 'float("inf")' if dtype in FLOAT_DTYPES else str(2**31 - 1 if dtype == "i32" else 2**63 - 1)
    if op == "min":
        return big
    small = '-float("inf")' if dtype in FLOAT_DTYPES else str(-(2**31) if dtype == "i32" else -(2**63))
    return small


@dataclass
class VarCode:
    """What a loop variable is in generated code: an int expression, and the mask of its valid lanes."""

    code: str
    mask: str | None = None


@dataclass
class Scope:
    """One region of generated lines (a kernel body, a loop body): variables, values, and a CSE memo."""

    indent: int
    parent: Scope | None = None
    vars: dict[str, VarCode] = field(default_factory=dict)
    values: dict[str, str] = field(default_factory=dict)
    memo: dict[object, str] = field(default_factory=dict)

    def child(self, indent: int | None = None) -> Scope:
        return Scope(self.indent if indent is None else indent, self)

    def var(self, name: str) -> VarCode:
        s: Scope | None = self
        while s is not None:
            if name in s.vars:
                return s.vars[name]
            s = s.parent
        raise KeyError(f"loop variable {name!r} has no code in this template")

    def value(self, name: str) -> str:
        s: Scope | None = self
        while s is not None:
            if name in s.values:
                return s.values[name]
            s = s.parent
        raise KeyError(f"value {name!r} is not in scope")

    def lookup(self, key: object) -> str | None:
        s: Scope | None = self
        while s is not None:
            if key in s.memo:
                return s.memo[key]
            s = s.parent
        return None

    def all_vars(self) -> dict[str, VarCode]:
        out: dict[str, VarCode] = {}
        chain: list[Scope] = []
        s: Scope | None = self
        while s is not None:
            chain.append(s)
            s = s.parent
        for sc in reversed(chain):
            out.update(sc.vars)
        return out


class Writer:
    """Accumulates generated lines and translates IR expressions into them."""

    def __init__(self, program: Program, check_types: bool = False) -> None:
        self.program = program
        self.check_types = check_types  # emit a static assert of the IR type after every value (tests)
        self.lines: list[str] = []
        self.counter = 0
        self.value_types: dict[str, str] = {}
        # (vars in order, their axes, flat offset code): an access by exactly these is the flat offset
        self.flat: tuple[tuple[str, ...], tuple[str, ...], str] | None = None
        # arithmetic on bf16 values: Triton's interpreter computes it on the raw bits (launches refuse it there)
        self.bf16_math = False

    # -- lines and names
    def fresh(self, stem: str = "t") -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def line(self, scope: Scope, text: str) -> None:
        self.lines.append("    " * scope.indent + text)

    def assign(self, scope: Scope, key: object, text: str, stem: str = "t") -> str:
        """`name = text` once per scope chain for `key`; returns the name."""
        have = scope.lookup(key)
        if have is not None:
            return have
        name = self.fresh(stem)
        self.line(scope, f"{name} = {text}")
        scope.memo[key] = name
        return name

    # -- types
    def dtype_of(self, e: Expr) -> str:
        if isinstance(e, Load):
            return self.program.buffer(e.buffer).dtype
        if isinstance(e, Ref):
            return self.value_types[e.name]
        if isinstance(e, Const | Cast):
            return e.dtype
        if isinstance(e, Extent):
            return "i64"
        if isinstance(e, Unary):
            return self.dtype_of(e.x)
        if isinstance(e, Binary):
            return self.dtype_of(e.a)
        raise TypeError(f"not an expression: {type(e).__name__}")

    # -- addresses
    def stride(self, buffer: str, dim: int) -> str:
        """Contiguous stride of dimension `dim` of `buffer`, as int code ('' when it is 1)."""
        buf = self.program.buffer(buffer)
        static = 1
        dynamic: list[str] = []
        for ax in buf.shape[dim + 1:]:
            axis = self.program.axis(ax)
            if axis.extent is None:
                dynamic.append(ext_name(ax))
            else:
                static *= axis.extent
        parts = dynamic + ([str(static)] if static != 1 else [])
        return " * ".join(parts)

    def extent_code(self, axis: str) -> str:
        ax = self.program.axis(axis)
        return ext_name(axis) if ax.extent is None else str(ax.extent)

    def address(self, scope: Scope, buffer: str, index: tuple[str, ...]) -> tuple[str, str | None]:
        """(offset code, mask name or None) of an access `buffer[index]` in `scope`."""
        dims = list(range(len(index)))
        tail = ""
        if self.flat is not None:  # trailing dimensions indexed by the lanes, in order: the flat offset itself
            lanes, axes, code = self.flat
            n = len(lanes)
            if index[-n:] == lanes and self.program.buffer(buffer).shape[-n:] == axes:
                dims, tail = dims[:-n], code
        terms = []
        for d in dims:
            v = index[d]
            code = str(v) if isinstance(v, int) else scope.var(v).code  # a constant position is a literal
            st = self.stride(buffer, d)
            terms.append(f"{code} * {st}" if st else code)
        offs = " + ".join(terms + ([tail] if tail else []))
        return offs, self.mask(scope, index)

    def mask(self, scope: Scope, index: tuple[str, ...]) -> str | None:
        masks: list[str] = []
        for var in index:
            if isinstance(var, int):  # a constant position is in bounds by the IR's rule
                continue
            m = scope.var(var).mask
            if m is not None and m not in masks:
                masks.append(m)
        if not masks:
            return None
        if len(masks) == 1:
            return masks[0]
        return self.assign(scope, ("mask", tuple(sorted(masks))), " & ".join(f"({m})" for m in sorted(masks)))

    # -- expressions
    def expr(self, scope: Scope, e: Expr) -> str:
        """Code name (or literal) holding the value of `e` in `scope`."""
        have = scope.lookup(e)
        if have is not None:
            return have
        name = self._expr(scope, e)
        if self.check_types and not isinstance(e, Ref):
            self.check(scope, name, self.dtype_of(e))
        return name

    def check(self, scope: Scope, name: str, dtype: str) -> None:
        """With `check_types`: a static assert that `name` holds the IR data type `dtype`."""
        if self.check_types:
            self.line(scope, f"tl.static_assert({name}.dtype == {TL_DTYPES[dtype]})")

    def _expr(self, scope: Scope, e: Expr) -> str:
        if isinstance(e, Ref):
            return scope.value(e.name)
        if isinstance(e, Load):
            offs, mask = self.address(scope, e.buffer, e.index)
            ptr = f"{buf_name(e.buffer)} + ({offs})"
            text = f"tl.load({ptr})" if mask is None else f"tl.load({ptr}, mask={mask}, other=0)"
            return self.assign(scope, e, text)
        if isinstance(e, Const):
            return self.assign(scope, e, f"tl.full([], {const_literal(e.dtype, e.value)}, {TL_DTYPES[e.dtype]})")
        if isinstance(e, Extent):
            return self.assign(scope, e, f"tl.full([], {self.extent_code(e.axis)}, tl.int64)")
        if isinstance(e, Cast):
            x = self.expr(scope, e.x)
            if self.dtype_of(e.x) == e.dtype:
                return x
            return self.assign(scope, e, f"{x}.to({TL_DTYPES[e.dtype]})")
        if isinstance(e, Unary):
            self.bf16_math |= self.dtype_of(e.x) == "bf16"
            return self.assign(scope, e, self.unary(scope, e.op, self.expr(scope, e.x), self.dtype_of(e.x)))
        if isinstance(e, Binary):
            self.bf16_math |= self.dtype_of(e.a) == "bf16"
            a, b = self.expr(scope, e.a), self.expr(scope, e.b)
            return self.assign(scope, e, self.binary(scope, e.op, a, b, self.dtype_of(e.a)))
        raise TypeError(f"not an expression: {type(e).__name__}")

    def unary(self, scope: Scope, op: str, x: str, dtype: str) -> str:
        if op == "neg":
            return f"-{x}"
        if op == "relu":
            return f"tl.where({x} < 0, 0.0, {x})"  # keeps NaN, as torch.relu does
        if op == "recip":  # Triton divides half-precision values in f32: round back to the IR's type
            return f"(1.0 / {x}).to({TL_DTYPES[dtype]})" if dtype in ("f16", "bf16") else f"1.0 / {x}"
        if op == "abs":
            return f"tl.abs({x})"
        wide = dtype in ("f16", "bf16") and op in _WIDEN
        arg = f"{x}.to(tl.float32)" if wide else x
        if op == "tanh":
            arg = self.assign(scope, ("wide", x), arg) if wide else x
            text = self.tanh(scope, arg)
        else:
            text = f"{_TL_UNARY[op]}({arg})"
        return f"({text}).to({TL_DTYPES[dtype]})" if wide else text

    def tanh(self, scope: Scope, x: str) -> str:
        """tanh from core ops (libdevice is not available to the interpreter): odd series near 0, else via exp."""
        ax = self.assign(scope, ("abs", x), f"tl.abs({x})")
        ex = self.assign(scope, ("tanh_e", x), f"tl.exp(-2.0 * {ax})")
        big = self.assign(scope, ("tanh_big", x), f"(1.0 - {ex}) / (1.0 + {ex})")
        x2 = self.assign(scope, ("sq", x), f"{x} * {x}")
        small = self.assign(
            scope, ("tanh_small", x),
            f"{x} * (1.0 + {x2} * (-0.3333333333333333 + {x2} * (0.13333333333333333 + {x2} * "
            f"(-0.05396825396825397 + {x2} * 0.021869488536155203))))",
        )
        signed = self.assign(scope, ("tanh_signed", x), f"tl.where({x} < 0, -{big}, {big})")
        return f"tl.where({ax} < 0.0625, {small}, {signed})"

    def binary(self, scope: Scope, op: str, a: str, b: str, dtype: str) -> str:
        if op == "div" and dtype in ("f16", "bf16"):  # Triton divides half precision in f32
            return f"({a} / {b}).to({TL_DTYPES[dtype]})"
        if op in _INFIX:
            return f"{a} {_INFIX[op]} {b}"
        if op == "max":
            return f"tl.maximum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)" if dtype in FLOAT_DTYPES \
                else f"tl.maximum({a}, {b})"
        if op == "min":
            return f"tl.minimum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)" if dtype in FLOAT_DTYPES \
                else f"tl.minimum({a}, {b})"
        if op == "pow":
            return self.pow(scope, a, b, dtype)
        raise ValueError(f"unknown binary operator {op!r}")

    def pow(self, scope: Scope, a: str, b: str, dtype: str) -> str:
        """a ** b from core ops: |a| ** b via exp2/log2, the sign of a negative base for integral b, 0 ** 0 = 1."""
        wide = dtype in ("f16", "bf16")
        if wide:
            a = self.assign(scope, ("wide", a), f"{a}.to(tl.float32)")
            b = self.assign(scope, ("wide", b), f"{b}.to(tl.float32)")
        mag = self.assign(scope, ("powmag", a, b), f"tl.exp2({b} * tl.log2(tl.abs({a})))")
        whole = self.assign(scope, ("powint", b), f"tl.floor({b}) == {b}")
        odd = self.assign(scope, ("powodd", b), f"(tl.floor({b} * 0.5) * 2.0) != {b}")
        neg = self.assign(
            scope, ("powneg", a, b), f"tl.where({whole}, tl.where({odd}, -{mag}, {mag}), float(\"nan\"))"
        )
        text = f"tl.where({b} == 0.0, 1.0, tl.where({a} < 0, {neg}, {mag}))"
        return f"({text}).to({TL_DTYPES[dtype]})" if wide else text
