"""The f16 matmul's AVX512-FP16 path (knob `dot=fp16`): `vfmadd231ph` into f16 chunk sums over 16 steps of k,
each chunk then widened and added in f32.

No machine of these sessions has AVX512-FP16, so the path is checked three ways:
- its generated text (the instructions, the target attribute on the function that uses them, the chunking) and
  that it builds at `deploy` and `rank` (the attribute lets a compiler for any x86-64 target build it);
- its structure run here with the AVX512-FP16 intrinsics replaced, lane by lane, by C that rounds to f16 as the
  instructions do (`_Float16`): the packing, the panels' indices, the chunks and the epilogue of the very source,
  against the f64 reference on odd sizes, several passes along k and both layouts of B, bit-equal between a
  checked call and a prepared launch;
- the instructions themselves only where this machine's probe lists `avx512_fp16` (skipped with the reason
  elsewhere). The option is offered only on such a card, and never first: only a measurement chooses it.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from emmy_core.codegen.backend import BuildError, get_setting
from emmy_core.codegen.c import CBackend
from emmy_core.codegen.c_build import CBuilt
from emmy_core.codegen.c_micro import FP16_TARGET
from emmy_core.ir.builders import Dim, matmul
from emmy_core.knobs import candidates
from emmy_core.knobs.validity import option_problem
from emmy_core.targets import Card, probe_cpu
from tests.codegen.products import check_silu_product

SPR = Card("Test Xeon SPR AVX-512 x2", "cpu", "x86_64", "", ("avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16"),
           "test card", cores=2, simd_bits=512, l1d_kib=48.0, l2_kib=2048.0)
ZEN4 = dataclasses.replace(SPR, name="Test Zen 4 AVX-512 x2", tensor_cores=("avx512_bf16",))

# The AVX512-FP16 intrinsics the generated source uses, as C over 32 (or 16) lanes of f16 values held in floats:
# each product-and-add rounds once to f16 (the product of two f16 values and a sum with an f16 value are exact in
# double), as vfmadd231ph does.
SHIM = r"""
#include <stdint.h>
#include <string.h>
#include <immintrin.h>
typedef struct { float v[32]; } emsim_h;
typedef struct { float v[16]; } emsim_h16;
static inline float emsim_f(uint16_t b) { _Float16 h; memcpy(&h, &b, 2); return (float)h; }
static inline uint16_t emsim_b(float x) { _Float16 h = (_Float16)x; uint16_t b; memcpy(&b, &h, 2); return b; }
static inline emsim_h emsim_setzero_ph(void) { emsim_h r; memset(&r, 0, sizeof r); return r; }
static inline emsim_h emsim_castsi512_ph(__m512i x) {
  uint16_t b[32]; emsim_h r; memcpy(b, &x, 64);
  for (int i = 0; i < 32; ++i) r.v[i] = emsim_f(b[i]);
  return r;
}
static inline __m512i emsim_castph_si512(emsim_h h) {
  uint16_t b[32]; __m512i x;
  for (int i = 0; i < 32; ++i) b[i] = emsim_b(h.v[i]);
  memcpy(&x, b, 64); return x;
}
static inline emsim_h emsim_fmadd_ph(emsim_h a, emsim_h b, emsim_h c) {
  emsim_h r;
  for (int i = 0; i < 32; ++i) r.v[i] = (float)(_Float16)((double)a.v[i] * (double)b.v[i] + (double)c.v[i]);
  return r;
}
static inline emsim_h16 emsim_castph512_ph256(emsim_h h) { emsim_h16 r; memcpy(r.v, h.v, 64); return r; }
static inline emsim_h16 emsim_castsi256_ph(__m256i x) {
  uint16_t b[16]; emsim_h16 r; memcpy(b, &x, 32);
  for (int i = 0; i < 16; ++i) r.v[i] = emsim_f(b[i]);
  return r;
}
static inline __m512 emsim_cvtxph_ps(emsim_h16 h) { return _mm512_loadu_ps(h.v); }
"""
RENAMES = {"__m512h": "emsim_h", "_mm512_setzero_ph": "emsim_setzero_ph", "_mm512_castsi512_ph": "emsim_castsi512_ph",
           "_mm512_castph_si512": "emsim_castph_si512", "_mm512_fmadd_ph": "emsim_fmadd_ph",
           "_mm512_castph512_ph256": "emsim_castph512_ph256", "_mm256_castsi256_ph": "emsim_castsi256_ph",
           "_mm512_cvtxph_ps": "emsim_cvtxph_ps"}


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CBackend:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("c_fp16_cache")))
        yield CBackend()


def program(bt: bool, epilogue: tuple[str, ...] = ("bias", "silu")):  # type: ignore[no-untyped-def]
    return matmul(Dim("T", 16), Dim("N", 16), Dim("K", 16), dtype="f16", b_transposed=bt, epilogue=epilogue)


def knobs(unroll: int = 8, vec: int = 32, tile_k: int = 64, **over: object) -> dict[str, object]:
    return {"tile_m": 32, "tile_n": 64, "tile_k": tile_k, "vec": vec, "unroll": unroll, "threads": 2, "simd": 512,
            "par_axis": "m", "pack_a": True, "pack_b": True, "prefetch": 0, "prefetch_c": False, "dot": "fp16",
            **over}


def emulated(backend: CBackend, prog, kn: dict[str, object]) -> CBuilt:  # type: ignore[no-untyped-def]
    """The generated source built with the AVX512-FP16 intrinsics replaced by `SHIM`'s emulation."""
    src = backend.source(prog, kn, "deploy")
    assert FP16_TARGET in src
    src = src.replace(FP16_TARGET, "").replace("#include <immintrin.h>", "")
    for name, sim in RENAMES.items():
        assert name in src, name
        src = src.replace(name, sim)
    path = backend.compiler.library(SHIM + src, get_setting("deploy").c_flags, prog.name + "_emulated")
    return CBuilt(prog, path)


