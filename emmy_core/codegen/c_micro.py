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
from emmy_core.ir.nodes import Range
from emmy_core.knobs.validity import window_problem

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
    dot: str = "fma"  # fma | dpbf16 | amx: the multiply instructions (`c_schedule`'s `dot`)
    prefetch_l2: int = 0  # k steps ahead the B stream is prefetched into L2 (0: none)

    @property
    def b_type(self) -> str:
        """The C type of a packed B panel's values."""
        return "uint16_t" if self.b_half or self.dot != "fma" else C_TYPES[self.acc]

    @property
    def a_type(self) -> str:
        """The C type of a packed A panel's values: bf16 bits for the dot-product paths, else the accumulator's."""
        return "uint16_t" if self.dot != "fma" else C_TYPES[self.acc]

    @property
    def k_align(self) -> int:
        """What the packed panels pad k to: a pair (dpbf16), a tile's 32 (amx), else nothing (1)."""
        return DOT_K_ALIGN[self.dot]

    @property
    def register_bytes(self) -> int:
        return self.lanes * ELEMENT_BITS[self.acc] // 8


def micro_geometry(s: CSchedule, acc: str, b_dtype: str | None = None) -> MicroGeometry:
    """The micro-kernel the schedule spells for accumulators of type `acc` (and a B of `b_dtype`: a packed
    f16 or bf16 B into f32 keeps its 16-bit values in the panels, half the bytes a pass streams)."""
    bits = ELEMENT_BITS[acc]
    width = min(s.simd or LEGACY_SIMD_BITS, s.vec * bits)
    lanes = max(1, width // bits)
    dot = s.dot
    half = b_dtype if b_dtype in HALF_LOADS and acc == "f32" and s.pack_b and dot == "fma" else None
    rows = s.unroll * AMX_TILE if dot == "amx" else s.unroll  # amx: `unroll` counts 16-row tiles
    return MicroGeometry(acc, rows, s.vec, lanes, max(1, s.vec // lanes), s.pack_a, s.pack_b, s.prefetch, half,
                         dot, s.prefetch_l2)


DOT_K_ALIGN = {"fma": 1, "dpbf16": 2, "amx": 32, "fp16": 1}
DOT_OPERANDS = {"dpbf16": "bf16", "amx": "bf16", "fp16": "f16"}  # the operands' type each `dot` multiplies
# The dot-product kernels carry their instruction set as a function attribute, so they build at every setting
# (`rank`'s baseline target too): they are only ever chosen on a card whose probe found the instructions.
DPBF16_TARGET = '__attribute__((target("avx512f,avx512bf16")))'
AMX_TARGET = '__attribute__((target("amx-tile,amx-bf16")))'
FP16_TARGET = '__attribute__((target("avx512f,avx512bw,avx512vl,avx512fp16")))'
FP16_CHUNK = 16  # k steps an fp16 micro-kernel sums in f16 before adding them into its f32 accumulators
AMX_TILE = 16  # rows of an AMX tile, and f32 columns of a C tile (64 bytes)
AMX_K = 32  # bf16 values along k one A tile row holds (64 bytes)


def dot_problem(g: MicroGeometry, a_dtype: str, b_dtype: str, window: Range | None) -> str | None:
    """Why the schedule's `dot` cannot build this matmul, or None (fma always can)."""
    if g.dot == "fma":
        return None
    want = DOT_OPERANDS[g.dot]
    if (a_dtype, b_dtype, g.acc) != (want, want, "f32"):
        return f"dot={g.dot} needs {want} A and B accumulating in f32, not {a_dtype} x {b_dtype} into {g.acc}"
    if not (g.pack_a and g.pack_b):
        return f"dot={g.dot} needs both operands packed (pack_a and pack_b true)"
    problem = window_problem(window, g.dot)
    if problem is not None:
        return problem
    if g.dot == "dpbf16" and (g.lanes != 16 or g.nr % 16):
        return f"dot=dpbf16 needs 512-bit registers (simd 512) and vec a multiple of 16, not vec={g.nr}"
    if g.dot == "fp16" and (g.lanes != 16 or g.nr % 32):
        return f"dot=fp16 needs 512-bit registers (simd 512) and vec a multiple of 32, not vec={g.nr}"
    if g.dot == "amx" and g.prefetch_l2:
        return "prefetch_l2 takes the fma and dpbf16 micro-kernels: dot=amx loads whole tiles of B"
    if g.dot == "amx" and (g.mr not in (16, 32) or g.nr not in (16, 32)):
        return (f"dot=amx needs one or two tiles of 16 rows (unroll 1 or 2) and 16 or 32 columns (vec), not "
                f"{g.mr} x {g.nr}")
    return None


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


def _f32_tile_open(dot: str, target: str, acc: list[list[str]]) -> list[str]:
    """The opening of a dot-product `em_micro` over 512-bit f32 accumulators `acc` (rows of registers, 16
    columns each) under the function attribute `target`: the x86-64 guard, the signature on 16-bit panels, and the
    tile loaded from `em_ci` (a pass after the first) or zeroed."""
    out = ["#if !defined(__x86_64__)",
           f'#error "dot={dot} needs an x86-64 build"',
           "#endif",
           "#include <immintrin.h>",
           f"{target}",
           "static void em_micro(int64_t em_kc, const uint16_t *restrict em_ap, int64_t em_lda, int64_t em_ra,",
           "                     const uint16_t *restrict em_bp, int64_t em_ldb, const float *em_ci, int64_t em_ldi,",
           "                     float *em_co, int64_t em_ldo) {",
           "  (void)em_lda; (void)em_ra; (void)em_ldb;",
           "  __m512 " + ", ".join(v for row in acc for v in row) + ";",
           "  if (em_ci) {"]
    for r, row in enumerate(acc):
        out.append("    " + " ".join(f"{v} = _mm512_loadu_ps(em_ci + {r} * em_ldi + {q * 16});"
                                     for q, v in enumerate(row)))
    out.append("  } else {")
    for row in acc:
        out.append("    " + " ".join(f"{v} = _mm512_setzero_ps();" for v in row))
    out.append("  }")
    return out


def _f32_tile_close(acc: list[list[str]]) -> list[str]:
    """The end of a dot-product `em_micro`: the 512-bit f32 accumulators `acc` stored to `em_co`."""
    return [*("  " + " ".join(f"_mm512_storeu_ps(em_co + {r} * em_ldo + {q * 16}, {v});" for q, v in enumerate(row))
              for r, row in enumerate(acc)), "}"]


def _dpbf16_kernel_c(g: MicroGeometry) -> str:
    """`em_micro` on AVX512-BF16: per pair of k steps, `vpr` registers of B (16 columns x 2 k each) and a
    32-bit broadcast of each row's A pair, multiplied and added into f32 by `vdpbf16ps`.

    A's panel is `[k/2][M_r][2]` bf16, B's `[k/2][N_r][2]` (pairs of k interleaved per column), both padded
    with zeros to an even depth: a padded pair adds 0 x 0."""
    acc = [[f"em_c{r}_{q}" for q in range(g.vpr)] for r in range(g.mr)]
    out = [f"/* micro-kernel: {g.mr} x {g.nr} f32 accumulators in {g.mr * g.vpr} registers; bf16 pairs along k "
           "by vdpbf16ps (AVX512-BF16), A and B packed pair-interleaved */",
           *_f32_tile_open("dpbf16", DPBF16_TARGET, acc)]
    out += [            "  const int64_t em_pairs = (em_kc + 1) / 2;",
            "  for (int64_t em_p = 0; em_p < em_pairs; ++em_p) {",
            f"    const uint16_t *restrict em_b = em_bp + em_p * {2 * g.nr};",
            f"    const uint16_t *restrict em_a = em_ap + em_p * {2 * g.mr};"]
    if g.prefetch:
        out += [f"    __builtin_prefetch(em_b + {g.prefetch * 2 * g.nr + q}, 0, 3);" for q in range(0, 2 * g.nr, 32)]
        out.append(f"    __builtin_prefetch(em_a + {g.prefetch * 2 * g.mr}, 0, 3);")
    if g.prefetch_l2:  # k steps ahead: a pair step holds 2 N_r values of B
        out += [f"    __builtin_prefetch(em_b + {g.prefetch_l2 * g.nr + q}, 0, 2);" for q in range(0, 2 * g.nr, 32)]
    out.append("    __m512bh " + ", ".join(f"em_b{q}" for q in range(g.vpr)) + ";")
    for q in range(g.vpr):
        out.append(f"    em_b{q} = (__m512bh)_mm512_loadu_si512((const void *)(em_b + {32 * q}));")
    for r in range(g.mr):
        fmas = " ".join(f"{acc[r][q]} = _mm512_dpbf16_ps({acc[r][q]}, em_x, em_b{q});" for q in range(g.vpr))
        out.append(f"    {{ uint32_t em_w; memcpy(&em_w, em_a + {2 * r}, 4); "
                   f"const __m512bh em_x = (__m512bh)_mm512_set1_epi32((int)em_w); {fmas} }}")
    out += ["  }", *_f32_tile_close(acc)]
    return "\n".join(out)


def _fp16_kernel_c(g: MicroGeometry) -> str:
    """`em_micro` on AVX512-FP16: per k step, `nr / 32` registers of B (32 f16 columns each) and a 16-bit
    broadcast of each row's A value, multiplied and added in f16 by `vfmadd231ph` into chunk sums that start from
    zero every `FP16_CHUNK` steps; each chunk's sums are then widened (`vcvtph2psx`) and added into the f32
    accumulators, so a sum rounds to f16 over 16 products at most, and the depth adds in f32.

    A's panel is `[k][M_r]` f16, B's `[k][N_r]` f16, both the operands' own bits."""
    hq = g.nr // 32
    acc = [[f"em_c{r}_{q}" for q in range(2 * hq)] for r in range(g.mr)]
    part = [[f"em_h{r}_{q}" for q in range(hq)] for r in range(g.mr)]
    out = [f"/* micro-kernel: {g.mr} x {g.nr} f32 accumulators in {g.mr * 2 * hq} registers; f16 products summed in "
           f"f16 over {FP16_CHUNK} steps of k by vfmadd231ph (AVX512-FP16), then in f32 */",
           *_f32_tile_open("fp16", FP16_TARGET, acc)]
    out += [            f"  for (int64_t em_k0 = 0; em_k0 < em_kc; em_k0 += {FP16_CHUNK}) {{",
            f"    const int64_t em_k1 = em_k0 + {FP16_CHUNK} < em_kc ? em_k0 + {FP16_CHUNK} : em_kc;",
            "    __m512h " + ", ".join(f"{v} = _mm512_setzero_ph()" for row in part for v in row) + ";",
            "    for (int64_t em_k = em_k0; em_k < em_k1; ++em_k) {",
            f"      const uint16_t *restrict em_b = em_bp + em_k * {g.nr};",
            f"      const uint16_t *restrict em_a = em_ap + em_k * {g.mr};"]
    if g.prefetch:
        out += [f"      __builtin_prefetch(em_b + {g.prefetch * g.nr + q}, 0, 3);" for q in range(0, g.nr, 32)]
        out.append(f"      __builtin_prefetch(em_a + {g.prefetch * g.mr}, 0, 3);")
    if g.prefetch_l2:
        out += [f"      __builtin_prefetch(em_b + {g.prefetch_l2 * g.nr + q}, 0, 2);" for q in range(0, g.nr, 32)]
    out.append("      __m512h " + ", ".join(f"em_b{q}" for q in range(hq)) + ";")
    for q in range(hq):
        out.append(f"      em_b{q} = _mm512_castsi512_ph(_mm512_loadu_si512((const void *)(em_b + {32 * q})));")
    for r in range(g.mr):
        fmas = " ".join(f"{part[r][q]} = _mm512_fmadd_ph(em_x, em_b{q}, {part[r][q]});" for q in range(hq))
        out.append(f"      {{ const __m512h em_x = _mm512_castsi512_ph(_mm512_set1_epi16((short)em_a[{r}])); {fmas} }}")
    out.append("    }")
    for r in range(g.mr):
        for q in range(hq):
            h = part[r][q]
            lo, hi = acc[r][2 * q], acc[r][2 * q + 1]
            out.append(f"    {lo} = _mm512_add_ps({lo}, _mm512_cvtxph_ps(_mm512_castph512_ph256({h}))); "
                       f"{hi} = _mm512_add_ps({hi}, _mm512_cvtxph_ps(_mm256_castsi256_ph("
                       f"_mm512_extracti64x4_epi64(_mm512_castph_si512({h}), 1))));")
    out += ["  }", *_f32_tile_close(acc)]
    return "\n".join(out)


def _amx_kernel_c(g: MicroGeometry) -> str:
    """`em_micro` on AMX-BF16: (M_r / 16) x (N_r / 16) f32 tiles, per 32 steps of k one A tile per 16 rows
    and one B tile per 16 columns, multiplied by `tdpbf16ps`; `em_amx_start` (each thread, before its first
    tile) loads the tile configuration, `em_amx_end` releases it.

    A's panel is `M_r` rows of the pass's depth padded to a multiple of 32 (row-major bf16), B's is
    `[k/2][N_r][2]` (the tile layout: a B tile is 16 rows of k pairs by 16 columns); zeros pad both."""
    ti, tj = g.mr // AMX_TILE, g.nr // AMX_TILE
    c_tiles = [[i * tj + j for j in range(tj)] for i in range(ti)]
    a_tiles = [ti * tj + i for i in range(ti)]
    b_tiles = [ti * tj + ti + j for j in range(tj)]
    n_tiles = ti * tj + ti + tj
    out = [f"/* micro-kernel: {g.mr} x {g.nr} f32 accumulators in {ti * tj} AMX tiles; bf16 16 x 32 tiles of A "
           "and 16 x (16 pairs) of B by tdpbf16ps (AMX-BF16) */",
           "#if !defined(__x86_64__) || !defined(__linux__)",
           '#error "dot=amx needs an x86-64 Linux build"',
           "#endif",
           "#include <immintrin.h>",
           "#include <sys/syscall.h>",
           "#include <unistd.h>",
           "/* the OS's permission for AMX tile data (arch_prctl ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA): once */",
           "static int em_amx_permitted(void) {",
           "  static int em_state = 0; /* 0 unknown, 1 granted, -1 refused */",
           "  int em_s = __atomic_load_n(&em_state, __ATOMIC_ACQUIRE);",
           "  if (em_s == 0) {",
           "    em_s = syscall(SYS_arch_prctl, 0x1023, 18) == 0 ? 1 : -1;",
           "    __atomic_store_n(&em_state, em_s, __ATOMIC_RELEASE);",
           "  }",
           "  return em_s > 0;",
           "}",
           f"{AMX_TARGET}",
           "static void em_amx_start(void) {",
           "  unsigned char em_cfg[64] __attribute__((aligned(64)));",
           "  memset(em_cfg, 0, sizeof em_cfg);",
           "  em_cfg[0] = 1; /* palette 1 */",
           f"  for (int em_t = 0; em_t < {n_tiles}; ++em_t) {{ em_cfg[16 + 2 * em_t] = 64; em_cfg[48 + em_t] = 16; }}",
           "  __asm__ volatile(\"\" : : \"r\"(em_cfg) : \"memory\"); /* every byte of it is read: none may be dropped */",
           "  _tile_loadconfig(em_cfg);",
           "}",
           f"{AMX_TARGET} static void em_amx_end(void) {{ _tile_release(); }}",
           f"{AMX_TARGET}",
           "static void em_micro(int64_t em_kc, const uint16_t *restrict em_ap, int64_t em_lda, int64_t em_ra,",
           "                     const uint16_t *restrict em_bp, int64_t em_ldb, const float *em_ci, int64_t em_ldi,",
           "                     float *em_co, int64_t em_ldo) {",
           "  (void)em_lda; (void)em_ra; (void)em_ldb;",
           f"  const int64_t em_kp = (em_kc + {AMX_K - 1}) / {AMX_K} * {AMX_K};",
           "  if (em_ci) {"]
    for i in range(ti):
        for j in range(tj):
            out.append(f"    _tile_loadd({c_tiles[i][j]}, em_ci + {16 * i} * em_ldi + {16 * j}, em_ldi * 4);")
    out.append("  } else {")
    for i in range(ti):
        for j in range(tj):
            out.append(f"    _tile_zero({c_tiles[i][j]});")
    out += ["  }",
            f"  for (int64_t em_k = 0; em_k < em_kp; em_k += {AMX_K}) {{"]
    for i in range(ti):
        out.append(f"    _tile_loadd({a_tiles[i]}, em_ap + {16 * i} * em_kp + em_k, em_kp * 2);")
    for j in range(tj):
        out.append(f"    _tile_loadd({b_tiles[j]}, em_bp + em_k * {g.nr} + {32 * j}, {4 * g.nr});")
    for i in range(ti):
        for j in range(tj):
            out.append(f"    _tile_dpbf16ps({c_tiles[i][j]}, {a_tiles[i]}, {b_tiles[j]});")
    out.append("  }")
    for i in range(ti):
        for j in range(tj):
            out.append(f"  _tile_stored({c_tiles[i][j]}, em_co + {16 * i} * em_ldo + {16 * j}, em_ldo * 4);")
    out.append("}")
    return "\n".join(out)


def _b_prefetch(g: MicroGeometry, steps: int, b_step: str, locality: int) -> list[str]:
    """The fma micro-kernel's prefetch of the B row `steps` k steps ahead, a line at a time (`locality` 3: into
    L1, 2: into L2)."""
    b_line = 32 if g.b_half else 64 * 8 // ELEMENT_BITS[g.acc]
    return [f"    __builtin_prefetch(em_b + {steps} * {b_step} + {q}, 0, {locality});" for q in range(0, g.nr, b_line)]


def micro_kernel_c(g: MicroGeometry) -> str:
    """C declarations of the micro-kernel: its vector type, multiply-add and `em_micro` function.

    `em_micro(kc, ap, lda, ra, bp, ldb, ci, ldi, co, ldo)`: `lda` and `ra` are read only when A
    is read in place (row r of the tile at `ap + r * lda`, k contiguous; rows from `ra` on, past
    the matrix, repeat its last row, whose sums the epilogue never stores), `ldb` only when B is
    (row k at `bp + k * ldb`, the tile's columns contiguous); packed panels step by M_r and N_r.
    `dot` other than fma writes the dot-product kernels above (bf16 or f16 panels, f32 tiles).
    """
    if g.dot == "dpbf16":
        return _dpbf16_kernel_c(g)
    if g.dot == "amx":
        return _amx_kernel_c(g)
    if g.dot == "fp16":
        return _fp16_kernel_c(g)
    t = C_TYPES[g.acc]
    vec_type = (f"typedef {t} em_vec;" if g.lanes == 1 else
                f"typedef {t} em_vec __attribute__((vector_size({g.register_bytes})));")
    acc = [[f"em_c{r}_{q}" for q in range(g.vpr)] for r in range(g.mr)]
    how = ", ".join(["A packed" if g.pack_a else "A in place", "B packed" if g.pack_b else "B in place"]
                    + ([f"prefetch {g.prefetch} steps ahead"] if g.prefetch else [])
                    + ([f"B prefetched into L2 {g.prefetch_l2} steps ahead"] if g.prefetch_l2 else []))
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
    line_elems = 64 * 8 // ELEMENT_BITS[g.acc]
    if g.prefetch:
        out += _b_prefetch(g, g.prefetch, b_step, 3)
        if g.pack_a:
            out.append(f"    __builtin_prefetch(em_a + {g.prefetch * g.mr}, 0, 3);")
        else:
            out += [f"    if (((em_k + {g.prefetch}) & {line_elems - 1}) == 0) "
                    + " ".join(f"__builtin_prefetch(em_a{r} + em_k + {g.prefetch}, 0, 3);" for r in range(g.mr))]
    if g.prefetch_l2:  # the B stream alone, into L2, far enough ahead to hide the memory's latency
        out += _b_prefetch(g, g.prefetch_l2, b_step, 2)
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
