"""The tiled C form of a matmul-family kernel: where the CPU tile knobs act.

Once per launch, inside the parallel region, B is packed into panels of `tile_n` columns
(`[batch][panel][k][tile_n]`, converted to the accumulator type), and A is converted into
an accumulator-typed copy when its load is cast (otherwise it is read in place). Then the
output is cut into `tile_m` x `tile_n` tiles; the (batch.., parts.., tile) loops are one
`omp for collapse(n)`, each thread owning an accumulator tile. For each k step (`tile_k`
at a time, inside the reduction's window when it has one) the tile is updated by
register blocks of `unroll` rows x `vec` columns held in gcc vector registers (f32/f64
accumulators, `vec` > 1), else one row at a time over a simd loop. Every element adds its
products in increasing k, so the sum is the IR's sequential sum (the compiler may fuse a
multiply-add). The epilogue lets and stores run per element of the tile through the
generic translator, with the reduction's name bound to its accumulator. The operand
expressions (a load, maybe cast to the accumulator type) come from the reduction's body
and are evaluated while packing, so nothing is copied per kernel.
"""

from __future__ import annotations

from emmy_core.codegen.c_emit import Emitter, affine_c, independent
from emmy_core.codegen.c_expr import C_TYPES, axis_c, buffer_c, reduce_init, value_c, var_c
from emmy_core.ir.errors import IRError
from emmy_core.ir.family import MatmulShape, classify
from emmy_core.ir.nodes import Binary, Cast, Expr, Load, Loop, Reduce, Stmt

VECTOR_TYPES = {"f32": 4, "f64": 8}  # accumulator types held in gcc vector registers: element bytes
MAX_VECTOR_BYTES = 64  # one vector variable at most this wide (AVX-512); wider `vec` takes several


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


def _row_steps(em: Emitter, dtype: str, a_at: str, b_row: str, m: str, k: str, tn: int) -> None:
    """One row of the tile at a time: `acc[j] += a[m, k] * panel[k, j]` over a simd loop (any dtype)."""
    acc_t, s = C_TYPES[dtype], em.sched
    with em.block(f"for (int64_t {m} = em_tm; {m} < em_me; ++{m})"):
        em.line(f"{acc_t} *restrict em_row = em_acc + ({m} - em_tm) * {tn};")
        if s.unroll > 1:
            em.line(f"#pragma GCC unroll {s.unroll}")
        with em.block(f"for (int64_t {k} = em_tk; {k} < em_kend; ++{k})"):
            em.line(f"const {acc_t} em_a = {a_at};")
            em.line(f"const {acc_t} *restrict em_b = {b_row};")
            if s.vec > 1:
                em.line(f"#pragma omp simd simdlen({s.vec})")
            step = em.x.combine("sum", "em_row[em_j]", em.x.combine("mul", "em_a", "em_b[em_j]", dtype), dtype)
            em.line(f"for (int64_t em_j = 0; em_j < em_nw; ++em_j) em_row[em_j] = {step};")


