"""What the dot-product micro-kernels' tests share: odd sizes, the 16-bit tolerance, and one check of a built
`y = silu(a @ b(.T) + bias)` product against the f64 reference, called directly and again through a prepared
launch (B packed once), which must give the same bits."""

from __future__ import annotations

import torch

from emmy_core.codegen.c_build import CBuilt

SIZES = [(1, 1, 1), (7, 19, 3), (29, 70, 45), (37, 50, 100), (40, 96, 130)]  # (M, N, K)
TOL = 2e-2  # a 16-bit output: half an ulp of 8 bits, the f32 sums' own error far below it


def check_silu_product(built: CBuilt, bt: bool, g: torch.Generator, dtype: torch.dtype) -> None:
    for m, n, k in SIZES:
        a = torch.randn(m, k, generator=g).to(dtype)
        b = torch.randn(*((n, k) if bt else (k, n)), generator=g).to(dtype)
        bias = torch.randn(n, generator=g).to(dtype)
        y = torch.full((m, n), float("nan")).to(dtype)
        built({"a": a, "b": b, "bias": bias, "y": y}, {"T": m, "N": n, "K": k})
        want = torch.nn.functional.silu(a.double() @ (b.double().T if bt else b.double()) + bias.double())
        torch.testing.assert_close(y.double(), want, rtol=TOL, atol=TOL, msg=f"{(m, n, k, bt)}")
        launch = built.prepare({"T": m, "N": n, "K": k}, {"b": b, "bias": bias})  # B packed once
        again = torch.empty_like(y)
        launch({"a": a, "y": again})
        assert torch.equal(again, y)
