"""The packed, register-blocked C form of a matmul-family kernel: where the CPU tile knobs act.

The structure is BLIS's, written for loop programs:

- B is packed into panels of N_r columns (`vec`) over the whole k axis, converted to the
  accumulator type once (`[batch][panel][k][N_r]`, zero columns past N). A launch packs it
  in parallel before computing, unless it was packed once beforehand (a constant operand,
  `emmy_pack`: see `CBuilt.prepare`); then the launch only reads the packed panels.
- The threads share out blocks along `par_axis` (`m`: M_c = `tile_m` rows; `n`: N_c =
  `tile_n` columns), one at a time (dynamic schedule), over the batch (and split-K parts)
  axes too. A block sweeps the other axis in steps of M_c or N_c.
- For each K_c (`tile_k`) deep pass, the block's rows of A are packed (converted once,
  `[M_r rows][k][M_r]`, zero rows past M) and the micro-kernel (`c_micro.py`) runs on each
  M_r x N_r tile: B micro-panels outer, A micro-panels inner. A thread keeps the packed A of
  every pass of its row block (`A_PASSES_MAX`, `A_PASSES_BYTES`), so the next column block
  reads them instead of packing them again (`c_pack.py` writes the packing functions). A tile's partial sums wait
  in a per-thread block between passes; after the last pass the epilogue (the program's
  own lets and stores, bias, activation, residual, gate, scale) runs on the accumulator
  tile, a row at a time in a simd loop, before anything is stored. 16-bit epilogue inputs
  and outputs are converted a row of the tile at a time (F16C where the build has it).
- Operands may stay where they lie instead (`pack_a` / `pack_b` false: the micro-kernel reads
  M_r rows of A, or rows of a row-major B, in place), for small per-batch operands that a
  packed copy would serve only a few times; `prefetch_c` prefetches a tile's output and
  epilogue operand rows before the k loop of its last pass (`prefetch`: the A and B streams).
- Every element's sum adds its products in increasing k (the reduction's window when it
  has one), one multiply-add per step, whatever the knobs: padding rows and columns take
  part in no real element's sum. Products are fused with the addition where the build
  has FMA; the IR's product of 16-bit operands is exact in f32, so fusing changes nothing
  there.

Matmuls accumulating in f32 or f64 take this form; others (integer sums) are translated
as written by the generic translator.
"""

from __future__ import annotations

from dataclasses import dataclass

from emmy_core.codegen.backend import BuildError
from emmy_core.codegen.c_emit import Emitter, affine_c, independent
from emmy_core.codegen.c_epilogue import EpilogueRuns, emit_epilogue, epilogue_runs, prefetch_tile
from emmy_core.codegen.c_expr import C_TYPES, axis_c, buffer_c, var_c
from emmy_core.codegen.c_micro import ELEMENT_BITS, MicroGeometry, dot_problem, micro_geometry, micro_kernel_c
from emmy_core.codegen.c_pack import declare_packers
from emmy_core.codegen.c_schedule import CSchedule
from emmy_core.ir.errors import IRError
from emmy_core.ir.family import MatmulShape, classify
from emmy_core.ir.nodes import Binary, Cast, Expr, Load, Loop, Program, Reduce, Stmt

PACK_ENTRY = "emmy_pack"
PACK_BYTES_ENTRY = "emmy_pack_bytes"
ALIGN = 64  # bytes: packed panels and per-thread blocks start on a cache line
# A thread keeps the packed panels of every pass of its row block (up to these many passes and bytes), so that
# the next column block reuses them: repacking them per column block cost 5-10% of a bf16 product at
# 128 x 5632 x 2048 on a Zen 4 EPYC (six column blocks of 1024, two passes)
A_PASSES_MAX = 32
A_PASSES_BYTES = 4 << 20


@dataclass(frozen=True)
class MatmulPlan:
    """A matmul the packed form applies to: its shape, reduction and the two operand expressions."""

    shape: MatmulShape
    red: Reduce
    a: Expr  # a[batch.., m, k], maybe cast to the accumulator type
    b: Expr  # b[batch.., k, n] or b[batch.., n, k]


