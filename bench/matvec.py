"""How fast is a decode step's matrix-vector product through `torch.compile(backend="emmy")`, against eager and Inductor?

A decode step multiplies one row by every weight of the model: it streams the weights from memory once,
so its speed is the bytes it reads per second. This bench chains `--chain` bias-free linears of the
same shape but different weights (more than the caches hold, so each reads from memory, as in a model)
and times one row through them, compiled with Emmy's kernels and with Inductor, beside eager torch,
interleaved in one run (medians), per dtype and (out, in) shape. An f16 or bf16 weight is packed by Emmy
as 16-bit panels (the weights' own bytes); the ratio printed is eager's time over each contender's, with
the bandwidth each reached; peak memory at the end.

Run: .venv/bin/python bench/matvec.py [--shapes 2816x1024,4096x4096] [--dtypes f32,f16,bf16] [--chain 8] [--repeats 30]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from emmy_core.compiler.backend import emmy_backend
from emmy_core.compiler.compare import interleaved_medians, max_error
from emmy_core.dtypes import torch_dtype


class Chain(torch.nn.Module):
    """`n` bias-free linears of one shape, each applied to the same row (their outputs returned)."""

    def __init__(self, n: int, out: int, width: int) -> None:
        super().__init__()
        self.layers = torch.nn.ModuleList(torch.nn.Linear(width, out, bias=False) for _ in range(n))

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        return [layer(x) for layer in self.layers]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default="2816x1024,4096x4096", help="(out)x(in) of each linear")
    ap.add_argument("--dtypes", default="f32,f16,bf16")
    ap.add_argument("--chain", type=int, default=8, help="linears of different weights per call")
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    print(f"bench/matvec.py: one row through {args.chain} linears; medians of {args.repeats} interleaved rounds; "
          f"threads {torch.get_num_threads()}; load {os.getloadavg()[0]:.2f}")
    print(f"{'dtype':<5} {'shape':>10} {'MB':>6} {'emmy':>16} {'inductor':>16} {'eager':>16} {'eager/emmy':>11} "
          f"{'eager/ind':>10} {'error':>8}")
    for dt in args.dtypes.split(","):
        dtype = torch_dtype(dt)
        for shape in args.shapes.split(","):
            out, width = (int(v) for v in shape.split("x"))
            torch.manual_seed(0)
            module = Chain(args.chain, out, width).eval().to(dtype)
            x = torch.randn(1, 1, width, dtype=dtype)
            torch._dynamo.reset()
            with torch.no_grad():
                fns = {"emmy": torch.compile(module, backend=emmy_backend(prior=False)),
                       "inductor": torch.compile(module), "eager": module}
                err = max(max_error(g, w) for g, w in zip(fns["emmy"](x), module(x), strict=True))
                med, failed = interleaved_medians(fns, (x,), args.repeats, warmup=2)
            mb = args.chain * out * width * dtype.itemsize / 1e6

            def cell(name: str, mb: float = mb, med: dict[str, float] = med) -> str:
                return f"{med[name] / 1e3:6.2f}ms {mb / med[name] * 1e3:5.1f}GB/s" if name in med else "failed"

            ratio = {k: med["eager"] / med[k] if k in med and "eager" in med else float("nan")
                     for k in ("emmy", "inductor")}
            print(f"{dt:<5} {shape:>10} {mb:6.0f} {cell('emmy'):>16} {cell('inductor'):>16} {cell('eager'):>16} "
                  f"{ratio['emmy']:10.2f}x {ratio['inductor']:9.2f}x {err:8.2g}", flush=True)
            for name, why in failed.items():
                print(f"      {name} failed: {why}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory {peak:.0f} MiB; load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
