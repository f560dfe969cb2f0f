"""Row kernels in C with every element converted once and every library call made once.

A row reduction (RMSNorm, softmax, layernorm) or an elementwise chain reads and writes
whole rows: `x[rows.., j]`. The generic translator converts a 16-bit element each time
an expression reads it and recomputes an expression the loop after a reduction repeats
(softmax's `exp(x - max)`). Here, per row (the rows shared out among the threads):

- each 16-bit input read only as whole rows is converted once into an f32 run (eight or
  sixteen halves per instruction with F16C, else the exact integer form), and a 16-bit
  input indexed by the row position alone (a norm's weight) once per thread;
- each 16-bit output written only as whole rows is computed into an f32 run and rounded
  once at the end of the row (the same rounding as an element-wise store);
- a reduction whose per-element value calls the math library and is read again by the
  loop after it (same expression, same loop variable) keeps that value in a run.

Values are bit for bit those of the generic translation: conversions are exact or
rounded once either way, and a kept value is the value that would be recomputed. Kernels
with nothing to convert or keep, split partials (windowed reductions) and loops that are
not independent take the generic translation.
"""

from __future__ import annotations

from dataclasses import dataclass

from emmy_core.codegen.c_emit import Emitter, independent
from emmy_core.codegen.c_expr import HALF_RUNS, Staged, axis_c, buffer_c, offset_of, var_c
from emmy_core.ir.errors import IRError
from emmy_core.ir.family import ElementwiseShape, RowShape, classify
from emmy_core.ir.nodes import Binary, Expr, Let, Load, Loop, Reduce, Stmt, Store, Unary

LIBRARY_CALLS = frozenset({"exp", "log", "tanh", "erf", "sigmoid"})  # unary ops that call libm


@dataclass(frozen=True)
class RowPlan:
    rows: tuple[str, ...]  # row axes, outermost first
    rows_vars: tuple[str, ...]
    row: str  # the axis along a row
    body: tuple[Stmt, ...]  # statements per row
    per_row: tuple[str, ...]  # 16-bit inputs converted per row
    per_thread: tuple[str, ...]  # 16-bit inputs indexed by the row position alone
    outputs: tuple[str, ...]  # 16-bit outputs rounded per row
    keep: tuple[tuple[Expr, str], ...]  # (reduction body, its data type) kept per element


def _walk(e: Expr, out: list[Expr]) -> None:
    out.append(e)
    for f in ("x", "a", "b"):
        sub = getattr(e, f, None)
        if isinstance(sub, Expr):
            _walk(sub, out)


def _exprs(stmts: tuple[Stmt, ...]) -> list[Expr]:
    out: list[Expr] = []
    for s in stmts:
        if isinstance(s, Loop):
            out.extend(_exprs(s.body))
        elif isinstance(s, Reduce):
            _walk(s.body, out)
        elif isinstance(s, Let | Store):
            _walk(s.value, out)
    return out


def _stores(stmts: tuple[Stmt, ...], inner: bool = False) -> list[tuple[Store, bool]]:
    out: list[tuple[Store, bool]] = []
    for s in stmts:
        if isinstance(s, Store):
            out.append((s, inner))
        elif isinstance(s, Loop):
            out.extend(_stores(s.body, True))
    return out


def _calls_library(e: Expr) -> bool:
    found: list[Expr] = []
    _walk(e, found)
    return any((isinstance(x, Unary) and x.op in LIBRARY_CALLS) or (isinstance(x, Binary) and x.op == "pow")
               for x in found)


