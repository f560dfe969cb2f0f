"""`check_fits`: buffers beyond UNCHECKED_BYTES are refused where the device lacks the memory, naming the bytes;
smaller ones are not checked (no read of the free memory at each new size of a small model)."""

from __future__ import annotations

import pytest
import torch

from emmy_core.compiler import memory
from emmy_core.compiler.memory import UNCHECKED_BYTES, TooLarge, check_fits


def test_small_buffers_are_not_checked_and_large_ones_are(monkeypatch: pytest.MonkeyPatch) -> None:
    reads: list[int] = []
    monkeypatch.setattr(memory, "available_bytes", lambda device: (reads.append(1), 0)[1])
    check_fits(UNCHECKED_BYTES, torch.device("cpu"), "a small group")
    assert not reads
    with pytest.raises(TooLarge, match=f"{UNCHECKED_BYTES + 1:,} bytes"):
        check_fits(UNCHECKED_BYTES + 1, torch.device("cpu"), "a large group")
    assert reads == [1]
