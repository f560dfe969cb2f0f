"""Rule of the f16 round trip in C: an f32 value rounded to f16 and read back as f32 (the rmsnorm that rounds its
row before the weight, as Hugging Face's f16 LlamaRMSNorm does) is rounded in float arithmetic (`em_f2h2f`, which
vectorises) and gives torch's `x.half().float()` bit for bit: ties to even, f16 subnormals, the edge of overflow,
infinities, -0 and NaN. (The helper equals the integer round trip on all 2^32 floats; checked once offline.)"""

from __future__ import annotations

import pytest
import torch

from emmy_core.codegen.c import CBackend
from emmy_core.ir import parse

ROUND_TRIP = """kernel f16_round_trip {
  axis B = dyn(8)
  axis C = dyn(64)
  in x: f32[B, C]
  out y: f32[B, C]
  for i in B {
    for j in C {
      y[i, j] = cast(f32, cast(f16, x[i, j]))
    }
  }
}
"""


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CBackend:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("c_round_trip_cache")))
        yield CBackend()


def test_an_f32_value_rounded_to_f16_and_back_is_rounded_in_float_arithmetic_with_torchs_bits(
        backend: CBackend) -> None:
    prog = parse(ROUND_TRIP)
    knobs = {"vec": 8, "unroll": 1, "threads": 1}
    src = backend.source(prog, knobs, "deploy")
    assert "em_f2h2f(" in src and "em_f2h(" not in src.split("int emmy_kernel")[1]
    built = backend.build(prog, knobs, "deploy")
    ulp = 2.0 ** -10
    edges = [0.0, -0.0, 1.0, 1 + ulp / 2, 1 + 3 * ulp / 2, -(1 + ulp / 2), 2.0 ** -24, 2.0 ** -25, 3 * 2.0 ** -25,
             2.0 ** -14 - 2.0 ** -25, 1e-30, 1e-45, 65504.0, 65519.99, 65520.0, -65520.0, 1e30,
             float("inf"), float("-inf"), float("nan")]
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.tensor(edges), torch.randn(1000, generator=g) * 3, torch.randn(1000, generator=g) * 1e-5,
                   torch.randn(1000, generator=g) * 3e4]).view(4, -1)
    y = torch.full_like(x, 7.0)
    built({"x": x, "y": y}, {"B": x.shape[0], "C": x.shape[1]})
    want = x.half().float()
    nan = want.isnan()
    assert torch.equal(y.isnan(), nan)
    assert torch.equal(y[~nan].view(torch.int32), want[~nan].view(torch.int32))
