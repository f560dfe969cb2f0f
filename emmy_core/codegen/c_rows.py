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
from emmy_core.codegen.c_expr import HALF_RUNS, Staged, axis_c, buffer_c, offset_of, value_c, var_c
from emmy_core.ir.errors import IRError
from emmy_core.ir.family import ElementwiseShape, RowShape, classify
from emmy_core.ir.nodes import Binary, Cast, Expr, Let, Load, Loop, Reduce, Ref, Stmt, Store, Unary

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


# f16 rows with F16C: the conversion fused into the first pass when that pass takes the row's maximum,
# and the rounding into the last when it scales a kept value (softmax's max and scale passes). A max
# is the same whatever the order (em_maxf: a NaN wins); each element is rounded once either way.
H2F_RUN_MAX = """/* halves to floats and their maximum (em_maxf's: a NaN wins) in one pass over the row */
static inline float em_h2f_run_max(const uint16_t *restrict s, float *restrict d, int64_t n) {
  float m = -INFINITY;
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  if (n >= 8) {
    __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0, m2 = m0, m3 = m0;
#define EM_MAXV(acc, x) acc = _mm256_blendv_ps(acc, x, _mm256_or_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q), \\
                                                              _mm256_cmp_ps(x, acc, _CMP_GT_OQ)))
    for (; i + 32 <= n; i += 32) {
      const __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i)));
      const __m256 x1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i + 8)));
      const __m256 x2 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i + 16)));
      const __m256 x3 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i + 24)));
      _mm256_storeu_ps(d + i, x0); _mm256_storeu_ps(d + i + 8, x1);
      _mm256_storeu_ps(d + i + 16, x2); _mm256_storeu_ps(d + i + 24, x3);
      EM_MAXV(m0, x0); EM_MAXV(m1, x1); EM_MAXV(m2, x2); EM_MAXV(m3, x3);
    }
    for (; i + 8 <= n; i += 8) {
      const __m256 x0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i)));
      _mm256_storeu_ps(d + i, x0);
      EM_MAXV(m0, x0);
    }
    EM_MAXV(m0, m1); EM_MAXV(m2, m3); EM_MAXV(m0, m2);  /* lanes folded in vectors: no scalar chain */
    EM_MAXV(m0, _mm256_permute2f128_ps(m0, m0, 1));
    EM_MAXV(m0, _mm256_shuffle_ps(m0, m0, 0x4e));
    EM_MAXV(m0, _mm256_shuffle_ps(m0, m0, 0xb1));
#undef EM_MAXV
    m = _mm256_cvtss_f32(m0);
  }
#endif
  for (; i < n; ++i) { d[i] = em_h2f(s[i]); m = em_maxf(m, d[i]); }
  return m;
}"""
SCALE_F2H_RUN = """/* a run of floats times c, each product rounded once to a half (round to nearest even) */
static inline void em_scale_f2h_run(const float *restrict s, float c, uint16_t *restrict d, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX__)
  const __m256 cv = _mm256_set1_ps(c);
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_mul_ps(_mm256_loadu_ps(s + i), cv),
                                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
  for (; i < n; ++i) d[i] = em_f2h(s[i] * c);
}"""


def _max_pass(plan: RowPlan, em: Emitter) -> Reduce | None:
    """The row's first statement when it takes the maximum of an f16 row input converted per row."""
    first = plan.body[0] if plan.body else None
    if not (isinstance(first, Reduce) and first.op == "max" and first.dtype == "f32" and first.window is None
            and first.axis == plan.row and isinstance(first.body, Cast) and first.body.dtype == "f32"
            and isinstance(first.body.x, Load) and first.body.x.buffer in plan.per_row
            and first.body.x.index == (*plan.rows_vars, first.var)
            and em.program.buffer(first.body.x.buffer).dtype == "f16"):
        return None
    return first


def _scale_pass(plan: RowPlan, em: Emitter) -> tuple[str, Expr, str] | None:
    """(output, kept value, scale) when the row's last statement stores an f16 output as a kept value
    times a scalar f32 value: `y[.., j] = f16(kept[j] * s)`."""
    last = plan.body[-1] if plan.body else None
    if not (isinstance(last, Loop) and last.axis == plan.row and len(last.body) == 1):
        return None
    st = last.body[0]
    if not (isinstance(st, Store) and st.buffer in plan.outputs and st.index == (*plan.rows_vars, last.var)
            and em.program.buffer(st.buffer).dtype == "f16" and isinstance(st.value, Cast)
            and st.value.dtype == "f16" and isinstance(st.value.x, Binary) and st.value.x.op == "mul"):
        return None
    kept = {e for e, t in plan.keep if t == "f32"}
    a, b = st.value.x.a, st.value.x.b
    for value, scale in ((a, b), (b, a)):
        if value in kept and isinstance(scale, Ref):
            scalars = {s.name: s.dtype for s in plan.body if isinstance(s, Let | Reduce)}
            if scalars.get(scale.name) == "f32":
                return st.buffer, value, scale.name
    return None


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
        fused = em.sched.vec > 1  # vec 1 asks for sequential order: passes as written
        max_pass = _max_pass(plan, em) if fused else None
        scale_pass = _scale_pass(plan, em) if fused else None
        body = plan.body[1 if max_pass else 0:len(plan.body) - (1 if scale_pass else 0)]
        if max_pass:
            em.declare(H2F_RUN_MAX)
        if scale_pass:
            em.declare(SCALE_F2H_RUN)
        with em.block(em.for_head(plan.rows_vars[-1], plan.rows[-1])):
            em.line("if (!em_ok) continue;")
            start = (*(var_c(v) for v in plan.rows_vars), "0")
            for name in plan.per_row:
                at = offset_of(p, name, start)
                if max_pass is not None and name == max_pass.body.x.buffer:  # type: ignore[attr-defined]
                    em.line(f"const float {value_c(max_pass.name)} = em_h2f_run_max({buffer_c(name)} + {at}, "
                            f"{staged[name].scratch}, {n_row});")
                    em.x.values[max_pass.name] = "f32"
                    continue
                em.line(f"{HALF_RUNS[p.buffer(name).dtype][0]}({buffer_c(name)} + {at}, {staged[name].scratch}, "
                        f"{n_row});")
            em.x.staged = {n: staged[n] for n in (*plan.per_row, *plan.per_thread)}
            em.staged_out = {n: staged[n] for n in plan.outputs}
            try:
                em.stmts(body, True)
                if scale_pass is not None:
                    out, value, scale = scale_pass
                    em.line(f"em_scale_f2h_run({em.keep[value]}, {value_c(scale)}, {buffer_c(out)} + "
                            f"{offset_of(p, out, start)}, {n_row});")
            finally:
                em.x.staged, em.staged_out, em.keep = {}, {}, {}
                em.x.reuse = {}
            for name in plan.outputs:
                if scale_pass is not None and name == scale_pass[0]:
                    continue
                at = offset_of(p, name, start)
                em.line(f"{HALF_RUNS[p.buffer(name).dtype][1]}({staged[name].scratch}, {buffer_c(name)} + {at}, "
                        f"{n_row});")
        em.line("free(em_rs); free(em_rd);")
    return True


__all__ = ["LIBRARY_CALLS", "RowPlan", "emit_rows", "row_plan"]
