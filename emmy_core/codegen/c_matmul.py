"""The tiled C form of a matmul-family kernel: where the CPU tile knobs act.

The output is cut into `tile_m` x `tile_n` tiles; the (batch.., parts.., tile) loops are
one `omp for collapse(n)` inside a parallel region in which each thread owns an
accumulator tile and a packed B panel (`tile_k` x `tile_n`, converted to the
accumulator type once). For each k step (`tile_k` at a time, inside the reduction's
window when it has one) the tile is updated by register blocks of `unroll` rows x `vec`
columns held in gcc vector registers (f32/f64 accumulators, `vec` > 1), else one row at a
time over a simd loop. Every element adds its products in increasing k, so the sum is
the IR's sequential sum (the compiler may fuse a multiply-add). The epilogue lets and
stores run per element of the tile through the generic translator, with the reduction's
name bound to its accumulator. Operand expressions (a load, maybe cast to the
accumulator type) come from the reduction's body, so nothing is copied per kernel.
"""

from __future__ import annotations

from emmy_core.codegen.c_emit import Emitter, affine_c, independent
from emmy_core.codegen.c_expr import C_TYPES, axis_c, reduce_init, value_c, var_c
from emmy_core.ir.errors import IRError
from emmy_core.ir.family import MatmulShape, classify
from emmy_core.ir.nodes import Binary, Cast, Expr, Load, Loop, Reduce, Stmt

VECTOR_TYPES = {"f32": 4, "f64": 8}  # accumulator types held in gcc vector registers: element bytes


def _load_of(e: Expr) -> Load:
    inner = e.x if isinstance(e, Cast) else e
    assert isinstance(inner, Load)
    return inner


def _tileable(em: Emitter) -> tuple[MatmulShape, Reduce, Expr, Expr] | None:
    try:
        shape = classify(em.program)
    except IRError:
        return None
    if not isinstance(shape, MatmulShape):
        return None
    body: tuple[Stmt, ...] = em.program.body
    while len(body) == 1 and isinstance(body[0], Loop):
        if not independent(body[0].var, body[0].body):
            return None  # a loop that is not independent: the generic form keeps its order
        body = body[0].body
    red = body[0]
    assert isinstance(red, Reduce) and isinstance(red.body, Binary)
    a_index = (*shape.batch_vars, shape.m_var, shape.k_var)
    x, y = red.body.a, red.body.b
    if _load_of(x).index == a_index and _load_of(x).buffer == shape.a:
        return shape, red, x, y
    return shape, red, y, x


def _row_steps(em: Emitter, dtype: str, op_a: Expr, m: str, k: str, tn: int) -> None:
    """One row of the tile at a time: `acc[j] += a[m, k] * panel[k, j]` over a simd loop (any dtype)."""
    acc_t, s = C_TYPES[dtype], em.sched
    with em.block(f"for (int64_t {m} = em_tm; {m} < em_me; ++{m})"):
        em.line(f"{acc_t} *restrict em_row = em_acc + ({m} - em_tm) * {tn};")
        if s.unroll > 1:
            em.line(f"#pragma GCC unroll {s.unroll}")
        with em.block(f"for (int64_t {k} = em_tk; {k} < em_kend; ++{k})"):
            em.line(f"const {acc_t} em_a = {em.x.code(op_a)};")
            em.line(f"const {acc_t} *restrict em_b = em_bp + ({k} - em_tk) * {tn};")
            if s.vec > 1:
                em.line(f"#pragma omp simd simdlen({s.vec})")
            step = em.x.combine("sum", "em_row[em_j]", em.x.combine("mul", "em_a", "em_b[em_j]", dtype), dtype)
            em.line(f"for (int64_t em_j = 0; em_j < em_nw; ++em_j) em_row[em_j] = {step};")


def _register_blocks(em: Emitter, dtype: str, op_a: Expr, m: str, k: str, tn: int) -> None:
    """`unroll` rows x `vec` columns of accumulators held in vector registers across the k step.

    Each register block loads its accumulators once, then per k broadcasts a[m + r, k] and
    adds its product with one panel row (gcc vector extensions, so no vectoriser is needed at
    -O1); columns past the last whole block, and rows past the last whole group, take the
    same step one element at a time. Every element still adds its products in k order.
    """
    acc_t, s = C_TYPES[dtype], em.sched
    vt = f"em_v{dtype}x{s.vec}"
    em.preamble.add(f"typedef {acc_t} {vt} __attribute__((vector_size({s.vec * VECTOR_TYPES[dtype]})));")
    a_code = em.x.code(op_a)
    em.line("int64_t em_i0 = em_tm;")
    for rows in sorted({s.unroll, 1}, reverse=True):
        step = "++em_i0" if rows == 1 else f"em_i0 += {rows}"
        with em.block(f"for (; em_i0 + {rows} <= em_me; {step})"):
            em.line("int64_t em_j0 = 0;")
            with em.block(f"for (; em_j0 + {s.vec} <= em_nw; em_j0 += {s.vec})"):
                for r in range(rows):
                    em.line(f"{acc_t} *em_p{r} = em_acc + (em_i0 + {r} - em_tm) * {tn} + em_j0;")
                    em.line(f"{vt} em_c{r};")
                    em.line(f"memcpy(&em_c{r}, em_p{r}, sizeof em_c{r});")
                with em.block(f"for (int64_t {k} = em_tk; {k} < em_kend; ++{k})"):
                    em.line(f"{vt} em_bv;")
                    em.line(f"memcpy(&em_bv, em_bp + ({k} - em_tk) * {tn} + em_j0, sizeof em_bv);")
                    for r in range(rows):
                        em.line(f"{{ const int64_t {m} = em_i0 + {r}; em_c{r} = em_c{r} + ({a_code}) * em_bv; }}")
                for r in range(rows):
                    em.line(f"memcpy(em_p{r}, &em_c{r}, sizeof em_c{r});")
            with em.block("for (; em_j0 < em_nw; ++em_j0)"):
                for r in range(rows):
                    with em.block(""):
                        em.line(f"const int64_t {m} = em_i0 + {r};")
                        em.line(f"{acc_t} *em_p = em_acc + ({m} - em_tm) * {tn} + em_j0;")
                        em.line(f"for (int64_t {k} = em_tk; {k} < em_kend; ++{k}) "
                                f"*em_p = *em_p + ({a_code}) * em_bp[({k} - em_tk) * {tn} + em_j0];")


