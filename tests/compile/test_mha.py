"""`nn.MultiheadAttention` through the emmy backend: its functional form, one node to Dynamo, is rewritten as the
projections and attention Emmy lowers (`emmy_core.graph.mha`), and matches eager for self- and cross-attention,
masks, weights asked for or not; where it is not rewritten, the report names it and says why."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

from emmy_core.compiler.backend import compile_reports, emmy_backend

E = 32


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


def _case(kind: str, m: nn.MultiheadAttention, batch: int, length: int) -> tuple[tuple[torch.Tensor, ...], dict[str, Any]]:
    def t(seq: int, width: int = E) -> torch.Tensor:
        return torch.randn(batch, seq, width) if m.batch_first else torch.randn(seq, batch, width)

    x = t(length)
    if kind == "self, causal, weights per head":
        return (x, x, x), {"attn_mask": torch.ones(length, length, dtype=torch.bool).triu(1), "is_causal": True,
                           "average_attn_weights": False}
    if kind == "cross, padding, no weights":
        memory = t(length + 2)
        padding = torch.rand(batch, length + 2) < 0.3
        padding[:, 0] = False
        return (x, memory, memory), {"key_padding_mask": padding, "need_weights": False}
    return (x, t(length + 1, 16), t(length + 1, 24)), {}  # separate key and value widths


@pytest.mark.parametrize(("kind", "batch_first"), [("self, causal, weights per head", True),
                                                   ("cross, padding, no weights", False),
                                                   ("key and value widths of their own", True)])
def test_multihead_attention_runs_its_projections_on_emmy_and_matches_eager(kind: str, batch_first: bool) -> None:
    torch.manual_seed(0)
    extra = {"kdim": 16, "vdim": 24} if kind.startswith("key and value") else {}
    m = nn.MultiheadAttention(E, 4, batch_first=batch_first, **extra).eval()
    c = torch.compile(m, backend=emmy_backend(defer=False, prior=False, library=False), dynamic=True)
    before = len(compile_reports())
    with torch.no_grad():
        for batch, length in ((2, 7), (1, 1), (3, 12)):
            args, kwargs = _case(kind, m, batch, length)
            got, want = c(*args, **kwargs), m(*args, **kwargs)
            torch.testing.assert_close(got[0], want[0])
            if want[1] is None:
                assert got[1] is None
            else:
                torch.testing.assert_close(got[1], want[1])
    reports = compile_reports()[before:]
    assert reports
    for r in reports:
        assert "torch.nn.functional.multi_head_attention_forward" not in {f.op for f in r.fell_back}
        assert "torch.linear" not in {f.op for f in r.fell_back}, r.fell_back
        assert r.matmul_flops_on_emmy > 0


def test_multihead_attention_it_does_not_rewrite_is_named_in_the_report_with_its_reason() -> None:
    torch.manual_seed(0)
    m = nn.MultiheadAttention(E, 4, batch_first=True, dropout=0.0).train()  # in training: its dropout is torch's
    c = torch.compile(m, backend=emmy_backend(defer=False, prior=False, library=False), dynamic=True)
    before = len(compile_reports())
    x = torch.randn(2, 5, E)
    with torch.no_grad():
        torch.testing.assert_close(c(x, x, x)[0], m(x, x, x)[0])
    fell = [f for r in compile_reports()[before:] for f in r.fell_back if "multi_head_attention" in f.op]
    assert fell and all("training" in f.reason for f in fell), fell


@pytest.mark.parametrize("attention", ["auto", True])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("batch_first", [True, False])
def test_a_query_whose_every_key_is_padded_gets_eagers_answer_nan_or_zero(batch_first: bool, need_weights: bool,
                                                                           attention: bool | str) -> None:
    """#45 item 9: eager gives NaN on its fast path (self-attention, batch first, no weights asked) and under
    need_weights=True, 0 where it runs scaled_dot_product_attention; Emmy gave 0 on the fast path."""
    torch.manual_seed(0)
    m = nn.MultiheadAttention(E, 2, batch_first=batch_first).eval()
    x = torch.randn(2, 5, E) if batch_first else torch.randn(5, 2, E)
    padding = torch.zeros(2, 5, dtype=torch.bool)
    padding[1] = True  # the second sequence hides every key
    with torch.no_grad():
        want, _ = m(x, x, x, key_padding_mask=padding, need_weights=need_weights)
        compiled = torch.compile(m, backend=emmy_backend(defer=False, prior=False, library=False, attention=attention))
        got, _ = compiled(x, x, x, key_padding_mask=padding, need_weights=need_weights)
    assert torch.equal(got.isnan(), want.isnan())
    torch.testing.assert_close(got.nan_to_num(), want.nan_to_num(), rtol=1e-5, atol=1e-5)
