"""User models the compile fault tests name on the command line (`--model tests.faults.user_models_for_faults:...`)."""

from __future__ import annotations

import torch
from torch import nn


class RaisesInInit(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        raise RuntimeError("weights file missing")


class NeedsArguments(nn.Module):
    def __init__(self, hidden: int) -> None:
        super().__init__()
        self.lin = nn.Linear(hidden, hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x)
