"""Rule of exp in generated C: below -104 (f32) or -746 (f64) it is +0 without calling the vector exp on the
lane (a masked softmax entry sent its whole vector to libmvec's slow scalar path), and everywhere else it is the
library's exp: the same bits as the kernel before the rule, on -inf, finfo.min, NaN, the edge of the cut, the
subnormal range and past the overflow bound. Rule of sigmoid: exp's argument is kept off the vector exp's slow
range (clamped at -20 / -40, and +0 where exp(-x) overflows), with the bits of 1 / (1 + exp(-x)) written out."""

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


@pytest.mark.parametrize(("dtype", "bound"), [(torch.float32, float.fromhex("0x1.62e42ep6")),
                                              (torch.float64, float.fromhex("0x1.62e42fefa39efp9"))])
def test_exp_past_the_overflow_bound_is_inf_and_exact_below_it(backend: CBackend, dtype: torch.dtype,
                                                                  bound: float) -> None:
    t = "f32" if dtype == torch.float32 else "f64"
    built = backend.build(parse(EXP.format(t=t)), {"vec": 8, "unroll": 1, "threads": 1}, "deploy")
    below = torch.tensor(bound, dtype=dtype)
    edge = [float(below), float(torch.nextafter(below, torch.tensor(0.0, dtype=dtype))),
            float(torch.nextafter(below, torch.tensor(math.inf, dtype=dtype)))]
    special = [*edge, bound - 0.5, bound - 1.0, bound + 1.0, bound * 1.2, torch.finfo(dtype).max, float("inf"),
               float("nan"), 0.0, -1.0, 3.0]
    g = torch.Generator().manual_seed(1)
    x = torch.cat([torch.tensor(special, dtype=dtype), torch.randn(30, generator=g, dtype=dtype) * bound / 2])
    x = x[torch.randperm(len(x), generator=g)]
    y = torch.full_like(x, 7.0)
    built({"x": x, "y": y}, {"C": len(x)})
    over = x > bound
    assert over.sum() >= 5
    assert torch.isinf(y[over]).all() and (y[over] > 0).all()
    assert torch.isnan(y[torch.isnan(x)]).all()
    rest = ~over & ~torch.isnan(x)
    want = torch.exp(x[rest])
    assert torch.isfinite(want[x[rest] < bound]).all()  # the bound is the library's: below it exp is finite
    torch.testing.assert_close(y[rest], want, rtol=2 * torch.finfo(dtype).eps, atol=0.0)


SIGMOID = """kernel sig_{t}_{name}_Cdyn {{
  axis C = dyn(64)
  in x: {t}[C]
  out y: {t}[C]
  for j in C {{
    y[j] = {expr}
  }}
}}
"""


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sigmoid_keeps_exp_off_its_slow_range_with_the_same_bits(backend: CBackend, dtype: torch.dtype) -> None:
    """sigmoid(x) clamps exp's argument at -20 (f32) or -40 (f64), past which 1 + exp(-x) rounds to 1: its
    results are bit for bit those of 1 / (1 + exp(-x)) written out, on either side of the clamp, where exp would
    take its slow range (past 87 in f32), its cuts, infinities and NaN."""
    t = "f32" if dtype == torch.float32 else "f64"
    one = f"const({t}, 1.0)"
    knobs = {"vec": 8, "unroll": 1, "threads": 1}
    sig = parse(SIGMOID.format(t=t, name="op", expr="sigmoid(x[j])"))
    assert f"em_sigmoid{'f' if t == 'f32' else 'd'}(" in backend.source(sig, knobs, "deploy")
    built = backend.build(sig, knobs, "deploy")
    spelt = backend.build(parse(SIGMOID.format(t=t, name="spelt", expr=f"div({one}, add({one}, exp(neg(x[j]))))")),
                          knobs, "deploy")
    special = [19.0, 20.0, 20.5, 36.0, 41.0, 80.0, 87.5, 88.5, 95.0, 103.0, 105.0, 800.0, -20.0, -87.0, -88.0, -88.8,
               -95.0, -710.0, -800.0, 0.0, -0.0, float("inf"), float("-inf"), float("nan"), torch.finfo(dtype).max,
               torch.finfo(dtype).min]
    g = torch.Generator().manual_seed(2)
    x = torch.cat([torch.tensor(special, dtype=dtype), torch.randn(40, generator=g, dtype=dtype) * 40])
    x = x[torch.randperm(len(x), generator=g)]
    y, want = torch.full_like(x, 7.0), torch.full_like(x, 7.0)
    built({"x": x, "y": y}, {"C": len(x)})
    spelt({"x": x, "y": want}, {"C": len(x)})
    assert torch.equal(y.isnan(), x.isnan())
    assert torch.equal(y[~x.isnan()], want[~x.isnan()])
    torch.testing.assert_close(y, torch.sigmoid(x), rtol=4 * torch.finfo(dtype).eps, atol=0.0, equal_nan=True)
