"""How Emmy's OpenMP threads wait: they sleep at once (OMP_WAIT_POLICY=PASSIVE) rather than spin.

Emmy's generated C runs its loops with OpenMP, on the OpenMP runtime torch loaded (torch's libgomp: Emmy's
kernels link it by name, and one process holds one). A thread that finished its share of a parallel region
spins for the next one (GOMP_SPINCOUNT, 300000 turns by default) before it sleeps. Emmy launches a region per
kernel, so on a machine whose cores other work takes, each region's threads spin on cores the thread with
work left needs: `bench/threads_under_load.py --load torch` (another process running torch's threaded
products) measured a tiny Qwen3 on a 2-core Xeon going from 0.59 to 10.9 ms (18.5x; eager torch 7.3x), and
49 ms (77x; eager 13.6x) on a busier run; with PASSIVE it did not slow (0.5-1.1x, eager 0.8-1.2x). Spinning
10000 turns still went 3.5x (eager 1.4x). What sleeping costs a quiet machine (a thread's wake-up per
region) measured 0.69-1.22 ms against spinning's 0.59-0.75 ms on a shared machine, within its noise.

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
