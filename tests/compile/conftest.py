"""Compile tests share one build cache for the session (a fresh folder: builds are real, and reused)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn


@pytest.fixture(scope="session", autouse=True)
def build_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("compile_build_cache")))
        yield


class Mlp(nn.Module):
    """Two linears around a ReLU and a scale, with a residual: the route's and the tune's smallest product model."""

    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)) * 0.5)
