"""The C text every generated kernel starts with: headers, libmvec's vector math declarations, and the
`em_` helpers the expressions of `c_expr` call.

f16 and bf16 convert to and from float exactly in integer operations (whole runs with F16C where the
build targets it); `em_f2h2f` rounds a float to f16 and back in float arithmetic (vectorisable, the same
bits); `em_expf` / `em_expd` take exp below its zero cut as 0 without calling the vector exp on the lane, and
`em_sigmoidf` / `em_sigmoidd` keep exp's argument off the vector exp's slow range;
max and min propagate NaN as torch does; integer add, sub and mul wrap, computed unsigned.
"""

from __future__ import annotations

PRELUDE = r"""#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GLIBC__) && defined(_OPENMP)
/* glibc's libmvec has vector forms of these; math.h declares them only under -ffast-math */
#pragma omp declare simd notinbranch
float expf(float);
#pragma omp declare simd notinbranch
double exp(double);
#pragma omp declare simd notinbranch
float logf(float);
#pragma omp declare simd notinbranch
double log(double);
#pragma omp declare simd notinbranch
float powf(float, float);
#pragma omp declare simd notinbranch
double pow(double, double);
#if __GLIBC_PREREQ(2, 35)
#pragma omp declare simd notinbranch
float tanhf(float);
#pragma omp declare simd notinbranch
double tanh(double);
#pragma omp declare simd notinbranch
float erff(float);
#pragma omp declare simd notinbranch
double erf(double);
#endif
#endif

/* f16 bits <-> float in integer operations (exact; vectorisable, unlike gcc 12's _Float16 conversions) */
static inline float em_h2f(uint16_t h) {
  const uint32_t em = (uint32_t)h & 0x7fffu;
  const float sub = (float)em * 0x1p-24f; /* zero and subnormals: exact */
  uint32_t su; memcpy(&su, &sub, 4);
  const uint32_t u = em >= 0x7c00u ? ((em << 13) | 0x7f800000u) : em >= 0x0400u ? (em << 13) + 0x38000000u : su;
  const uint32_t r = u | (((uint32_t)h & 0x8000u) << 16);
  float f; memcpy(&f, &r, 4); return f;
}
static inline uint16_t em_f2h(float f) {
  /* round to nearest even; subnormals by one float addition (the FPU rounds to nearest even) */
  uint32_t u; memcpy(&u, &f, 4);
  const uint32_t sign = u & 0x80000000u;
  u ^= sign;
  float a; memcpy(&a, &u, 4);
  const float t = a + 0.5f;
  uint32_t tu; memcpy(&tu, &t, 4);
  const uint32_t sub = tu - 0x3f000000u;
  const uint32_t norm = (u + 0xc8000fffu + ((u >> 13) & 1u)) >> 13;
  const uint32_t big = u > 0x7f800000u ? 0x7e00u : 0x7c00u;
  const uint32_t o = u >= 0x47800000u ? big : u < 0x38800000u ? sub : norm;
  return (uint16_t)(o | (sign >> 16));
}
static inline float em_f2h2f(float f) {
  /* em_h2f(em_f2h(f)) in float arithmetic, which vectorises (the integer round trip costs a 16-bit row six
     times its loop): adding 2^(e+13), e the exponent of |f| (at least f16's -14), rounds |f| at f16's ulp, to
     nearest even; subtracting it again is exact. At 65520 and above f16 is infinite; a NaN stays a NaN. */
  uint32_t u; memcpy(&u, &f, 4);
  const uint32_t sign = u & 0x80000000u;
  const uint32_t au = u ^ sign;
  float a; memcpy(&a, &au, 4);
  const uint32_t e = au & 0x7f800000u;
  const uint32_t mb = (e < 0x38800000u ? 0x38800000u : e) + (13u << 23);
  float m; memcpy(&m, &mb, 4);
  float r = (a + m) - m;
  r = a >= 65520.0f ? INFINITY : r;
  r = a != a ? a : r;
  uint32_t ru; memcpy(&ru, &r, 4); ru |= sign;
  memcpy(&r, &ru, 4); return r;
}
static inline float em_bf2f(uint16_t x) { uint32_t u = (uint32_t)x << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint16_t em_f2bf(float f) {
  uint32_t u; memcpy(&u, &f, 4);
  const uint32_t r = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
  return (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : r);
}
static inline float em_d2odd(double d) {
  /* a double rounded to float by round-to-odd: a later rounding to 16 bits is then the only one */
  float f = (float)d;
  if (fabs((double)f) > fabs(d)) f = nextafterf(f, 0.0f);
  if ((double)f != d) { uint32_t u; memcpy(&u, &f, 4); u |= 1u; memcpy(&f, &u, 4); }
  return f;
}
static inline uint16_t em_d2h(double d) { return em_f2h(em_d2odd(d)); }
static inline uint16_t em_d2bf(double d) { return em_f2bf(em_d2odd(d)); }
static inline float em_maxf(float a, float b) { return (b != b || b > a) ? b : a; }
static inline float em_minf(float a, float b) { return (b != b || b < a) ? b : a; }
static inline double em_maxd(double a, double b) { return (b != b || b > a) ? b : a; }
static inline double em_mind(double a, double b) { return (b != b || b < a) ? b : a; }
/* exp below -104 (f32) or -746 (f64) is +0 exactly (under half the least subnormal). Those lanes call exp
   on +0 and take 0: libmvec's vector exp sends a whole vector to its scalar fallback when one lane is far
   out of range, so a softmax row with masked (-inf, finfo.min) entries ran 6-7x slower. The lanes are
   masked with bits, not a select, which gcc would fold back into exp's argument. (The overflow side is
   left to the library: a softmax's arguments are never positive, and a mask for it cost 9% there.) */
static inline float em_expf(float x) {
  const uint32_t keep = x < -104.0f ? 0u : 0xffffffffu;
  uint32_t u; memcpy(&u, &x, 4); u &= keep;
  float a; memcpy(&a, &u, 4);
  const float e = expf(a);
  uint32_t r; memcpy(&r, &e, 4); r &= keep;
  float o; memcpy(&o, &r, 4); return o;
}
static inline double em_expd(double x) {
  const uint64_t keep = x < -746.0 ? 0u : 0xffffffffffffffffu;
  uint64_t u; memcpy(&u, &x, 8); u &= keep;
  double a; memcpy(&a, &u, 8);
  const double e = exp(a);
  uint64_t r; memcpy(&r, &e, 8); r &= keep;
  double o; memcpy(&o, &r, 8); return o;
}
/* sigmoid as 1 / (1 + exp(-x)), exp kept off most of the range where libmvec's vector exp sends the whole vector
   to its scalar fallback (an argument past 87.3 either way in f32): the argument is clamped at -20 (f32) or -40
   (f64), past which 1 + exp(-x) rounds to 1 exactly, and where exp(-x) overflows (x below minus the library's
   overflow bound) the result is +0, as 1 / (1 + inf) is, without the call; only x in (-88.8, -87.3) still takes
   the slow path (its exp is finite there). Every result keeps its bits; a SiLU over entries past 87 ran 3x
   slower, one over small entries costs about 0.1 ns an entry more. Masked with bits, as in `em_expf` (a select
   gcc moves after the call). NaN stays NaN (the comparisons are false). */
static inline float em_sigmoidf(float x) {
  const uint32_t big = x > 20.0f ? 0xffffffffu : 0u;
  const uint32_t over = x < -0x1.62e42ep6f ? 0xffffffffu : 0u; /* exp(-x) is +inf: 1 / (1 + inf) is +0 */
  uint32_t u; memcpy(&u, &x, 4); u = ((u & ~big) | (big & 0x41a00000u)) & ~over;
  float a; memcpy(&a, &u, 4);
  const float r = 1.0f / (1.0f + expf(-a));
  uint32_t o; memcpy(&o, &r, 4); o &= ~over;
  float y; memcpy(&y, &o, 4); return y;
}
static inline double em_sigmoidd(double x) {
  const uint64_t big = x > 40.0 ? 0xffffffffffffffffu : 0u;
  const uint64_t over = x < -0x1.62e42fefa39efp9 ? 0xffffffffffffffffu : 0u;
  uint64_t u; memcpy(&u, &x, 8); u = ((u & ~big) | (big & 0x4044000000000000u)) & ~over;
  double a; memcpy(&a, &u, 8);
  const double r = 1.0 / (1.0 + exp(-a));
  uint64_t o; memcpy(&o, &r, 8); o &= ~over;
  double y; memcpy(&y, &o, 8); return y;
}
static inline float em_reluf(float x) { return x < 0.0f ? 0.0f : x; }
static inline double em_relud(double x) { return x < 0.0 ? 0.0 : x; }
static inline int32_t em_add_i32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a + (uint32_t)b); }
static inline int32_t em_sub_i32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a - (uint32_t)b); }
static inline int32_t em_mul_i32(int32_t a, int32_t b) { return (int32_t)((uint32_t)a * (uint32_t)b); }
static inline int64_t em_add_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a + (uint64_t)b); }
static inline int64_t em_sub_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a - (uint64_t)b); }
static inline int64_t em_mul_i64(int64_t a, int64_t b) { return (int64_t)((uint64_t)a * (uint64_t)b); }
static inline int64_t em_min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t em_max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Whole runs converted at once: with F16C (and AVX-512) eight or sixteen halves per instruction,
   rounding to nearest even as em_f2h does; elsewhere the exact integer forms above, vectorised. */
#if defined(__F16C__) || defined(__FMA__) || defined(__AVX512F__)
#include <immintrin.h>
#endif
static inline void em_h2f_run(const uint16_t *restrict s, float *restrict d, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX512F__)
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(s + i))));
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(d + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + i))));
#endif
#pragma omp simd
  for (int64_t j = i; j < n; ++j) d[j] = em_h2f(s[j]);
}
static inline void em_f2h_run(const float *restrict s, uint16_t *restrict d, int64_t n) {
  int64_t i = 0;
#if defined(__F16C__) && defined(__AVX512F__)
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256((__m256i *)(d + i), _mm512_cvtps_ph(_mm512_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
#if defined(__F16C__)
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128((__m128i *)(d + i), _mm256_cvtps_ph(_mm256_loadu_ps(s + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
#endif
#pragma omp simd
  for (int64_t j = i; j < n; ++j) d[j] = em_f2h(s[j]);
}
static inline void em_bf2f_run(const uint16_t *restrict s, float *restrict d, int64_t n) {
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) d[j] = em_bf2f(s[j]);
}
static inline void em_f2bf_run(const float *restrict s, uint16_t *restrict d, int64_t n) {
  /* integer rounding (AVX-512 BF16's VCVTNEPS2BF16 flushes subnormals, so it is not used) */
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) d[j] = em_f2bf(s[j]);
}
"""
