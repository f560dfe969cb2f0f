"""How fast is Hugging Face's f16 `LlamaRMSNorm` through `torch.compile(backend="emmy")` against eager and Inductor?

`w * (x.float() * rsqrt(mean(x.float()**2, -1) + eps)).half()` at TinyLlama's hidden size (2048), S=128, at each
`--batch` (1 and 8 by default), f16 on this CPU: the emmy backend (its casts folded into one rmsnorm kernel reading
and writing f16), Inductor and eager on the same input, interleaved in one run, medians of `--repeats`; the
largest error against eager and the share of elements bit-equal to it; the Emmy kernels it ran and the ops torch
ran; then the load average and the peak memory.

Run: .venv/bin/python bench/f16_rmsnorm.py [--hidden 2048] [--seq 128] [--batch 1 8] [--repeats 30] [--threads N]
Timings on a shared machine are noisy: compare the ratios of one run, and run it more than once.
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

from emmy_core.compiler.backend import _GRAPHS, emmy_backend
from emmy_core.compiler.compare import interleaved_medians, max_error, medians_line


def main() -> int:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--threads", type=int, default=0, help="torch's intra-op threads (0: torch's default)")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    load_before = os.getloadavg()[0]
    gen = torch.Generator().manual_seed(0)
    module = LlamaRMSNorm(args.hidden, eps=1e-6).half().eval()
    with torch.no_grad():
        module.weight.copy_(torch.randn(args.hidden, generator=gen).half())
    print(f"LlamaRMSNorm f16, hidden {args.hidden}, S={args.seq}; torch {torch.__version__}, "
          f"{torch.get_num_threads()} threads; medians of {args.repeats} interleaved rounds")
    for b in args.batch:
        x = (torch.randn(b, args.seq, args.hidden, generator=gen) * 3).half()
        torch._dynamo.reset()
        before = len(_GRAPHS)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            emmy = torch.compile(module, backend=emmy_backend())
            got, want = emmy(x), module(x)
            err, equal = max_error(got, want), (got == want).float().mean().item()
            inductor = torch.compile(module)
            inductor(x)
            med, failed = interleaved_medians({"emmy": emmy, "inductor": inductor, "eager": module}, (x,),
                                              args.repeats)
        kernels = [k.program.name for g in _GRAPHS[before:] for grp in g.live_groups() if grp.off is None
                   for k in grp.compiled.lowered.kernels]
        fell = [f for g in _GRAPHS[before:] for f in g.report().fell_back]
        line = medians_line(med)
        print(f"  B={b}: {line}")
        print(f"    max error against eager {err:.2g}, {100 * equal:.2f}% of elements bit-equal; Emmy kernels "
              f"{kernels}; ops run by torch {len(fell)}")
        for name, why in failed.items():
            print(f"    {name} failed: {why}")
        for f in fell:
            print(f"    torch {f.op} ({f.node}): {f.reason}")
    print(f"load average (1 min) before {load_before:.2f}, after {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"peak memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