def _register_blocks(em: Emitter, dtype: str, a_at: str, b_row: str, m: str, k: str, tn: int) -> None:
    """`unroll` rows x `vec` columns of accumulators held in vector registers across the k step.

    Each register block loads its accumulators once, then per k broadcasts a[m + r, k] and
    adds its product with one panel row (gcc vector extensions, so no vectoriser is needed at
    -O1); columns past the last whole block, and rows past the last whole group, take the
    same step one element at a time. Every element still adds its products in k order.
    """
    acc_t, s = C_TYPES[dtype], em.sched
    width = min(s.vec, MAX_VECTOR_BYTES // VECTOR_TYPES[dtype])  # lanes of one vector variable
    subs = s.vec // width  # vectors per row of the block
    vt = f"em_v{dtype}x{width}"
    em.preamble.add(f"typedef {acc_t} {vt} __attribute__((vector_size({width * VECTOR_TYPES[dtype]})));")
    em.line("int64_t em_i0 = em_tm;")
    for rows in sorted({s.unroll, 1}, reverse=True):
        step = "++em_i0" if rows == 1 else f"em_i0 += {rows}"
        with em.block(f"for (; em_i0 + {rows} <= em_me; {step})"):
            em.line("int64_t em_j0 = 0;")
            with em.block(f"for (; em_j0 + {s.vec} <= em_nw; em_j0 += {s.vec})"):
                for r in range(rows):
                    em.line(f"{acc_t} *em_p{r} = em_acc + (em_i0 + {r} - em_tm) * {tn} + em_j0;")
                    for q in range(subs):
                        em.line(f"{vt} em_c{r}_{q};")
                        em.line(f"memcpy(&em_c{r}_{q}, em_p{r} + {q * width}, sizeof em_c{r}_{q});")
                with em.block(f"for (int64_t {k} = em_tk; {k} < em_kend; ++{k})"):
                    for q in range(subs):
                        em.line(f"{vt} em_bv{q};")
                        em.line(f"memcpy(&em_bv{q}, {b_row} + em_j0 + {q * width}, sizeof em_bv{q});")
                    for r in range(rows):
                        updates = " ".join(f"em_c{r}_{q} = em_c{r}_{q} + em_a * em_bv{q};" for q in range(subs))
                        em.line(f"{{ const int64_t {m} = em_i0 + {r}; const {acc_t} em_a = {a_at}; {updates} }}")
                for r in range(rows):
                    for q in range(subs):
                        em.line(f"memcpy(em_p{r} + {q * width}, &em_c{r}_{q}, sizeof em_c{r}_{q});")
            with em.block("for (; em_j0 < em_nw; ++em_j0)"):
                for r in range(rows):
                    with em.block(""):
                        em.line(f"const int64_t {m} = em_i0 + {r};")
                        em.line(f"{acc_t} *em_p = em_acc + ({m} - em_tm) * {tn} + em_j0;")
                        em.line(f"for (int64_t {k} = em_tk; {k} < em_kend; ++{k}) "
                                f"*em_p = *em_p + ({a_at}) * ({b_row})[em_j0];")


def _tile(knob: int, extent: int | None) -> int:
    return min(knob, extent) if extent is not None else knob


def _batch_index(em: Emitter, shape: MatmulShape) -> str:
    code = "INT64_C(0)"
    for v, a in zip(shape.batch_vars, shape.batch, strict=True):
        code = f"({code} * {axis_c(a)} + {var_c(v)})"
    return code


def _fail_and_return(em: Emitter, cond: str, frees: list[str]) -> None:
    em.line(f"if ({cond}) {{")
    for f in frees:
        em.line(f"  free({f});")
    em.line("  return 1;")
    em.line("}")


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
    nm, nn, nk = axis_c(shape.m), axis_c(shape.n), axis_c(shape.k)
    batch = list(zip(shape.batch_vars, shape.batch, strict=True))
    a_in_place = isinstance(op_a, Load) and p.buffer(op_a.buffer).dtype == red.dtype
    bidx = _batch_index(em, shape)
    batches = " * ".join(["INT64_C(1)", *(axis_c(a) for a in shape.batch)])
    with em.block(""):
        em.line(f"const int64_t em_nb = ({nn} + {tn - 1}) / {tn};")
        em.line(f"const int64_t em_nbatch = {batches};")
        em.line(f"{acc_t} *em_pb = ({acc_t} *)malloc(sizeof({acc_t}) * em_nbatch * em_nb * {nk} * {tn});")
        frees = ["em_pb"]
        if a_in_place:
            em.line(f"const {acc_t} *em_A = {buffer_c(shape.a)};")
        else:
            em.line(f"{acc_t} *em_pa = ({acc_t} *)malloc(sizeof({acc_t}) * em_nbatch * {nm} * {nk});")
            em.line("const " + acc_t + " *em_A = em_pa;")
            frees.append("em_pa")
        _fail_and_return(em, " || ".join(f"!{f}" for f in frees), frees)
        if em.parallel:
            em.line(f"#pragma omp parallel{em.threads_clause()}")
        with em.block(""):
            # pack B: [batch][panel][k][tile_n], reading b along its contiguous axis
            slot = f"em_pb[(({bidx} * em_nb + {n} / {tn}) * {nk} + {k}) * {tn} + {n} % {tn}]"
            inner, other = ((n, shape.n), (k, shape.k)) if shape.b_transposed else ((k, shape.k), (n, shape.n))
            if em.parallel:
                em.line(f"#pragma omp for collapse({len(batch) + 1}) schedule(static)")
            for v, a in batch:
                em.line(f"for (int64_t {var_c(v)} = 0; {var_c(v)} < {axis_c(a)}; ++{var_c(v)})")
            em.line(em.for_head(shape.n_var if shape.b_transposed else shape.k_var, inner[1]))
            em.line(f"  {em.for_head(shape.k_var if shape.b_transposed else shape.n_var, other[1])} "
                    f"{slot} = {em.x.code(op_b)};")
            if not a_in_place:
                if em.parallel:
                    em.line(f"#pragma omp for collapse({len(batch) + 1}) schedule(static)")
                for v, a in batch:
                    em.line(f"for (int64_t {var_c(v)} = 0; {var_c(v)} < {axis_c(a)}; ++{var_c(v)})")
                em.line(em.for_head(shape.m_var, shape.m))
                em.line(f"  {em.for_head(shape.k_var, shape.k)} "
                        f"em_pa[({bidx} * {nm} + {m}) * {nk} + {k}] = {em.x.code(op_a)};")
            em.line(f"{acc_t} *em_acc = ({acc_t} *)malloc(sizeof({acc_t}) * {tm * tn});")
            if em.parallel:
                em.line(f"#pragma omp for collapse({len(outer) + 2}) schedule(static)")
            for v, a in outer:
                em.line(em.for_head(v, a))
            em.line(f"for (int64_t em_tm = 0; em_tm < {nm}; em_tm += {tm})")
            with em.block(f"for (int64_t em_tn = 0; em_tn < {nn}; em_tn += {tn})"):
                em.line("if (!em_acc) {")
                if em.parallel:
                    em.line("#pragma omp atomic write")
                em.line("  em_err = 1;")
                em.line("  continue;")
                em.line("}")
                em.line(f"const int64_t em_me = em_min64(em_tm + {tm}, {nm});")
                em.line(f"const int64_t em_ne = em_min64(em_tn + {tn}, {nn});")
                em.line("const int64_t em_nw = em_ne - em_tn;")
                em.line(f"const int64_t em_bi = {bidx};")
                em.line(f"const {acc_t} *em_panel = em_pb + (em_bi * em_nb + em_tn / {tn}) * {nk} * {tn};")
                em.line(f"const {acc_t} *em_arows = em_A + em_bi * {nm} * {nk};")
                if shape.window is None:
                    em.line("const int64_t em_kb = 0;")
                    em.line(f"const int64_t em_ke = {nk};")
                else:
                    em.line(f"const int64_t em_kb = {affine_c(shape.window.start)};")
                    em.line(f"const int64_t em_ke = em_min64(em_kb + {shape.window.length}, {nk});")
                em.line(f"for (int64_t em_x = 0; em_x < (em_me - em_tm) * {tn}; ++em_x) "
                        f"em_acc[em_x] = {reduce_init('sum', red.dtype)};")
                with em.block(f"for (int64_t em_tk = em_kb; em_tk < em_ke; em_tk += {tk})"):
                    em.line(f"const int64_t em_kend = em_min64(em_tk + {tk}, em_ke);")
                    a_at = f"em_arows[{m} * {nk} + {k}]"
                    b_row = f"(em_panel + {k} * {tn})"
                    if red.dtype in VECTOR_TYPES and s.vec > 1:
                        _register_blocks(em, red.dtype, a_at, b_row, m, k, tn)
                    else:
                        _row_steps(em, red.dtype, a_at, b_row, m, k, tn)
                with em.block(f"for (int64_t {m} = em_tm; {m} < em_me; ++{m})"):
                    with em.block(f"for (int64_t {n} = em_tn; {n} < em_ne; ++{n})"):
                        em.line(f"const {acc_t} {value_c(red.name)} = em_acc[({m} - em_tm) * {tn} + ({n} - em_tn)];")
                        em.x.values[red.name] = red.dtype
                        em.stmts((*shape.epilogue, *shape.stores), True)
            em.line("free(em_acc);")
        for f in frees:
            em.line(f"free({f});")
    return True
