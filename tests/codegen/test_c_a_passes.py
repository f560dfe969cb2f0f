"""The packed matmul keeps a row block's packed A for every pass along k (`c_matmul.A_PASSES_MAX` passes at
most, in `A_PASSES_BYTES`), so that the next column block reuses them instead of packing them again.

Rule: whatever the number of passes against the regions kept (fewer, as many, more: then a region is packed
again for each pass it serves), whatever the number of column blocks and the axis the threads share, the
product equals the f64 reference; and a region never serves a pass, row block or batch it was not packed for.
"""

from __future__ import annotations

import pytest
import torch

from emmy_core.codegen.c import CBackend
from emmy_core.codegen.c_matmul import A_PASSES_MAX
from emmy_core.ir.builders import Dim, matmul
from emmy_core.targets import probe_cpu

TOL = {"f32": 1e-4, "bf16": 2e-2}


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CBackend:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("c_a_passes_cache")))
        yield CBackend()


def _dots() -> list[tuple[str, str]]:
    out = [("f32", "fma")]
    if "avx512_bf16" in probe_cpu().tensor_cores:
        out.append(("bf16", "dpbf16"))
    return out


@pytest.mark.parametrize("dtype,dot", _dots())
@pytest.mark.parametrize("par", ["m", "n"])
def test_packed_a_kept_per_pass_equals_the_reference(backend: CBackend, dtype: str, dot: str, par: str) -> None:
    simd = 512 if dot == "dpbf16" else (probe_cpu().simd_bits or 128)
    lanes = simd // 32
    knobs = {"tile_m": 16, "tile_n": 2 * lanes, "tile_k": 2, "vec": lanes, "unroll": 4, "threads": 2,
             "simd": simd, "par_axis": par, "pack_a": True, "pack_b": True, "prefetch": 0, "prefetch_c": False,
             "dot": dot}
    prog = matmul(Dim("T", 16), Dim("N", 16), Dim("K", 16), dtype=dtype, b_transposed=True, epilogue=("bias",))
    built = backend.build(prog, knobs, "deploy")
    g = torch.Generator().manual_seed(7)
    td = torch.float32 if dtype == "f32" else torch.bfloat16
    # depths of fewer, exactly as many and more passes than the regions kept; five column blocks; two row blocks
    for m, n, k in ((37, 5 * 2 * lanes - 3, 9), (20, 3 * lanes, 2 * A_PASSES_MAX), (33, 70, 2 * A_PASSES_MAX + 7)):
        a = torch.randn(m, k, generator=g).to(td)
        b = torch.randn(n, k, generator=g).to(td)
        bias = torch.randn(n, generator=g).to(td)
        y = torch.full((m, n), float("nan")).to(td)
        built({"a": a, "b": b, "bias": bias, "y": y}, {"T": m, "N": n, "K": k})
        want = a.double() @ b.double().T + bias.double()
        torch.testing.assert_close(y.double(), want, rtol=TOL[dtype], atol=TOL[dtype], msg=f"{(m, n, k, par)}")
