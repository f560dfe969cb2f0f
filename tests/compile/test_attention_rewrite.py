"""Attention rewritten as Emmy's kernels where a mask hides a query from every key, or masks by a finite value,
and where one key head is broadcast over every query head.

torch's attention gives 0 for a query that may attend to nothing (a padded query of a left-padded batch); a
softmax over -inf alone gives NaN, and the next layer spreads it over every position of the sequence (0
probability times a NaN value). A finite mask (`finfo.min`, -10000) is added to the scaled scores, never
divided by the scale, where it overflowed to -inf. Multi-query attention written as a key and value of one
head (Falcon's `multi_query`, no `enable_gqa`) is grouped-query attention with one key head. A head count
Dynamo writes as an exact floor division (two sizes given one symbol) is its number.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from emmy_core import compile_reports
from emmy_core.compiler.backend import emmy_backend
from emmy_core.graph.attention import TENSOR_MASK


def _attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def _on_emmy(*args: torch.Tensor) -> torch.Tensor:
    torch._dynamo.reset()
    before = len(compile_reports())
    with torch.no_grad():
        got = torch.compile(_attend, backend=emmy_backend(prior=False, library=False, attention=True))(*args)
    (report,) = compile_reports()[before:]
    assert report.matmul_flops_on_emmy == report.matmul_flops > 0 and not report.notes, report
    return got


def test_a_query_the_mask_hides_from_every_key_gets_zero_as_torchs_attention_gives_it() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 7, 8), torch.randn(2, 2, 7, 8), torch.randn(2, 2, 7, 8)  # 2 query heads a key head
    keep = torch.rand(2, 1, 7, 7) > 0.3
    keep[..., 0] = True
    keep[0, :, 3] = False  # query 3 of the first batch row may attend to nothing
    minus_inf = torch.zeros(7, 7).masked_fill(~keep[1, 0], float("-inf"))
    minus_inf[5] = float("-inf")
    for mask in (keep, minus_inf):
        want = _attend(q, k, v, mask)
        got = _on_emmy(q, k, v, mask)
        assert not got.isnan().any()
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    assert torch.equal(_on_emmy(q, k, v, keep)[0, :, 3], torch.zeros(4, 8))


def test_a_left_padded_batch_of_a_transformers_llama_matches_eager_and_its_padding_spreads_no_nan() -> None:
    import transformers as T

    torch.manual_seed(0)
    cfg = T.LlamaConfig(vocab_size=128, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                        num_attention_heads=4, num_key_value_heads=2, attn_implementation="sdpa")
    model = T.LlamaModel(cfg).eval()
    ids, mask = torch.randint(0, 128, (2, 8)), torch.ones(2, 8, dtype=torch.long)
    mask[0, :3] = 0
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=mask).last_hidden_state
        for attention in (True, "auto"):
            torch._dynamo.reset()
            compiled = torch.compile(model, backend=emmy_backend(prior=False, library=False, attention=attention))
            got = compiled(input_ids=ids, attention_mask=mask).last_hidden_state
            assert not got.isnan().any(), attention
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_a_finite_mask_is_added_to_the_scaled_scores_and_a_row_masked_by_it_throughout_is_torchs() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 64) for _ in range(3))  # scale 1/8: finfo(f32).min / scale overflowed
    keep = torch.ones(6, 6, dtype=torch.bool)
    keep[2] = False
    keep[4, 3:] = False
    for dtype, fill, tol in ((torch.float32, torch.finfo(torch.float32).min, 1e-5), (torch.float16, -10000.0, 2e-3),
                             (torch.bfloat16, -10000.0, 2e-2)):
        args = (q.to(dtype), k.to(dtype), v.to(dtype), torch.where(keep, 0.0, fill).to(dtype))
        want = _attend(*args)
        got = _on_emmy(*args)
        torch.testing.assert_close(got, want, rtol=tol, atol=tol, msg=lambda m, d=dtype: f"{d}: {m}")


def test_attention_auto_leaves_attention_with_a_mask_given_as_a_tensor_to_torchs_fused_kernel() -> None:
    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 6, 8) for _ in range(3))
    keep = torch.rand(6, 6) > 0.3
    torch._dynamo.reset()
    before = len(compile_reports())
    with torch.no_grad():
        got = torch.compile(_attend, backend=emmy_backend(prior=False, library=False))(q, k, v, keep)
    torch.testing.assert_close(got, _attend(q, k, v, keep), rtol=1e-5, atol=1e-5)
    (report,) = compile_reports()[before:]
    assert report.matmul_flops_on_emmy == 0
    assert [f.reason for f in report.fell_back if "scaled_dot_product_attention" in f.op] == [TENSOR_MASK]


def test_one_key_head_broadcast_over_the_query_heads_is_stacked_as_grouped_query_attention() -> None:
    torch.manual_seed(0)
    q, k, v = torch.randn(3, 4, 7, 16), torch.randn(3, 1, 7, 16), torch.randn(3, 1, 7, 16)
    keep = torch.rand(3, 1, 7, 7) > 0.3

    def multi_query(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)  # k and v broadcast, no enable_gqa

    torch._dynamo.reset()
    before = len(compile_reports())
    with torch.no_grad():
        got = torch.compile(multi_query, backend=emmy_backend(prior=False, library=False, attention=True))(q, k, v, keep)
    torch.testing.assert_close(got, multi_query(q, k, v, keep), rtol=1e-5, atol=1e-5)
    (report,) = compile_reports()[before:]
    assert report.matmul_flops_on_emmy == report.matmul_flops > 0 and not report.notes, report


class _Heads(torch.nn.Module):
    """Heads inferred by -1 from a hidden size its weights fix, as `transformers` writes it."""

    def __init__(self) -> None:
        super().__init__()
        self.embed, self.proj = torch.nn.Embedding(50, 64), torch.nn.Linear(64, 64)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        q = self.proj(x).view(*x.shape[:-1], -1, 16).transpose(1, 2)
        return F.scaled_dot_product_attention(q, q, q, is_causal=True)


def test_heads_dynamo_writes_as_an_exact_floor_division_are_read_as_their_number() -> None:
    torch.manual_seed(0)
    model = _Heads().eval()
    ids = torch.randint(0, 50, (8, 8))  # batch equal to length: Dynamo gives both one symbol
    torch._dynamo.reset()
    before = len(compile_reports())
    with torch.no_grad():
        got = torch.compile(model, backend=emmy_backend(prior=False, library=False), dynamic=True)(ids)
        torch.testing.assert_close(got, model(ids), rtol=1e-5, atol=1e-5)
    (report,) = compile_reports()[before:]
    assert not [f for f in report.fell_back if "scaled_dot_product_attention" in f.op], report.fell_back
