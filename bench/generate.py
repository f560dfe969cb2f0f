"""How fast does a Hugging Face model generate through `torch.compile(backend="emmy")`, against eager and Inductor?

Generation is a prefill, then one decode step per token with a KV cache: every step shows the
backend a cache one position longer (a size it has not run), so this is where per-size costs show
(in a size bucket run before, the check against torch; in a new one, settling forks, races and builds too)
and where a matmul has one row per sequence. A tiny-vocabulary `LlamaForCausalLM` with random weights (no downloads) generates greedily
from the same prompt with each contender: the first `generate` (Dynamo's compile, Emmy's builds and
every new size: what a user's first call costs), one from a longer prompt (every cache length new, the
graphs compiled; its prefill a size bucket never run, which the backend's `defer` leaves to torch's ops at its
first call), then `--repeats` more calls over the first call's lengths, interleaved (median). The tokens must equal eager's. Ratios are eager's time over each contender's.
Then the cost of a new prompt length in a size bucket seen before (`ir.sizes.size_bucket`: the longer prompt's):
a forward (a graph of its own, first called at one length of that bucket) at each of 4 lengths never run, its
first call's time less its second's (median), beside eager's call.

`--attention true` rewrites every attention as Emmy's, a decode step's too (what the default leaves to torch's fused
kernel, and why: `graph.attention.torch_wins`). `--local-db` points the local tuning database at an empty one made for the run (as a machine has once `emmy tune`
or the backend's `tune` option has run on it), where the default leaves it as this machine has it.

Run: .venv/bin/python bench/generate.py [--hidden 64,1024] [--dtypes f16,f32] [--tokens 40] [--repeats 5] [--local-db] [--attention auto|true|false]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import time
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch

from emmy_core.compiler.backend import emmy_backend
from emmy_core.dtypes import torch_dtype


def _model(hidden: int, dtype: torch.dtype):  # type: ignore[no-untyped-def]
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(hidden_size=hidden, intermediate_size=hidden * 11 // 4, num_attention_heads=max(4, hidden // 64),
                      num_key_value_heads=max(2, hidden // 256), num_hidden_layers=2, vocab_size=1000,
                      max_position_embeddings=512)
    cfg._attn_implementation = "sdpa"
    torch.manual_seed(0)
    return LlamaForCausalLM(cfg).eval().to(dtype)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hidden", default="64,1024", help="hidden sizes (heads of 64, two layers)")
    ap.add_argument("--dtypes", default="f16,f32")
    ap.add_argument("--tokens", type=int, default=40, help="new tokens per generate")
    ap.add_argument("--prompt", type=int, default=7, help="prompt length")
    ap.add_argument("--repeats", type=int, default=5, help="timed generates after the first, interleaved")
    ap.add_argument("--no-inductor", action="store_true")
    ap.add_argument("--local-db", action="store_true", help="an empty local tuning database made for the run")
    ap.add_argument("--attention", default="auto", choices=["auto", "true", "false"],
                    help="the backend's `attention`: auto (the default: a decode step's is torch's), true (Emmy's "
                         "everywhere, a decode step's too), false (torch's fused kernel everywhere)")
    args = ap.parse_args()
    if args.local_db:
        import tempfile

        from emmy_core.store import open_store

        path = Path(tempfile.mkdtemp(prefix="emmy-generate-")) / "autotune.db"
        open_store(path, "w").close()
        os.environ["EMMY_TUNING_DB"] = str(path)
        print(f"local tuning database: an empty one made for this run ({path.name})")
    print(f"bench/generate.py: LlamaForCausalLM, 2 layers, prompt {args.prompt}, {args.tokens} new tokens, "
          f"greedy; attention {args.attention}; threads {torch.get_num_threads()}; load {os.getloadavg()[0]:.2f}")
    print(f"{'dtype':<5} {'hidden':>6} {'contender':<10} {'first call':>11} {'new sizes':>10} {'eager/it':>9} "
          f"{'median':>9} {'ms/token':>9} {'eager/it':>9} {'tokens':>7}")
    for dt in args.dtypes.split(","):
        for hidden in (int(h) for h in args.hidden.split(",")):
            dtype = torch_dtype(dt)
            ids = torch.randint(0, 1000, (1, args.prompt), generator=torch.Generator().manual_seed(1))
            models = {"eager": _model(hidden, dtype), "emmy": _model(hidden, dtype)}
            backend = "emmy" if args.attention == "auto" else emmy_backend(attention=args.attention == "true")
            models["emmy"].forward = torch.compile(models["emmy"].forward, backend=backend, dynamic=True)
            if not args.no_inductor:
                models["inductor"] = _model(hidden, dtype)
                models["inductor"].forward = torch.compile(models["inductor"].forward, dynamic=True)
            first: dict[str, float] = {}
            fresh: dict[str, float] = {}
            longer = torch.randint(0, 1000, (1, args.prompt + args.tokens), generator=torch.Generator().manual_seed(2))
            times: dict[str, list[float]] = {k: [] for k in models}
            out: dict[str, torch.Tensor] = {}
            torch._dynamo.reset()
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                for name, m in models.items():
                    t0 = time.perf_counter()
                    out[name] = m.generate(ids, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)
                    first[name] = time.perf_counter() - t0
                for name, m in models.items():
                    t0 = time.perf_counter()
                    m.generate(longer, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)
                    fresh[name] = time.perf_counter() - t0
                for _ in range(args.repeats):
                    for name, m in models.items():
                        t0 = time.perf_counter()
                        m.generate(ids, max_new_tokens=args.tokens, min_new_tokens=args.tokens, do_sample=False)
                        times[name].append(time.perf_counter() - t0)
                # the longer prompt's bucket; a call without generate's arguments is a graph of its own, first called
                # at `warm` (its first size: a race, builds), so that the lengths timed are new sizes of a seen bucket
                warm = args.prompt + args.tokens + 1
                lengths = [warm + 1 + i for i in range(4)]
                for m in models.values():
                    m(torch.randint(0, 1000, (1, warm), generator=torch.Generator().manual_seed(warm)))
                extra: dict[str, list[float]] = {k: [] for k in models}
                call: dict[str, list[float]] = {k: [] for k in models}
                for n in lengths:
                    x = torch.randint(0, 1000, (1, n), generator=torch.Generator().manual_seed(n))
                    for name, m in models.items():
                        t0 = time.perf_counter()
                        m(x)
                        t1 = time.perf_counter()
                        m(x)
                        t2 = time.perf_counter()
                        extra[name].append(t1 - t0 - (t2 - t1))
                        call[name].append(t2 - t1)
            med = {k: statistics.median(v) for k, v in times.items()}
            for name in models:
                assert out[name].shape[-1] == args.prompt + args.tokens, out[name].shape
                same = "equal" if torch.equal(out[name], out["eager"]) else "DIFFER"
                print(f"{dt:<5} {hidden:>6} {name:<10} {first[name]:>10.2f}s {fresh[name]:>9.3f}s "
                      f"{fresh['eager'] / fresh[name]:>8.2f}x {med[name]:>8.3f}s {1e3 * med[name] / args.tokens:>9.2f} "
                      f"{med['eager'] / med[name]:>8.2f}x {same:>7}", flush=True)
            print(f"  a new prompt length in a seen bucket ({lengths[0]}-{lengths[-1]} tokens), first call's extra "
                  "time (median): " + ", ".join(f"{k} {1e3 * statistics.median(v):.1f} ms" for k, v in extra.items())
                  + f" (a call of eager: {1e3 * statistics.median(call['eager']):.1f} ms)", flush=True)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak memory {peak:.0f} MiB; load {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
