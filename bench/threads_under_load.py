"""Do Emmy's OpenMP threads yield when the machine is busy? Emmy's time on a loaded machine over its time on a quiet one,
beside eager's, per OpenMP wait policy.

Emmy's generated C and torch's own ops share one OpenMP runtime (torch's libgomp: Emmy's kernels link it by its
name, and the process has it loaded already), which reads its wait policy once, when it loads. A thread that
finished its share of a parallel region spins for the next one (GOMP_SPINCOUNT, 300000 by default) before it
sleeps; on a machine whose cores are all taken, that spinning takes the core from the thread with work left.
Each policy therefore runs in its own process, with the variables set before torch loads: `emmy` (what
`import emmy_core` before torch sets: OMP_WAIT_POLICY=PASSIVE, sleep at once; `emmy_core.threads`),
`spinning` (libgomp's own default, as where torch loaded first) and `spin=N` (GOMP_SPINCOUNT=N).

A tiny Qwen3 (two layers, random weights, no downloads) runs through `torch.compile(backend="emmy")` and eagerly,
interleaved, each median of `--repeats` calls, first on the quiet machine, then with `--busy` busy processes
(1 by default) each pinned to one core, from the last down, or (`--load torch`) running torch's threaded matrix
products as another user's model would, its threads spinning by libgomp's default. The ratio is loaded over quiet (1.0: untouched by the load); the bench's claim holds where Emmy's
ratio is no worse than eager's. Quiet medians are printed too, so a policy that buys the loaded case with the
quiet one shows it. Peak memory per process at the end of its line.

Run: .venv/bin/python bench/threads_under_load.py [--policies emmy,spinning,spin=10000] [--repeats 200]
     [--hidden 64] [--seq 16] [--busy 1] [--load spin|torch]
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import resource
import subprocess
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICIES = {"emmy": {}, "spinning": {"EMMY_OMP_WAIT": "inherit"}}


def policy_env(name: str) -> dict[str, str]:
    """The environment variables of one policy: `emmy`, `spinning` or `spin=N`."""
    if name in POLICIES:
        return POLICIES[name]
    if name.startswith("spin=") and name[5:].isdigit():
        return {"GOMP_SPINCOUNT": name[5:]}
    raise SystemExit(f"--policies: {name!r} is not one of emmy, spinning, spin=N")


def cpu_line() -> str:
    """This CPU's model, vector ISA and cores, as Emmy's CPU probe names them."""
    from emmy_core.targets.cpu import model_name, parse_cpuinfo, vector_isa

    info = parse_cpuinfo(Path("/proc/cpuinfo").read_text())
    return (f"{model_name(info) or 'unknown CPU'}, {vector_isa(info.get('flags', ''))}, "
            f"{len(os.sched_getaffinity(0))} cores")


def busy(core: int, kind: str) -> subprocess.Popen[bytes]:
    """One process busy until killed: `spin`, a Python loop pinned to `core`; `torch`, torch's matrix products on
    every core with its own OpenMP threads (libgomp's default policy), as another user's model would run."""
    if kind == "torch":
        code = "import torch\na = torch.randn(192, 192)\nwhile True:\n    a @ a\n"
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
        return subprocess.Popen([sys.executable, "-c", code], env=env)
    code = f"import os\nos.sched_setaffinity(0, {{{core}}})\nwhile True:\n    pass\n"
    return subprocess.Popen([sys.executable, "-c", code])


def child(args: argparse.Namespace) -> None:
    """One policy's measurement, in a process whose environment set it before torch loaded."""
    importlib.import_module("emmy_core")  # before torch, as a user who wants its threads to sleep imports it
    import torch
    import transformers

    from emmy_core.compiler.compare import interleaved_medians

    warnings.simplefilter("ignore")
    torch.manual_seed(0)
    cfg = transformers.Qwen3Config(hidden_size=args.hidden, intermediate_size=2 * args.hidden, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, head_dim=args.hidden // 4,
                                   vocab_size=128, max_position_embeddings=4 * args.seq)
    model = transformers.Qwen3ForCausalLM(cfg).eval()
    ids = torch.randint(0, 128, (1, args.seq))
    emmy = torch.compile(model, backend="emmy", dynamic=False)
    with torch.no_grad():
        fns = {"emmy": lambda i: emmy(i).logits, "eager": lambda i: model(i).logits}
        quiet, _ = interleaved_medians(fns, (ids,), args.repeats)
        cores = sorted(os.sched_getaffinity(0))
        loads = [busy(cores[-1 - i % len(cores)], args.load) for i in range(args.busy)]
        try:
            time.sleep(0.5)
            loaded, _ = interleaved_medians(fns, (ids,), args.repeats)
        finally:
            for load in loads:
                load.kill()
                load.wait()
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"quiet": quiet, "loaded": loaded, "peak_mib": peak}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--policies", default="emmy,spinning,spin=10000")
    ap.add_argument("--repeats", type=int, default=200)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--busy", type=int, default=1, help="busy processes, each pinned to a core from the last down")
    ap.add_argument("--load", choices=("spin", "torch"), default="spin",
                    help="what each busy process runs: a pinned Python loop, or torch's threaded products")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
        return
    print(f"bench/threads_under_load.py: tiny Qwen3 (hidden {args.hidden}, 2 layers, length {args.seq}), median of "
          f"{args.repeats} calls, interleaved; loaded: {args.busy} busy process(es) ({args.load})")
    print(f"CPU: {cpu_line()}; load before {os.getloadavg()[0]:.2f}")
    print(f"{'policy':<12} {'emmy quiet':>11} {'loaded':>9} {'ratio':>7}   {'eager quiet':>11} {'loaded':>9} "
          f"{'ratio':>7}   {'peak':>8}")
    for name in args.policies.split(","):
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "EMMY_OMP_WAIT")}
        env.update(policy_env(name))
        if name.startswith("spin="):
            env["EMMY_OMP_WAIT"] = "inherit"
        cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--repeats", str(args.repeats),
               "--hidden", str(args.hidden), "--seq", str(args.seq), "--busy", str(args.busy), "--load", args.load]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True, cwd=ROOT, check=False)
        if run.returncode != 0:
            print(f"{name:<12} failed: {(run.stderr or run.stdout).strip().splitlines()[-1:]}")
            continue
        r = json.loads(run.stdout.strip().splitlines()[-1])
        q, lo = r["quiet"], r["loaded"]
        print(f"{name:<12} {q['emmy'] / 1e3:9.2f}ms {lo['emmy'] / 1e3:7.2f}ms {lo['emmy'] / q['emmy']:6.1f}x   "
              f"{q['eager'] / 1e3:9.2f}ms {lo['eager'] / 1e3:7.2f}ms {lo['eager'] / q['eager']:6.1f}x   "
              f"{r['peak_mib']:6.0f}MiB", flush=True)


if __name__ == "__main__":
    main()
