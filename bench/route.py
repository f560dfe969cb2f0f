"""Is a model compiled by Emmy ever slower than torch on this machine? (the route fork, torch's kernels as candidates)

Two decoders at real sizes, as a user brings them: TinyLlama-shaped (hidden 2048, 32 heads, 4 key heads, MLP
5632) and Qwen2-0.5B-shaped (hidden 896, 14 heads, 2 key heads, MLP 4864), each 2 layers of `transformers`'
own model with random weights (no downloads), through `torch.compile(model, backend="emmy")` at B=1, S=128
(and `--shapes` others), in f32 and bf16. Contenders, interleaved call by call on fresh inputs of the same
shape, every answer checked against eager:

- eager (the baseline every ratio is against), Inductor (`torch.compile` default);
- `emmy`: the backend's default, every matrix product's first option torch's own kernel, Emmy's kernels where
  this machine's evidence (freeze goldens, the local tuning database) says they win, and each group raced at
  its size against the same group on Emmy's kernels only and against torch's ops (`compiler.race`);
- `emmy-only`: `options={"library": False}`, Emmy's kernels wherever Emmy lowers (the round before this fork);
- with `--dynamo`, `torch.compile(backend="eager")`: what capturing the model costs with no compiler behind it.

Prints per case the medians, eager/X and Inductor/X, where the forks were settled (tiers, and how many
products run as torch), the CPU model and its ISA, the load average, and peak memory.

Run: .venv/bin/python bench/route.py [--repeats 10] [--dtypes f32,bf16] [--shapes 1x128,8x128] [--models tinyllama,qwen2] [--dynamo]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from emmy_core.compiler.backend import _GRAPHS
from emmy_core.knobs.route import is_library

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16}


def _decoder(name: str, dtype: torch.dtype) -> torch.nn.Module:
    import transformers as T

    if name == "tinyllama":
        cfg = T.LlamaConfig(hidden_size=2048, intermediate_size=5632, num_attention_heads=32, num_key_value_heads=4,
                            num_hidden_layers=2, vocab_size=1000, max_position_embeddings=512)
        cls: type = T.LlamaModel
    elif name == "qwen2":
        cfg = T.Qwen2Config(hidden_size=896, intermediate_size=4864, num_attention_heads=14, num_key_value_heads=2,
                            num_hidden_layers=2, vocab_size=1000, max_position_embeddings=512)
        cls = T.Qwen2Model
    else:
        raise SystemExit(f"unknown model {name!r}: tinyllama or qwen2")
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return cls(cfg).eval().to(dtype)


class Hidden(torch.nn.Module):
    """The decoder from embeddings (the product the user's model spends its time in), last hidden state out."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.model(inputs_embeds=x, use_cache=False).last_hidden_state


def cpu_line() -> str:
    model, flags = "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model == "unknown CPU":
                model = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = set(line.split(":", 1)[1].split())
    except OSError:
        pass
    isa = [n for f, n in (("avx2", "AVX2"), ("avx512f", "AVX-512"), ("avx512_bf16", "AVX512-BF16"),
                          ("avx512_fp16", "AVX512-FP16"), ("amx_bf16", "AMX-BF16")) if f in flags]
    return f"{model}; {', '.join(isa) or 'no AVX2'}; {os.cpu_count()} cores; torch {torch.__version__}"


def _time(fns: dict[str, Callable[[torch.Tensor], torch.Tensor]], make: Callable[[], torch.Tensor],
          repeats: int) -> dict[str, float]:
    times: dict[str, list[float]] = {k: [] for k in fns}
    with torch.inference_mode():
        for _ in range(repeats):
            for name, fn in fns.items():  # interleaved: a load spike hits every contender alike
                x = make()
                t0 = time.perf_counter()
                fn(x)
                times[name].append(time.perf_counter() - t0)
    return {k: statistics.median(v) * 1e3 for k, v in times.items()}


def _routes(first: int, last: int) -> str:
    tiers: dict[str, int] = {}
    torch_products = emmy_products = groups = raced = own = 0
    for graph in _GRAPHS[first:last]:
        kept = []
        for grp in graph.live_groups():
            groups += 1
            if grp.status.torch_at_last() is not None:
                raced += 1
            else:
                kept.append(grp)
                own += grp.active is not grp.compiled
        for rec in (grp.active.record for grp in kept):
            for r in rec.resolutions:
                if not r.applied:
                    continue
                tiers[r.tier] = tiers.get(r.tier, 0) + 1
                knobs = getattr(r.choice, "knobs", None)
                if r.rule == "schedule" and knobs is not None and r.kernel.startswith("matmul"):
                    if is_library(knobs):
                        torch_products += 1
                    else:
                        emmy_products += 1
    return (f"groups: {raced} of {groups} run as torch ran them, {own} on Emmy's kernels only (each the race's "
            f"winner here); products in the rest: "
            f"{torch_products} as torch runs them, {emmy_products} on Emmy's kernels; forks by tier: "
            + ", ".join(f"{k} {v}" for k, v in sorted(tiers.items())))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--shapes", default="1x128", help="comma list of BxS")
    ap.add_argument("--models", default="tinyllama,qwen2")
    ap.add_argument("--no-emmy-only", action="store_true", help="skip the library-off contender")
    ap.add_argument("--dynamo", action="store_true",
                    help="add torch.compile(backend='eager'): Dynamo's own cost, no compiler behind it")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    torch._dynamo.config.recompile_limit = 64
    print(f"machine: {cpu_line()}; load average {os.getloadavg()[0]:.2f}")
    print(f"{'case':<28} {'eager':>9} {'inductor':>9} {'emmy':>9} {'emmy-only':>10}  {'eager/emmy':>10} "
          f"{'ind/emmy':>9} {'ind/only':>9}")
    worst = []
    for name in args.models.split(","):
        for dt in args.dtypes.split(","):
            dtype = DTYPES[dt]
            model = Hidden(_decoder(name, dtype))
            hidden = model.model.config.hidden_size
            for shape in args.shapes.split(","):
                b, s = (int(v) for v in shape.split("x"))

                def make(b: int = b, s: int = s, hidden: int = hidden, dtype: torch.dtype = dtype) -> torch.Tensor:
                    return torch.randn(b, s, hidden, dtype=dtype) * 0.5

                # one recompile region per case: four backends compile the same forward, and past Dynamo's
                # recompile limit a contender would silently run eager
                torch._dynamo.reset()
                fns: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
                    "eager": model,
                    "inductor": torch.compile(model, dynamic=False),
                    "emmy": torch.compile(model, backend="emmy", dynamic=True),
                }
                if args.dynamo:
                    fns["dynamo"] = torch.compile(model, backend="eager", dynamic=True)
                if not args.no_emmy_only:
                    fns["emmy-only"] = torch.compile(model, backend="emmy", dynamic=True,
                                                     options={"library": False})
                x = make()
                with torch.inference_mode():
                    want = model(x)
                    tol = 1e-3 if dtype == torch.float32 else 5e-2
                    marks: dict[str, tuple[int, int]] = {}
                    for k, fn in fns.items():  # compiled and checked before timing
                        before = len(_GRAPHS)
                        got = fn(x)
                        marks[k] = (before, len(_GRAPHS))
                        err = (got.float() - want.float()).abs().max().item() / (want.float().abs().max().item())
                        if err > tol:
                            print(f"  {k} differs from eager by {err:.3g} (relative to the largest value)")
                routes = _routes(*marks["emmy"])

                t = _time(fns, make, args.repeats)
                only = t.get("emmy-only", float("nan"))
                case = f"{name} {dt} B={b},S={s}"
                print(f"{case:<28} {t['eager']:>8.2f}ms {t['inductor']:>8.2f}ms {t['emmy']:>8.2f}ms {only:>9.2f}ms  "
                      f"{t['eager'] / t['emmy']:>10.2f} {t['inductor'] / t['emmy']:>9.2f} {t['inductor'] / only:>9.2f}")
                print(f"  {routes}")
                if "dynamo" in t:
                    print(f"  Dynamo alone (backend='eager'): {t['dynamo']:.2f} ms; eager/dynamo "
                          f"{t['eager'] / t['dynamo']:.2f}, dynamo/emmy {t['dynamo'] / t['emmy']:.2f}")
                worst.append(t["eager"] / t["emmy"])
    print(f"eager/emmy: worst {min(worst):.2f}, geomean {statistics.geometric_mean(worst):.2f} "
          f"(never slower than torch: >= 0.95 within noise)")
    print(f"peak memory (max RSS): {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
