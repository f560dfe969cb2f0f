"""Structural facts of a loop program at concrete sizes: pure functions, never stored.

Counts of statements and operations by kind (static, as written), loop extents,
data types and widths, bytes moved (every buffer read or written once), flops (each
arithmetic operation weighted by how often it runs) and arithmetic intensity. The
prior's structure features are computed from these whenever a row is turned into features.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from math import prod

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
from emmy_core.ir.vocab import DTYPES, dtype_bytes


@dataclass(frozen=True)
class Facts:
    statements: dict[str, int]  # loop / let / reduce / store -> count
    operations: dict[str, int]  # operator (and load, cast, const) -> count as written
    loop_extents: tuple[int, ...]  # extent of every loop and reduction, in program order
    max_depth: int
    dtypes: tuple[str, ...]  # distinct buffer data types, sorted
    max_width: int  # widest buffer data type, bits
    min_width: int
    bytes_moved: int
    flops: int
    intensity: float  # flops per byte moved
    sizes: dict[str, int]


def _expr_ops(e: Expr, ops: Counter[str]) -> int:
    """Counts operations in `e` into `ops`; returns its arithmetic op count (unary + binary)."""
    if isinstance(e, Load):
        ops["load"] += 1
        return 0
    if isinstance(e, Const):
        ops["const"] += 1
        return 0
    if isinstance(e, Ref | Extent):
        return 0
    if isinstance(e, Cast):
        ops["cast"] += 1
        return _expr_ops(e.x, ops)
    if isinstance(e, Unary):
        ops[e.op] += 1
        return 1 + _expr_ops(e.x, ops)
    if isinstance(e, Binary):
        ops[e.op] += 1
        return 1 + _expr_ops(e.a, ops) + _expr_ops(e.b, ops)
    raise TypeError(type(e).__name__)


def facts(program: Program, sizes: dict[str, int] | None = None) -> Facts:
    """Structural facts of `program` with dynamic axes at `sizes` (default: their expected sizes)."""
    ext = extents(program, sizes)
    stmts: Counter[str] = Counter()
    ops: Counter[str] = Counter()
    loop_extents: list[int] = []
    flops = 0
    depth_seen = 0

    def trip(reduce: Reduce) -> int:
        n = ext[reduce.axis]
        return min(n, reduce.window.length) if reduce.window is not None else n

    def walk(body: tuple[Stmt, ...], mult: int, depth: int) -> None:
        nonlocal flops, depth_seen
        depth_seen = max(depth_seen, depth)
        for s in body:
            if isinstance(s, Loop):
                stmts["loop"] += 1
                loop_extents.append(ext[s.axis])
                walk(s.body, mult * ext[s.axis], depth + 1)
            elif isinstance(s, Let):
                stmts["let"] += 1
                flops += mult * _expr_ops(s.value, ops)
            elif isinstance(s, Reduce):
                stmts["reduce"] += 1
                n = trip(s)
                loop_extents.append(n)
                depth_seen = max(depth_seen, depth + 1)
                flops += mult * n * (_expr_ops(s.body, ops) + 1)  # + the accumulation
                ops[f"reduce_{s.op}"] += 1
            elif isinstance(s, Store):
                stmts["store"] += 1
                ops["store"] += 1
                flops += mult * _expr_ops(s.value, ops)

    walk(program.body, 1, 0)
    moved = sum(prod(ext[a] for a in b.shape) * dtype_bytes(b.dtype) for b in program.buffers)
    widths = [DTYPES[b.dtype] for b in program.buffers]
    return Facts(
        statements=dict(sorted(stmts.items())),
        operations=dict(sorted(ops.items())),
        loop_extents=tuple(loop_extents),
        max_depth=depth_seen,
        dtypes=tuple(sorted({b.dtype for b in program.buffers})),
        max_width=max(widths),
        min_width=min(widths),
        bytes_moved=moved,
        flops=flops,
        intensity=flops / moved if moved else 0.0,
        sizes={a.name: ext[a.name] for a in program.dynamic_axes},
    )
