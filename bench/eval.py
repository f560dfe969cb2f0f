"""What does `emmy eval prior` say of the prior, and how long does it take on all the peer data?

Three questions, each printed with the load average beside it:

- golden: the golden view of the installed prior on the repository freeze (`freezes/`), in full;
- loco: the measured view of leave-one-card-out fits on the peer data, in full: for each card,
  a prior fitted (measured pools, no cross-validation) on every other card's pools, evaluated on
  that card's pools beside the baselines (the first configuration of each cache file, a random
  pick, the most similar other card's best, the transfer baseline), the held-out cards' pools
  gathered into one report;
- time: `evaluate` on all the peer data (both views, the installed prior, the caches' order
  given) against reading the export alone, the baseline measured in the same run; peak memory.

Run: .venv/bin/python bench/eval.py [--only golden,loco,time] [--peer DIR] [--seed 0] [--json-dir DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.prior import load, peak_mb, say
from emmy_core.eval import EvalReport, evaluate
from emmy_core.eval.extern_order import file_order
from emmy_core.eval.report import write_json
from emmy_core.prior import load_installed_prior
from emmy_core.prior.dataset import Dataset, read_dataset
from emmy_core.prior.fit import fit_dataset
from emmy_core.prior.training import Params

ROOT = Path(__file__).resolve().parents[1]


def export_of(sources: list[Path], out: Path) -> Path:
    from emmy_core.exchange.export import export_db
    from emmy_core.exchange.importer import import_db

    refused = [o.message for o in import_db(out / "store.db", sources, fresh=True) if not o.ok]
    if refused:
        raise SystemExit(f"import refused: {refused[0]}")
    export_db(out / "store.db", out / "export")
    return out / "export"


def peer_files(peer: Path) -> list[Path]:
    return sorted(p for p in peer.iterdir() if p.name.endswith((".json", ".json.gz")))


def bench_golden(tmp: Path, json_dir: Path | None) -> None:
    from emmy_core.freezefolder.freeze_names import freeze_folder

    export = export_of(freeze_folder(ROOT / "freezes").reviewed, tmp)
    t = time.monotonic()
    report = evaluate(export, load_installed_prior(), pools="golden")
    say(f"golden: the installed prior on the repository freeze, {time.monotonic() - t:.1f} s ({load()})")
    say(report.markdown())
    if json_dir is not None:
        write_json(report.to_json(), json_dir / "golden-installed-freeze.json")


def bench_loco(peer: Path, tmp: Path, seed: int, json_dir: Path | None) -> None:
    files = peer_files(peer)
    data = read_dataset(export_of(files, tmp))
    order = file_order(files)
    cards = sorted({f.card_name for f in data.forks})
    pools: list[dict] = []
    started = time.monotonic()
    for card in cards:
        t = time.monotonic()
        train = Dataset(data.digest, [f for f in data.forks if f.card_name != card], 0, [])
        fit = fit_dataset(train, tmp / f"without-{len(pools)}.json", pools="measured", folds=1, seed=seed,
                          params=Params(), tracking_uri="off", fits_dir=tmp / "fits")
        held = evaluate(data, fit.artifact_path, pools="measured", extern_order=order, cards={card})
        pools += held.pools
        say(f"  without {card}: fit on {len(train.forks)} forks and evaluated in {time.monotonic() - t:.0f} s "
            f"({load()})")
    report = EvalReport("measured", data.digest, "leave-one-card-out fits (each card scored by a prior fitted "
                        "without it)", {"pools": "measured", "seed": seed, "folds": "none",
                                        "time": "per held-out card", "dataset_digest": data.digest},
                        len(data.forks), data.undescribed_pools, data.undescribed_cards, True, pools)
    say(f"loco: measured view of leave-one-card-out fits on the peer data, seed {seed}, "
        f"{time.monotonic() - started:.0f} s; peak {peak_mb():.0f} MB ({load()})")
    say(report.markdown())
    if json_dir is not None:
        write_json(report.to_json(), json_dir / f"loco-peer-seed{seed}.json")


def bench_time(peer: Path, tmp: Path) -> None:
    files = peer_files(peer)
    export = export_of(files, tmp)
    prior = load_installed_prior()
    t = time.monotonic()
    data = read_dataset(export)
    read_s = time.monotonic() - t
    t = time.monotonic()
    order = file_order(files)
    order_s = time.monotonic() - t
    t = time.monotonic()
    report = evaluate(data, prior, pools="both", extern_order=order)
    eval_s = time.monotonic() - t
    rows = sum(len(f.knobs) for f in data.forks)
    say(f"time: all peer data ({len(data.forks)} forks, {rows} candidates, {len(report.pools)} pools) ({load()})")
    say(f"  read the export (baseline)       {read_s:6.2f} s")
    say(f"  read the caches' own order        {order_s:6.2f} s")
    say(f"  evaluate (score, figures, prices) {eval_s:6.2f} s   ratio to reading {eval_s / read_s:.2f}")
    say(f"  total, as `emmy eval prior --pools both --extern-order` runs it: {read_s + order_s + eval_s:.2f} s; "
        f"peak {peak_mb():.0f} MB")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="golden,loco,time")
    ap.add_argument("--peer", type=Path, default=ROOT.parent / "shared" / "peer")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json-dir", type=Path, default=None, help="also write each report as JSON here")
    args = ap.parse_args()
    only = set(args.only.split(","))
    say(f"bench/eval.py ({load()})")
    with tempfile.TemporaryDirectory() as tmp:
        if "golden" in only:
            (Path(tmp) / "g").mkdir()
            bench_golden(Path(tmp) / "g", args.json_dir)
        for name, run in (("loco", lambda d: bench_loco(args.peer, d, args.seed, args.json_dir)),
                          ("time", lambda d: bench_time(args.peer, d))):
            if name not in only:
                continue
            if not args.peer.is_dir():
                say(f"{name}: no peer data at {args.peer}; skipped")
                continue
            (Path(tmp) / name).mkdir()
            run(Path(tmp) / name)
    say(f"done; peak {peak_mb():.0f} MB ({load()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
