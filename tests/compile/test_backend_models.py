"""Real architectures through `torch.compile(model, backend=emmy)`: equal to eager at sizes never compiled.

Tiny configs built directly (offline, random weights, no hub downloads), Dynamo with dynamic shapes, kernels
built with the cheaper `rank` setting (the same programs and forks; correctness does not need -O3).
Each model is compared with eager at three sequence lengths it was not compiled at (1, and odd
ones), and its coverage says every matrix product of a linear layer ran on an Emmy kernel.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from emmy_core.compiler.backend import GraphReport, compile_reports, emmy_backend

transformers = pytest.importorskip("transformers")

HIDDEN, HEADS, FF = 32, 4, 64
COMPILED_AT, SIZES = 6, (1, 7, 11)


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


def _first(out: object) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if hasattr(out, "last_hidden_state"):
        return out.last_hidden_state  # type: ignore[no-any-return,attr-defined]
    return out[0]  # type: ignore[index,no-any-return]


def _equal_to_eager(module: nn.Module, make: Callable[[int], tuple], rtol: float = 1e-4,
                    sizes: tuple[int, ...] = SIZES, attention: bool | str = "auto") -> list[GraphReport]:
    module.eval()
    before = len(compile_reports())
    # the `rank` setting (-O1): the same kernels and forks as `deploy`, half the C compile time of a test
    compiled = torch.compile(module, backend=emmy_backend(defer=False, prior=False, library=False, setting="rank", attention=attention),
                             dynamic=True)
    with torch.no_grad():
        compiled(*make(COMPILED_AT))
        for s in sizes:
            inputs = make(s)
            got, want = _first(compiled(*inputs)), _first(module(*inputs))
            assert got.shape == want.shape
            torch.testing.assert_close(got, want, rtol=rtol, atol=rtol, msg=lambda m, s=s: f"S={s}: {m}")
    reports = compile_reports()[before:]
    assert reports, "the backend compiled no graph"
    linear_on_torch = [f for r in reports for f in r.fell_back if f.op in ("torch.linear", "torch.addmm")]
    assert not linear_on_torch, linear_on_torch
    assert sum(r.matmul_flops_on_emmy for r in reports) > 0
    return reports


def _llama_config(**kw: object) -> object:
    cfg = transformers.LlamaConfig(hidden_size=HIDDEN, intermediate_size=FF, num_attention_heads=HEADS,
                                   num_key_value_heads=2, num_hidden_layers=2, vocab_size=97,
                                   max_position_embeddings=64, **kw)
    cfg._attn_implementation = "sdpa"
    return cfg


class LlamaLayerWithRope(nn.Module):
    """A Llama decoder layer fed its rotary embeddings, as LlamaModel feeds it."""

    def __init__(self) -> None:
        super().__init__()
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer, LlamaRotaryEmbedding

        cfg = _llama_config()
        self.layer = LlamaDecoderLayer(cfg, 0)
        self.rope = LlamaRotaryEmbedding(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(x.shape[1], device=x.device).unsqueeze(0)
        return _first(self.layer(x, position_embeddings=self.rope(x, pos), attention_mask=None))


def _hidden(batch: int = 2) -> Callable[[int], tuple]:
    def make(s: int) -> tuple:
        return (torch.randn(batch, s, HIDDEN),)

    return make


def test_llama_decoder_layer_with_rope_and_sdpa() -> None:
    torch.manual_seed(0)
    more = (2, 3, 4, 5, 8, 9)  # with the compiled size and SIZES: ten sequence lengths, each checked against eager
    reports = _equal_to_eager(LlamaLayerWithRope(), _hidden(), sizes=SIZES + more, attention=True)
    # recompiles are bounded: S=1 takes its own graph (Dynamo specialises a size of 1, and attention is causal
    # only past one token); the nine other lengths share one graph of symbolic sizes
    assert len(reports) <= 2, [(r.name, r.sizes) for r in reports]
    # causal attention asked of Emmy runs as its matmuls and softmax: every matrix product on Emmy, the mask torch's
    assert sum(r.matmul_flops_on_emmy for r in reports) == sum(r.matmul_flops for r in reports)
    fell = {f.op for r in reports for f in r.fell_back}
    assert not any("scaled_dot_product" in op for op in fell) and any("attention_mask" in op for op in fell)


def test_whole_tiny_llama_model_from_token_ids() -> None:
    torch.manual_seed(0)
    model = transformers.LlamaModel(_llama_config())

    def make(s: int) -> tuple:
        return (torch.randint(0, 97, (2, s)),)

    reports = _equal_to_eager(model, make)
    fell = {f.op: f.reason for r in reports for f in r.fell_back}
    assert "torch.embedding" in fell or any("embedding" in op for op in fell)  # integer ops stay torch's


def test_tiny_llama_generates_eagers_tokens_with_a_kv_cache_its_decode_steps_on_emmy() -> None:
    """f16 greedy generation: a prefill graph, then decode steps whose attention sees a cache one position longer
    each time (its groups see that length only as length + 1); every projection of both graphs runs on Emmy."""
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(_llama_config()).eval().half()
    ids = torch.randint(0, 97, (1, 5), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False)
        before = len(compile_reports())
        model.forward = torch.compile(model.forward, backend=emmy_backend(defer=False, prior=False, library=False, setting="rank"), dynamic=True)
        got = model.generate(ids, max_new_tokens=6, min_new_tokens=6, do_sample=False)
    assert torch.equal(got, want)
    reports = compile_reports()[before:]
    assert len(reports) == 2  # the prefill, and one decode graph for every cache length
    for r in reports:
        linear_on_torch = [f for f in r.fell_back if f.op in ("torch.linear", "torch.addmm")]
        assert not linear_on_torch and r.matmul_flops_on_emmy > 0, (r.name, r.fell_back)


def test_gpt2_block() -> None:
    from transformers.models.gpt2.modeling_gpt2 import GPT2Block

    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_embd=HIDDEN, n_head=HEADS, n_inner=FF, n_layer=1, resid_pdrop=0.0,
                                  attn_pdrop=0.0, embd_pdrop=0.0)
    cfg._attn_implementation = "eager"
    _equal_to_eager(GPT2Block(cfg, layer_idx=0), _hidden())


def test_bert_layer() -> None:
    from transformers.models.bert.modeling_bert import BertLayer

    torch.manual_seed(0)
    cfg = transformers.BertConfig(hidden_size=HIDDEN, num_attention_heads=HEADS, intermediate_size=FF,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    cfg._attn_implementation = "eager"
    _equal_to_eager(BertLayer(cfg), _hidden())


def test_torch_transformer_encoder_layer() -> None:
    """Sequence-first (batch_first=True in inference takes torch's fused native layer, one op Emmy cannot split)."""
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(HIDDEN, HEADS, dim_feedforward=FF, dropout=0.0)

    def make(s: int) -> tuple:
        return (torch.randn(s, 2, HIDDEN),)

    _equal_to_eager(layer, make)



def _ids(s: int) -> tuple:
    return (torch.randint(0, 97, (2, s)),)


def test_deepseek_v3_whose_keys_are_filled_in_place_through_slices() -> None:
    """Its attention builds keys as `k = new_empty(...); k[..., :d].copy_(a); k[..., d:].copy_(b)`: with a group
    spanning those writes the answer was 0.8 off eager, every group's check passing."""
    torch.manual_seed(0)
    cfg = transformers.DeepseekV3Config(
        hidden_size=HIDDEN, intermediate_size=FF, moe_intermediate_size=16, num_attention_heads=HEADS,
        num_key_value_heads=HEADS, num_hidden_layers=2, first_k_dense_replace=1, n_routed_experts=4, n_group=1,
        topk_group=1, num_experts_per_tok=2, n_shared_experts=1, q_lora_rank=16, kv_lora_rank=16,
        qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=8, vocab_size=97, max_position_embeddings=64)
    cfg._attn_implementation = "sdpa"
    _equal_to_eager(transformers.DeepseekV3Model(cfg), _ids)


def test_rwkv_whose_scan_fills_its_output_a_step_at_a_time() -> None:
    """Its CPU attention writes `out[:, t] = ...` per step: the answer was 5 off eager."""
    torch.manual_seed(0)
    cfg = transformers.RwkvConfig(hidden_size=HIDDEN, attention_hidden_size=HIDDEN, intermediate_size=FF,
                                  num_hidden_layers=2, vocab_size=97, context_length=64)
    _equal_to_eager(transformers.RwkvModel(cfg), _ids)


def test_mamba_whose_convolution_takes_its_weight_by_keyword_and_whose_mask_is_built_under_vmap() -> None:
    torch.manual_seed(0)
    cfg = transformers.MambaConfig(hidden_size=HIDDEN, state_size=8, num_hidden_layers=2, vocab_size=97, expand=2,
                                   conv_kernel=4, use_mambapy=False)
    _equal_to_eager(transformers.MambaModel(cfg), _ids)
