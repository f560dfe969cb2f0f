"""Which `transformers` architectures compile through `torch.compile(backend="emmy")`, and how much runs on Emmy?

Each architecture is built at a tiny config with random weights (no downloads), compiled once with
dynamic shapes, and run at four sequence lengths (7, 1, 33 and 40; batch 2, 1, 2 and 2: 40 a new length of
33's size bucket, run on the runner made for it) against eager (token ids, or an image, a waveform or mel bins
where the model reads one).
The table prints, per architecture: whether it ran, the largest error against eager, the graphs
Dynamo handed over, the share of matrix-product FLOPs on Emmy kernels, the ops torch ran, and the
groups handed back to torch (with the first reason); in bf16 or f16, also how far Emmy's answer and eager's
are from the same weights run in f32 (eager's own rounding can be the larger: an expert choice it flips). This is the coverage question of a user
bringing a model no one here wrote; the speed questions are `bench/compile.py`'s. Peak memory at the end.

Run: .venv/bin/python bench/architectures.py [--dtype float32|bfloat16|float16] [--only mistral,gpt2] [--fallback inductor]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch


def _models() -> dict[str, Callable[[], torch.nn.Module]]:
    import transformers as T

    def cfg(cls, **kw):  # type: ignore[no-untyped-def]
        c = cls(**kw)
        c._attn_implementation = "sdpa"
        return c

    small = dict(hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=2,
                 vocab_size=500, max_position_embeddings=256)
    enc = dict(hidden_size=64, num_attention_heads=4, intermediate_size=128, num_hidden_layers=2, vocab_size=500)
    return {
        "llama": lambda: T.LlamaModel(cfg(T.LlamaConfig, num_key_value_heads=2, **small)),
        "mistral": lambda: T.MistralModel(cfg(T.MistralConfig, num_key_value_heads=2, **small)),
        "qwen2": lambda: T.Qwen2Model(cfg(T.Qwen2Config, num_key_value_heads=2, **small)),
        "phi3 (fused qkv)": lambda: T.Phi3Model(cfg(T.Phi3Config, num_key_value_heads=2, pad_token_id=0, **small)),
        "gemma": lambda: T.GemmaModel(cfg(T.GemmaConfig, num_key_value_heads=2, head_dim=16, **small)),
        "gpt_neox": lambda: T.GPTNeoXModel(cfg(T.GPTNeoXConfig, **small)),
        "falcon (fused qkv)": lambda: T.FalconModel(cfg(T.FalconConfig, hidden_size=64, num_attention_heads=4,
                                                        num_hidden_layers=2, vocab_size=500)),
        "opt": lambda: T.OPTModel(cfg(T.OPTConfig, hidden_size=64, ffn_dim=128, num_attention_heads=4,
                                      num_hidden_layers=2, vocab_size=500, word_embed_proj_dim=64,
                                      max_position_embeddings=256)),
        "gpt2": lambda: T.GPT2Model(cfg(T.GPT2Config, n_embd=64, n_head=4, n_layer=2, vocab_size=500,
                                        n_positions=256, bos_token_id=0, eos_token_id=0)),
        "bert": lambda: T.BertModel(cfg(T.BertConfig, **enc)),
        "roberta": lambda: T.RobertaModel(cfg(T.RobertaConfig, **enc)),
        "distilbert": lambda: T.DistilBertModel(cfg(T.DistilBertConfig, dim=64, n_heads=4, hidden_dim=128,
                                                    n_layers=2, vocab_size=500)),
        "t5 encoder": lambda: T.T5EncoderModel(cfg(T.T5Config, d_model=64, d_ff=128, num_heads=4, num_layers=2,
                                                   vocab_size=500, d_kv=16)),
        "vit": lambda: T.ViTModel(cfg(T.ViTConfig, hidden_size=64, num_attention_heads=4, intermediate_size=128,
                                      num_hidden_layers=2, image_size=32, patch_size=8)),
        "mixtral (experts)": lambda: T.MixtralModel(cfg(T.MixtralConfig, num_key_value_heads=2, num_local_experts=4,
                                                        num_experts_per_tok=2, **small)),
        "bart encoder": lambda: T.BartModel(cfg(T.BartConfig, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128,
                                                encoder_attention_heads=4, decoder_attention_heads=4, encoder_layers=2,
                                                decoder_layers=2, vocab_size=500,
                                                max_position_embeddings=256)).get_encoder(),
        "wav2vec2 (conv front)": lambda: T.Wav2Vec2Model(T.Wav2Vec2Config(
            hidden_size=64, intermediate_size=128, num_attention_heads=4, num_hidden_layers=2, conv_dim=(16, 16),
            conv_stride=(5, 2), conv_kernel=(10, 3), num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4)),
        "whisper encoder": lambda: T.WhisperModel(cfg(
            T.WhisperConfig, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128, encoder_attention_heads=4,
            decoder_attention_heads=4, encoder_layers=2, decoder_layers=2, vocab_size=500, num_mel_bins=16,
            max_source_positions=64, max_target_positions=64, pad_token_id=0, bos_token_id=0, eos_token_id=0,
            decoder_start_token_id=0)).get_encoder(),
        "deepseek_v3 (mla, moe)": lambda: T.DeepseekV3Model(cfg(  # keys filled through slices, in place
            T.DeepseekV3Config, hidden_size=64, intermediate_size=128, moe_intermediate_size=32,
            num_attention_heads=4, num_key_value_heads=4, num_hidden_layers=2, first_k_dense_replace=1,
            n_routed_experts=4, n_group=1, topk_group=1, num_experts_per_tok=2, n_shared_experts=1, q_lora_rank=32,
            kv_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, vocab_size=500,
            max_position_embeddings=256)),
        "rwkv (setitem scan)": lambda: T.RwkvModel(T.RwkvConfig(hidden_size=64, attention_hidden_size=64,
                                                               intermediate_size=128, num_hidden_layers=2,
                                                               vocab_size=500, context_length=256)),
        "mamba (vmap mask)": lambda: T.MambaModel(T.MambaConfig(hidden_size=64, state_size=8,
                                                                         num_hidden_layers=2, vocab_size=500,
                                                                         expand=2, conv_kernel=4,
                                                                         use_mambapy=False)),
        "torch MultiheadAttention": lambda: _SelfAttention(),
    }


class _SelfAttention(torch.nn.Module):
    """torch's own `nn.MultiheadAttention` over embedded tokens, its weights asked for (as its default)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(500, 64)
        self.attn = torch.nn.MultiheadAttention(64, 4, batch_first=True)

    def forward(self, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x = self.embed(ids)
        return self.attn(x, x, x)


def _input(name: str, batch: int, seq: int, dtype: torch.dtype) -> torch.Tensor:
    """The input of each architecture: token ids, or an image, a waveform or mel bins of the model's dtype."""
    if name == "vit":
        return torch.randn(batch, 3, 32, 32, dtype=dtype)
    if name.startswith("wav2vec2"):
        return torch.randn(batch, 400 + 16 * seq, dtype=dtype)  # its convolutions' output lengths differ by seq
    if name.startswith("whisper"):
        return torch.randn(batch, 16, 128, dtype=dtype)
    return torch.randint(1, 500, (batch, seq))


def _first(out: object) -> torch.Tensor:
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, tuple | list):
        return _first(out[0])
    return _first(out.last_hidden_state)  # type: ignore[attr-defined]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--only", default="", help="comma list of architecture names (prefixes)")
    ap.add_argument("--fallback", default="eager", choices=["eager", "inductor"],
                    help="how the ops left to torch run (emmy_backend's fallback)")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    import transformers

    transformers.logging.set_verbosity_error()
    from emmy_core.compiler.backend import _GRAPHS, emmy_backend

    dtype = getattr(torch, args.dtype)
    models = _models()
    if args.only:
        models = {k: v for k, v in models.items() if any(k.startswith(w) for w in args.only.split(","))}
    print(f"{len(models)} architectures, {args.dtype}, tiny configs, random weights; load {os.getloadavg()[0]:.2f}")
    print(f"  {'architecture':<26}{'result':<8}{'max err':>9}{'graphs':>7}{'matmul on emmy':>16}  "
          f"torch ran / groups handed back")
    ran = 0
    for name, make in models.items():
        torch.manual_seed(0)
        module = make().eval().to(dtype)
        wide = None
        if dtype != torch.float32:  # the same weights in f32: how far each 16-bit answer is from the exact one
            torch.manual_seed(0)
            wide = make().eval()
        torch._dynamo.reset()
        before = len(_GRAPHS)
        t0 = time.perf_counter()
        try:
            with torch.no_grad():
                # every size settled at its first call (`defer=False`): the answers and the coverage are Emmy's at
                # each length, where the default would leave a new bucket's first call to torch's ops
                compiled = torch.compile(module, backend=emmy_backend(prior=False, fallback=args.fallback,
                                                                      defer=False), dynamic=True)
                err, ours_off, eager_off = 0.0, 0.0, 0.0
                for batch, seq in ((2, 7), (1, 1), (2, 33), (2, 40)):  # 40: 33's bucket, on its runner
                    x = _input(name, batch, seq, dtype)
                    got, want = _first(compiled(x)).float(), _first(module(x)).float()
                    err = max(err, float((got - want).abs().max()))
                    if wide is not None:
                        exact = _first(wide(x.float() if x.is_floating_point() else x)).float()
                        ours_off = max(ours_off, float((got - exact).abs().max()))
                        eager_off = max(eager_off, float((want - exact).abs().max()))
        except Exception as exc:  # the point of the bench: say which architecture fails, and why
            lines = [ln for ln in str(exc).splitlines() if ln.strip()]
            print(f"  {name:<26}{'FAILED':<8} {type(exc).__name__}: {' | '.join(lines[:2])[:240]}")
            continue
        ran += 1
        reports = [st.report() for st in _GRAPHS[before:]]
        on = sum(r.matmul_flops_on_emmy for r in reports)
        total = sum(r.matmul_flops for r in reports)
        fell = sorted({f.op for r in reports for f in r.fell_back})
        notes = [n for r in reports for n in r.notes]
        share = f"{100 * on / total:.0f}%" if total else "-"
        exactness = f"; from f32: emmy {ours_off:.2g}, eager {eager_off:.2g}" if wide is not None else ""
        print(f"  {name:<26}{'ok':<8}{err:>9.2g}{len(reports):>7}{share:>16}  {len(fell)} kinds of op; "
              f"{len(notes)} handed back{': ' + notes[0][:110] if notes else ''}{exactness} "
              f"({time.perf_counter() - t0:.0f} s)")
    print(f"{ran} of {len(models)} ran and matched eager within the error shown; peak memory "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0 if ran == len(models) else 1


if __name__ == "__main__":
    raise SystemExit(main())
