"""Does sizing the thread team from the run's work (`CPU_GRAIN`) pay, against a team of `threads` always?

For each kernel of the chosen models at each shape and data type, the rule's first option (what an
untuned machine runs; `threads` = every core) is built twice: as the generator now writes it (a
parallel region takes at most work / CPU_GRAIN threads) and with the grain off (the team is always
`threads`, as before). The two run interleaved as prepared launches (`--rounds` rounds); the table
prints the medians and always/grained (above 1: the grain is faster), with the geometric mean per
shape, and the peak memory.

Run: .venv/bin/python bench/grain.py [--models llama_block] [--shapes "B=1,S=8;B=1,S=128;B=8,S=128"]
     [--dtypes f32,f16] [--rounds 41]
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from bench.kernels_cpu import emmy_launch, interleaved, kernel_tensors
from emmy_core.codegen import c_emit
from emmy_core.codegen.c import CBackend
from emmy_core.dtypes import torch_dtype
from emmy_core.graph.pipeline import compile_model
from emmy_core.knobs import candidates
from emmy_core.targets import local_card


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="llama_block")
    ap.add_argument("--shapes", default="B=1,S=8;B=1,S=128;B=8,S=128")
    ap.add_argument("--dtypes", default="f32,f16")
    ap.add_argument("--rounds", type=int, default=41)
    args = ap.parse_args()
    card = local_card()
    load = os.getloadavg()
    print(f"{card.name}: {card.cores} cores; CPU_GRAIN {c_emit.CPU_GRAIN} iterations a thread; load {load[0]:.2f}")
    be = CBackend()
    bits = c_emit.GRAIN_BITS
    for model in args.models.split(","):
        for shape_text in args.shapes.split(";"):
            shape = {k: int(v) for k, v in (p.split("=") for p in shape_text.split(","))}
            for dtype in args.dtypes.split(","):
                lowered = compile_model(model, shape, torch_dtype(dtype))
                print(f"\n== {model} {shape_text} {dtype}")
                print(f"{'kernel':<44} {'sizes':<14} {'always us':>10} {'grained us':>10} {'always/grained':>14}")
                seen: set[tuple[str, str]] = set()
                ratios = []
                for step in lowered.kernels:
                    dyn = step.sizes(shape)
                    key = (step.kernel_id, ",".join(f"{k}={v}" for k, v in sorted(dyn.items())))
                    if key in seen:
                        continue
                    seen.add(key)
                    knobs = dict(candidates(step.program, card)[0])
                    bufs = kernel_tensors(step, dyn, 0)
                    grained = emmy_launch(be, step, knobs, dyn, bufs)
                    c_emit.GRAIN_BITS = 0  # a grain of 1: a team of `threads` whatever the work, as before
                    try:
                        always = emmy_launch(be, step, knobs, dyn, bufs)
                    finally:
                        c_emit.GRAIN_BITS = bits
                    with torch.no_grad():
                        t = interleaved({"always": always, "grained": grained}, args.rounds)
                    ratio = t["always"] / t["grained"]
                    ratios.append(ratio)
                    print(f"{step.program.name[:44]:<44} {key[1][:14]:<14} {t['always']:10.1f} {t['grained']:10.1f} "
                          f"{ratio:14.2f}")
                geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
                print(f"{'geomean':<44} {'':<14} {'':>10} {'':>10} {geo:14.2f}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"\npeak memory {peak:.0f} MB; load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
