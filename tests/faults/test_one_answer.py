"""#45's compile cases as a new user met them: one answer for one model, whichever way it is compiled.

Each is the reported call, kept here so it stays fixed (the rules behind them are tested in tests/compile/)."""

from __future__ import annotations

import warnings

import torch
from torch import nn

import emmy_core
from emmy_core.compiler import NoGradientsWarning
from emmy_core.compiler.backend import compile_reports, emmy_backend

H = 16


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(H, H)
        self.b = nn.Linear(H, H)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return self.b(torch.relu(torch.cumsum(torch.relu(self.a(x)), dim=1))) * scale


def test_item_6_the_direct_api_takes_keyword_arguments_as_the_model_does() -> None:
    torch.manual_seed(0)
    m = Scaled().eval()
    x = torch.randn(2, 5, H)
    with torch.no_grad():
        torch.testing.assert_close(emmy_core.compile(m, (x,), prior=False, library=False)(x, scale=2.5), m(x, scale=2.5))


def test_item_7_training_through_the_direct_api_changes_the_weights() -> None:
    torch.manual_seed(0)
    m = Scaled().train()
    x = torch.randn(2, 5, H)
    extra = nn.Parameter(torch.ones(3))
    f = emmy_core.compile(m, (x,), prior=False, library=False)
    opt = torch.optim.SGD([*m.parameters(), extra], lr=0.1)
    before = [p.detach().clone() for p in m.parameters()]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoGradientsWarning)
        loss = f(x).pow(2).mean() + extra.pow(2).sum()
    loss.backward()
    assert all(p.grad is not None for p in m.parameters())
    opt.step()
    assert all(not torch.equal(b, p) for b, p in zip(before, m.parameters(), strict=True))


def test_item_9_multihead_attention_hiding_every_key_of_a_row_gives_eagers_nan() -> None:
    torch.manual_seed(0)
    m = nn.MultiheadAttention(H, 2, batch_first=True).eval()
    x = torch.randn(2, 5, H)
    padding = torch.zeros(2, 5, dtype=torch.bool)
    padding[1] = True
    with torch.no_grad():
        want, _ = m(x, x, x, key_padding_mask=padding, need_weights=False)
        got, _ = torch.compile(m, backend=emmy_backend(prior=False, library=False))(x, x, x, key_padding_mask=padding,
                                                                     need_weights=False)
    assert want[1].isnan().all() and torch.equal(got.isnan(), want.isnan())


def test_item_10_in_training_torch_calls_never_exceed_calls() -> None:
    torch.manual_seed(0)
    m = Scaled().train()
    f = emmy_core.compile(m, (torch.randn(2, 5, H),), prior=False, library=False)
    before = len(compile_reports())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoGradientsWarning)
        for _ in range(3):
            f(torch.randn(2, 5, H)).sum().backward()
    reports = compile_reports()[before:]
    assert reports and all(r.torch_calls <= r.calls for r in reports)
    assert any(r.groups >= 2 and r.torch_calls == r.calls == 3 for r in reports)
