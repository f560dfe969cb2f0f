"""Rules of the matmul's operand paths and of code generated for a card other than this machine:

- reading A or B in place, prefetching the streams or the tile's rows changes no result bit (odd sizes,
  M = 1, K = 1, two panels, a batch), and equals the f64 reference;
- the first option generated for a fabricated AVX-512 card is the 512-bit path and compiles for
  AVX-512 (compiled only: this machine may not run it); for an AVX2 card, the 256-bit one.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import torch

from emmy_core.codegen.backend import BuildError
from emmy_core.codegen.c import CBackend
from emmy_core.ir.builders import Dim, matmul
from emmy_core.knobs import candidates
from emmy_core.targets import Card

AVX2 = Card("AVX2 Only Part x2", "cpu", "x86_64", "", (), "test card (Zen 3)", cores=2, simd_bits=256,
            l1d_kib=32.0, l2_kib=512.0)
AVX512 = Card("AVX-512 Part x2", "cpu", "x86_64", "", (), "test card (Zen 4)", cores=2, simd_bits=512,
              l1d_kib=32.0, l2_kib=1024.0)
BASE = {"tile_m": 16, "tile_n": 32, "tile_k": 32, "vec": 16, "unroll": 6, "threads": 2, "simd": 256,
        "par_axis": "m"}
PATHS = ({"pack_a": False}, {"pack_b": False}, {"pack_a": False, "pack_b": False, "prefetch": 16},
         {"prefetch_c": True, "prefetch": 4}, {"pack_a": False, "prefetch_c": True, "threads": 1})


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CBackend:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("c_paths_cache")))
        yield CBackend()


def test_operand_paths_change_no_result_bit(backend: CBackend) -> None:
    """A batched matmul with a residual: N static (32, a multiple of vec) so B may stay in place."""
    prog = matmul(Dim("S", 16), 32, Dim("K", 16), dtype="f32", batch=(Dim("B", 1), 3), epilogue=("residual",))
    builds = [backend.build(prog, {**BASE, **over}, "deploy") for over in ({}, *PATHS)]
    for b, s, k in [(1, 1, 1), (2, 7, 45), (1, 29, 1), (2, 13, 70)]:
        g = torch.Generator().manual_seed(s * k + b)
        a = torch.randn(b, 3, s, k, generator=g)
        w = torch.randn(b, 3, k, 32, generator=g)
        res = torch.randn(b, 3, s, 32, generator=g)
        want = (a.double() @ w.double()) + res.double()
        outs = []
        for built in builds:
            y = torch.full((b, 3, s, 32), float("nan"))
            built({"a": a, "b": w, "residual": res, "y": y}, {"B": b, "S": s, "K": k})
            outs.append(y)
        torch.testing.assert_close(outs[0].double(), want, rtol=1e-4, atol=1e-4)
        for over, y in zip(PATHS, outs[1:], strict=True):
            assert torch.equal(y, outs[0]), (over, (b, s, k))


def test_a_row_major_b_in_place_needs_a_static_n_that_vec_divides(backend: CBackend) -> None:
    with pytest.raises(BuildError, match="static N"):
        backend.source(matmul(Dim("T", 8), 40, 16, dtype="f32"), {**BASE, "pack_b": False}, "deploy")


def _compiles_for(source: str, flags: list[str], tmp: Path) -> None:
    path = tmp / "k.c"
    path.write_text(source, encoding="utf-8")
    done = subprocess.run(["cc", "-O2", *flags, "-fopenmp", "-fPIC", "-c", str(path), "-o", str(tmp / "k.o")],
                          capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr[:2000]


def test_an_avx512_cards_first_option_is_the_512_bit_path_and_compiles_for_it(tmp_path: Path) -> None:
    be = CBackend()
    for prog in (matmul(Dim("T", 64), 256, 256, dtype="f32", b_transposed=True, epilogue=("silu", "mul")),
                 matmul(Dim("S", 128), 64, Dim("K", 128), dtype="f32", batch=(Dim("B", 1), 4))):
        wide, narrow = candidates(prog, AVX512)[0], candidates(prog, AVX2)[0]
        assert wide["simd"] == 512 and narrow["simd"] == 256
        src = be.source(prog, wide, "deploy")
        assert "vector_size(64)" in src and "_mm512_fmadd_ps" in src
        _compiles_for(src, ["-mavx512f", "-mavx512vl", "-mfma", "-mf16c"], tmp_path)
        src2 = be.source(prog, narrow, "deploy")
        assert "vector_size(32)" in src2 and "_mm256_fmadd_ps" in src2 and "6 x 16 f32" in src2
        _compiles_for(src2, ["-mavx2", "-mfma", "-mf16c"], tmp_path)
