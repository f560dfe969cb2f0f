"""The rules of a well-formed loop program: names, scopes and types.

One `Scope` object implements every rule; the parser calls it as it reads (so a
fault is reported at its line and column) and `validate()` walks a program built
in code through the same calls (so a fault is reported by its path). Rules:
names follow `names.py` and are never shadowed; axes and buffers are declared once;
`in` buffers are only loaded and `out` buffers only stored, each at least once;
an index is a loop variable whose axis is the buffer's axis in that position, or a
constant position inside a static axis (so every access is in bounds by construction); operands of an operator share a data
type and casts are explicit; nesting is bounded.
"""

from __future__ import annotations

from emmy_core.ir.errors import IRError
from emmy_core.ir.names import name_problem
from emmy_core.ir.nodes import (
    Affine,
    Axis,
    Binary,
    Buffer,
    Cast,
    Const,
    Expr,
    Extent,
    Extern,
    Kernel,
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
from emmy_core.ir.vocab import BINARY_OPS, DTYPES, FLOAT_DTYPES, REDUCE_OPS, ROLES, UNARY_OPS

MAX_EXPR_DEPTH = 64
MAX_LOOP_DEPTH = 16
MAX_RANK = 8
MAX_EXTENT = 2**31 - 1
FLOAT_ONLY_BINARY = frozenset({"div", "pow"})
HEX64 = frozenset("0123456789abcdef")


def _name(name: object, what: str) -> str:
    problem = name_problem(name)
    if problem is not None:
        raise IRError(f"{what} name: {problem}")
    assert isinstance(name, str)
    return name


def check_dtype(dtype: object) -> str:
    if not isinstance(dtype, str) or dtype not in DTYPES:
        raise IRError(f"unknown data type {str(dtype)[:40]!r}; known: {', '.join(sorted(DTYPES))}")
    return dtype


def check_extent(value: object, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_EXTENT:
        raise IRError(f"{what} must be an integer in 1..{MAX_EXTENT}, got {str(value)[:40]}")
    return value


class Scope:
    """Declarations visible at one point of a program, and the type rules over them."""

    def __init__(self) -> None:
        self.axes: dict[str, Axis] = {}
        self.buffers: dict[str, Buffer] = {}
        self.loop_vars: dict[str, str] = {}  # variable -> axis
        self.values: dict[str, str] = {}  # let/reduce name -> dtype
        self.frames: list[list[str]] = [[]]
        self.stored: set[str] = set()

    # -- declarations
    def _fresh(self, name: object, what: str) -> str:
        n = _name(name, what)
        if n in self.axes or n in self.buffers or n in self.loop_vars or n in self.values:
            raise IRError(f"{what} name {n!r} is already declared in this scope")
        return n

    def declare_axis(self, axis: Axis) -> None:
        self._fresh(axis.name, "axis")
        if axis.extent is None:
            check_extent(axis.hint, f"expected size of dynamic axis {axis.name!r}")
        else:
            check_extent(axis.extent, f"extent of axis {axis.name!r}")
            if axis.hint is not None:
                raise IRError(f"static axis {axis.name!r} cannot carry an expected size")
        self.axes[axis.name] = axis

    def declare_buffer(self, buf: Buffer) -> None:
        self._fresh(buf.name, "buffer")
        if buf.role not in ROLES:
            raise IRError(f"buffer {buf.name!r}: role must be 'in' or 'out', got {str(buf.role)[:20]!r}")
        check_dtype(buf.dtype)
        if not 1 <= len(buf.shape) <= MAX_RANK:
            raise IRError(f"buffer {buf.name!r}: rank must be 1..{MAX_RANK}, got {len(buf.shape)}")
        for ax in buf.shape:
            if ax not in self.axes:
                raise IRError(f"buffer {buf.name!r}: unknown axis {str(ax)[:70]!r} in its shape")
        self.buffers[buf.name] = buf

    def push_loop(self, var: str, axis: str) -> None:
        if len(self.frames) > MAX_LOOP_DEPTH:
            raise IRError(f"loops nest deeper than {MAX_LOOP_DEPTH}")
        self._fresh(var, "loop variable")
        if axis not in self.axes:
            raise IRError(f"loop over unknown axis {str(axis)[:70]!r}")
        self.loop_vars[var] = axis
        self.frames.append([var])

    def pop_loop(self) -> None:
        for name in self.frames.pop():
            self.loop_vars.pop(name, None)
            self.values.pop(name, None)

    def declare_value(self, name: str, dtype: str) -> None:
        self._fresh(name, "value")
        self.values[name] = dtype
        self.frames[-1].append(name)

    # -- expressions
    def index(self, buffer: str, index: tuple[str | int, ...], role: str) -> Buffer:
        buf = self.buffers.get(buffer)
        if buf is None:
            raise IRError(f"unknown buffer {str(buffer)[:70]!r}")
        if buf.role != role:
            verb = "loaded" if role == "in" else "stored"
            raise IRError(f"buffer {buffer!r} is an '{buf.role}' buffer and cannot be {verb}")
        if len(index) != len(buf.shape):
            raise IRError(f"buffer {buffer!r} has rank {len(buf.shape)} but is indexed with {len(index)}")
        for pos, (var, ax) in enumerate(zip(index, buf.shape, strict=True)):
            if isinstance(var, int) and not isinstance(var, bool):  # a constant position of a static axis
                extent = self.axes[ax].extent
                if extent is None:
                    raise IRError(f"constant index {var} of {buffer!r} at position {pos}: axis {ax!r} is dynamic")
                if not 0 <= var < extent:
                    raise IRError(f"constant index {var} of {buffer!r} at position {pos} is outside axis {ax!r} "
                                  f"(0..{extent - 1})")
                continue
            if not isinstance(var, str):
                raise IRError(f"index of {buffer!r} at position {pos} is neither a loop variable nor an integer")
            bound = self.loop_vars.get(var)
            if bound is None:
                raise IRError(f"index {str(var)[:70]!r} of {buffer!r} is not a loop variable in scope")
            if bound != ax:
                raise IRError(
                    f"index {var!r} runs over axis {bound!r} but position {pos} of {buffer!r} is axis {ax!r}"
                )
        return buf

    def type_unary(self, op: str, x: str) -> str:
        if op not in UNARY_OPS:
            raise IRError(f"unknown unary operator {str(op)[:40]!r}")
        if x not in FLOAT_DTYPES:
            raise IRError(f"{op} needs a floating operand, got {x}")
        return x

    def type_binary(self, op: str, a: str, b: str) -> str:
        if op not in BINARY_OPS:
            raise IRError(f"unknown binary operator {str(op)[:40]!r}")
        if a != b:
            raise IRError(f"{op} of {a} and {b}: operands must share a data type (cast explicitly)")
        if op in FLOAT_ONLY_BINARY and a not in FLOAT_DTYPES:
            raise IRError(f"{op} needs floating operands, got {a}")
        return a

    def type_const(self, c: Const) -> str:
        check_dtype(c.dtype)
        return c.dtype

    def type_ref(self, name: str) -> str:
        if name in self.values:
            return self.values[name]
        if name in self.loop_vars:
            raise IRError(f"{name!r} is a loop variable, not a value")
        raise IRError(f"unknown value {str(name)[:70]!r}")

    def type_extent(self, axis: str) -> str:
        if axis not in self.axes:
            raise IRError(f"extent of unknown axis {str(axis)[:70]!r}")
        return "i64"

    def type_of(self, e: Expr, depth: int = 0) -> str:
        """The data type of a built expression (walked iteratively deep, bounded)."""
        if depth > MAX_EXPR_DEPTH:
            raise IRError(f"expression nests deeper than {MAX_EXPR_DEPTH}")
        if isinstance(e, Load):
            return self.index(e.buffer, e.index, "in").dtype
        if isinstance(e, Ref):
            return self.type_ref(e.name)
        if isinstance(e, Const):
            return self.type_const(e)
        if isinstance(e, Extent):
            return self.type_extent(e.axis)
        if isinstance(e, Cast):
            self.type_of(e.x, depth + 1)
            return check_dtype(e.dtype)
        if isinstance(e, Unary):
            return self.type_unary(e.op, self.type_of(e.x, depth + 1))
        if isinstance(e, Binary):
            return self.type_binary(e.op, self.type_of(e.a, depth + 1), self.type_of(e.b, depth + 1))
        raise IRError(f"not an expression: {type(e).__name__}")

    # -- statements
    def check_affine(self, a: Affine) -> None:
        seen: set[str] = set()
        for var, coef in a.terms:
            if var not in self.loop_vars:
                raise IRError(f"window start uses {str(var)[:70]!r}, which is not a loop variable in scope")
            if var in seen:
                raise IRError(f"window start names {var!r} twice")
            seen.add(var)
            if not isinstance(coef, int) or isinstance(coef, bool) or not 1 <= coef <= MAX_EXTENT:
                raise IRError(f"window coefficient of {var!r} must be in 1..{MAX_EXTENT}")
        if not isinstance(a.offset, int) or isinstance(a.offset, bool) or not 0 <= a.offset <= MAX_EXTENT:
            raise IRError(f"window offset must be in 0..{MAX_EXTENT}")

    def begin_reduce(self, r_name: str, dtype: str, op: str, var: str, axis: str) -> None:
        """Checks the head of a reduction and opens the scope of its variable."""
        self._fresh(r_name, "value")
        check_dtype(dtype)
        if op not in REDUCE_OPS:
            raise IRError(f"unknown reduction {str(op)[:40]!r}; known: {', '.join(sorted(REDUCE_OPS))}")
        if var == r_name:
            raise IRError(f"reduction {r_name!r} and its variable share a name")
        self.push_loop(var, axis)

    def end_reduce(self, r_name: str, dtype: str, body_type: str) -> None:
        self.pop_loop()
        if body_type != dtype:
            raise IRError(f"reduction {r_name!r} accumulates {dtype} but its body is {body_type}")
        self.declare_value(r_name, dtype)

    def check_let(self, name: str, dtype: str, value_type: str) -> None:
        check_dtype(dtype)
        if value_type != dtype:
            raise IRError(f"let {name!r} is declared {dtype} but its value is {value_type}")
        self.declare_value(name, dtype)

    def check_store(self, buffer: str, index: tuple[str | int, ...], value_type: str) -> None:
        buf = self.index(buffer, index, "out")
        if value_type != buf.dtype:
            raise IRError(f"store into {buffer!r} ({buf.dtype}) of a {value_type} value (cast explicitly)")
        self.stored.add(buffer)

    def finish(self) -> None:
        if not any(b.role == "out" for b in self.buffers.values()):
            raise IRError("a kernel needs at least one 'out' buffer")
        for b in self.buffers.values():
            if b.role == "out" and b.name not in self.stored:
                raise IRError(f"'out' buffer {b.name!r} is never stored")


def check_extern(k: Extern) -> None:
    _name(k.name, "extern kernel")
    if not 1 <= len(k.problem) <= MAX_RANK:
        raise IRError(f"extern {k.name!r}: problem size needs 1..{MAX_RANK} dimensions")
    for d in k.problem:
        check_extent(d, f"extern {k.name!r} problem dimension")
    if not isinstance(k.space, str) or len(k.space) != 64 or not set(k.space) <= HEX64:
        raise IRError(f"extern {k.name!r}: space must be a sha256 digest in 64 lowercase hex digits")


def _walk(scope: Scope, stmts: tuple[Stmt, ...], path: str) -> None:
    for i, s in enumerate(stmts):
        here = f"{path}[{i}]"
        try:
            if isinstance(s, Loop):
                scope.push_loop(s.var, s.axis)
                if not s.body:
                    raise IRError("a loop needs a body")
                _walk(scope, s.body, f"{here}.body")
                scope.pop_loop()
            elif isinstance(s, Let):
                scope.check_let(_name(s.name, "value"), s.dtype, scope.type_of(s.value))
            elif isinstance(s, Reduce):
                if s.window is not None:  # checked before the reduction's own variable is in scope
                    scope.check_affine(s.window.start)
                    check_extent(s.window.length, "window length")
                scope.begin_reduce(s.name, s.dtype, s.op, s.var, s.axis)
                scope.end_reduce(s.name, s.dtype, scope.type_of(s.body))
            elif isinstance(s, Store):
                scope.check_store(s.buffer, tuple(s.index), scope.type_of(s.value))
            else:
                raise IRError(f"not a statement: {type(s).__name__}")
        except IRError as exc:
            if str(exc).startswith("body"):
                raise
            raise IRError(f"{here}: {exc}") from None


def validate(kernel: Kernel) -> Kernel:
    """Checks every rule of the IR on a kernel built in code; returns it, or raises `IRError`."""
    if isinstance(kernel, Extern):
        check_extern(kernel)
        return kernel
    if not isinstance(kernel, Program):
        raise IRError(f"not a kernel: {type(kernel).__name__}")
    _name(kernel.name, "kernel")
    scope = Scope()
    for ax in kernel.axes:
        scope.declare_axis(ax)
    for buf in kernel.buffers:
        scope.declare_buffer(buf)
    _walk(scope, kernel.body, "body")
    scope.finish()
    return kernel
