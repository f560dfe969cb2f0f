"""How much memory a call needs, and whether the device has it: refused before anything is allocated.

A compiled model at a size allocates its buffers once (intermediates, decision scratch) and
its outputs on every call; `check_fits` compares their total with what the device has free
(`MemAvailable` of /proc/meminfo on a CPU, `torch.cuda.mem_get_info` on a GPU) and raises
`TooLarge` naming both byte counts, so a shape that cannot run fails with a sentence, never
with an allocator's traceback half-way through a call.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

HEADROOM = 0.9  # leave a tenth of the free memory to everything else
# buffers this small are not checked: reading /proc/meminfo took 0.23 ms a group, a tenth of what a new prompt
# length of a small model costs, and a machine without 16 MiB free fails in torch's own allocations first
UNCHECKED_BYTES = 16 << 20


class TooLarge(MemoryError):
    """A call whose buffers would not fit in the device's free memory (refused before allocating)."""


def available_bytes(device: Any) -> int | None:
    """Free memory on `device` (a torch.device) in bytes, or None when it cannot be told."""
    if getattr(device, "type", "cpu") == "cuda":
        import torch

        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_AVPHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def check_fits(need: int, device: Any, what: str) -> None:
    """TooLarge unless `need` bytes fit in the device's free memory (with headroom); up to UNCHECKED_BYTES, None."""
    if need <= UNCHECKED_BYTES:
        return
    free = available_bytes(device)
    if free is not None and need > free * HEADROOM:
        raise TooLarge(f"{what} needs {need:,} bytes ({gib(need)}) of buffers on {device}, which has {free:,} bytes "
                       f"({gib(free)}) free; refused before allocating anything")
