"""The peak resident memory of this process alone, for a bench step run as a child process.

`getrusage(RUSAGE_SELF).ru_maxrss` in a child started by `subprocess` carries its parent's peak across `exec`
on Linux, so a step would report at least what the orchestrating parent once held. `VmHWM` belongs to the
process's own address space, which `exec` replaces. Where `/proc` is absent, `ru_maxrss` is the answer there is.
"""

from __future__ import annotations

import resource
from pathlib import Path


def own_peak_mb() -> float:
    """This process's own peak resident memory in MiB (VmHWM; ru_maxrss where /proc is absent)."""
    status = Path("/proc/self/status")
    if status.is_file():
        for line in status.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