def _load_of(e: Expr) -> Load:
    inner = e.x if isinstance(e, Cast) else e
    assert isinstance(inner, Load)
    return inner


def matmul_plan(program: Program) -> MatmulPlan | None:
    """The packed-form reading of `program`, or None when it is not a matmul accumulating in f32/f64."""
    try:
        shape = classify(program)
    except IRError:
        return None
    if not isinstance(shape, MatmulShape):
        return None
    body: tuple[Stmt, ...] = program.body
    while len(body) == 1 and isinstance(body[0], Loop):
        if not independent(body[0].var, body[0].body):
            return None  # a loop that is not independent: the generic form keeps its order
        body = body[0].body
    red = body[0]
    assert isinstance(red, Reduce) and isinstance(red.body, Binary)
    if red.dtype not in ELEMENT_BITS:
        return None
    x, y = red.body.a, red.body.b
    a_index = (*shape.batch_vars, shape.m_var, shape.k_var)
    if not (_load_of(x).index == a_index and _load_of(x).buffer == shape.a):
        x, y = y, x
    return MatmulPlan(shape, red, x, y)


def packed_operand(program: Program) -> str | None:
    """The buffer a launch packs into panels (the matmul's b), which `emmy_pack` can pack once; else None."""
    plan = matmul_plan(program)
    return plan.shape.b if plan is not None else None


# ---- geometry ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Blocking:
    """The micro-kernel and the block sizes a schedule spells for one program (tiles clipped to static extents)."""

    micro: MicroGeometry
    mc: int  # rows of A per block: a multiple of M_r
    nc: int  # columns per block: a multiple of N_r
    kc: int  # depth of one pass


