"""The packing functions the packed matmul (`c_matmul`) declares: `em_pack_a`, one row block's rows of A for one
pass along k, and `em_pack_b`, one column panel of B over the whole depth, each converting to the accumulator
type (or, on the dot-product paths, copying bf16 or f16 bits into the instruction's layout).

Rows, columns and depth past the operand are written as zeros: a padded product adds nothing to any real sum.
"""

from __future__ import annotations

from emmy_core.codegen.c_emit import Emitter
from emmy_core.codegen.c_expr import C_TYPES, HALF_RUNS, cast_c
from emmy_core.codegen.c_micro import MicroGeometry
from emmy_core.ir.family import MatmulShape


def _converter(name: str, src: str, acc: str) -> str:
    """A C function converting a contiguous run of `src` values into the accumulator type."""
    st, at = C_TYPES[src], C_TYPES[acc]
    head = f"static inline void {name}(const {st} *restrict em_s, {at} *restrict em_d, int64_t em_n) {{"
    if src == acc:
        return f"{head} memcpy(em_d, em_s, sizeof({at}) * (size_t)em_n); }}"
    if acc == "f32" and src in HALF_RUNS:
        return f"{head} {HALF_RUNS[src][0]}(em_s, em_d, em_n); }}"
    return (f"{head}\n#pragma omp simd\n  for (int64_t em_i = 0; em_i < em_n; ++em_i) "
            f"em_d[em_i] = {cast_c('em_s[em_i]', src, acc)};\n}}")


def declare_packers(em: Emitter, shape: MatmulShape, acc: str, g: MicroGeometry) -> None:
    """Declares the packing functions: each operand's run converter, `em_pack_a` and `em_pack_b`."""
    p = em.program
    at = C_TYPES[acc]
    a_src, b_src = p.buffer(shape.a).dtype, p.buffer(shape.b).dtype
    em.declare(_converter("em_cvt_a", a_src, acc))
    em.declare(_converter("em_cvt_b", b_src, acc))
    sa, sb = C_TYPES[a_src], C_TYPES[b_src]
    direct = a_src == acc
    if g.dot != "fma":
        _dot_packers(em, shape, g)
        return
    em.declare("\n".join([
        "/* rows [0, avail) of A (row stride lda), k [0, kc), into M_r-row panels; rows up to `rows` are zero */",
        f"static void em_pack_a(const {sa} *restrict em_a, int64_t em_lda, int64_t em_avail, int64_t em_rows,",
        f"                      int64_t em_kc, {at} *restrict em_ap, {at} *restrict em_tmp) {{",
        "  for (int64_t em_r = 0; em_r < em_rows; ++em_r) {",
        f"    {at} *restrict em_d = em_ap + (em_r / {g.mr}) * em_kc * {g.mr} + em_r % {g.mr};",
        "    if (em_r < em_avail) {",
        ("      const " + at + " *restrict em_s = em_a + em_r * em_lda;" if direct else
         "      em_cvt_a(em_a + em_r * em_lda, em_tmp, em_kc);\n      const " + at + " *restrict em_s = em_tmp;"),
        f"      for (int64_t em_k = 0; em_k < em_kc; ++em_k) em_d[em_k * {g.mr}] = em_s[em_k];",
        "    } else {",
        f"      for (int64_t em_k = 0; em_k < em_kc; ++em_k) em_d[em_k * {g.mr}] = 0;",
        "    }",
        "  }",
        "}"]))
    bt = g.b_type
    if g.b_half:  # 16-bit panels: B's own bits
        body = _bits_b_body(shape, g)
    elif shape.b_transposed:  # b[.., n, k]: each column of the panel is a contiguous run along k
        body = [
            f"  for (int64_t em_c = 0; em_c < {g.nr}; ++em_c) {{",
            "    if (em_c < em_cols) {",
            "      em_cvt_b(em_b + (em_n0 + em_c) * em_kn, em_tmp, em_kn);",
            f"      for (int64_t em_k = 0; em_k < em_kn; ++em_k) em_bp[em_k * {g.nr} + em_c] = em_tmp[em_k];",
            "    } else {",
            f"      for (int64_t em_k = 0; em_k < em_kn; ++em_k) em_bp[em_k * {g.nr} + em_c] = 0;",
            "    }",
            "  }"]
    else:  # b[.., k, n]: each row of the panel is a contiguous run along n
        body = [
            "  for (int64_t em_k = 0; em_k < em_kn; ++em_k) {",
            f"    {at} *restrict em_d = em_bp + em_k * {g.nr};",
            "    em_cvt_b(em_b + em_k * em_nn + em_n0, em_d, em_cols);",
            f"    for (int64_t em_c = em_cols; em_c < {g.nr}; ++em_c) em_d[em_c] = 0;",
            "  }"]
    em.declare("\n".join([
        "/* one panel (columns [n0, n0 + N_r), every k) of one batch of B, zero columns past n */",
        f"static void em_pack_b(const {sb} *restrict em_b, int64_t em_nn, int64_t em_kn, int64_t em_n0,",
        f"                      {bt} *restrict em_bp, {at} *restrict em_tmp) {{",
        f"  const int64_t em_cols = em_min64({g.nr}, em_nn - em_n0);",
        "  (void)em_tmp;",
        *body,
        "}"]))


