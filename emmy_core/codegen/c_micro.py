"""The register-blocked micro-kernel of the C matmul: an M_r x N_r accumulator tile in vector registers.

`micro_geometry(schedule, acc)` reads the shape from the knobs (`unroll` rows, `vec`
columns held in registers of `simd` bits); `micro_kernel_c(geometry)` writes the C:

- a vector type of the register width (gcc vector extensions, so the same source builds
  for SSE, AVX2, AVX-512 or NEON; the compiler's target decides the instructions);
- `em_micro(kc, ap, bp, ci, ldi, co, ldo)`: the tile starts from `ci` (or zero), then for
  each of `kc` steps broadcasts M_r values of the packed A panel (`ap`, `k`-major, M_r
  per step) and adds their products with N_r values of the packed B panel (`bp`, N_r per
  step), and is stored to `co`. Every element adds its products in increasing k, one
  multiply-add per step: fused where the build has FMA (AVX-512, AVX2+FMA, Arm), by the
  target's own instruction; unfused (a product rounded, then a sum rounded) elsewhere.
  The order is the same for every micro-kernel shape, panel size and thread count, so
  those knobs never change a result bit.
"""

from __future__ import annotations

from dataclasses import dataclass

from emmy_core.codegen.c_expr import C_TYPES
from emmy_core.codegen.c_schedule import LEGACY_SIMD_BITS, CSchedule

ELEMENT_BITS = {"f32": 32, "f64": 64}  # accumulator types the micro-kernel holds in vector registers
# (element type, register bytes) -> (the macro that enables it, the fused multiply-add, its vector type)
FMA_INTRINSICS = {
    ("f32", 64): ("__AVX512F__", "_mm512_fmadd_ps", "__m512"),
    ("f64", 64): ("__AVX512F__", "_mm512_fmadd_pd", "__m512d"),
    ("f32", 32): ("__FMA__", "_mm256_fmadd_ps", "__m256"),
    ("f64", 32): ("__FMA__", "_mm256_fmadd_pd", "__m256d"),
    ("f32", 16): ("__FMA__", "_mm_fmadd_ps", "__m128"),
    ("f64", 16): ("__FMA__", "_mm_fmadd_pd", "__m128d"),
}


@dataclass(frozen=True)
class MicroGeometry:
    acc: str  # f32 | f64
    mr: int  # rows of the tile
    nr: int  # columns of the tile
    lanes: int  # elements per vector register
    vpr: int  # vector registers per row of the tile
    pack_a: bool = True  # A from M_r-row panels (k-major); else M_r rows read in place (row stride em_lda)
    pack_b: bool = True  # B from N_r-column panels; else rows of B read in place (row stride em_ldb)
    prefetch: int = 0  # k steps ahead the A and B streams are prefetched (0: none)
    b_half: str | None = None  # "f16" / "bf16": the packed B panels keep B's 16-bit values, widened as loaded

    @property
    def b_type(self) -> str:
        """The C type of a packed B panel's values."""
        return "uint16_t" if self.b_half else C_TYPES[self.acc]

    @property
    def register_bytes(self) -> int:
        return self.lanes * ELEMENT_BITS[self.acc] // 8


