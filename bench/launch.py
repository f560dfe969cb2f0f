"""What does one kernel launch cost from Python, apart from the kernel?

A one-row f32 rmsnorm (256 wide: the kernel itself is tens of nanoseconds) called three ways, in interleaved
batches of 20,000 calls, the best batch of each: a prepared launch (`Built.prepare`: pointers written once, as a
compiled model's runner calls its kernels), a checked call (every buffer's shape, dtype and device checked, as
`emmy bench` and tests call a build), and the raw ctypes call of the same build with its pointer arrays made
beforehand. The prepared launch over the raw call is what Python adds to each of a compiled model's kernels; a
decode step runs tens of them.

Run: .venv/bin/python bench/launch.py
"""

from __future__ import annotations

import ctypes
import math
import os
import platform
import sys
import time

import torch

from emmy_core.codegen.c import CBackend
from emmy_core.ir.builders import rmsnorm
from emmy_core.targets import local_card
from emmy_core.targets.cpu import probe_isa


def launch_costs(be: CBackend, calls: int = 20000, batches: int = 3) -> dict[str, float]:
    """Microseconds per call of a one-row f32 rmsnorm: prepared, checked, and the raw ctypes call."""
    built = be.build(rmsnorm(256, dtype="f32"), {"vec": 16, "unroll": 1, "threads": 1}, "deploy")
    x, w, y = torch.randn(1, 256), torch.randn(256), torch.empty(1, 256)
    launch = built.prepare({"B": 1}, {"w": w})
    bufs = {"x": x, "y": y}
    ptrs = (ctypes.c_void_p * 4)(x.data_ptr(), w.data_ptr(), y.data_ptr(), None)
    dyn = (ctypes.c_int64 * 1)(1)
    fns = {"prepared": lambda: launch(bufs), "checked": lambda: built({"x": x, "w": w, "y": y}, {"B": 1}),
           "raw ctypes": lambda: built._fn(ptrs, dyn)}
    out: dict[str, float] = {}
    for _ in range(batches):  # interleaved batches; the best batch of each
        for k, f in fns.items():
            t0 = time.perf_counter_ns()
            for _ in range(calls):
                f()
            out[k] = min(out.get(k, math.inf), (time.perf_counter_ns() - t0) / 1e3 / calls)
    return out


def main() -> int:
    card = local_card()
    isa = probe_isa()
    print(f"CPU {card.name} ({platform.machine()}): {isa.simd_bits}-bit SIMD, AVX512-BF16 {isa.avx512bf16}, "
          f"AVX512-FP16 {isa.avx512fp16}, AMX tiles {isa.amx_tile}; torch {torch.__version__}; "
          f"load average {os.getloadavg()[0]:.2f}")
    over = launch_costs(CBackend())
    print(f"launch of a one-row rmsnorm, us per call: prepared {over['prepared']:.2f}, checked "
          f"{over['checked']:.2f}, raw ctypes {over['raw ctypes']:.2f}; Python per prepared launch "
          f"{over['prepared'] - over['raw ctypes']:.2f} us over the raw call")
    return 0


if __name__ == "__main__":
    sys.exit(main())