def _dot_packers(em: Emitter, shape: MatmulShape, g: MicroGeometry) -> None:
    """The packing functions of the dot-product paths (bf16 A and B, copied as their bits):

    - dpbf16: A `[M_r-row panel][k/2][M_r][2]`, B `[k/2][N_r][2]`, k padded to a pair;
    - amx: A `[M_r-row panel][M_r][k padded to 32]` (rows of a tile), B `[k/2][N_r][2]` padded to 32 k.
    Rows, columns and k past the operand are zeros (a zero product adds nothing)."""
    a = g.k_align
    if g.dot == "fp16":
        _fp16_packers(em, shape, g)
        return
    if g.dot == "amx":
        em.declare("\n".join([
            "/* rows [0, avail) of A (row stride lda), k [0, kc) padded to 32, into M_r-row bf16 panels; rows up to "
            "`rows` are zero */",
            "static void em_pack_a(const uint16_t *restrict em_a, int64_t em_lda, int64_t em_avail, int64_t em_rows,",
            "                      int64_t em_kc, uint16_t *restrict em_ap, float *restrict em_tmp) {",
            "  (void)em_tmp;",
            f"  const int64_t em_kp = (em_kc + {a - 1}) / {a} * {a};",
            "  for (int64_t em_r = 0; em_r < em_rows; ++em_r) {",
            f"    uint16_t *restrict em_d = em_ap + (em_r / {g.mr}) * em_kp * {g.mr} + (em_r % {g.mr}) * em_kp;",
            "    const uint16_t *restrict em_s = em_a + em_r * em_lda;",
            "    const int em_real = em_r < em_avail;",
            "    for (int64_t em_k = 0; em_k < em_kp; ++em_k) em_d[em_k] = em_real && em_k < em_kc ? em_s[em_k] : 0;",
            "  }",
            "}"]))
    else:  # dpbf16: a row's k pairs are 32-bit words, each copied to its place in the panel as one word
        em.declare("\n".join([
            "/* rows [0, avail) of A (row stride lda), k [0, kc) padded to a pair, into M_r-row bf16 panels of k "
            "pairs (one 32-bit word each, the lower k in the low half); rows up to `rows` are zero */",
            "static void em_pack_a(const uint16_t *restrict em_a, int64_t em_lda, int64_t em_avail, int64_t em_rows,",
            "                      int64_t em_kc, uint16_t *restrict em_ap, float *restrict em_tmp) {",
            "  (void)em_tmp;",
            "  const int64_t em_pairs = (em_kc + 1) / 2, em_full = em_kc / 2;",
            "  for (int64_t em_r = 0; em_r < em_rows; ++em_r) {",
            f"    uint16_t *restrict em_d = em_ap + (em_r / {g.mr}) * em_pairs * {2 * g.mr} + (em_r % {g.mr}) * 2;",
            "    const uint16_t *restrict em_s = em_a + em_r * em_lda;",
            "    uint32_t em_w = 0;",
            "    if (em_r < em_avail) {",
            "      for (int64_t em_j = 0; em_j < em_full; ++em_j) {",
            "        memcpy(&em_w, em_s + 2 * em_j, 4);",
            f"        memcpy(em_d + em_j * {2 * g.mr}, &em_w, 4);",
            "      }",
            "      if (em_kc & 1) {",
            "        em_w = em_s[em_kc - 1];",
            f"        memcpy(em_d + em_full * {2 * g.mr}, &em_w, 4);",
            "      }",
            "    } else {",
            f"      for (int64_t em_j = 0; em_j < em_pairs; ++em_j) memcpy(em_d + em_j * {2 * g.mr}, &em_w, 4);",
            "    }",
            "  }",
            "}"]))
    put = f"em_bp[((em_k >> 1) * {g.nr} + em_c) * 2 + (em_k & 1)]"
    if shape.b_transposed:  # b[.., n, k]: a column's run along k lands on every other value of a row pair
        body = [f"  for (int64_t em_c = 0; em_c < {g.nr}; ++em_c) {{",
                "    const uint16_t *restrict em_s = em_b + (em_n0 + em_c) * em_kn;",
                f"    for (int64_t em_k = 0; em_k < em_kp; ++em_k) {put} = em_c < em_cols && em_k < em_kn ? "
                "em_s[em_k] : 0;",
                "  }"]
    else:  # b[.., k, n]: a row's run along n
        body = ["  for (int64_t em_k = 0; em_k < em_kp; ++em_k) {",
                "    const uint16_t *restrict em_s = em_b + em_k * em_nn + em_n0;",
                f"    for (int64_t em_c = 0; em_c < {g.nr}; ++em_c) {put} = em_c < em_cols && em_k < em_kn ? "
                "em_s[em_c] : 0;",
                "  }"]
    em.declare("\n".join([
        f"/* one panel (columns [n0, n0 + N_r), every k padded to {a}) of one batch of B, k pairs interleaved */",
        "static void em_pack_b(const uint16_t *restrict em_b, int64_t em_nn, int64_t em_kn, int64_t em_n0,",
        "                      uint16_t *restrict em_bp, float *restrict em_tmp) {",
        f"  const int64_t em_cols = em_min64({g.nr}, em_nn - em_n0);",
        f"  const int64_t em_kp = (em_kn + {a - 1}) / {a} * {a};",
        "  (void)em_tmp;",
        *body,
        "}"]))


