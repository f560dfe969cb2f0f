"""Which code-template family a kernel belongs to, recognised from its structure alone.

`classify(kernel)` returns one of:

- `MatmulShape`: a perfect loop nest over (batch.., m, n) whose innermost body is
  `reduce acc = sum(k in K) a[batch.., m, k] * b[batch.., k, n]` (b may be [.., n, k]),
  then `let`s (the epilogue) and stores in any order (stores only write, so the lets may
  all be computed first). The product's loads may be cast to the
  accumulator type. A split-K partial is the same with a windowed reduce and an extra
  loop over a parts axis (`parts`) that only the window start and the stores use.
- `RowShape`: a perfect nest over the outer parallel axes (`rows`) whose body holds at
  least one reduction, `let`s, scalar stores and at most one inner loop (over `row`) of
  `let`s and stores. The reductions run over `reduce_axes` (the row axis for a plain
  norm; the parts axis for a split combine). Windowed reductions mark a split partial.
- `ElementwiseShape`: a perfect nest whose innermost body holds only `let`s and stores.
- `ExternShape`: an `Extern` kernel.

Matmul is tried before row, so a product of two operand loads is never taken for a row
reduction. Anything else raises `IRError("no template family fits kernel X: <reason>")`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from emmy_core.ir.errors import IRError
from emmy_core.ir.nodes import (
    Binary,
    Cast,
    Expr,
    Extern,
    Kernel,
    Let,
    Load,
    Loop,
    Program,
    Range,
    Reduce,
    Stmt,
    Store,
)

FAMILIES = ("matmul", "row", "elementwise", "extern")


@dataclass(frozen=True)
class MatmulShape:
    batch: tuple[str, ...]
    m: str
    n: str
    k: str
    a: str
    b: str
    b_transposed: bool
    reduce: str
    acc_dtype: str
    epilogue: tuple[Let, ...]
    stores: tuple[Store, ...]
    batch_vars: tuple[str, ...]
    m_var: str
    n_var: str
    k_var: str
    loops: tuple[tuple[str, str], ...]  # (var, axis) of the nest, outermost first
    parts: str | None = None  # the parts axis of a split-K partial
    parts_var: str | None = None
    window: Range | None = None
    family: str = field(default="matmul", init=False)


@dataclass(frozen=True)
class RowShape:
    rows: tuple[str, ...]
    row: str
    n_reductions: int
    rows_vars: tuple[str, ...]
    row_var: str | None  # the inner loop's variable, None when the kernel stores one value per row
    reductions: tuple[Reduce, ...]
    reduce_axes: tuple[str, ...]
    windowed: bool
    body: tuple[Stmt, ...]  # the statements at row level, inner loop included
    family: str = field(default="row", init=False)


@dataclass(frozen=True)
class ElementwiseShape:
    axes: tuple[str, ...]
    vars: tuple[str, ...]
    body: tuple[Stmt, ...]
    family: str = field(default="elementwise", init=False)


@dataclass(frozen=True)
class ExternShape:
    name: str
    problem: tuple[int, ...]
    family: str = field(default="extern", init=False)


Shape = MatmulShape | RowShape | ElementwiseShape | ExternShape


class _NoFit(Exception):
    pass


def _nest(program: Program) -> tuple[list[tuple[str, str]], tuple[Stmt, ...]]:
    loops: list[tuple[str, str]] = []
    body = program.body
    while len(body) == 1 and isinstance(body[0], Loop):
        loops.append((body[0].var, body[0].axis))
        body = body[0].body
    return loops, body


def _operand(e: Expr, acc: str) -> Load | None:
    if isinstance(e, Cast):
        return e.x if isinstance(e.x, Load) and e.dtype == acc else None
    return e if isinstance(e, Load) else None


def _matmul(program: Program, loops: list[tuple[str, str]], body: tuple[Stmt, ...]) -> MatmulShape:
    if not body or not isinstance(body[0], Reduce):
        raise _NoFit("the innermost body does not start with a reduction")
    red = body[0]
    lets = tuple(s for s in body[1:] if isinstance(s, Let))
    stores = tuple(s for s in body[1:] if isinstance(s, Store))
    if not stores or len(lets) + len(stores) != len(body) - 1:
        raise _NoFit("after the reduction come lets and stores, and nothing else")
    if red.op != "sum" or not isinstance(red.body, Binary) or red.body.op != "mul":
        raise _NoFit("the reduction is not a sum of a product")
    x, y = _operand(red.body.a, red.dtype), _operand(red.body.b, red.dtype)
    if x is None or y is None:
        raise _NoFit("the product is not of two operand loads")
    var_axis = dict(loops)
    k = red.var
    for a, b in ((x, y), (y, x)):
        if len(a.index) < 2 or a.index[-1] != k or len(b.index) != len(a.index):
            continue
        m_var, batch_vars = a.index[-2], a.index[:-2]
        if b.index[-2] == k:
            n_var, transposed = b.index[-1], False
        elif b.index[-1] == k:
            n_var, transposed = b.index[-2], True
        else:
            continue
        if b.index[:-2] != batch_vars or m_var == n_var or k in batch_vars:
            continue
        if any(v not in var_axis for v in (m_var, n_var, *batch_vars)) or len(set(batch_vars)) != len(batch_vars):
            continue
        used = {m_var, n_var, *batch_vars}
        extra = [v for v, _ in loops if v not in used]
        window_vars = {v for v, _ in red.window.start.terms} if red.window is not None else set()
        if len(extra) > 1 or (extra and extra[0] not in window_vars):
            raise _NoFit(f"loop variable {extra[0]!r} is neither a matmul axis nor a parts axis")
        for s in stores:
            assert isinstance(s, Store)
            if m_var not in s.index or n_var not in s.index:
                raise _NoFit(f"store into {s.buffer!r} is not indexed by both m and n")
        parts_var = extra[0] if extra else None
        return MatmulShape(
            batch=tuple(var_axis[v] for v in batch_vars), m=var_axis[m_var], n=var_axis[n_var], k=red.axis,
            a=a.buffer, b=b.buffer, b_transposed=transposed, reduce=red.name, acc_dtype=red.dtype,
            epilogue=lets, stores=stores, batch_vars=tuple(batch_vars),
            m_var=m_var, n_var=n_var, k_var=k, loops=tuple(loops),
            parts=var_axis[parts_var] if parts_var else None, parts_var=parts_var, window=red.window,
        )
    raise _NoFit("the operand loads are not indexed [.., m, k] and [.., k, n] (or [.., n, k])")


def _row(loops: list[tuple[str, str]], body: tuple[Stmt, ...]) -> RowShape:
    reductions = tuple(s for s in body if isinstance(s, Reduce))
    inner = [s for s in body if isinstance(s, Loop)]
    if not reductions:
        raise _NoFit("no reduction at row level")
    if len(inner) > 1:
        raise _NoFit("more than one inner loop at row level")
    row_var = None
    if inner:
        loop = inner[0]
        if not loop.body or not all(isinstance(s, Let | Store) for s in loop.body):
            raise _NoFit("the inner loop holds something other than lets and stores")
        row_var, row = loop.var, loop.axis
    else:
        row = reductions[0].axis
    return RowShape(
        rows=tuple(a for _, a in loops), row=row, n_reductions=len(reductions),
        rows_vars=tuple(v for v, _ in loops), row_var=row_var, reductions=reductions,
        reduce_axes=tuple(r.axis for r in reductions), windowed=any(r.window is not None for r in reductions),
        body=body,
    )


def classify(kernel: Kernel) -> Shape:
    """The template family of a (validated) kernel and its structural parts; IRError when none fits."""
    if isinstance(kernel, Extern):
        return ExternShape(kernel.name, kernel.problem)
    if not isinstance(kernel, Program):
        raise IRError(f"not a kernel: {type(kernel).__name__}")
    loops, body = _nest(kernel)
    if not loops:
        raise IRError(f"no template family fits kernel {kernel.name}: its body is not a loop nest")
    if all(isinstance(s, Let | Store) for s in body):
        if not any(isinstance(s, Store) for s in body):
            raise IRError(f"no template family fits kernel {kernel.name}: the innermost body stores nothing")
        return ElementwiseShape(tuple(a for _, a in loops), tuple(v for v, _ in loops), body)
    reasons = []
    try:
        return _matmul(kernel, loops, body)
    except _NoFit as exc:
        reasons.append(f"not a matmul ({exc})")
    try:
        return _row(loops, body)
    except _NoFit as exc:
        reasons.append(f"not a row reduction ({exc})")
    raise IRError(f"no template family fits kernel {kernel.name}: {'; '.join(reasons)}")
