"""Files that name the process holding them (the chain's run lock, a fresh import's build folder): whether
that process still runs, so a record left by a killed process can be taken over."""

from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """Whether a process with this PID exists (one of another user counts as alive)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
