"""How fast is Hugging Face's rotary embedding through `torch.compile(backend="emmy")` against Inductor?

`apply_rotary_pos_emb` (q * cos + rotate_half(q) * sin, the same for k) at the Llama decoder layer's sizes
(TinyLlama: 32 query heads, 4 key-value heads, head dimension 64; B=8, S=128 by default), f32 on this CPU:
the emmy backend, Inductor and eager on the same inputs, interleaved in one run, medians of `--repeats`;
the largest error against eager; how many Emmy kernels the chain became and how many ops torch ran (the
chain fused is one kernel per tensor, every op on Emmy); then the load average and the peak memory.

Run: .venv/bin/python bench/rotary.py [--batch 8] [--seq 128] [--repeats 30] [--dtype f32]
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
from emmy_core.compiler.compare import interleaved_medians, max_error
from emmy_core.dtypes import torch_dtype


class Rotary(torch.nn.Module):
    """Hugging Face Llama's rotary embedding applied to q and k, as LlamaAttention applies it."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        return apply_rotary_pos_emb(q, k, cos, sin)  # type: ignore[no-any-return]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--head-dim", type=int, default=64)
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()
    dtype = torch_dtype(args.dtype)
    load_before = os.getloadavg()[0]
    gen = torch.Generator().manual_seed(0)

    def t(*shape: int) -> torch.Tensor:
        return torch.randn(*shape, generator=gen).to(dtype)

    b, s, d = args.batch, args.seq, args.head_dim
    x = (t(b, args.heads, s, d), t(b, args.kv_heads, s, d), t(1, s, d), t(1, s, d))  # cos, sin as LlamaModel passes
    module = Rotary()
    before = len(_GRAPHS)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        emmy = torch.compile(module, backend=emmy_backend())
        err = max_error(emmy(*x), module(*x))
        inductor = torch.compile(module)
        inductor(*x)
        med, failed = interleaved_medians({"emmy": emmy, "inductor": inductor, "eager": module}, x, args.repeats)
    reports = [g.report() for g in _GRAPHS[before:]]
    kernels = sum(len(g.compiled.lowered.kernels) for st in _GRAPHS[before:] for g in st.live_groups()
                  if g.off is None)
    on_torch = sum(len(r.fell_back) for r in reports)
    print(f"rotary q [{b}, {args.heads}, {s}, {d}], k [{b}, {args.kv_heads}, {s}, {d}] {args.dtype}; torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads; medians of {args.repeats} interleaved rounds")
    for name, us in med.items():
        print(f"  {name:<9} {us / 1e3:8.3f} ms")
    for name, why in failed.items():
        print(f"  {name} failed: {why}")
    if "inductor" in med and "emmy" in med:
        print(f"emmy {med['inductor'] / med['emmy']:.2f}x Inductor's speed, {med['eager'] / med['emmy']:.2f}x eager's")
    print(f"max error against eager {err:.2g}; Emmy kernels {kernels}, ops run by torch {on_torch}")
    for r in reports:
        for f in r.fell_back:
            print(f"  torch {f.op} ({f.node}): {f.reason}")
    print(f"load average (1 min) before {load_before:.2f}, after {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"peak memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
