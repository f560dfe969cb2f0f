"""What does tuning buy on this CPU, and how much does the choice matter?

Tunes the serving matrix's CPU cases (every model and shape of
`emmy_core/graph/serving_matrix.json` on the local card) with the real C backend: real
builds, real timings, through the one bench harness (worker processes, watchdog,
verification, integrity checks). Each distinct kernel gets a seeded sample of `--budget`
candidates that always includes the rule's first option, which is the baseline measured
in the same run. Per kernel it prints the fastest, the first option's and the slowest
time, first/fastest (what tuning buys over the safe default) and slowest/fastest (how
much the choice matters); then the geometric means, failures and flags, total wall
time, variants per minute and peak memory. Nothing is recorded.

Run: .venv/bin/python bench/tune_cpu.py [--budget 8] [--setting deploy] [--seed 0]
(deploy, what a compile ships, builds with -O3 -march=native; rank with -O1 and fewer repeats)
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emmy_core.bench.harness import BenchConfig, Outcome, bench, dedupe
from emmy_core.bench.plan import model_units, tune_plan
from emmy_core.graph.serving import load_serving_matrix
from emmy_core.targets import local_card


def _geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--budget", type=int, default=8, help="candidates per kernel (first option always included)")
    ap.add_argument("--setting", default="deploy", help="compile setting: deploy or rank")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=60.0, help="watchdog seconds per variant")
    ap.add_argument("--spread-limit", type=float, default=0.5)
    ap.add_argument("--models", default="", help="comma-separated subset of the serving matrix's models")
    ap.add_argument("--max-shapes", type=int, default=0, help="first N shapes of each model (0: all)")
    ap.add_argument("--warm-cache", action="store_true",
                    help="reuse the build cache (default: a fresh one, so every variant is really compiled)")
    args = ap.parse_args()

    t0 = time.monotonic()
    load_before = os.getloadavg()
    card = local_card()
    if card.target != "cpu":
        print(f"this machine's card is {card.name} ({card.target}); this benchmark tunes the CPU", file=sys.stderr)
        return 2
    matrix = load_serving_matrix()
    wanted = {m for m in args.models.split(",") if m}
    plan = []
    for m in matrix.models:
        if wanted and m.name not in wanted:
            continue
        for shape in m.shapes[: args.max_shapes or None]:
            units = model_units(m.name, dict(shape), m.dtype)
            plan.extend(tune_plan(units, card, args.budget, args.seed))
    t_plan = time.monotonic() - t0
    planned = dedupe(plan)
    print(f"card {card.name}; setting {args.setting}; budget {args.budget}; spread limit {args.spread_limit:g}; "
          f"{len(planned)} distinct (kernel, sizes) "
          f"units from {sum(p.count for p in planned)} instances; {sum(len(p.variants) for p in planned)} variants; "
          f"lowering and planning {t_plan:.1f} s", flush=True)

    config = BenchConfig(setting=args.setting, timeout_s=args.timeout, spread_limit=args.spread_limit,
                         seed=args.seed, progress=sys.stderr.isatty())
    env = None
    cold = None if args.warm_cache else tempfile.mkdtemp(prefix="emmy-build-")
    if cold is not None:
        env = dict(os.environ, EMMY_BUILD_CACHE=cold)
    try:
        report = bench(plan, card, None, None, config, worker_env=env)
    finally:
        if cold is not None:
            shutil.rmtree(cold, ignore_errors=True)

    by_unit: dict[tuple[str, str], list[Outcome]] = {}
    for o in report.outcomes:
        by_unit.setdefault(o.unit.key, []).append(o)
    print(f"\n{'kernel':<44} {'sizes':<12} {'ok':>5} {'fastest us':>11} {'first us':>11} {'slowest us':>11} "
          f"{'first/fast':>10} {'slow/fast':>10}")
    buys, matters = [], []
    fastest_knobs: list[tuple[str, dict[str, object], dict[str, object]]] = []
    for p in planned:
        outs = by_unit.get(p.unit.key, [])
        ok = [o for o in outs if o.status == "ok" and o.stats is not None]
        first = next((o for o in outs if o.knobs == p.variants[0]), None)
        cells = [f"{p.unit.program.name[:44]:<44}", f"{p.unit.sizes_text:<12}", f"{len(ok):>2}/{len(outs):<2}"]
        if not ok:
            print(" ".join(cells) + "  (no clean result)")
            continue
        fast = min(o.stats.median_us for o in ok)  # type: ignore[union-attr]
        slow = max(o.stats.median_us for o in ok)  # type: ignore[union-attr]
        first_us = first.stats.median_us if first is not None and first.status == "ok" and first.stats else None
        matters.append(slow / fast)
        if first_us is not None:
            buys.append(first_us / fast)
        first_text = f"{first_us:11.1f}" if first_us is not None else f"{(first.status if first else '-'):>11}"
        ratio = f"{first_us / fast:10.2f}" if first_us is not None else f"{'-':>10}"
        best = min(ok, key=lambda o: o.stats.median_us)  # type: ignore[union-attr]
        fastest_knobs.append((p.unit.program.name, best.knobs, p.variants[0]))
        print(" ".join(cells) + f" {fast:11.1f} {first_text} {slow:11.1f} {ratio} {slow / fast:10.2f}")

    print("\nfastest variant's knobs (first option's) per kernel:")
    for name, knobs, first_knobs in fastest_knobs:
        text = ",".join(f"{k}={v}" for k, v in sorted(knobs.items()))
        base = ",".join(f"{k}={v}" for k, v in sorted(first_knobs.items()))
        print(f"  {name[:44]:<44} {text}  ({base})")
    wall = report.wall_s
    n = len(report.outcomes)
    kinds = ", ".join(f"{k} {c}" for k, c in sorted(report.failure_kinds.items())) or "none"
    reasons = ", ".join(f"{k} {c}" for k, c in sorted(report.flag_reasons.items())) or "none"
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"\nfirst option / fastest (what tuning buys): geomean {_geomean(buys):.2f}, max "
          f"{max(buys, default=float('nan')):.2f} over {len(buys)} kernels")
    print(f"slowest / fastest (how much the choice matters): geomean {_geomean(matters):.2f}, max "
          f"{max(matters, default=float('nan')):.2f} over {len(matters)} kernels")
    print(f"variants: {n} run, ok {report.count('ok')}, failed {report.count('failed')} ({kinds}), flagged "
          f"{report.count('flagged')} ({reasons}); units not prepared: {len(report.unit_errors)}")
    print(f"bench wall {wall:.1f} s ({n / wall * 60 if wall else 0:.1f} variants/min, builds "
          f"{'from the warm cache where present' if args.warm_cache else 'cold: a fresh build cache'}); "
          f"total with lowering "
          f"{time.monotonic() - t0:.1f} s; worker starts {report.worker_starts}")
    load_after = os.getloadavg()
    print(f"load average (1 min) before {load_before[0]:.2f}, after {load_after[0]:.2f} on {os.cpu_count()} CPUs "
          "(other work on the machine widens spreads and slows multi-threaded variants)")
    print(f"peak memory: harness {self_kb / 1024:.0f} MiB, largest worker {child_kb / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
