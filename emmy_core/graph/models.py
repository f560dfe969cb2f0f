"""Reference models built in the repository: the serving matrix compiles these by name.

`llama_block` is a Llama-style decoder block (RMSNorm, q/k/v projections, attention
with softmax and no mask, output projection, SwiGLU MLP, two residual adds); its
first norm is `nn.RMSNorm` and its second the decomposed form
`x * rsqrt(mean(x*x, -1) + eps) * w`, so both spellings are exercised. `llama_stack`
is four such blocks. `mlp` is LayerNorm -> Linear+GELU -> Linear + residual.
`decoder_896`, `decoder_2048` and `decoder_4096` are that block at the sizes of real decoders (hidden
896, 2048 and 4096 with 14, 32 and 32 heads, MLPs of 2816, 5632 and 11008: Qwen2-0.5B-, TinyLlama- and
Llama-2-7B-like), so that the serving matrix holds products as large as a deployed model's instead of
leaving the prior to extrapolate there. Their key and value projections are as wide as the query's
(multi-head attention, as Llama-2-7B has): a grouped-query decoder's narrower ones would need a product
that broadcasts a key/value head over its query heads, which the reference graph does not express.
Inputs are `(B, S, hidden)`; `B` and `S` are the dynamic axes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from functools import partial

import torch
import torch.nn.functional as F
from torch import nn

from emmy_core.graph.errors import GraphError

HIDDEN = 256
HEADS = 4
FFN = 688
MLP_FFN = 1024
STACK_LAYERS = 4


class DecomposedRMSNorm(nn.Module):
    """RMSNorm written out, as Llama's reference code spells it."""

    def __init__(self, hidden: int, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(hidden))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class LlamaBlock(nn.Module):
    def __init__(self, hidden: int = HIDDEN, heads: int = HEADS, ffn: int = FFN, eps: float = 1e-5) -> None:
        super().__init__()
        self.heads, self.head_dim = heads, hidden // heads
        self.attn_norm = nn.RMSNorm(hidden, eps=eps)
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        self.mlp_norm = DecomposedRMSNorm(hidden, eps=eps)
        self.gate_proj = nn.Linear(hidden, ffn, bias=False)
        self.up_proj = nn.Linear(hidden, ffn, bias=False)
        self.down_proj = nn.Linear(ffn, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, hidden = x.shape
        h = self.attn_norm(x)
        q = self.q_proj(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(h).view(b, s, self.heads, self.head_dim).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) * (1.0 / math.sqrt(self.head_dim))
        attn = torch.softmax(scores, dim=-1) @ v
        x = x + self.o_proj(attn.transpose(1, 2).reshape(b, s, hidden))
        h = self.mlp_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class LlamaStack(nn.Module):
    def __init__(self, layers: int = STACK_LAYERS) -> None:
        super().__init__()
        self.layers = nn.ModuleList(LlamaBlock() for _ in range(layers))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = layer(x)
        return x


class MLP(nn.Module):
    def __init__(self, hidden: int = HIDDEN, ffn: int = MLP_FFN) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.fc1 = nn.Linear(hidden, ffn)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(ffn, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(self.act(self.fc1(self.norm(x))))


# name -> (builder, hidden size of its input, its MLP's width)
_BUILDERS: dict[str, tuple[Callable[[], nn.Module], int, int]] = {
    "llama_block": (LlamaBlock, HIDDEN, FFN),
    "llama_stack": (LlamaStack, HIDDEN, FFN),
    "mlp": (MLP, HIDDEN, MLP_FFN),
    "decoder_896": (partial(LlamaBlock, hidden=896, heads=14, ffn=2816), 896, 2816),
    "decoder_2048": (partial(LlamaBlock, hidden=2048, heads=32, ffn=5632), 2048, 5632),
    "decoder_4096": (partial(LlamaBlock, hidden=4096, heads=32, ffn=11008), 4096, 11008),
}
MODEL_NAMES = tuple(sorted(_BUILDERS))

InputsFn = Callable[[Mapping[str, int]], tuple[torch.Tensor, ...]]


def model_sizes(name: str) -> tuple[int, int]:
    """The model's hidden size and its MLP's width, without building it (a real decoder's weights are GBs)."""
    if name not in _BUILDERS:
        raise GraphError(f"unknown model {name!r}; known models: {', '.join(MODEL_NAMES)}")
    return _BUILDERS[name][1], _BUILDERS[name][2]


def _perturb_norms(module: nn.Module, gen: torch.Generator) -> None:
    """Norm weights start at one; move them off it so a dropped weight shows up in a comparison."""
    for m in module.modules():
        if isinstance(m, nn.RMSNorm | nn.LayerNorm | DecomposedRMSNorm):
            with torch.no_grad():
                m.weight.add_(0.1 * torch.randn(m.weight.shape, generator=gen))
                if getattr(m, "bias", None) is not None:
                    m.bias.add_(0.1 * torch.randn(m.bias.shape, generator=gen))


def build_model(name: str, dtype: torch.dtype = torch.float32, seed: int = 0) -> tuple[nn.Module, InputsFn]:
    """The model `name` (eval mode, deterministic weights) and a function of a shape giving example inputs."""
    if name not in _BUILDERS:
        raise GraphError(f"unknown model {name!r}; known models: {', '.join(MODEL_NAMES)}")
    torch.manual_seed(seed)
    build, hidden, _ffn = _BUILDERS[name]
    module = build()
    _perturb_norms(module, torch.Generator().manual_seed(seed + 1))
    module = module.to(dtype).eval()

    def example_inputs(shape: Mapping[str, int]) -> tuple[torch.Tensor, ...]:
        unknown = sorted(set(shape) - {"B", "S"})
        if unknown or not {"B", "S"} <= set(shape):
            raise GraphError(f"model {name} takes a shape with exactly B and S, got {dict(shape)}")
        gen = torch.Generator().manual_seed(seed + 2)
        return (torch.randn(shape["B"], shape["S"], hidden, generator=gen).to(dtype),)

    return module, example_inputs
