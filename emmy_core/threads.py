"""How Emmy's OpenMP threads wait: they sleep at once (OMP_WAIT_POLICY=PASSIVE) rather than spin.

Emmy's generated C runs its loops with OpenMP, on the OpenMP runtime torch loaded (torch's libgomp: Emmy's
kernels link it by name, and one process holds one). A thread that finished its share of a parallel region
spins for the next one (GOMP_SPINCOUNT, 300000 turns by default) before it sleeps. Emmy launches a region per
kernel, so on a machine whose cores are taken by other work, each region's threads spin on cores the thread
with work left needs: `bench/threads_under_load.py` measured a tiny Qwen3 on a shared 2-core Xeon at 47.5 ms
where it takes 0.75 ms with PASSIVE (eager torch 12.1 against 1.19 ms), and with one more busy process 75.9
against 0.82 ms; a spin bound of 10000 turns kept 2.7 ms, slower than sleeping.

libgomp reads its policy once, when it loads (with torch), so it is set here, from `import emmy_core`, only
where no OpenMP runtime is loaded yet and the user set neither variable; `EMMY_OMP_WAIT=inherit` keeps the
process's own. Where torch was imported first the policy is libgomp's already: `spinning()` says so, and the
compile warns once (`SpinningThreadsWarning`) with what to do.
"""

from __future__ import annotations

import os
import warnings
from pathlib import Path

POLICY = {"OMP_WAIT_POLICY": "PASSIVE"}
OPT_OUT = "EMMY_OMP_WAIT"  # "inherit": leave the process's OpenMP wait policy as it is
SET_BY_USER = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
_warned: list[bool] = []


class SpinningThreadsWarning(UserWarning):
    """The OpenMP runtime loaded before Emmy could ask its threads to sleep: they spin under load."""


def openmp_loaded(maps: Path = Path("/proc/self/maps")) -> bool:
    """Whether this process already holds an OpenMP runtime (which read its wait policy when it loaded)."""
    try:
        text = maps.read_text()
    except OSError:  # no /proc (not Linux): assume it is, so nothing is set that would not take effect
        return True
    return any(name in text for name in ("libgomp", "libiomp", "libomp"))


def apply_wait_policy() -> bool:
    """Sets OMP_WAIT_POLICY=PASSIVE for the OpenMP runtime torch will load, where that can still take effect
    and the user chose nothing; True when set."""
    if os.environ.get(OPT_OUT) == "inherit" or any(k in os.environ for k in SET_BY_USER) or openmp_loaded():
        return False
    os.environ.update(POLICY)
    return True


def spinning() -> bool:
    """Whether the loaded OpenMP runtime's threads spin after a region (neither a wait policy nor a spin count
    was set before it loaded, and the user did not ask to keep it)."""
    return os.environ.get(OPT_OUT) != "inherit" and not any(k in os.environ for k in SET_BY_USER)


def warn_if_spinning() -> None:
    """Warns once per process where Emmy's threads will spin under load (the compile paths call it)."""
    if _warned or not spinning():
        return
    _warned.append(True)
    warnings.warn(SpinningThreadsWarning(
        "OpenMP loaded (with torch) before emmy_core, so Emmy's threads spin between kernels, which on a busy "
        "machine turns microseconds into milliseconds: import emmy_core before torch, or set "
        "OMP_WAIT_POLICY=PASSIVE in the environment (EMMY_OMP_WAIT=inherit keeps the spinning, unwarned)"),
        stacklevel=3)