def row_plan(em: Emitter) -> RowPlan | None:
    """What the row form converts and keeps for this program; None when the generic form is used."""
    p = em.program
    try:
        shape = classify(p)
    except IRError:
        return None
    if isinstance(shape, RowShape):
        if shape.windowed:
            return None
        rows, rows_vars, row, body = shape.rows, shape.rows_vars, shape.row, shape.body
    elif isinstance(shape, ElementwiseShape) and len(shape.axes) >= 2:
        rows, rows_vars, row = shape.axes[:-1], shape.vars[:-1], shape.axes[-1]
        body = (Loop(shape.vars[-1], row, shape.body),)
    else:
        return None
    nest = p.body
    for _ in rows:
        loop = nest[0]
        assert isinstance(loop, Loop)
        if not independent(loop.var, loop.body):
            return None
        nest = loop.body
    loads: dict[str, set[tuple[str, ...]]] = {}
    for e in _exprs(body):
        if isinstance(e, Load):
            loads.setdefault(e.buffer, set()).add(e.index)
    per_row, per_thread = [], []
    for name in sorted(loads):
        b = p.buffer(name)
        if b.dtype not in HALF_RUNS or b.shape[-1] != row:
            continue
        prefixes = {idx[:-1] for idx in loads[name]}
        if b.shape == (*rows, row) and prefixes == {rows_vars}:
            per_row.append(name)
        elif b.shape == (row,):
            per_thread.append(name)
    outputs = []
    stores = _stores(body)
    for b in p.outputs:
        mine = [(s, inner) for s, inner in stores if s.buffer == b.name]
        if (b.dtype in HALF_RUNS and b.shape == (*rows, row) and mine
                and all(inner and s.index[:-1] == rows_vars for s, inner in mine)):
            outputs.append(b.name)
    inner_exprs = [e for s in body if isinstance(s, Loop) for e in _exprs((s,))]
    keep = []
    for s in body:
        if isinstance(s, Reduce) and s.window is None and s.dtype in ("f32", "f64") and s.axis == row \
                and _calls_library(s.body) and s.body in inner_exprs \
                and any(isinstance(x, Loop) and x.var == s.var for x in body):
            keep.append((s.body, s.dtype))
    if not (per_row or per_thread or outputs or keep):
        return None
    return RowPlan(tuple(rows), tuple(rows_vars), row, body, tuple(per_row), tuple(per_thread), tuple(outputs),
                   tuple(keep))


def emit_rows(em: Emitter) -> bool:
    """Emits the row form when `row_plan` finds something to convert once or keep; False otherwise."""
    plan = row_plan(em)
    if plan is None:
        return False
    p = em.program
    n_row = axis_c(plan.row)
    runs = [*plan.per_row, *plan.per_thread, *plan.outputs]
    kept32 = [e for e, t in plan.keep if t == "f32"]
    kept64 = [e for e, t in plan.keep if t == "f64"]
    if em.parallel:
        em.line(f"#pragma omp parallel{em.threads_clause()}")
    with em.block(""):
        em.line(f"float *em_rs = (float *)malloc(sizeof(float) * (size_t)({len(runs) + len(kept32)} * {n_row} + 1));")
        em.line(f"double *em_rd = (double *)malloc(sizeof(double) * (size_t)({len(kept64)} * {n_row} + 1));")
        em.line("const int em_ok = em_rs && em_rd;")
        with em.block("if (!em_ok)"):
            if em.parallel:
                em.line("#pragma omp atomic write")
            em.line("em_err = 1;")
        staged: dict[str, Staged] = {}
        for i, name in enumerate(runs):
            em.line(f"float *em_run{i} = em_rs + {i} * {n_row};")
            prefix = () if name in plan.per_thread else plan.rows_vars
            staged[name] = Staged(prefix, f"em_run{i}")
        for i, e in enumerate(kept32):
            em.line(f"float *em_keep{i} = em_rs + {len(runs) + i} * {n_row};")
            em.keep[e] = f"em_keep{i}"
        for i, e in enumerate(kept64):
            em.line(f"double *em_keepd{i} = em_rd + {i} * {n_row};")
            em.keep[e] = f"em_keepd{i}"
        for name in plan.per_thread:
            em.line(f"if (em_ok) {HALF_RUNS[p.buffer(name).dtype][0]}({buffer_c(name)}, {staged[name].scratch}, "
                    f"{n_row});")
        if em.parallel:
            em.line(f"#pragma omp for collapse({len(plan.rows)}) schedule(static)")
        for v, a in zip(plan.rows_vars[:-1], plan.rows[:-1], strict=True):
            em.line(em.for_head(v, a))
        with em.block(em.for_head(plan.rows_vars[-1], plan.rows[-1])):
            em.line("if (!em_ok) continue;")
            start = (*(var_c(v) for v in plan.rows_vars), "0")
            for name in plan.per_row:
                at = offset_of(p, name, start)
                em.line(f"{HALF_RUNS[p.buffer(name).dtype][0]}({buffer_c(name)} + {at}, {staged[name].scratch}, "
                        f"{n_row});")
            em.x.staged = {n: staged[n] for n in (*plan.per_row, *plan.per_thread)}
            em.staged_out = {n: staged[n] for n in plan.outputs}
            try:
                em.stmts(plan.body, True)
            finally:
                em.x.staged, em.staged_out, em.keep = {}, {}, {}
                em.x.reuse = {}
            for name in plan.outputs:
                at = offset_of(p, name, start)
                em.line(f"{HALF_RUNS[p.buffer(name).dtype][1]}({staged[name].scratch}, {buffer_c(name)} + {at}, "
                        f"{n_row});")
        em.line("free(em_rs); free(em_rd);")
    return True


__all__ = ["LIBRARY_CALLS", "RowPlan", "emit_rows", "row_plan"]
