"""The bf16 matmul's dot-product paths (knob `dot`): AVX512-BF16 pairs (`dpbf16`) and AMX tiles (`amx`).

The generated text of each path is checked everywhere (the instructions, the guards that refuse a build
for another target, the OS permission AMX asks for). Each path also builds at `deploy` and runs against
the f64 reference within the bf16 tolerance, on odd sizes, several passes along k, both layouts of B and
an epilogue, checked and prepared launches alike, at `rank` (the baseline target: the kernels carry their
instruction set as a function attribute) as at `deploy`; that part runs only where this machine's probe lists
the instruction (`Card.tensor_cores`), and is skipped with the reason elsewhere.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from emmy_core.codegen.backend import BuildError
from emmy_core.codegen.c import CBackend
from emmy_core.graph.decisions import split_k
from emmy_core.ir.builders import Dim, matmul
from emmy_core.knobs.validity import option_problem
from emmy_core.targets import probe_cpu
from tests.codegen.products import TOL, check_silu_product

NEEDS = {"dpbf16": "avx512_bf16", "amx": "amx_bf16"}
# (dot, unroll, vec): the micro-kernels each path offers (amx: `unroll` counts 16-row tiles)
SHAPES = [("dpbf16", 8, 32), ("dpbf16", 4, 64), ("dpbf16", 14, 16), ("amx", 2, 32), ("amx", 1, 16),
          ("amx", 2, 16), ("amx", 1, 32)]


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CBackend:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("c_dot_cache")))
        yield CBackend()


def program(bt: bool, epilogue: tuple[str, ...] = ("bias", "silu")):  # type: ignore[no-untyped-def]
    return matmul(Dim("T", 16), Dim("N", 16), Dim("K", 16), dtype="bf16", b_transposed=bt, epilogue=epilogue)


def knobs(dot: str, unroll: int, vec: int, tile_k: int = 32, **over: object) -> dict[str, object]:
    return {"tile_m": 32, "tile_n": 64, "tile_k": tile_k, "vec": vec, "unroll": unroll, "threads": 2, "simd": 512,
            "par_axis": "m", "pack_a": True, "pack_b": True, "prefetch": 0, "prefetch_c": False, "dot": dot, **over}


def needs(dot: str) -> None:
    have = probe_cpu().tensor_cores
    if NEEDS[dot] not in have:
        pytest.skip(f"this machine's CPU does not list {NEEDS[dot]} (it lists {', '.join(have) or 'none'}): "
                    f"dot={dot} is only checked for its generated text here")


def test_each_path_writes_its_instructions_with_its_target_on_the_functions_that_use_them() -> None:
    be = CBackend()
    fma = be.source(program(True), knobs("fma", 8, 32), "deploy")
    dp = be.source(program(True), knobs("dpbf16", 8, 32, prefetch=8), "deploy")
    amx = be.source(program(True), knobs("amx", 2, 32), "deploy")
    assert "dpbf16" not in fma and "_tile_" not in fma and "arch_prctl" not in fma
    assert "_mm512_dpbf16_ps" in dp and '__attribute__((target("avx512f,avx512bf16")))' in dp
    assert "__builtin_prefetch(em_b + " in dp  # the B pair stream, prefetch steps ahead
    assert "_tile_dpbf16ps(0, 4, 6);" in amx and "_tile_dpbf16ps(3, 5, 7);" in amx  # 2 x 2 C tiles
    assert "_tile_loadconfig(em_cfg);" in amx and "_tile_release();" in amx
    # the configuration's 64 bytes all reach ldtilecfg (its asm names 8 of them: -O1 dropped the rest's zeros)
    assert '__asm__ volatile("" : : "r"(em_cfg) : "memory");' in amx
    assert "syscall(SYS_arch_prctl, 0x1023, 18)" in amx  # ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA
    assert amx.count('__attribute__((target("amx-tile,amx-bf16")))') == 3  # start, end, micro-kernel
    one = be.source(program(False), knobs("amx", 1, 16), "deploy")
    assert "_tile_dpbf16ps(0, 1, 2);" in one and "_tile_dpbf16ps(1" not in one


@pytest.mark.parametrize("dot", ["dpbf16", "amx"])
def test_the_generator_refuses_what_the_path_cannot_take(dot: str) -> None:
    be = CBackend()
    f32 = matmul(Dim("T", 16), 64, 64, dtype="f32")
    with pytest.raises(BuildError, match="bf16 A and B"):
        be.source(f32, knobs(dot, 1, 16), "deploy")
    with pytest.raises(BuildError, match="pack_a=false"):  # the in-place check refuses it first
        be.source(program(True), knobs(dot, 1, 16, pack_a=False), "deploy")
    with pytest.raises(BuildError, match="tile_k a multiple"):  # a dynamic depth in passes the layout cannot take
        be.source(program(True), knobs(dot, 1, 16, tile_k=1), "deploy")
    assert "em_micro" in be.source(matmul(8, 64, 1, dtype="bf16"), knobs(dot, 1, 16, tile_k=1), "deploy")


@pytest.mark.parametrize("dot,unroll,vec", SHAPES)
def test_each_micro_kernel_equals_the_reference_on_odd_sizes(backend: CBackend, dot: str, unroll: int,
                                                           vec: int) -> None:
    needs(dot)
    g = torch.Generator().manual_seed(unroll * vec)
    for bt in (True, False):
        prog = program(bt)
        built = backend.build(prog, knobs(dot, unroll, vec), "deploy" if bt else "rank")
        check_silu_product(built, bt, g, torch.bfloat16)


@pytest.mark.parametrize("dot", ["dpbf16", "amx"])
def test_a_static_product_at_real_sizes_with_a_residual_and_one_thread(backend: CBackend, dot: str) -> None:
    needs(dot)
    prog = matmul(Dim("T", 16), 896, 1000, dtype="bf16", b_transposed=True, epilogue=("residual",))
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(70, 1000, generator=g).bfloat16(), torch.randn(896, 1000, generator=g).bfloat16()
    res = torch.randn(70, 896, generator=g).bfloat16()
    want = a.double() @ b.double().T + res.double()
    for over in ({"tile_k": 256, "threads": 1}, {"tile_k": 1024, "par_axis": "n", "tile_n": 256}):
        y = torch.empty(70, 896, dtype=torch.bfloat16)
        unroll, vec = (2, 32) if dot == "amx" else (8, 32)
        backend.build(prog, knobs(dot, unroll, vec, **over), "deploy")({"a": a, "b": b, "residual": res, "y": y},
                                                                       {"T": 70})
        torch.testing.assert_close(y.double(), want, rtol=TOL, atol=0.25)  # |y| reaches ~100: 8 bits of it


@pytest.mark.parametrize("dot", ["dpbf16", "amx"])
def test_a_split_k_part_takes_the_dot_path_where_its_windows_start_on_the_packed_depth(backend: CBackend,
                                                                                       dot: str) -> None:
    """A split-K part reads B from a window's start: where every start falls on the packed depth's boundary (a
    pair, a tile's 32), the dot path takes it and each part's sums equal the reference over its window; where
    one would not, the option is refused by name, by the validity check and by the generator alike."""
    step = 32 if dot == "amx" else 2
    unroll, vec = (1, 16) if dot == "amx" else (4, 32)
    odd = split_k(matmul(Dim("T", 16), 64, 3 * step + 3, dtype="bf16", b_transposed=True), 3).pieces[0]
    kn = knobs(dot, unroll, vec, tile_k=step)
    card = dataclasses.replace(probe_cpu(), tensor_cores=("avx512_bf16", "amx_tile", "amx_bf16"))
    assert "multiple of" in (option_problem(odd, card, kn) or "")
    with pytest.raises(BuildError, match="multiple of"):
        backend.source(odd, kn, "deploy")
    needs(dot)
    part = split_k(matmul(Dim("T", 16), 70, 6 * step, dtype="bf16", b_transposed=True), 3).pieces[0]
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(29, 6 * step, generator=g).bfloat16(), torch.randn(70, 6 * step, generator=g).bfloat16()
    out = next(x.name for x in part.outputs)
    got = torch.full((3, 29, 70), float("nan"))
    backend.build(part, knobs(dot, unroll, vec, tile_k=step), "deploy")({"a": a, "b": b, out: got}, {"T": 29})
    for p in range(3):
        w = slice(2 * step * p, 2 * step * (p + 1))
        torch.testing.assert_close(got[p].double(), a[:, w].double() @ b[:, w].double().T, rtol=1e-5, atol=1e-5)
