"""Does the rule's first option for a matrix product with a dynamic row count serve decode and prefill alike?

A pool depends on a kernel's static extents only (`emmy_core.knobs.space`): a projection whose M is
the dynamic token count has one first option for a decode step (M of 1 to 8) and a prefill (M of
hundreds). That option shares row blocks between threads (`par_axis` m), which at decode sizes
leaves all but one thread without a block. This bench measures, per matrix product of a model at
each S, the first option (the baseline, in the same run) against the same knobs with the columns
shared instead (`par_axis` n, at each column block the pool offers) and on one thread: real builds
and timings through the one bench harness (workers, watchdog, verification). It prints each
variant's time over the first option's, their geometric means per S, the wall time and peak
memory. Nothing is recorded.

Run: .venv/bin/python bench/decode_split.py [--model llama_block] [--shapes 1,8,128,512] [--dtype f16]
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from emmy_core.bench.harness import BenchConfig, Unit, bench, dedupe
from emmy_core.bench.plan import model_units
from emmy_core.knobs import candidates
from emmy_core.targets import local_card


def variants(unit: Unit) -> list[tuple[str, dict[str, object]]]:
    """The first option, then its knobs with the columns shared (each column block the pool has) and on one
    thread, as far as the pool holds them; empty for a kernel without a thread split (not a CPU matmul)."""
    pool = [dict(k) for k in candidates(unit.program, local_card())]
    if not pool or "par_axis" not in pool[0]:
        return []
    first = pool[0]
    out = [("first", first)]

    def like(k: dict[str, object], free: tuple[str, ...]) -> bool:
        return all(k.get(x) == v for x, v in first.items() if x not in free)

    other = "n" if first["par_axis"] == "m" else "m"
    for k in pool:
        if k["par_axis"] == other and like(k, ("par_axis", "tile_n")):
            out.append((f"{other}-split tile_n {k['tile_n']}", k))
    for k in pool:
        if k["threads"] == 1 and first["threads"] != 1 and like(k, ("threads",)):
            out.append(("1 thread", k))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="llama_block")
    ap.add_argument("--shapes", default="1,8,128,512", help="S values (B=1)")
    ap.add_argument("--dtype", default="f16")
    args = ap.parse_args()
    card = local_card()
    if card.target != "cpu":
        print(f"this machine's card is {card.name} ({card.target}); this benchmark measures the CPU", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    load_before = os.getloadavg()[0]
    print(f"card {card.name}; {args.model} {args.dtype}, B=1; time over the first option's (in the same run)")
    ratios: dict[tuple[int, str], list[float]] = {}
    for s in (int(x) for x in args.shapes.split(",")):
        plan, labels = [], {}
        for p in dedupe((u, ()) for u in model_units(args.model, {"B": 1, "S": s}, args.dtype)):
            vs = variants(p.unit)
            if len(vs) > 1:
                plan.append((p.unit, [k for _, k in vs]))
                labels[p.unit.key] = vs
        report = bench(plan, card, config=BenchConfig(setting="deploy"))
        times = {(o.unit.key, tuple(sorted(o.knobs.items()))): o.stats.median_us
                 for o in report.outcomes if o.status == "ok" and o.stats is not None}
        for unit, _ in plan:
            vs = labels[unit.key]
            base = times.get((unit.key, tuple(sorted(vs[0][1].items()))))
            if base is None:
                print(f"S={s:<4} {unit.program.name[:48]:<48} first option gave no clean time")
                continue
            cells = []
            for label, k in vs[1:]:
                t = times.get((unit.key, tuple(sorted(k.items()))))
                if t is not None:
                    ratios.setdefault((s, label), []).append(t / base)
                cells.append(f"{label} {t / base:.2f}" if t is not None else f"{label} -")
            print(f"S={s:<4} {unit.program.name[:48]:<48} first {vs[0][1]['par_axis']}-split {base:8.1f} us; "
                  + "; ".join(cells), flush=True)
    print("\ngeomean of time over the first option's, per S and variant (over the kernels whose pool holds it):")
    for (s, label), xs in sorted(ratios.items()):
        print(f"  S={s:<4} {label:<22} {math.exp(sum(map(math.log, xs)) / len(xs)):.2f} over {len(xs)} kernels")
    self_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    child_kb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    print(f"wall {time.monotonic() - t0:.0f} s; load (1 min) {load_before:.2f} before, {os.getloadavg()[0]:.2f} after; "
          f"peak memory: harness {self_kb / 1024:.0f} MiB, largest worker {child_kb / 1024:.0f} MiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
