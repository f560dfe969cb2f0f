"""Loop programs as frozen dataclasses.

A `Program` is a kernel: named axes (a constant extent, or a dynamic axis with an
expected size), typed buffers with a role (`in` read-only, `out` write-only),
and a body of statements (`Loop`, `Let`, `Reduce`, `Store`) over expressions
(`Load`, `Ref`, `Const`, `Cast`, `Extent`, `Unary`, `Binary`). An `Extern` is a
kernel defined outside Emmy (a Kernel Tuner kernel): a name, a problem size and the
digest of its knob space. Nodes are values: equal text means equal nodes.
The rules a well-formed program obeys are checked in `check.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Union

from emmy_core.ir.vocab import FLOAT_DTYPES, float_misfit


@dataclass(frozen=True)
class Axis:
    """A loop axis: a constant `extent`, or dynamic (`extent` None) with an expected size `hint`."""

    name: str
    extent: int | None
    hint: int | None = None

    @property
    def dynamic(self) -> bool:
        return self.extent is None


@dataclass(frozen=True)
class Buffer:
    """A typed buffer the kernel reads (`in`) or writes (`out`); its shape names axes."""

    name: str
    role: str
    dtype: str
    shape: tuple[str, ...]


# ---- expressions -------------------------------------------------------------------------------


Index = tuple[str | int, ...]  # per axis of the buffer: a loop variable over it, or a constant position in it


@dataclass(frozen=True)
class Load:
    buffer: str
    index: Index


@dataclass(frozen=True)
class Ref:
    """The value of a `Let` or `Reduce` in scope."""

    name: str


@dataclass(frozen=True)
class Const:
    dtype: str
    value: float | int

    def __post_init__(self) -> None:
        # Normalise so that equal constants are equal nodes and render identically.
        if isinstance(self.value, bool):
            raise TypeError("a constant is a number, not a bool")
        if self.dtype in FLOAT_DTYPES:
            v = float(self.value)
            if math.isnan(v):
                raise ValueError("a NaN constant has no canonical text")
            misfit = float_misfit(self.dtype, v)
            if misfit is not None:
                raise ValueError(f"constant {v!r} {misfit}")
            object.__setattr__(self, "value", v + 0.0 if v == 0 else v)
        elif isinstance(self.value, float):
            if not self.value.is_integer():
                raise ValueError(f"integer constant {self.value!r} is not an integer")
            object.__setattr__(self, "value", int(self.value))


@dataclass(frozen=True)
class Cast:
    dtype: str
    x: Expr


@dataclass(frozen=True)
class Extent:
    """The extent of an axis at run time, as an i64."""

    axis: str


@dataclass(frozen=True)
class Unary:
    op: str
    x: Expr


@dataclass(frozen=True)
class Binary:
    op: str
    a: Expr
    b: Expr


Expr = Union[Load, Ref, Const, Cast, Extent, Unary, Binary]  # noqa: UP007


# ---- statements --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Affine:
    """`sum(coef * var) + offset` over loop variables, with non-negative coefficients."""

    terms: tuple[tuple[str, int], ...]
    offset: int = 0


@dataclass(frozen=True)
class Range:
    """A window `[start, start + length)` of an axis, clipped to the axis's extent."""

    start: Affine
    length: int


@dataclass(frozen=True)
class Let:
    name: str
    dtype: str
    value: Expr


@dataclass(frozen=True)
class Reduce:
    """`name = op over var in axis (or a window of it) of body`, accumulated in `dtype`."""

    name: str
    dtype: str
    op: str
    var: str
    axis: str
    body: Expr
    window: Range | None = None


@dataclass(frozen=True)
class Store:
    buffer: str
    index: Index
    value: Expr


@dataclass(frozen=True)
class Loop:
    var: str
    axis: str
    body: tuple[Stmt, ...]


Stmt = Union[Loop, Let, Reduce, Store]  # noqa: UP007


@dataclass(frozen=True)
class Program:
    name: str
    axes: tuple[Axis, ...]
    buffers: tuple[Buffer, ...]
    body: tuple[Stmt, ...]
    _axis_map: dict[str, Axis] = field(init=False, repr=False, compare=False, hash=False)
    _buffer_map: dict[str, Buffer] = field(init=False, repr=False, compare=False, hash=False)
    _dynamic: tuple[Axis, ...] = field(init=False, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_axis_map", {a.name: a for a in self.axes})
        object.__setattr__(self, "_buffer_map", {b.name: b for b in self.buffers})
        object.__setattr__(self, "_dynamic", tuple(a for a in self.axes if a.dynamic))

    def axis(self, name: str) -> Axis:
        return self._axis_map[name]

    def buffer(self, name: str) -> Buffer:
        return self._buffer_map[name]

    @property
    def dynamic_axes(self) -> tuple[Axis, ...]:
        return self._dynamic  # read at every size a compile settles: worked out once

    @property
    def inputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.role == "in")

    @property
    def outputs(self) -> tuple[Buffer, ...]:
        return tuple(b for b in self.buffers if b.role == "out")


@dataclass(frozen=True)
class Extern:
    """A kernel defined outside Emmy: a name, its problem size, the digest of its knob space."""

    name: str
    problem: tuple[int, ...]
    space: str


Kernel = Union[Program, Extern]  # noqa: UP007
