"""The knob `prefetch_l2` and the rule that streams a few-row product's weights.

- the fma and dpbf16 micro-kernels prefetch their B stream into L2 (`__builtin_prefetch(.., 0, 2)`, prefetcht1)
  `prefetch_l2` k steps ahead, a line at a time, beside `prefetch`'s L1 distance; AMX refuses the knob;
- a prefetch changes no result bit (odd sizes, several passes along k, B in place or packed, a residual);
- a static M of at most 16 rows takes a first option that streams B: one row block, the widest micro-kernel
  whose rows hold all of M (one pass over B where the registers allow), the deepest pass, B prefetched into L2
  8 KiB ahead; more rows take none; a pool whose M may be that small ends with the streaming options.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from emmy_core.codegen.backend import BuildError
from emmy_core.codegen.c import CBackend
from emmy_core.ir.builders import Dim, matmul
from emmy_core.knobs import candidates
from emmy_core.knobs.cpu_matmul import CPU_STREAM_AHEAD, CPU_STREAM_TILE_K
from emmy_core.knobs.validity import option_problem
from emmy_core.targets import Card, probe_cpu

ZEN4 = Card("Test Zen 4 AVX-512 x2", "cpu", "x86_64", "", ("avx512_bf16",), "test card", cores=2, simd_bits=512,
            l1d_kib=32.0, l2_kib=1024.0)
AMX = dataclasses.replace(ZEN4, name="Test Xeon AMX AVX-512 x2",
                          tensor_cores=("avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"))
AVX2 = Card("Test AVX2 x2", "cpu", "x86_64", "", (), "test card", cores=2, simd_bits=256, l1d_kib=32.0,
            l2_kib=512.0)
BASE = {"tile_m": 16, "tile_n": 32, "tile_k": 32, "vec": 16, "unroll": 6, "threads": 2, "simd": 256,
        "par_axis": "n"}


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CBackend:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("c_stream_cache")))
        yield CBackend()


def test_the_micro_kernels_prefetch_the_b_stream_into_l2_a_line_at_a_time() -> None:
    be = CBackend()
    f32 = matmul(Dim("T", 16), 64, 256, dtype="f32", b_transposed=True)
    text = be.source(f32, {**BASE, "simd": 512, "vec": 32, "prefetch": 16, "prefetch_l2": 96}, "deploy")
    assert "__builtin_prefetch(em_b + 96 * 32 + 0, 0, 2);" in text  # two 64-byte lines of a 32-wide f32 row
    assert "__builtin_prefetch(em_b + 96 * 32 + 16, 0, 2);" in text
    assert "__builtin_prefetch(em_b + 16 * 32 + 0, 0, 3);" in text  # prefetch's own L1 distance stays
    assert "B prefetched into L2 96 steps ahead" in text
    assert ", 0, 2);" not in be.source(f32, {**BASE, "simd": 512, "vec": 32}, "deploy")
    bf16 = matmul(Dim("T", 16), 64, 256, dtype="bf16", b_transposed=True)
    dp = be.source(bf16, {**BASE, "simd": 512, "vec": 16, "dot": "dpbf16", "prefetch_l2": 256}, "deploy")
    assert "__builtin_prefetch(em_b + 4096, 0, 2);" in dp  # 256 k steps of a 16-wide bf16 pair panel: 8 KiB
    with pytest.raises(BuildError, match="dot=amx loads whole tiles"):
        be.source(bf16, {**BASE, "simd": 512, "vec": 16, "unroll": 1, "dot": "amx", "prefetch_l2": 64}, "deploy")
    amx = {**BASE, "simd": 512, "vec": 16, "unroll": 1, "tile_k": 64, "dot": "amx", "prefetch_l2": 64}
    assert "dot=amx loads whole tiles" in (option_problem(bf16, AMX, amx) or "")


def test_prefetching_b_into_l2_changes_no_result_bit(backend: CBackend) -> None:
    prog = matmul(Dim("S", 16), 32, Dim("K", 16), dtype="f32", epilogue=("residual",))
    paths = ({"prefetch_l2": 64}, {"prefetch_l2": 1024, "prefetch": 4}, {"prefetch_l2": 3, "pack_b": False})
    builds = [backend.build(prog, {**BASE, **over}, "deploy") for over in ({}, *paths)]
    for s, k in [(1, 1), (7, 45), (29, 70), (16, 300)]:
        g = torch.Generator().manual_seed(s * k)
        a, w, res = torch.randn(s, k, generator=g), torch.randn(k, 32, generator=g), torch.randn(s, 32, generator=g)
        outs = []
        for built in builds:
            y = torch.full((s, 32), float("nan"))
            built({"a": a, "b": w, "residual": res, "y": y}, {"S": s, "K": k})
            outs.append(y)
        torch.testing.assert_close(outs[0].double(), a.double() @ w.double() + res.double(), rtol=1e-4, atol=1e-4)
        for over, y in zip(paths, outs[1:], strict=True):
            assert torch.equal(y, outs[0]), (over, (s, k))


def test_the_dpbf16_kernel_prefetching_b_into_l2_changes_no_result_bit(backend: CBackend) -> None:
    if "avx512_bf16" not in probe_cpu().tensor_cores:
        pytest.skip("this machine's CPU does not list avx512_bf16: dot=dpbf16 is only checked for its text here")
    prog = matmul(Dim("T", 16), 96, Dim("K", 16), dtype="bf16", b_transposed=True)
    kn = {**BASE, "simd": 512, "vec": 16, "unroll": 16, "tile_k": 64, "dot": "dpbf16"}
    plain, far = (backend.build(prog, {**kn, **over}, "deploy") for over in ({}, {"prefetch_l2": 256}))
    for m, k in [(1, 3), (16, 200), (13, 64)]:
        g = torch.Generator().manual_seed(m + k)
        a, b = torch.randn(m, k, generator=g).bfloat16(), torch.randn(96, k, generator=g).bfloat16()
        ys = [torch.full((m, 96), float("nan")).bfloat16() for _ in range(2)]
        plain({"a": a, "b": b, "y": ys[0]}, {"T": m, "K": k})
        far({"a": a, "b": b, "y": ys[1]}, {"T": m, "K": k})
        assert torch.equal(ys[0], ys[1])
        torch.testing.assert_close(ys[0].double(), a.double() @ b.double().T, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("m", [1, 4, 8, 16])
def test_a_few_row_product_streams_its_weights_in_one_pass(m: int) -> None:
    """The first option of a static M of at most 16 rows: one row block whose micro-kernel holds every row
    (on 32 registers), all of K up to 8192 in one pass, N shared among the threads, B prefetched into L2
    8 KiB ahead; on vdpbf16ps for bf16 where the card has it, on AMX tiles (no stream prefetch) with AMX."""
    for dtype, card in (("f32", ZEN4), ("bf16", ZEN4), ("bf16", AMX)):
        first = candidates(matmul(m, 5632, 2048, dtype=dtype, b_transposed=True), card)[0]
        if first.get("dot") == "amx":
            assert "prefetch_l2" not in first
            continue
        assert first["unroll"] >= m and first["tile_m"] == m and first["par_axis"] == "n"
        assert first["tile_k"] == 2048 and first["prefetch_l2"] * first["vec"] * (4 if dtype == "f32" else 2) \
            == CPU_STREAM_AHEAD
        assert first.get("dot", "fma") == ("dpbf16" if dtype == "bf16" else "fma")
    deep = candidates(matmul(16, 2048, 5632, dtype="f32", b_transposed=True), ZEN4)[0]
    assert deep["tile_k"] >= 5632  # one pass: 16 rows of A packed over 5632 steps fit half of a 1 MiB L2
    avx2 = candidates(matmul(16, 5632, 2048, dtype="f32", b_transposed=True), AVX2)[0]
    assert "prefetch_l2" in avx2 and avx2["simd"] == 256  # 16 registers hold no 16-row micro-kernel: the rule's


def test_more_rows_take_no_streaming_option_and_a_dynamic_m_offers_them_last() -> None:
    for m in (17, 64, 512):
        pool = candidates(matmul(m, 5632, 2048, dtype="f32", b_transposed=True), ZEN4)
        assert not any("prefetch_l2" in o for o in pool)
    for dtype in ("f32", "bf16"):
        kernel = matmul(Dim("T", 16), 5632, 2048, dtype=dtype, b_transposed=True)
        pool = candidates(kernel, ZEN4)
        assert "prefetch_l2" not in pool[0]
        streaming = [i for i, o in enumerate(pool) if "prefetch_l2" in o]
        assert streaming and streaming == list(range(len(pool) - len(streaming), len(pool)))
        assert {o.get("dot", "fma") for o in pool if "prefetch_l2" in o} == (
            {"fma", "dpbf16"} if dtype == "bf16" else {"fma"})
        assert all(option_problem(kernel, ZEN4, o) is None for o in pool if "prefetch_l2" in o)
        rows = {(o["unroll"], o["vec"]) for o in pool if "prefetch_l2" in o and o.get("dot", "fma") == "fma"}
        assert rows == {(16, 16), (8, 32), (4, 64), (2, 64), (1, 64)}  # one pass over B at 16, 8, 4, 2 or 1 rows
    scores = matmul(Dim("S", 16), Dim("S2", 16), 64, dtype="f32", batch=(Dim("B", 1), 4))  # q @ k^T: no weight
    assert not any("prefetch_l2" in o for o in candidates(scores, ZEN4))


def test_a_streaming_pass_is_as_deep_as_half_the_l2_holds_the_rows_of_a() -> None:
    """All of K in one pass where the packed rows of A (f32) fit half the L2, else the deepest power of two that
    does: a second pass reads and writes every output tile again, and the rows of A are read once per panel."""
    small = dataclasses.replace(ZEN4, name="Test small L2", l2_kib=256.0)  # 128 KiB for 16 rows: 2048 deep
    for card, m, k, want in ((ZEN4, 16, 5632, 8192), (ZEN4, 16, 896, 1024), (small, 16, 5632, 2048),
                             (small, 4, 5632, 8192), (ZEN4, 1, 16384, CPU_STREAM_TILE_K)):
        picks = [candidates(matmul(m, 2048, k, dtype="f32", b_transposed=True), card)[0]]
        if m == 16:  # a dynamic M's streaming options are for up to 16 rows
            picks += [o for o in candidates(matmul(Dim("T", m), 2048, k, dtype="f32", b_transposed=True), card)
                      if "prefetch_l2" in o]
        for pick in picks:
            assert pick["tile_k"] == want, (card.name, m, k, pick)
