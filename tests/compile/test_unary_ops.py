"""Rule of the backend's elementwise chains: the unary functions models spell by hand (tanh, sigmoid, sqrt, abs,
log, erf) run on Emmy, fused into the chain, in f32 and bf16."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from emmy_core.compiler.backend import GraphReport, compile_reports, emmy_backend

H = 32


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


def _since(before: int) -> list[GraphReport]:
    return compile_reports()[before:]


class Activations(nn.Module):
    """GPT-2's tanh GELU written out, a sigmoid gate, and the unary functions models spell by hand."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(H, H)
        self.b = nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.a(x)
        g = 0.5 * h * (1.0 + torch.tanh(0.7978845608 * (h + 0.044715 * torch.pow(h, 3.0))))
        s = h * torch.sigmoid(h) + torch.log(torch.abs(h) + 1.0) + torch.sqrt(torch.abs(h)) + torch.erf(h)
        return self.b(g + s.tanh() + F.sigmoid(h))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_tanh_sigmoid_sqrt_abs_log_and_erf_run_on_emmy(dtype: torch.dtype) -> None:
    """They were torch's ("Emmy has no kernel for it": tanh in 15 of 87 real models, sigmoid in 6), splitting
    the elementwise chains around them, though the elementwise language and both code generators had them."""
    torch.manual_seed(0)
    module = Activations().eval().to(dtype)
    before = len(compile_reports())
    with torch.no_grad():
        compiled = torch.compile(module, backend=emmy_backend(defer=False, prior=False, library=False), dynamic=True)
        for s in (7, 1, 33):
            x = torch.randn(2, s, H).to(dtype)
            tol = 1e-5 if dtype == torch.float32 else 3e-2
            torch.testing.assert_close(compiled(x), module(x), rtol=tol, atol=tol)
    reports = _since(before)
    assert not [f for r in reports for f in r.fell_back], [f for r in reports for f in r.fell_back]
    assert not [n for r in reports for n in r.notes]