def _round_up(x: int, step: int) -> int:
    return -(-x // step) * step


def blocking(em: Emitter, plan: MatmulPlan) -> Blocking:
    s, p, shape = em.sched, em.program, plan.shape
    g = micro_geometry(s, plan.red.dtype, p.buffer(shape.b).dtype)
    m_ext, n_ext, k_ext = (p.axis(a).extent for a in (shape.m, shape.n, shape.k))
    if shape.window is not None:
        k_ext = min(k_ext, shape.window.length) if k_ext is not None else shape.window.length
    mc = _round_up(max(s.tile_m, 1), g.mr)
    if m_ext is not None:
        mc = min(mc, _round_up(m_ext, g.mr))
    nc = _round_up(max(s.tile_n, g.nr), g.nr)
    if n_ext is not None:
        nc = min(nc, _round_up(n_ext, g.nr))
    kc = min(s.tile_k, k_ext) if k_ext is not None else s.tile_k
    return Blocking(g, mc, nc, max(1, kc))


# ---- packing -------------------------------------------------------------------------------------


def _kpad(k: str, g: MicroGeometry) -> str:
    """The C expression of depth `k` padded as the packed panels pad it (`MicroGeometry.k_align`)."""
    a = g.k_align
    return k if a == 1 else f"(({k} + {a - 1}) / {a} * {a})"


def _pack_all_b(em: Emitter, plan: MatmulPlan, g: MicroGeometry, dst: str) -> None:
    """Lines packing every panel of every batch of B into `dst` (inside or outside a parallel region)."""
    shape = plan.shape
    at = C_TYPES[plan.red.dtype]
    nn, nk = axis_c(shape.n), axis_c(shape.k)
    em.line(f"{at} *em_btmp = ({at} *)malloc(sizeof({at}) * (size_t)({nk} + 1));")
    em.line("if (!em_btmp) {")
    if em.parallel:
        em.line("#pragma omp atomic write")
    em.line("  em_err = 1;")
    em.line("}")
    if em.parallel:
        em.line("#pragma omp for collapse(2) schedule(static)")
    em.line("for (int64_t em_g = 0; em_g < em_nbatch; ++em_g)")
    with em.block("for (int64_t em_p = 0; em_p < em_np; ++em_p)"):
        em.line("if (!em_btmp) continue;")
        em.line(f"em_pack_b({buffer_c(shape.b)} + em_g * {nk} * {nn}, {nn}, {nk}, em_p * {g.nr}, "
                f"{dst} + (em_g * em_np + em_p) * {_kpad(nk, g)} * {g.nr}, em_btmp);")
    em.line("free(em_btmp);")


def _common_lines(em: Emitter, plan: MatmulPlan, g: MicroGeometry) -> None:
    shape = plan.shape
    batches = " * ".join(["INT64_C(1)", *(axis_c(a) for a in shape.batch)])
    em.line(f"const int64_t em_np = ({axis_c(shape.n)} + {g.nr - 1}) / {g.nr};")
    em.line(f"const int64_t em_nbatch = {batches};")


def _packed_bytes(plan: MatmulPlan, g: MicroGeometry) -> str:
    return (f"(int64_t)sizeof({g.b_type}) * em_nbatch * em_np * {_kpad(axis_c(plan.shape.k), g)} * {g.nr}"
            f" + {ALIGN}")


def pack_entries(program: Program, schedule: CSchedule) -> str:
    """`emmy_pack_bytes(dyn)` and `emmy_pack(bufs, dyn, out)`: B packed once, for a prepared launch."""
    plan = matmul_plan(program)
    assert plan is not None
    g = micro_geometry(schedule, plan.red.dtype, program.buffer(plan.shape.b).dtype)
    bt = g.b_type
    sizes = Emitter(program, schedule)
    sizes.depth = 1
    sizes.axes_header()
    _common_lines(sizes, plan, g)
    packer = Emitter(program, schedule)
    packer.depth = 1
    packer.header()
    _common_lines(packer, plan, g)
    packer.line(f"{bt} *em_dst = ({bt} *)(((uintptr_t)em_out + {ALIGN - 1}) & ~(uintptr_t){ALIGN - 1});")
    if not g.pack_b:  # B is read in place: nothing to pack (the kernel ignores the packed slot)
        packer.line("(void)em_dst;")
    else:
        if packer.parallel:
            packer.line(f"#pragma omp parallel{packer.threads_clause()}")
        with packer.block(""):
            _pack_all_b(packer, plan, g, "em_dst")
    return "\n".join([
        "/* the bytes of B packed once, and that packing (constant operands) */",
        f"int64_t {PACK_BYTES_ENTRY}(const int64_t *em_dyn) {{",
        "  (void)em_dyn;",
        *sizes.lines,
        f"  return {_packed_bytes(plan, g) if g.pack_b else ALIGN};",
        "}",
        f"int {PACK_ENTRY}(void *const *em_bufs, const int64_t *em_dyn, void *em_out) {{",
        "  (void)em_bufs; (void)em_dyn;",
        *packer.lines,
        "  return em_err;",
        "}"])


# ---- the kernel ----------------------------------------------------------------------------------


def _fail(em: Emitter) -> None:
    if em.parallel:
        em.line("#pragma omp atomic write")
    em.line("em_err = 1;")


def _block_body(em: Emitter, plan: MatmulPlan, bl: Blocking, runs: EpilogueRuns) -> None:
    """One block of rows [em_m0, em_me) x columns [em_n0, em_ne): every pass, micro-kernel and epilogue."""
    shape, g = plan.shape, bl.micro
    at, pt = C_TYPES[plan.red.dtype], g.a_type
    nm, nk = axis_c(shape.m), axis_c(shape.k)
    nn = axis_c(shape.n)
    with em.block(f"for (int64_t em_pc = em_kb; em_pc < em_ke; em_pc += {bl.kc})"):
        em.line(f"const int64_t em_kc = em_min64({bl.kc}, em_ke - em_pc);")
        em.line(f"const int64_t em_kcp = {_kpad('em_kc', g)};")
        em.line("const int em_first = em_pc == em_kb, em_last = em_pc + em_kc >= em_ke;")
        if g.pack_a:
            em.line(f"const int64_t em_reg = (em_pc - em_kb) / {bl.kc} % em_nreg;")
            em.line(f"{g.a_type} *const em_apr = em_ap + em_reg * em_areg;")
            em.line("int64_t *const em_key = em_apk[em_reg];")
            with em.block("if (em_key[0] != em_bi || em_key[1] != em_m0 || em_key[2] != em_pc || "
                          "em_key[3] != em_kc)"):
                em.line(f"em_pack_a({buffer_c(shape.a)} + (em_bi * {nm} + em_m0) * {nk} + em_pc, {nk}, "
                        f"em_me - em_m0, em_min64({bl.mc}, ({nm} - em_m0 + {g.mr - 1}) / {g.mr} * {g.mr}), em_kc, "
                        "em_apr, em_atmp);")
                em.line("em_key[0] = em_bi; em_key[1] = em_m0; em_key[2] = em_pc; em_key[3] = em_kc;")
        with em.block(f"for (int64_t em_jr = em_n0; em_jr < em_ne; em_jr += {g.nr})"):
            if g.pack_b:
                em.line(f"const {g.b_type} *em_bp = em_B + ((em_bi * em_np + em_jr / {g.nr}) * {_kpad(nk, g)} + "
                        f"em_pc) * {g.nr};")
            else:  # row-major B read where it lies: row k of this batch, columns from em_jr
                em.line(f"const {at} *em_bp = {buffer_c(shape.b)} + (em_bi * {nk} + em_pc) * {nn} + em_jr;")
            with em.block(f"for (int64_t em_ir = em_m0; em_ir < em_me; em_ir += {g.mr})"):
                if g.pack_a:
                    em.line(f"const {pt} *em_ap1 = em_apr + (em_ir - em_m0) / {g.mr} * em_kcp * {g.mr};")
                else:  # rows of A read where they lie
                    em.line(f"const {at} *em_ap1 = {buffer_c(shape.a)} + (em_bi * {nm} + em_ir) * {nk} + em_pc;")
                em.line(f"const int64_t em_ra = em_min64({g.mr}, {nm} - em_ir);")
                if em.sched.prefetch_c:
                    with em.block("if (em_last)"):
                        prefetch_tile(em, plan.shape, g)
                a_args = f"em_ap1, {nk}, em_ra, em_bp, {nn}"
                em.line(f"const {at} *em_t;")
                em.line("int64_t em_ld;")
                with em.block("if (em_first && em_last)"):  # one pass: the tile stays in registers, then here
                    em.line(f"em_micro(em_kc, {a_args}, 0, 0, em_ct, {g.nr});")
                    em.line(f"em_t = em_ct; em_ld = {g.nr};")
                with em.block("else"):  # partial sums wait in the block between passes
                    em.line(f"{at} *em_cw1 = em_cw + (em_ir - em_m0) * {bl.nc} + (em_jr - em_n0);")
                    em.line(f"em_micro(em_kc, {a_args}, em_first ? 0 : em_cw1, {bl.nc}, em_cw1, {bl.nc});")
                    em.line("if (!em_last) continue;")
                    em.line(f"em_t = em_cw1; em_ld = {bl.nc};")
                emit_epilogue(em, plan.shape, plan.red, g, runs, "em_t", "em_ld")


def in_place_problem(program: Program, plan: MatmulPlan, g: MicroGeometry) -> str | None:
    """Why the schedule's operands read in place (`pack_a` / `pack_b` false) cannot be, or None.

    An operand stays in place only when it is already of the accumulator type (packing is what
    converts); B, only when row-major with a static N that is a multiple of N_r (no panel to pad).
    """
    shape, acc = plan.shape, plan.red.dtype
    if not g.pack_a and program.buffer(shape.a).dtype != acc:
        return f"pack_a=false needs A of the accumulator type {acc}, not {program.buffer(shape.a).dtype}"
    if not g.pack_b:
        n = program.axis(shape.n).extent
        if program.buffer(shape.b).dtype != acc:
            return f"pack_b=false needs B of the accumulator type {acc}, not {program.buffer(shape.b).dtype}"
        if shape.b_transposed:
            return "pack_b=false needs a row-major B (b[.., k, n]), not a transposed one"
        if n is None or n % g.nr:
            return f"pack_b=false needs a static N that vec={g.nr} divides (N is {n if n is not None else 'dynamic'})"
    return None


def emit_matmul(em: Emitter) -> bool:
    """Emits the packed form when the program is a matmul it applies to; False otherwise."""
    plan = matmul_plan(em.program)
    if plan is None:
        return False
    shape, s = plan.shape, em.sched
    bl = blocking(em, plan)
    g = bl.micro
    problem = in_place_problem(em.program, plan, g) or dot_problem(
        g, em.program.buffer(shape.a).dtype, em.program.buffer(shape.b).dtype, shape.window)
    k_ext = em.program.axis(shape.k).extent
    if problem is None and bl.kc % g.k_align and (k_ext is None or k_ext > bl.kc):
        problem = f"dot={g.dot} needs tile_k a multiple of {g.k_align} where the depth takes several passes"
    if problem is not None:
        raise BuildError(f"{em.program.name}: {problem}")
    runs = epilogue_runs(em.program, plan.shape)
    at = C_TYPES[plan.red.dtype]
    em.declare(micro_kernel_c(g))
    declare_packers(em, plan.shape, plan.red.dtype, g)
    nm, nn, nk = axis_c(shape.m), axis_c(shape.n), axis_c(shape.k)
    outer = [(v, a) for v, a in shape.loops if v not in (shape.m_var, shape.n_var)]
    bidx = "INT64_C(0)"
    for v, a in zip(shape.batch_vars, shape.batch, strict=True):
        bidx = f"({bidx} * {axis_c(a)} + {var_c(v)})"
    k_len = nk if shape.window is None else f"em_min64({shape.window.length}, {nk})"
    nb = len(em.program.buffers)
    with em.block(""):
        _common_lines(em, plan, g)
        bt = g.b_type
        em.line(f"const {bt} *em_B = (const {bt} *)em_bufs[{nb}];")  # B packed beforehand, or NULL
        em.line(f"{bt} *em_own = 0;")
        if not g.pack_b:
            em.line("(void)em_B;")
        with em.block("if (!em_B)" if g.pack_b else "if (0)"):
            em.line(f"em_own = ({bt} *)aligned_alloc({ALIGN}, (size_t)(({_packed_bytes(plan, g)}) / {ALIGN} + 1)"
                    f" * {ALIGN});")
            em.line("if (!em_own) return 1;")
            em.line("em_B = em_own;")
        em.line(f"const int em_multipass = {k_len} > {bl.kc};")
        em.line(f"const int64_t em_npass = ({k_len} + {bl.kc - 1}) / {bl.kc};")
        if not g.pack_a:
            em.line("(void)em_npass;")
        if g.dot == "amx":
            with em.block("if (!em_amx_permitted())"):  # the OS refused AMX tile data to this process
                em.line("free(em_own);")
                em.line("return 1;")
        blocks = f"({nm} + {bl.mc - 1}) / {bl.mc}" if s.par_axis == "m" else f"({nn} + {bl.nc - 1}) / {bl.nc}"
        if em.parallel:  # a team no larger than its blocks, unless it packs B first (which all of it shares)
            units = " * ".join([*(f"({axis_c(a)})" for _, a in outer), f"({blocks})"])
            em.line(f"#pragma omp parallel{em.threads_clause(f'em_own ? INT64_MAX : {units}')}")
        with em.block(""):
            with em.block("if (em_own)"):
                _pack_all_b(em, plan, g, "em_own")
            if g.dot == "amx":
                em.line("em_amx_start();")
            pt = g.a_type
            if g.pack_a:
                area = _round_up(bl.mc * _round_up(bl.kc, g.k_align), 32)
                em.line(f"const int64_t em_areg = {area};")  # values of one pass's panels
                em.line(f"const int64_t em_nreg = em_min64(em_min64(em_npass, {A_PASSES_MAX}), "
                        f"em_max64(1, {A_PASSES_BYTES} / (int64_t)(sizeof({pt}) * {area})));")
                em.line(f"{pt} *em_ap = ({pt} *)aligned_alloc({ALIGN}, sizeof({pt}) * em_areg * em_nreg);")
                em.line(f"{at} *em_atmp = ({at} *)malloc(sizeof({at}) * {bl.kc});")
            else:  # A read in place: no panels (two empty allocations keep the checks and frees below)
                em.line(f"{at} *em_ap = ({at} *)malloc(1), *em_atmp = ({at} *)malloc(1);")
            em.line(f"{at} *em_cw = em_multipass ? ({at} *)aligned_alloc({ALIGN}, sizeof({at}) * "
                    f"{_round_up(bl.mc * bl.nc, 16)}) : 0;")
            em.line(f"{at} em_ct[{g.mr * g.nr}] __attribute__((aligned({ALIGN})));")
            for i in range(runs.runs):
                em.line(f"float em_s{i}[{g.nr}];")
            if g.pack_a:
                em.line(f"int64_t em_apk[{A_PASSES_MAX}][4];")  # which block and pass of A each region holds
                em.line(f"for (int em_i = 0; em_i < {A_PASSES_MAX}; ++em_i) "
                        "em_apk[em_i][0] = em_apk[em_i][1] = em_apk[em_i][2] = em_apk[em_i][3] = -1;")
            em.line("const int em_ok = em_ap && em_atmp && (em_cw || !em_multipass);")
            with em.block("if (!em_ok)"):
                _fail(em)
            if em.parallel:
                em.line(f"#pragma omp for collapse({len(outer) + 1}) schedule(dynamic, 1)")
            for v, a in outer:
                em.line(em.for_head(v, a))
            with em.block(f"for (int64_t em_blk = 0; em_blk < {blocks}; ++em_blk)"):
                em.line("if (!em_ok) continue;")
                em.line(f"const int64_t em_bi = {bidx};")
                if shape.window is None:
                    em.line("const int64_t em_kb = 0;")
                    em.line(f"const int64_t em_ke = {nk};")
                else:
                    em.line(f"const int64_t em_kb = {affine_c(shape.window.start)};")
                    em.line(f"const int64_t em_ke = em_min64(em_kb + {shape.window.length}, {nk});")
                if s.par_axis == "m":
                    em.line(f"const int64_t em_m0 = em_blk * {bl.mc}, em_me = em_min64(em_m0 + {bl.mc}, {nm});")
                    with em.block(f"for (int64_t em_n0 = 0; em_n0 < {nn}; em_n0 += {bl.nc})"):
                        em.line(f"const int64_t em_ne = em_min64(em_n0 + {bl.nc}, {nn});")
                        _block_body(em, plan, bl, runs)
                else:
                    em.line(f"const int64_t em_n0 = em_blk * {bl.nc}, em_ne = em_min64(em_n0 + {bl.nc}, {nn});")
                    with em.block(f"for (int64_t em_m0 = 0; em_m0 < {nm}; em_m0 += {bl.mc})"):
                        em.line(f"const int64_t em_me = em_min64(em_m0 + {bl.mc}, {nm});")
                        _block_body(em, plan, bl, runs)
            em.line("free(em_ap); free(em_atmp); free(em_cw);")
            if g.dot == "amx":
                em.line("em_amx_end();")
        em.line("free(em_own);")
    return True


__all__ = ["PACK_BYTES_ENTRY", "PACK_ENTRY", "MatmulPlan", "emit_matmul", "matmul_plan", "pack_entries",
           "packed_operand"]
