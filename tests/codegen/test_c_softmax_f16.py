"""Rule of the f16 row passes with F16C: converting inside the max pass and rounding inside the scale pass
gives the bits of the passes as written (`vec` 1), and torch's softmax within rounding, at every row
length the vector loops and their tails see (1, 7, 8, 37, 128), with -0, infinities and a NaN in rows."""

from __future__ import annotations

import pytest
import torch

from emmy_core.codegen.c import CBackend
from emmy_core.ir import parse

SOFTMAX = """kernel softmax_f16_Cdyn {
  axis B = dyn(512)
  axis C = dyn(128)
  in x: f16[B, C]
  out y: f16[B, C]
  for i in B {
    reduce mx: f32 = max(j in C) cast(f32, x[i, j])
    reduce se: f32 = sum(j in C) exp(sub(cast(f32, x[i, j]), mx))
    let inv: f32 = recip(se)
    for j in C {
      y[i, j] = cast(f16, mul(exp(sub(cast(f32, x[i, j]), mx)), inv))
    }
  }
}
"""  # the Llama block's attention softmax, as the model lowers it


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CBackend:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("c_softmax_cache")))
        yield CBackend()


def test_fused_f16_softmax_passes_equal_the_passes_as_written(backend: CBackend) -> None:
    prog = parse(SOFTMAX)
    fused_src = backend.source(prog, {"vec": 8, "unroll": 1, "threads": 2}, "deploy")
    assert "em_h2f_run_max(" in fused_src and "em_scale_f2h_run(" in fused_src
    plain_src = backend.source(prog, {"vec": 1, "unroll": 1, "threads": 2}, "deploy")
    assert "em_h2f_run_max(" not in plain_src and "em_scale_f2h_run(" not in plain_src
    fused = backend.build(prog, {"vec": 8, "unroll": 1, "threads": 2}, "deploy")
    plain = backend.build(prog, {"vec": 1, "unroll": 1, "threads": 2}, "deploy")
    g = torch.Generator().manual_seed(0)
    for cols in (1, 7, 8, 37, 128):
        x = (torch.randn(9, cols, generator=g) * 4).half()
        x[1, 0] = -0.0
        x[2, cols // 2] = float("inf")
        x[3, cols - 1] = float("nan")
        x[4, :] = float("-inf")
        outs = []
        for built in (fused, plain):
            y = torch.full_like(x, float("nan"))
            built({"x": x, "y": y}, {"B": 9, "C": cols})
            outs.append(y)
        assert torch.equal(outs[0].view(torch.int16), outs[1].view(torch.int16)), cols
        want = torch.softmax(x.float(), -1)
        finite = torch.isfinite(x).all(-1)
        torch.testing.assert_close(outs[0][finite].float(), want[finite], rtol=2e-3, atol=1e-3)
