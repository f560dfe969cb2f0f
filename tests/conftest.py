"""Test configuration. Triton's interpreter must be chosen before any kernel is defined."""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

from pathlib import Path

import pytest

PEER_DIR = Path(__file__).resolve().parents[1].parent / "shared" / "peer"


@pytest.fixture
def peer_dir() -> Path:
    """The folder of real Kernel Tuner caches beside the project; skips when absent."""
    if not PEER_DIR.is_dir() or not any(PEER_DIR.glob("*.json*")):
        pytest.skip(f"peer data not found at ../shared/peer (looked in {PEER_DIR.name}); skipping")
    return PEER_DIR


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except Exception:  # pragma: no cover - torch is a hard dependency
        has_gpu = False
    if has_gpu:
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU; none on this machine")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