def micro_geometry(s: CSchedule, acc: str, b_dtype: str | None = None) -> MicroGeometry:
    """The micro-kernel the schedule spells for accumulators of type `acc` (and a B of `b_dtype`: a packed
    f16 or bf16 B into f32 keeps its 16-bit values in the panels, half the bytes a pass streams)."""
    bits = ELEMENT_BITS[acc]
    width = min(s.simd or LEGACY_SIMD_BITS, s.vec * bits)
    lanes = max(1, width // bits)
    half = b_dtype if b_dtype in HALF_LOADS and acc == "f32" and s.pack_b else None
    return MicroGeometry(acc, s.unroll, s.vec, lanes, s.vec // lanes, s.pack_a, s.pack_b, s.prefetch, half)


# (16-bit type, lanes) -> (the macro that enables it, the load of `lanes` values widened to f32 into `d` from `p`)
HALF_LOADS = {
    "f16": {4: ("__F16C__", "__m128i em_h = _mm_loadl_epi64((const __m128i *)(p)); (d) = (em_vec)_mm_cvtph_ps(em_h);"),
            8: ("__F16C__", "__m128i em_h; memcpy(&em_h, (p), 16); (d) = (em_vec)_mm256_cvtph_ps(em_h);"),
            16: ("__AVX512F__", "__m256i em_h; memcpy(&em_h, (p), 32); (d) = (em_vec)_mm512_cvtph_ps(em_h);")},
    "bf16": {8: ("__AVX2__", "__m128i em_h; memcpy(&em_h, (p), 16); "
                             "(d) = (em_vec)_mm256_slli_epi32(_mm256_cvtepu16_epi32(em_h), 16);"),
             16: ("__AVX512F__", "__m256i em_h; memcpy(&em_h, (p), 32); "
                                 "(d) = (em_vec)_mm512_slli_epi32(_mm512_cvtepu16_epi32(em_h), 16);")},
}
SCALAR_WIDEN = {"f16": "em_h2f", "bf16": "em_bf2f"}  # the prelude's exact conversions


def _load_b_macro(g: MicroGeometry) -> str:
    """`EM_LOAD_B(d, p)`: `lanes` values of a B panel from `p` into the register `d` (16-bit ones widened
    exactly: the sums are the same bits as from f32 panels)."""
    if g.b_half is None:
        return "#define EM_LOAD_B(d, p) memcpy(&(d), (p), sizeof (d))"
    widen = SCALAR_WIDEN[g.b_half]
    if g.lanes == 1:
        return f"#define EM_LOAD_B(d, p) ((d) = {widen}((p)[0]))"
    loop = (f"#define EM_LOAD_B(d, p) do {{ for (int em_l = 0; em_l < {g.lanes}; ++em_l) "
            f"(d)[em_l] = {widen}((p)[em_l]); }} while (0)")
    known = HALF_LOADS[g.b_half].get(g.lanes)
    if known is None:
        return loop
    guard, body = known
    return "\n".join([f"#if defined({guard})", f"#define EM_LOAD_B(d, p) do {{ {body} }} while (0)", "#else", loop,
                      "#endif"])


def _fma_macro(g: MicroGeometry) -> str:
    fma = "__builtin_fmaf" if g.acc == "f32" else "__builtin_fma"
    if g.lanes == 1:
        return (f"#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)\n"
                f"#define EM_FMA(c, a, b) ((c) = {fma}((a), (b), (c)))\n"
                f"#else\n#define EM_FMA(c, a, b) ((c) = (c) + (a) * (b))\n#endif")
    lane_loop = (f"#define EM_FMA(c, a, b) do {{ for (int em_l = 0; em_l < {g.lanes}; ++em_l) "
                 f"(c)[em_l] = {fma}((a)[em_l], (b)[em_l], (c)[em_l]); }} while (0)")
    lines = []
    known = FMA_INTRINSICS.get((g.acc, g.register_bytes))
    if known is not None:
        guard, fn, vt = known
        lines += [f"#if defined({guard})",
                  f"#define EM_FMA(c, a, b) ((c) = (em_vec){fn}(({vt})(a), ({vt})(b), ({vt})(c)))",
                  "#elif defined(__FMA__) || defined(__ARM_FEATURE_FMA)"]
    else:
        lines.append("#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)")
    lines += [lane_loop, "#else", "#define EM_FMA(c, a, b) ((c) = (c) + (a) * (b))", "#endif"]
    return "\n".join(lines)


def _broadcast(g: MicroGeometry, value: str) -> str:
    """`value` in every lane, spelled lane by lane: the compiler loads it with one broadcast from memory.

    (`(em_vec){0} + x` would add +0.0 in every lane, which it may not drop (-0.0 + 0.0 is +0.0): a
    scalar add and a register shuffle per row, on the shuffle pipe an FMA also issues on.)
    """
    if g.lanes == 1:
        return value
    return "(em_vec){" + ", ".join([value] * g.lanes) + "}"


def micro_kernel_c(g: MicroGeometry) -> str:
    """C declarations of the micro-kernel: its vector type, multiply-add and `em_micro` function.

    `em_micro(kc, ap, lda, ra, bp, ldb, ci, ldi, co, ldo)`: `lda` and `ra` are read only when A
    is read in place (row r of the tile at `ap + r * lda`, k contiguous; rows from `ra` on, past
    the matrix, repeat its last row, whose sums the epilogue never stores), `ldb` only when B is
    (row k at `bp + k * ldb`, the tile's columns contiguous); packed panels step by M_r and N_r.
    """
    t = C_TYPES[g.acc]
    vec_type = (f"typedef {t} em_vec;" if g.lanes == 1 else
                f"typedef {t} em_vec __attribute__((vector_size({g.register_bytes})));")
    acc = [[f"em_c{r}_{q}" for q in range(g.vpr)] for r in range(g.mr)]
    how = ", ".join(["A packed" if g.pack_a else "A in place", "B packed" if g.pack_b else "B in place"]
                    + ([f"prefetch {g.prefetch} steps ahead"] if g.prefetch else []))
    out = [f"/* micro-kernel: {g.mr} x {g.nr} {g.acc} accumulators in {g.mr * g.vpr} registers of {g.lanes} lanes; "
           f"{how} */",
           vec_type, _fma_macro(g), _load_b_macro(g),
           f"static void em_micro(int64_t em_kc, const {t} *restrict em_ap, int64_t em_lda, int64_t em_ra,",
           f"                     const {g.b_type} *restrict em_bp, int64_t em_ldb, const {t} *em_ci, int64_t em_ldi,",
           f"                     {t} *em_co, int64_t em_ldo) {{",
           "  (void)em_lda; (void)em_ra; (void)em_ldb;",
           "  em_vec " + ", ".join(v for row in acc for v in row) + ";"]
    if not g.pack_a:
        out.append("  const " + t + " *restrict " + ", *restrict ".join(
            f"em_a{r} = em_ap + ({r} < em_ra ? {r} : em_ra - 1) * em_lda" for r in range(g.mr)) + ";")
    out.append("  if (em_ci) {")
    for r in range(g.mr):
        for q in range(g.vpr):
            out.append(f"    memcpy(&{acc[r][q]}, em_ci + {r} * em_ldi + {q * g.lanes}, sizeof {acc[r][q]});")
    out.append("  } else {")
    zero = "(em_vec){0}" if g.lanes > 1 else "0"
    for r in range(g.mr):
        out.append("    " + " ".join(f"{v} = {zero};" for v in acc[r]))
    b_step = str(g.nr) if g.pack_b else "em_ldb"
    out += ["  }", "  for (int64_t em_k = 0; em_k < em_kc; ++em_k) {",
            f"    const {g.b_type} *restrict em_b = em_bp + em_k * {b_step};"]
    if g.pack_a:
        out.append(f"    const {t} *restrict em_a = em_ap + em_k * {g.mr};")
    if g.prefetch:
        line_elems = 64 * 8 // ELEMENT_BITS[g.acc]
        b_line = 32 if g.b_half else line_elems
        out += [f"    __builtin_prefetch(em_b + {g.prefetch} * {b_step} + {q}, 0, 3);"
                for q in range(0, g.nr, b_line)]
        if g.pack_a:
            out.append(f"    __builtin_prefetch(em_a + {g.prefetch * g.mr}, 0, 3);")
        else:
            out += [f"    if (((em_k + {g.prefetch}) & {line_elems - 1}) == 0) "
                    + " ".join(f"__builtin_prefetch(em_a{r} + em_k + {g.prefetch}, 0, 3);" for r in range(g.mr))]
    out.append("    em_vec " + ", ".join(f"em_b{q}" for q in range(g.vpr)) + ";")
    for q in range(g.vpr):
        out.append(f"    EM_LOAD_B(em_b{q}, em_b + {q * g.lanes});")
    for r in range(g.mr):
        fmas = " ".join(f"EM_FMA({acc[r][q]}, em_x, em_b{q});" for q in range(g.vpr))
        a = f"em_a[{r}]" if g.pack_a else f"em_a{r}[em_k]"
        out.append(f"    {{ const em_vec em_x = {_broadcast(g, a)}; {fmas} }}")
    out.append("  }")
    for r in range(g.mr):
        for q in range(g.vpr):
            out.append(f"  memcpy(em_co + {r} * em_ldo + {q * g.lanes}, &{acc[r][q]}, sizeof {acc[r][q]});")
    out.append("}")
    return "\n".join(out)
