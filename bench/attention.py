"""Where does Emmy's attention win against torch's own, on this CPU?

The emmy backend rewrites `scaled_dot_product_attention` as Emmy's batched matrix products and softmax
(`emmy_core.graph.attention`), or leaves it to torch's fused kernel. This bench times, interleaved in one
run, one causal grouped-query attention (as Llama calls it: q of `heads`, k and v of `heads / 4` heads)
compiled both ways through `torch.compile(backend="emmy")`, beside eager torch and Inductor, per head
dimension, sequence length and dtype. The ratio printed is torch's attention time over Emmy's (> 1: Emmy's
wins), the baseline measured in the same run; peak memory at the end.

Run: .venv/bin/python bench/attention.py [--dims 32,64,128] [--seqs 128,512] [--dtypes f32,f16] [--mask causal|tensor]
     [--repeats 30]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import tempfile
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch
import torch.nn.functional as F

from emmy_core.compiler.backend import emmy_backend
from emmy_core.compiler.compare import interleaved_medians, max_error
from emmy_core.dtypes import torch_dtype


class Attention(torch.nn.Module):
    """Causal grouped-query attention of given q, k, v (`[B, H, S, D]`, k and v with fewer heads)."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


class PaddedAttention(torch.nn.Module):
    """The same attention under a boolean mask given as a tensor (`[B, 1, S, S]`, causal with the first key
    position of every row masked out but the first row's), as a model with padding passes it."""

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dims", default="32,64,128", help="head dimensions")
    ap.add_argument("--seqs", default="128,512", help="sequence lengths")
    ap.add_argument("--dtypes", default="f32,f16")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=30)
    ap.add_argument("--mask", choices=("causal", "tensor"), default="causal",
                    help="is_causal=True, or a boolean mask passed as a tensor (made afresh by Emmy at every call)")
    ap.add_argument("--db", type=Path, default=None, help="tuning database the compile reads (default: an empty one)")
    args = ap.parse_args()
    args.db = args.db or Path(tempfile.mkdtemp()) / "none.db"
    print(f"bench/attention.py: B={args.batch}, {args.heads} heads (k, v {max(1, args.heads // 4)}), "
          f"mask {args.mask}; medians of {args.repeats} interleaved rounds; load {os.getloadavg()[0]:.2f}")
    print(f"{'dtype':<5} {'D':>4} {'S':>5} {'emmy':>10} {'torch sdpa':>11} {'inductor':>10} {'eager':>10} "
          f"{'torch/emmy':>11} {'error':>8}")
    module = (Attention() if args.mask == "causal" else PaddedAttention()).eval()
    for dt in args.dtypes.split(","):
        for d in (int(x) for x in args.dims.split(",")):
            for s in (int(x) for x in args.seqs.split(",")):
                torch.manual_seed(0)
                dtype = torch_dtype(dt)
                kv = max(1, args.heads // 4)
                x = (torch.randn(args.batch, args.heads, s, d, dtype=dtype),
                     torch.randn(args.batch, kv, s, d, dtype=dtype), torch.randn(args.batch, kv, s, d, dtype=dtype))
                if args.mask == "tensor":
                    keep = torch.ones(s, s, dtype=torch.bool).tril()
                    keep[1:, 0] = False
                    x = (*x, keep.expand(args.batch, 1, s, s).contiguous())
                torch._dynamo.reset()
                with torch.no_grad(), warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    fns = {"emmy": torch.compile(module, backend=emmy_backend(tuning_db=args.db, attention=True)),
                           "torch sdpa": torch.compile(module, backend=emmy_backend(tuning_db=args.db,
                                                                                      attention=False)),
                           "inductor": torch.compile(module), "eager": module}
                    got = fns["emmy"](*x)
                    err = max_error(got, module(*x))
                    med, failed = interleaved_medians(fns, x, args.repeats, warmup=1)
                cells = " ".join(f"{med[k] / 1e3:9.3f}m" if k in med else f"{'failed':>10}"
                                 for k in ("emmy", "torch sdpa", "inductor", "eager"))
                ratio = med["torch sdpa"] / med["emmy"] if "emmy" in med and "torch sdpa" in med else float("nan")
                print(f"{dt:<5} {d:>4} {s:>5} {cells} {ratio:>10.2f}x {err:>8.2g}", flush=True)
                for name, why in failed.items():
                    print(f"      {name} failed: {why}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory {peak:.0f} MiB; load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
