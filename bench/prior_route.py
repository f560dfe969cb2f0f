"""Does the prior settle the library route better than torch's kernel first, on a product shape it never saw?

The prior ranks torch's own kernel beside Emmy's candidates on the cards whose freeze holds torch's kernel
measured (`Prior.sees_library`). This bench judges that on the freeze folder's pools with torch's kernel
measured, by the fit's kernel split (5 folds: each pool ranked by a model fitted without its kernel, at any
size, on any card: a new product shape on a known card), against the baseline the route has without the
prior, torch's kernel first (what a product runs where nothing measured answers):

- per pool, the prior's pick among the measured members (torch's included) over the pool's fastest, and
  torch's kernel over the fastest; geomeans and the worst;
- the oracle route over the prior's Emmy-only pick (the better of torch's and Emmy's top), which is what a
  perfect route choice on top of today's ranking of Emmy's candidates would reach;
- how often the prior picks torch's kernel exactly where it wins, and the pools where its pick is more than
  3% slower than torch's kernel (what a compile without a race would lose there).

Run: .venv/bin/python bench/prior_route.py [--freezes freezes] [--folds 5] [--seed 0]
"""

from __future__ import annotations

import argparse
import math
import resource
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def geomean(xs: list[float]) -> float:
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def main() -> int:
    from emmy_core.exchange.export import export_db
    from emmy_core.exchange.importer import import_db
    from emmy_core.freezefolder.freeze_names import freeze_folder
    from emmy_core.knobs.route import library_knobs
    from emmy_core.prior.dataset import read_dataset
    from emmy_core.prior.featurize import featurize
    from emmy_core.prior.fit import kernel_split
    from emmy_core.prior.installed import recorded_seed
    from emmy_core.prior.training import Params

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--freezes", type=Path, default=ROOT / "freezes")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--seed", type=int, default=recorded_seed())
    args = ap.parse_args()

    t0 = time.perf_counter()
    files = freeze_folder(args.freezes).reviewed
    if not files:
        print(f"no freeze file in {args.freezes}: nothing to judge")
        return 0
    tmp = Path(tempfile.mkdtemp(prefix="emmy-prior-route-"))
    import_db(tmp / "freeze.db", files, fresh=True)
    export_db(tmp / "freeze.db", tmp / "dataset")
    dataset = read_dataset(tmp / "dataset")
    names = featurize(dataset.forks)
    _, held = kernel_split(dataset.forks, names, "both", args.folds, args.seed, Params(), ("tr.score", 1.0))
    lib = library_knobs()
    rows: list[tuple[str, str, str, float, float, float, bool, bool]] = []
    for h in held:
        f, scores = h.fork, np.asarray(h.ranker)
        li = next((i for i, k in enumerate(f.knobs) if k == lib), None)
        if li is None or not f.ok[li]:
            continue
        ok = np.where(f.ok)[0]
        own = [int(i) for i in ok if i != li]
        if not own:
            continue
        best = float(np.nanmin(f.times[ok]))
        pick = int(ok[np.argmax(scores[ok])])
        own_pick = own[int(np.argmax(scores[own]))]
        lib_wins = bool(f.times[li] <= np.nanmin(f.times[own]))
        rows.append((f.card_name, getattr(f.kernel, "name", ""), f.sizes, float(f.times[pick]) / best,
                     float(f.times[li]) / best, min(float(f.times[li]), float(f.times[own_pick])) / best,
                     pick == li, lib_wins))
    if not rows:
        print("no pool of the freeze holds torch's kernel of this release measured: nothing to judge")
        return 0
    cards = sorted({r[0] for r in rows})
    print(f"{len(rows)} pools with torch's kernel measured, on {', '.join(cards)}; kernel split, "
          f"{args.folds} folds, seed {args.seed}")
    prior, first = [r[3] for r in rows], [r[4] for r in rows]
    print(f"  prior with the route (its pick / fastest):  geomean {geomean(prior):.3f}, worst {max(prior):.2f}")
    print(f"  torch's kernel first (baseline):            geomean {geomean(first):.3f}, worst {max(first):.2f}")
    print(f"  ratio baseline / prior: {geomean(first) / geomean(prior):.2f}x")
    print(f"  oracle route over the prior's Emmy pick:    geomean {geomean([r[5] for r in rows]):.3f}")
    right = sum(1 for r in rows if r[6] == r[7])
    print(f"  route right (torch's kernel picked iff it is fastest): {right}/{len(rows)}; "
          f"torch's kernel fastest in {sum(r[7] for r in rows)}")
    slower = sorted((r for r in rows if r[3] > r[4] * 1.03), key=lambda r: -r[3] / r[4])
    print(f"  pools where the prior's pick is > 3% slower than torch's kernel: {len(slower)}")
    for r in slower:
        print(f"    {r[1][:58]:58s} {r[2]:24s} prior {r[3]:.2f}  torch {r[4]:.2f}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"done in {time.perf_counter() - t0:.0f} s; peak {peak:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