def _bits_b_body(shape: MatmulShape, g: MicroGeometry) -> list[str]:
    """The body of `em_pack_b` for `[k][N_r]` panels of B's own 16-bit values (an fma path's f16 or bf16 B, the
    fp16 path's): column by column from b[.., n, k], row by row from b[.., k, n]; zero columns past n."""
    if shape.b_transposed:
        return [f"  for (int64_t em_c = 0; em_c < {g.nr}; ++em_c) {{",
                "    const uint16_t *restrict em_s = em_b + (em_n0 + em_c) * em_kn;",
                f"    for (int64_t em_k = 0; em_k < em_kn; ++em_k) em_bp[em_k * {g.nr} + em_c] = em_c < em_cols ? "
                "em_s[em_k] : 0;",
                "  }"]
    return ["  for (int64_t em_k = 0; em_k < em_kn; ++em_k) {",
            f"    uint16_t *restrict em_d = em_bp + em_k * {g.nr};",
            "    memcpy(em_d, em_b + em_k * em_nn + em_n0, sizeof(uint16_t) * (size_t)em_cols);",
            f"    for (int64_t em_c = em_cols; em_c < {g.nr}; ++em_c) em_d[em_c] = 0;",
            "  }"]


def _fp16_packers(em: Emitter, shape: MatmulShape, g: MicroGeometry) -> None:
    """The packing functions of the fp16 path (f16 A and B, copied as their bits): A `[M_r-row panel][k][M_r]`,
    B `[k][N_r]`; rows and columns past the operand are zeros."""
    em.declare("\n".join([
        "/* rows [0, avail) of A (row stride lda), k [0, kc), into M_r-row f16 panels; rows up to `rows` are zero */",
        "static void em_pack_a(const uint16_t *restrict em_a, int64_t em_lda, int64_t em_avail, int64_t em_rows,",
        "                      int64_t em_kc, uint16_t *restrict em_ap, float *restrict em_tmp) {",
        "  (void)em_tmp;",
        "  for (int64_t em_r = 0; em_r < em_rows; ++em_r) {",
        f"    uint16_t *restrict em_d = em_ap + (em_r / {g.mr}) * em_kc * {g.mr} + em_r % {g.mr};",
        "    const uint16_t *restrict em_s = em_a + em_r * em_lda;",
        "    const int em_real = em_r < em_avail;",
        f"    for (int64_t em_k = 0; em_k < em_kc; ++em_k) em_d[em_k * {g.mr}] = em_real ? em_s[em_k] : 0;",
        "  }",
        "}"]))
    em.declare("\n".join([
        "/* one panel (columns [n0, n0 + N_r), every k) of one batch of B, f16 bits, zero columns past n */",
        "static void em_pack_b(const uint16_t *restrict em_b, int64_t em_nn, int64_t em_kn, int64_t em_n0,",
        "                      uint16_t *restrict em_bp, float *restrict em_tmp) {",
        f"  const int64_t em_cols = em_min64({g.nr}, em_nn - em_n0);",
        "  (void)em_tmp;",
        *_bits_b_body(shape, g),
        "}"]))


__all__ = ["declare_packers"]