def check(built: CBuilt, bt: bool, seed: int) -> None:
    check_silu_product(built, bt, torch.Generator().manual_seed(seed), torch.float16)


def test_the_fp16_path_writes_its_instructions_under_its_target_and_builds_anywhere(backend: CBackend) -> None:
    src = backend.source(program(True), knobs(prefetch=4, prefetch_l2=64), "deploy")
    assert "_mm512_fmadd_ph(em_x, em_b0, em_h0_0)" in src and "_mm512_cvtxph_ps(" in src
    assert FP16_TARGET in src and src.count(FP16_TARGET) == 1  # on em_micro alone
    assert "em_k0 += 16" in src  # f16 sums over 16 steps of k at most
    assert "__builtin_prefetch(em_b + 2048, 0, 2);" in src and "__builtin_prefetch(em_b + 128, 0, 3);" in src
    assert "vfmadd" not in backend.source(program(True), {**knobs(), "dot": "fma", "vec": 16}, "deploy")
    for setting in ("deploy", "rank"):  # built, not run: this machine may not have the instructions
        backend.build(program(False), knobs(4, 64), setting)


def test_the_fp16_path_refuses_what_it_cannot_take(backend: CBackend) -> None:
    with pytest.raises(BuildError, match="f16 A and B"):
        backend.source(matmul(Dim("T", 16), 64, 64, dtype="bf16"), knobs(), "deploy")
    with pytest.raises(BuildError, match="vec a multiple of 32"):
        backend.source(program(True), knobs(vec=16), "deploy")
    with pytest.raises(BuildError, match="pack_a=false"):
        backend.source(program(True), knobs(pack_a=False), "deploy")
    kernel = matmul(Dim("T", 16), 4864, 896, dtype="f16", b_transposed=True)
    assert "avx512_fp16" in (option_problem(kernel, ZEN4, knobs()) or "")
    assert option_problem(kernel, SPR, knobs()) is None
    assert "it would spill" in (option_problem(kernel, SPR, knobs(6, 64)) or "")  # 6 x (4 + 2) + 3 registers
    assert "simd=512" in (option_problem(kernel, SPR, knobs(simd=256)) or "")


def test_fp16_options_follow_the_fma_ones_only_on_a_card_with_the_instruction_and_never_first() -> None:
    for m in (Dim("T", 16), 1, 16, 512):
        kernel = matmul(m, 4864, 896, dtype="f16", b_transposed=True)
        pool = candidates(kernel, SPR)
        fp16 = [i for i, o in enumerate(pool) if o.get("dot") == "fp16"]
        assert fp16 and fp16[0] > 0 and all(option_problem(kernel, SPR, pool[i]) is None for i in fp16)
        assert not any(o.get("dot") == "fp16" for o in candidates(kernel, ZEN4))
        assert all(o.get("dot") != "fp16" for o in candidates(matmul(m, 4864, 896, dtype="bf16"), SPR))


@pytest.mark.parametrize("unroll,vec", [(8, 32), (4, 64), (1, 32)])
def test_the_fp16_paths_structure_equals_the_reference_with_the_instructions_emulated(backend: CBackend, unroll: int,
                                                                                    vec: int) -> None:
    for bt in (True, False):
        for tile_k in (16, 64, 1024):  # passes of one chunk, of several, and one pass of every k
            check(emulated(backend, program(bt), knobs(unroll, vec, tile_k=tile_k)), bt, unroll * vec + tile_k)


def test_the_emulated_chunks_round_to_f16_over_16_products_and_no_more(backend: CBackend) -> None:
    """2048 + 1 + 1 + ... in f16 stays 2048 (the unit in the last place there is 2): the first chunk's fifteen ones
    vanish, each later chunk's sixteen are exact, and the chunks add in f32: 2048 + 3 x 16 = 2096 over 64 steps
    (f32 throughout would give 2111, rounded to 2112; f16 throughout 2048; chunks of 32, 2080)."""
    prog = matmul(Dim("T", 16), 32, Dim("K", 16), dtype="f16", b_transposed=True)
    built = emulated(backend, prog, knobs(1, 32, tile_k=1024))
    k = 64
    a = torch.ones(1, k).half()
    b = torch.ones(32, k).half()
    b[:, 0] = 2048.0
    y = torch.empty(1, 32).half()
    built({"a": a, "b": b, "y": y}, {"T": 1, "K": k})
    assert torch.equal(y, torch.full((1, 32), 2096.0).half())


def test_the_fp16_instructions_equal_the_reference_where_the_machine_has_them(backend: CBackend) -> None:
    have = probe_cpu().tensor_cores
    if "avx512_fp16" not in have:
        pytest.skip(f"this machine's CPU does not list avx512_fp16 (it lists {', '.join(have) or 'none'}): dot=fp16 "
                    "is checked for its text, its build and its structure under emulation here")
    for bt in (True, False):
        for unroll, vec in ((8, 32), (4, 64)):
            check(backend.build(program(bt), knobs(unroll, vec), "deploy"), bt, unroll + vec)