def _tile(knob: int, extent: int | None) -> int:
    return min(knob, extent) if extent is not None else knob


def emit_matmul(em: Emitter) -> bool:
    """Emits the tiled form when the program is a matmul the tiling applies to; False otherwise."""
    found = _tileable(em)
    if found is None:
        return False
    shape, red, op_a, op_b = found
    p, s = em.program, em.sched
    acc_t = C_TYPES[red.dtype]
    tm = _tile(s.tile_m, p.axis(shape.m).extent)
    tn = _tile(s.tile_n, p.axis(shape.n).extent)
    k_len = p.axis(shape.k).extent
    if shape.window is not None:
        k_len = min(k_len, shape.window.length) if k_len is not None else shape.window.length
    tk = _tile(s.tile_k, k_len)
    outer = [(v, a) for v, a in shape.loops if v not in (shape.m_var, shape.n_var)]
    m, n, k = var_c(shape.m_var), var_c(shape.n_var), var_c(shape.k_var)
    with em.block(""):
        if em.parallel:
            em.line(f"#pragma omp parallel{em.threads_clause()}")
        with em.block(""):
            em.line(f"{acc_t} *em_acc = ({acc_t} *)malloc(sizeof({acc_t}) * {tm * tn});")
            em.line(f"{acc_t} *em_bp = ({acc_t} *)malloc(sizeof({acc_t}) * {tk * tn});")
            if em.parallel:
                em.line(f"#pragma omp for collapse({len(outer) + 2}) schedule(static)")
            for v, a in outer:
                em.line(em.for_head(v, a))
            em.line(f"for (int64_t em_tm = 0; em_tm < {axis_c(shape.m)}; em_tm += {tm})")
            with em.block(f"for (int64_t em_tn = 0; em_tn < {axis_c(shape.n)}; em_tn += {tn})"):
                em.line("if (!em_acc || !em_bp) {")
                if em.parallel:
                    em.line("#pragma omp atomic write")
                em.line("  em_err = 1;")
                em.line("  continue;")
                em.line("}")
                em.line(f"const int64_t em_me = em_min64(em_tm + {tm}, {axis_c(shape.m)});")
                em.line(f"const int64_t em_ne = em_min64(em_tn + {tn}, {axis_c(shape.n)});")
                em.line("const int64_t em_nw = em_ne - em_tn;")
                if shape.window is None:
                    em.line("const int64_t em_kb = 0;")
                    em.line(f"const int64_t em_ke = {axis_c(shape.k)};")
                else:
                    em.line(f"const int64_t em_kb = {affine_c(shape.window.start)};")
                    em.line(f"const int64_t em_ke = em_min64(em_kb + {shape.window.length}, {axis_c(shape.k)});")
                em.line(f"for (int64_t em_x = 0; em_x < (em_me - em_tm) * {tn}; ++em_x) "
                        f"em_acc[em_x] = {reduce_init('sum', red.dtype)};")
                with em.block(f"for (int64_t em_tk = em_kb; em_tk < em_ke; em_tk += {tk})"):
                    em.line(f"const int64_t em_kend = em_min64(em_tk + {tk}, em_ke);")
                    b_value = em.x.code(op_b)
                    b_slot = f"em_bp[({k} - em_tk) * {tn} + ({n} - em_tn)]"
                    if shape.b_transposed:  # read b along its rows (k is its last index)
                        em.line(f"for (int64_t {n} = em_tn; {n} < em_ne; ++{n})")
                        em.line(f"  for (int64_t {k} = em_tk; {k} < em_kend; ++{k}) {b_slot} = {b_value};")
                    else:
                        em.line(f"for (int64_t {k} = em_tk; {k} < em_kend; ++{k})")
                        em.line(f"  for (int64_t {n} = em_tn; {n} < em_ne; ++{n}) {b_slot} = {b_value};")
                    if red.dtype in VECTOR_TYPES and s.vec > 1:
                        _register_blocks(em, red.dtype, op_a, m, k, tn)
                    else:
                        _row_steps(em, red.dtype, op_a, m, k, tn)
                with em.block(f"for (int64_t {m} = em_tm; {m} < em_me; ++{m})"):
                    with em.block(f"for (int64_t {n} = em_tn; {n} < em_ne; ++{n})"):
                        em.line(f"const {acc_t} {value_c(red.name)} = em_acc[({m} - em_tm) * {tn} + ({n} - em_tn)];")
                        em.x.values[red.name] = red.dtype
                        em.stmts((*shape.epilogue, *shape.stores), True)
            em.line("free(em_acc);")
            em.line("free(em_bp);")
    return True
