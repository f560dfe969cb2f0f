"""The additive mask Emmy's attention decomposition reads: its values, and a causal mask made once per shape."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch._subclasses.fake_tensor import FakeTensorMode

from emmy_core.graph import attention
from emmy_core.graph.attention import attention_mask


def _reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, repeat: int) -> torch.Tensor:
    """softmax(q k^T scale + mask) v, the grouped heads stacked as rows, computed with torch's ops."""
    scale = q.shape[-1] ** -0.5
    rows = q.unflatten(-3, (k.shape[-3], repeat)).flatten(-3, -2)
    return torch.softmax(rows @ k.transpose(-2, -1) * scale + mask, -1) @ v


def test_the_causal_mask_keeps_key_positions_up_to_the_querys_own_in_every_stacked_head() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 2, 5, 8), torch.randn(2, 2, 5, 8)
    m = attention_mask(q, k, None, True, repeat=2)
    assert m.shape == (2, 2, 10, 5) and m.is_contiguous()
    kept = torch.ones(5, 5, dtype=torch.bool).tril()
    for row in range(10):  # row r * 5 + i of a key head is query i of its r-th query head
        assert torch.equal(m[..., row, :] == 0, kept[row % 5].expand(2, 2, 5))
    want = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
    got = _reference(q, k, v, m, 2).unflatten(-2, (2, 5)).flatten(-4, -3)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_a_causal_mask_is_made_once_per_shape_and_a_mask_given_as_a_tensor_at_every_call() -> None:
    q, k = torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8)
    first = attention_mask(q, k, None, True, repeat=2)
    assert attention_mask(torch.randn(1, 4, 6, 8), torch.randn(1, 2, 6, 8), None, True, 2) is first
    assert attention_mask(torch.randn(1, 4, 7, 8), torch.randn(1, 2, 7, 8), None, True, 2) is not first
    with torch.inference_mode():  # kept from inference mode, it is still a plain tensor
        made = attention_mask(torch.randn(3, 4, 6, 8), torch.randn(3, 2, 6, 8), None, True, 2)
    assert not made.is_inference()
    keep = torch.rand(1, 1, 6, 6) > 0.5
    given = attention_mask(q, k, keep, True, repeat=2)
    assert attention_mask(q, k, keep, True, repeat=2) is not given
    torch.testing.assert_close(given, attention_mask(q, k, keep, True, repeat=2))


def test_a_causal_mask_over_the_size_limit_or_of_fake_tensors_is_never_kept(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    q, k = torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8)
    monkeypatch.setattr(attention, "CACHED_MASK_BYTES", 4 * 2 * 6 * 6 - 1)
    assert attention_mask(q, k, None, True) is not attention_mask(q, k, None, True)
    monkeypatch.undo()
    attention._causal_mask.cache_clear()
    with FakeTensorMode() as mode:
        fq, fk = mode.from_tensor(q), mode.from_tensor(k)
        assert attention_mask(fq, fk, None, True).shape == (1, 2, 6, 6)
    assert attention._causal_mask.cache_info().currsize == 0
