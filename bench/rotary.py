"""How fast is Hugging Face's rotary embedding through `torch.compile(backend="emmy")` against Inductor?

`apply_rotary_pos_emb` (q * cos + rotate_half(q) * sin, the same for k) at the Llama decoder layer's sizes
(TinyLlama: 32 query heads, 4 key-value heads, head dimension 64; B=8, S=128 by default), f32 on this CPU,
in two cases: q and k given as [B, heads, S, D], and given as their projections make them, [B, S, heads, D],
transposed first (as LlamaAttention does; Inductor fuses the transpose into its kernel, Emmy reads through it):
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
from emmy_core.compiler.compare import interleaved_medians, max_error, medians_line
from emmy_core.dtypes import torch_dtype
from emmy_core.graph.lower import LayoutStep


class Rotary(torch.nn.Module):
    """Hugging Face Llama's rotary embedding applied to q and k, as LlamaAttention applies it."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        return apply_rotary_pos_emb(q, k, cos, sin)  # type: ignore[no-any-return]


class TransposedRotary(Rotary):
    """The same on q and k as their projections make them, [B, S, heads, D], transposed as LlamaAttention does."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return super().forward(q.transpose(1, 2), k.transpose(1, 2), cos, sin)


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
    print(f"rotary q {args.heads} heads, k {args.kv_heads} heads, B={b}, S={s}, D={d}, {args.dtype}; torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads; medians of {args.repeats} interleaved rounds")
    cases = {"q, k [B, heads, S, D]": (Rotary(), (b, args.heads, s, d), (b, args.kv_heads, s, d)),
             "q, k [B, S, heads, D] transposed": (TransposedRotary(), (b, s, args.heads, d), (b, s, args.kv_heads, d))}
    for what, (module, q_shape, k_shape) in cases.items():
        x = (t(*q_shape), t(*k_shape), t(1, s, d), t(1, s, d))  # cos, sin as LlamaModel passes them
        before = len(_GRAPHS)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            emmy = torch.compile(module, backend=emmy_backend())
            err = max_error(emmy(*x), module(*x))
            inductor = torch.compile(module)
            inductor(*x)
            med, failed = interleaved_medians({"emmy": emmy, "inductor": inductor, "eager": module}, x, args.repeats)
        reports = [g.report() for g in _GRAPHS[before:]]
        steps = [st for g in _GRAPHS[before:] for grp in g.live_groups() if grp.off is None
                 for st in grp.compiled.lowered.steps]
        kernels = sum(1 for st in steps if not isinstance(st, LayoutStep))
        copies = sum(1 for st in steps if isinstance(st, LayoutStep) and st.op != "reshape")
        line = medians_line(med)
        print(f"  {what}: {line}")
        print(f"    max error against eager {err:.2g}; Emmy kernels {kernels}, layout copies {copies}, ops run by torch "
              f"{sum(len(r.fell_back) for r in reports)}")
        for name, why in failed.items():
            print(f"    {name} failed: {why}")
        for r in reports:
            for f in r.fell_back:
                print(f"    torch {f.op} ({f.node}): {f.reason}")
    print(f"load average (1 min) before {load_before:.2f}, after {os.getloadavg()[0]:.2f} on {os.cpu_count()} CPUs; "
          f"peak memory {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
