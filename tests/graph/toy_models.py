"""Small models shared by the graph tests (not reference models: those live in emmy_core.graph.models)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class NormEpilogues(nn.Module):
    """Activations and scales after each norm family, and a residual prologue whose sum is reused."""

    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(24)
        self.rms = nn.RMSNorm(24, eps=1e-6)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> tuple[torch.Tensor, ...]:
        h = x + r
        a = F.silu(self.rms(h)) * 0.5
        b = F.gelu(self.ln(x), approximate="tanh")
        c = F.relu(torch.softmax(x * 2.0, dim=-1)) / 4.0
        return a, b, c, h
