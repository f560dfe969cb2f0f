"""Rule of exp in generated C: below -104 (f32) or -746 (f64) it is +0 without calling the vector exp on the
lane (a masked softmax entry sent its whole vector to libmvec's slow scalar path), and everywhere else it
is the library's exp: the same bits as the kernel before the rule, on -inf, finfo.min, NaN, the edge of
the cut and the subnormal range."""

from __future__ import annotations

import math

import pytest
import torch

from emmy_core.codegen.c import CBackend
from emmy_core.ir import parse

EXP = """kernel exp_{t}_Cdyn {{
  axis C = dyn(64)
  in x: {t}[C]
  out y: {t}[C]
  for j in C {{
    y[j] = exp(x[j])
  }}
}}
"""


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CBackend:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("c_exp_cache")))
        yield CBackend()


@pytest.mark.parametrize(("dtype", "cut"), [(torch.float32, -104.0), (torch.float64, -746.0)])
def test_exp_below_the_cut_is_zero_and_exact_elsewhere(backend: CBackend, dtype: torch.dtype, cut: float) -> None:
    t = "f32" if dtype == torch.float32 else "f64"
    prog = parse(EXP.format(t=t))
    src = backend.source(prog, {"vec": 8, "unroll": 1, "threads": 1}, "deploy")
    assert f"em_exp{'f' if t == 'f32' else 'd'}(" in src
    built = backend.build(prog, {"vec": 8, "unroll": 1, "threads": 1}, "deploy")
    tiny = torch.finfo(dtype).tiny
    special = [float("-inf"), torch.finfo(dtype).min, cut - 1e-3 * abs(cut), cut, cut + 0.5, math.log(tiny) - 3.0,
               math.log(tiny) + 1.0, -50.0, -1.0, -0.0, 0.0, 1.5, 80.0, float("inf"), float("nan")]
    g = torch.Generator().manual_seed(0)
    x = torch.cat([torch.tensor(special, dtype=dtype), torch.randn(40, generator=g, dtype=dtype) * 30])
    x = x[torch.randperm(len(x), generator=g)]  # the special lanes sit among ordinary ones in each vector
    y = torch.full_like(x, 7.0)
    built({"x": x, "y": y}, {"C": len(x)})
    below = x < cut
    assert below.sum() >= 3
    assert torch.equal(y[below], torch.zeros_like(y[below]))
    assert not torch.signbit(y[below]).any()
    assert torch.isnan(y[torch.isnan(x)]).all()
    rest = ~below & ~torch.isnan(x)
    # glibc's exp is correctly rounded in the normal range and at most one ulp away in the subnormal one
    torch.testing.assert_close(y[rest], torch.exp(x[rest]), rtol=2 * torch.finfo(dtype).eps, atol=4 * tiny * torch.finfo(dtype).eps)


def test_exp_of_the_last_lanes_above_the_cut_is_not_zero(backend: CBackend) -> None:
    """exp(-103) is a subnormal f32 (about 1.4e-45 * 1.2): the cut must not swallow it."""
    prog = parse(EXP.format(t="f32"))
    built = backend.build(prog, {"vec": 8, "unroll": 1, "threads": 1}, "deploy")
    x = torch.full((16,), -103.0)
    y = torch.empty_like(x)
    built({"x": x, "y": y}, {"C": 16})
    assert (y > 0).all()
    assert torch.equal(y, torch.exp(x.double()).float())
