"""Does keeping exp off libmvec's slow range pay: below the cut as 0 (`em_expf`) on masked softmax rows, and a
sigmoid's argument clamped (`em_sigmoidf`) on a SiLU over large entries?

A causal attention softmax (`--heads` x `--seq` rows of `--seq` columns, f32) is built from the softmax
kernel the model lowers, twice: as the generator writes it now (exp of a lane below -104 is 0 without
calling the vector exp on it) and with the call as it was (`expf` on every lane, which sends a vector
holding a masked lane to libmvec's scalar fallback). Both run on causal rows masked with -inf and with
finfo.min (what `transformers` writes) and on unmasked rows, interleaved with torch's softmax; the table
prints the medians, before/now (above 1: the rule pays) and the peak memory.

Then a SiLU-gated product's epilogue, `y = silu(x) * g` over `--heads` x `--seq` rows of 5632 (an MLP's width),
f32, with entries drawn at a spread of 1 (a trained model's) and of 40 (random weights of unit spread: entries past
87, where libmvec's vector exp falls back to scalar code for the whole vector): as the generator writes it now
(`em_sigmoidf`, exp's argument clamped at -20 and past its overflow bound taken as +inf) and as it was (the
sigmoid spelt `1 / (1 + expf(-x))`), beside torch's `F.silu(x) * g`; the results must be the same bits.

Run: .venv/bin/python bench/masked_exp.py [--heads 8] [--seq 128] [--rounds 101]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from emmy_core.codegen.backend import get_setting
from emmy_core.codegen.c import CBackend
from emmy_core.codegen.c_build import CBuilt
from emmy_core.codegen.c_prelude import PRELUDE
from emmy_core.ir import parse

SOFTMAX = """kernel softmax_f32_C{cols} {{
  axis B = dyn(1024)
  axis C = {cols}
  in x: f32[B, C]
  out y: f32[B, C]
  for i in B {{
    reduce mx: f32 = max(j in C) x[i, j]
    reduce se: f32 = sum(j in C) exp(sub(x[i, j], mx))
    let inv: f32 = recip(se)
    for j in C {{
      y[i, j] = mul(exp(sub(x[i, j], mx)), inv)
    }}
  }}
}}
"""

SILU = """kernel silu_gate_f32_C{cols} {{
  axis B = dyn(1024)
  axis C = {cols}
  in x: f32[B, C]
  in g: f32[B, C]
  out y: f32[B, C]
  for i in B {{
    for j in C {{
      y[i, j] = mul(mul(x[i, j], sigmoid(x[i, j])), g[i, j])
    }}
  }}
}}
"""


def interleaved(fns: dict[str, Callable[[], object]], rounds: int) -> dict[str, float]:
    """Median microseconds of each function over `rounds` interleaved rounds, after 3 warm-up rounds."""
    times: dict[str, list[float]] = {k: [] for k in fns}
    for r in range(rounds + 3):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            if r >= 3:
                times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e6 for k, v in times.items()}


def silu_part(be: CBackend, rows: int, rounds: int, threads: int) -> None:
    prog = parse(SILU.format(cols=5632))
    knobs = {"vec": 16, "unroll": 1, "threads": threads}
    now_src = be.source(prog, knobs, "deploy")
    end = now_src.index(PRELUDE) + len(PRELUDE)  # the kernel's own text follows the helpers
    before_src = (now_src[:end] + "static inline float em_spelt_sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }\n"
                  + now_src[end:].replace("em_sigmoidf(", "em_spelt_sigmoidf("))
    assert before_src != now_src, "the SiLU no longer calls em_sigmoidf: this bench measures nothing"
    flags = get_setting("deploy").c_flags
    built = {name: CBuilt(prog, be.compiler.library(src, flags, f"{prog.name} ({name})"))
             for name, src in (("before", before_src), ("now", now_src))}
    print(f"\nSiLU-gated epilogue, {rows} rows of 5632, f32, {threads} threads")
    print(f"  {'entries':<22}{'before us':>11}{'now us':>10}{'torch us':>10}{'before/now':>12}{'torch/now':>11}")
    g = torch.Generator().manual_seed(1)
    gate = torch.randn(rows, 5632, generator=g)
    for spread in (1.0, 40.0):
        x = torch.randn(rows, 5632, generator=g) * spread
        outs = {name: torch.empty_like(x) for name in built}
        launches = {name: b.prepare({"B": rows}) for name, b in built.items()}
        fns: dict[str, Callable[[], object]] = {
            name: (lambda ln=ln, o=outs[name], x=x: ln({"x": x, "g": gate, "y": o})) for name, ln in launches.items()}
        fns["torch"] = lambda x=x: torch.nn.functional.silu(x) * gate
        med = interleaved(fns, rounds)
        assert torch.equal(outs["before"], outs["now"]), f"spread {spread}: the rule changed a result"
        print(f"  {'spread ' + format(spread, 'g'):<22}{med['before']:>11.1f}{med['now']:>10.1f}{med['torch']:>10.1f}"
              f"{med['before'] / med['now']:>12.2f}{med['torch'] / med['now']:>11.2f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=101)
    args = ap.parse_args()
    be = CBackend()
    prog = parse(SOFTMAX.format(cols=args.seq))
    knobs = {"vec": 8, "unroll": 1, "threads": os.cpu_count() or 1}
    now_src = be.source(prog, knobs, "deploy")
    before_src = now_src.replace("em_expf(((", "expf(((")  # the call as it was, on every lane
    assert before_src != now_src, "the softmax no longer calls em_expf: this bench measures nothing"
    flags = get_setting("deploy").c_flags
    built = {name: CBuilt(prog, be.compiler.library(src, flags, f"{prog.name} ({name})"))
             for name, src in (("before", before_src), ("now", now_src))}
    rows = args.heads * args.seq
    causal = torch.ones(args.seq, args.seq, dtype=torch.bool).triu(1).repeat(args.heads, 1)
    g = torch.Generator().manual_seed(0)
    base = torch.randn(rows, args.seq, generator=g)
    print(f"causal softmax, {rows} rows of {args.seq}, f32, {knobs['threads']} threads; load "
          f"{os.getloadavg()[0]:.2f}")
    print(f"  {'rows':<22}{'before us':>11}{'now us':>10}{'torch us':>10}{'before/now':>12}{'torch/now':>11}")
    for label, x in (("masked with -inf", base.masked_fill(causal, float("-inf"))),
                     ("masked with finfo.min", base.masked_fill(causal, torch.finfo(torch.float32).min)),
                     ("unmasked", base)):
        outs = {name: torch.empty_like(x) for name in built}
        launches = {name: b.prepare({"B": rows}) for name, b in built.items()}
        fns = {name: (lambda ln=ln, o=outs[name], x=x: ln({"x": x, "y": o})) for name, ln in launches.items()}
        fns["torch"] = lambda x=x: torch.softmax(x, -1)
        med = interleaved(fns, args.rounds)
        assert torch.equal(outs["before"], outs["now"]), f"{label}: the rule changed a result"
        print(f"  {label:<22}{med['before']:>11.1f}{med['now']:>10.1f}{med['torch']:>10.1f}"
              f"{med['before'] / med['now']:>12.2f}{med['torch'] / med['now']:>11.2f}")
    silu_part(be, args.heads * 16, max(11, args.rounds // 4), knobs["threads"])
    print(f"peak memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
