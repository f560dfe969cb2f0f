"""How fast does the prior score, how long does a fit take, and what does it earn on a card it never saw?

Four questions, each against a baseline measured in the same run:

- score: 1,000 candidates of one fork scored by `Prior.score` (features and trees, numpy only)
  and by the trees alone, against CatBoost's own `predict` on the same rows (median of repeats;
  the target is under 5 ms);
- fit: `emmy fit` on every peer cache (measured pools: the card split, the kernel split, then the
  final model), wall time and peak memory (the target is under 5 minutes);
- loco: the fit's card split on the peer data (one card per fold), for each seed: per held-out
  card and per kernel the prior's top-1 and top-5 slowdown, each card ranked with the blend
  selected on the other cards, beside the rule's first option (the first configuration in the
  cache file's own order), a random pick's expectation, the most similar card's best and the
  transfer baseline (no model: per configuration the geomean of best/time over the other
  cards of the same kernel), and the lookup's reach (the best of the other cards' own best and
  own top 5 read on the held-out card: below it, picks no other card ranked that high);
  every blend weight on all cards; the spread over seeds;
- unseen (`--unseen DIR [--unseen-cards FILE] [--unseen-card FILE=CARD ...]`): a prior fitted on every peer cache judged on Kernel
  Tuner caches of cards no peer file holds (Kernel Tuner's benchmark hub has the same kernels on the
  A100, MI250X, W7800, MI50, TITAN RTX and RTX 3060 Laptop; describe the cards the table lacks in a
  card file), beside the baselines read from the peer caches alone;
- cpu: the installed prior (fitted on the freeze's CPU) on pools this machine measured with
  `emmy tune` (a tuning database, `--cpu-db`), the same figures, the freeze's card as the
  other card of the baselines; then (`--recheck ROUNDS`, default 21) the prior's pick, the first
  option and the tune's fastest row of each pool timed again here, interleaved, which is what the
  verdict "at or below the first option" is read on (a tune's single timings are noisy).

Run: .venv/bin/python bench/prior.py [--only score,fit,loco,cpu] [--seeds 0,1,2] [--peer DIR] [--cpu-db PATH]
     [--recheck 21]
     [--unseen DIR --unseen-cards FILE [--unseen-card FILE=CARD ...]]
Fill the CPU database first, e.g. for m in "llama_block B=1,S=128" "mlp B=8,S=256"; do set -- $m;
.venv/bin/emmy tune --model $1 --shape $2 --budget 24 --db _data/cpu.db; done
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from emmy_core.eval.extern_order import card_names, file_order
from emmy_core.eval.figures import rule_order
from emmy_core.ir.builders import matmul
from emmy_core.knobs import candidates
from emmy_core.prior import Prior, load_installed_prior, load_prior
from emmy_core.prior import metrics as m
from emmy_core.prior.dataset import Dataset, read_dataset
from emmy_core.prior.featurize import featurize
from emmy_core.prior.fit import choice_figures, fit_dataset, select_choice
from emmy_core.prior.ranking import DIVERSE_HEAD
from emmy_core.prior.training import Params
from emmy_core.prior.transfer import card_split, fork_baselines
from emmy_core.targets import Card

ROOT = Path(__file__).resolve().parents[1]
FIGURES = ("top1", "top5", "first_slowdown", "random_slowdown", "similar_slowdown", "transfer_top1",
           "transfer_top5", "reach_top1", "reach_top5", "tau", "pick_failed")


def say(text: str) -> None:
    print(text, flush=True)


def load() -> str:
    a, b, c = os.getloadavg()
    return f"load {a:.2f} {b:.2f} {c:.2f}"


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def timed(fn: Any, repeats: int) -> float:
    """Median wall time of `fn()` in milliseconds, after one warm-up call."""
    fn()
    samples = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - t) * 1e3)
    return statistics.median(samples)


def bench_score(repeats: int) -> None:
    from catboost import CatBoostRanker

    prior = load_installed_prior()
    card = Card(name="Bench CPU x64", target="cpu", arch="x86_64", compute_capability="", tensor_cores=(),
                source="bench", cores=64, l1d_kib=48.0, l2_kib=2048.0, l3_kib=262144.0, simd_bits=512,
                freq_mhz=3000.0)
    kernel = matmul(4096, 4096, 4096)
    pool = list(candidates(kernel, card))[:1000]
    assert len(pool) == 1000, len(pool)
    rows = prior.rows(kernel, {}, card, "deploy", pool)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.json"
        path.write_text(json.dumps(prior.doc["model"]))
        model = CatBoostRanker()
        model.load_model(str(path), format="json")
    diff = float(np.abs(model.predict(rows) - prior.trees.predict(rows)).max())  # the same trees, two evaluators
    full = timed(lambda: prior.score(kernel, {}, card, "deploy", pool), repeats)
    # the same trees shipping a fitted order for this unseen card, its head spread (`ranking.diversified`)
    fitted = Prior({**prior.doc, "ranking": {**prior.doc["ranking"], "source": "tr.score", "weight": 0.0,
                                             "mode": "ranker", "no_evidence": "ranker", "diverse": DIVERSE_HEAD}},
                   "bench: the installed trees, a fitted order spread")
    spread = timed(lambda: fitted.score(kernel, {}, card, "deploy", pool), repeats)
    trees = timed(lambda: prior.trees.predict(rows), repeats)
    cat = timed(lambda: model.predict(rows), repeats)
    say(f"score: 1000 candidates, {prior.info['trees']} trees of depth {prior.info['depth']}, "
        f"{len(prior.features)} features ({load()})")
    say(f"  Prior.score (features + trees) {full:7.2f} ms   (target < 5 ms; this prior ships {prior.blend!r} here)")
    say(f"  the same, a fitted order spread {spread:6.2f} ms   (the ranker's order, its top {DIVERSE_HEAD} spread)")
    say(f"  numpy trees on the rows        {trees:7.2f} ms")
    say(f"  CatBoost predict on the rows   {cat:7.2f} ms   ratio numpy/CatBoost {trees / cat:.2f}; "
        f"largest difference {diff:.1e}")


def peer_dataset(peer: Path, tmp: Path, card_of: dict[str, str] | None = None) -> Dataset:
    """The caches in `peer` imported, exported and read; each extern fork's first option is its file's first
    entry. `card_of` names the card of a cache (by file name) whose `device_name` is empty, as `emmy db import
    --card` does."""
    from emmy_core.exchange.export import export_db
    from emmy_core.exchange.importer import import_db

    card_of = card_of or {}
    files = sorted(p for p in peer.iterdir() if p.name.endswith((".json", ".json.gz")))
    absent = sorted(set(card_of) - {p.name for p in files})
    if absent:
        raise SystemExit(f"--unseen-card names {absent[0]}, which is not a cache in {peer}")
    groups = [(None, [p for p in files if p.name not in card_of])]
    groups += [(card, [p for p in files if card_of.get(p.name) == card]) for card in sorted(set(card_of.values()))]
    refused = []
    for i, (card, group) in enumerate(g for g in groups if g[1]):
        refused += [o.message for o in import_db(tmp / "peer.db", group, fresh=i == 0, card=card) if not o.ok]
    if refused:
        hint = " (here: --unseen-card FILE=CARD)" if "device_name" in refused[0] else ""
        raise SystemExit(f"import refused: {refused[0]}{hint}")
    export_db(tmp / "peer.db", tmp / "peer")
    dataset = read_dataset(tmp / "peer")
    order = file_order(files, card_of)
    for fork in dataset.forks:
        rule = rule_order(fork, order.get((fork.kernel_id, fork.card_name)))
        if rule is not None:
            fork.first = int(np.argmax(rule))  # the file's first entry
    return dataset


def bench_fit(dataset: Dataset, params: Params) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        t = time.monotonic()
        result = fit_dataset(dataset, Path(tmp) / "peer.json", pools="measured", folds=5, seed=0, params=params,
                             tracking_uri="off", fits_dir=Path(tmp) / "fits")
        wall = time.monotonic() - t
    rows = sum(len(f.knobs) for f in dataset.forks)
    mean, kmean, rk = result.metrics["mean"], result.metrics["kernel_mean"], result.metrics["ranking"]
    say(f"fit: all peer data ({len(dataset.forks)} forks, {rows} rows, {result.metrics['train_groups']} groups), "
        f"card split ({len(result.metrics['folds'])} folds) + kernel split ({len(result.metrics['kernel_folds'])} "
        f"folds) + final model: {wall:.0f} s (target < 300 s); peak {peak_mb():.0f} MB ({load()})")
    say(f"  card split (unseen cards): top1 {mean['top1']:.3f} top5 {mean['top5']:.3f} transfer "
        f"{mean['transfer_top1']:.3f} similar {mean['similar_slowdown']:.3f}; kernel split: top1 {kmean['top1']:.3f} "
        f"top5 {kmean['top5']:.3f}; shipped ranking {rk['mode']} (weight {rk['weight']})")


def _cells(summary: dict[str, Any]) -> str:
    return " ".join("     -" if summary.get(n) is None else f"{summary[n]:6.3f}" for n in FIGURES)


def _header(what: str) -> str:
    short = ("top1", "top5", "first", "random", "simil", "trans1", "trans5", "reach1", "reach5", "tau", "failed")
    return f"  {what:<30} {'pools':>5} " + " ".join(f"{s:>6}" for s in short)


LABELS = ("card", "kernel", "family")


def _summary(figures: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The figures aggregated, their labels (card, kernel, family) left out."""
    return m.summarize([{k: v for k, v in f.items() if k not in LABELS} for f in figures])


def _row(label: str, figures: Sequence[dict[str, Any]]) -> str:
    summary = _summary(figures)
    return f"  {label[:30]:<30} {len(figures):>5} " + _cells(summary)


def bench_loco(dataset: Dataset, params: Params, seeds: Sequence[int]) -> None:
    """The fit's own card split (one card per fold), per seed: each card ranked with the blend weight
    selected on the other cards (nested, so no card is judged by a selection that saw it)."""
    names = featurize(dataset.forks)
    cards = sorted({f.card_name for f in dataset.forks})
    overall: dict[int, dict[str, float | None]] = {}
    for seed in seeds:
        t = time.monotonic()
        folds, held = card_split(dataset.forks, names, "measured", len(cards), seed, params)
        chosen = {c: select_choice([h for h in held if h.fork.card_name != c]) for c in cards}
        figures = [{**h.figures(*chosen[h.fork.card_name]), "card": h.fork.card_name,
                    "kernel": getattr(h.fork.kernel, "name", h.fork.kernel_id), "family": h.fork.family}
                   for h in held]
        overall[seed] = _summary(figures)
        say(f"loco seed {seed}: {len(folds)} folds, {time.monotonic() - t:.0f} s, {time.process_time():.0f} cpu-s "
            f"so far ({load()}); ranking per held-out card (selected on the others): {json.dumps(chosen)}; "
            f"shipped (all cards): {select_choice(held)}")
        say(_header("held-out card"))
        for card in cards:
            say(_row(card, [f for f in figures if f["card"] == card]))
        say(_row("all pools (geomean)", figures))
        say(_header("kernel"))
        for kernel in sorted({f["kernel"] for f in figures}):
            say(_row(kernel, [f for f in figures if f["kernel"] == kernel]))
        worse = []
        for c in cards:
            s = _summary([f for f in figures if f["card"] == c])
            if s.get("top1") and s.get("transfer_top1") and s["top1"] > 1.02 * s["transfer_top1"]:
                worse.append(f"{c} ({s['top1']:.3f} vs {s['transfer_top1']:.3f})")
        say(f"  cards worse than the transfer baseline by more than 2%: {', '.join(worse) or 'none'}")
        for c in choice_figures(held):
            say(f"  every card by {c['mode']} ({c['source']}, weight {c['weight']:.2f}): top1 {c['top1']:.3f} "
                f"top5 {c['top5']:.3f}")
    top1 = [o["top1"] for o in overall.values() if o.get("top1") is not None]
    top5 = [o["top5"] for o in overall.values() if o.get("top5") is not None]
    tr = [o["transfer_top1"] for o in overall.values() if o.get("transfer_top1") is not None]
    say(f"loco over seeds {list(seeds)}: top1 {statistics.mean(top1):.3f} (min {min(top1):.3f}, max {max(top1):.3f}, "
        f"spread {max(top1) - min(top1):.3f}); top5 {statistics.mean(top5):.3f} (min {min(top5):.3f}, max "
        f"{max(top5):.3f}, spread {max(top5) - min(top5):.3f}); transfer top1 {statistics.mean(tr):.3f}; "
        f"goal top1 <= 1.07, top5 <= 1.03, spread < 0.03")
    last = next(reversed(overall.values()))
    say(f"lookup reach (the best of the other cards' own best, and of their own top 5, read on the held-out card; "
        f"seed-free): top1 {last['reach_top1']:.3f} over {last['reach_top1_pools']} pools, top5 "
        f"{last['reach_top5']:.3f}. Below these, picks no other card ranked that high: a "
        f"prediction, not a lookup.")



def pool_figures(prior: Any, forks: Sequence[Any], others: Sequence[Any]) -> list[dict[str, Any]]:
    """Per fork with two measured members or more: the prior's figures on them, beside the baselines read
    from `others` (the forks of other cards)."""
    figures = []
    for fork in forks:
        mm = np.flatnonzero(fork.measured)
        if len(mm) < 2:
            continue
        scores = prior.score(fork.kernel, fork.sizes, fork.card, fork.setting, [fork.knobs[i] for i in mm],
                             ordered=fork.first is not None)
        f: dict[str, Any] = {"card": fork.card_name, "kernel": getattr(fork.kernel, "name", fork.kernel_id)}
        f.update(m.pool_metrics(scores, fork.times[mm], fork.ok[mm]))
        f.update(fork_baselines(fork, others))
        figures.append(f)
    return figures


def bench_cpu(cpu_db: Path, prior_path: Path | None, recheck_rounds: int = 0) -> None:
    from emmy_core.exchange.export import export_db
    from emmy_core.exchange.importer import import_db
    from emmy_core.freezefolder.freeze_names import freeze_folder

    if not cpu_db.is_file():
        say(f"cpu: no tuning database at {cpu_db}; fill it with emmy tune (see this script's docstring)")
        return
    prior = load_prior(prior_path) if prior_path else load_installed_prior()
    with tempfile.TemporaryDirectory() as tmp:
        export_db(cpu_db, Path(tmp) / "here")
        here = read_dataset(Path(tmp) / "here")
        sources = freeze_folder(ROOT / "freezes").reviewed
        assert all(o.ok for o in import_db(Path(tmp) / "freeze.db", sources, fresh=True))
        export_db(Path(tmp) / "freeze.db", Path(tmp) / "freeze")
        freeze = read_dataset(Path(tmp) / "freeze")
    figures = pool_figures(prior, here.forks, freeze.forks)
    cards = sorted({f.card_name for f in here.forks})
    which = (f"the prior {prior_path} (dataset {prior.doc['provenance']['dataset_digest'][:12]}, pools "
             f"{prior.doc['provenance']['pools']})" if prior_path else
             f"the installed prior (fitted on {', '.join(sorted({f.card_name for f in freeze.forks}))})")
    say(f"cpu: {which} on {len(figures)} pools measured on {', '.join(cards)} ({load()}); the baselines "
        f"(similar card, transfer) read the repository freeze")
    say(_header("card"))
    say(_row(", ".join(cards), figures))
    for f in figures:
        say(f"    {f['kernel'][:44]:<44} top1 {f['top1']:.3f} top5 {f['top5'] or float('nan'):.3f} "
            f"first {f.get('first_slowdown') or float('nan'):.3f} transfer {f.get('transfer_top1') or float('nan'):.3f}")
    if recheck_rounds:
        recheck(prior, here.forks, recheck_rounds)


def recheck(prior: Any, forks: Sequence[Any], rounds: int) -> None:
    """The prior's pick, the rule's first option and the tune's fastest row of each pool, built and timed again
    here interleaved (`rounds` rounds, medians): a tune times its candidates one after another, so a noisy
    spell on a shared machine can favour or penalise any of the three, and the verdict (the prior at or below
    the first option) is read on these times instead. Each pool's figures are over the fastest of the three."""
    import torch

    from emmy_core.codegen.c import CBackend
    from emmy_core.compiler.compare import interleaved_medians
    from emmy_core.dtypes import torch_dtype
    from emmy_core.ir.sizes import extents

    be, ratios = CBackend(), {"prior": [], "first": [], "fastest row": []}
    say(f"cpu, timed again: the prior's pick, the first option and the tune's fastest row, interleaved, {rounds} rounds")
    for f in forks:
        m = np.flatnonzero(f.measured & f.ok)
        if len(m) < 2 or f.first is None or not f.ok[f.first]:
            continue
        scores = np.asarray(prior.score(f.kernel, f.sizes, f.card, f.setting, [f.knobs[i] for i in m], ordered=True))
        chosen = {"prior": int(m[int(np.argmax(scores))]), "first": f.first,
                  "fastest row": int(m[int(np.argmin(f.times[m]))])}
        dyn = {k: int(v) for k, v in (kv.split("=") for kv in f.sizes.split(","))} if f.sizes else {}
        ext, gen = extents(f.kernel, dyn), torch.Generator().manual_seed(0)
        bufs = {b.name: (torch.randn([ext[a] for a in b.shape], generator=gen) if b.role == "in"
                         else torch.empty([ext[a] for a in b.shape])).to(torch_dtype(b.dtype)) for b in f.kernel.buffers}
        fns = {k: be.timed_launch(be.build(f.kernel, dict(f.knobs[i]), f.setting), bufs, dyn) for k, i in chosen.items()}
        t, failed = interleaved_medians(fns, (), rounds)
        if failed:
            say(f"    {f.kernel.name[:44]:<44} not timed: {failed}")
            continue
        lo = min(t.values())
        for k in ratios:
            ratios[k].append(t[k] / lo)
        say(f"    {f.kernel.name[:44]:<44} " + " ".join(f"{k} {t[k] / lo:.3f}" for k in ratios) + f" ({lo:.0f} us)")
    if ratios["prior"]:
        say("  geomean over " + f"{len(ratios['prior'])} pools: " + ", ".join(
            f"{k} {float(np.exp(np.mean(np.log(v)))):.3f}" for k, v in ratios.items()))


def bench_unseen(peer: Dataset, unseen: Path, cards_file: Path | None, params: Params,
                 card_of: dict[str, str] | None = None) -> None:
    """The question a fresh machine asks, on cards no peer file holds: a prior fitted on every peer cache
    (as `emmy fit DATASET --pools measured`) ranks each pool of the caches in `unseen`, beside the
    baselines read from the peer caches alone (what copying the other cards' best would give)."""
    from emmy_core.targets import CARDS_ENV

    if cards_file is not None:
        os.environ[CARDS_ENV] = str(cards_file)  # the import and the export describe the cards the table lacks
    with tempfile.TemporaryDirectory() as tmp:
        (Path(tmp) / "unseen").mkdir()
        held = peer_dataset(unseen, Path(tmp) / "unseen", card_of)
        t = time.monotonic()
        fit_dataset(peer, Path(tmp) / "fit.json", pools="measured", folds=5, seed=0, params=params,
                    tracking_uri="off", fits_dir=Path(tmp) / "fits")
        prior = load_prior(Path(tmp) / "fit.json")
        wall = time.monotonic() - t
    known = {f.card_name for f in peer.forks}
    figures = pool_figures(prior, [f for f in held.forks if f.card_name not in known], peer.forks)
    rk = prior.doc["ranking"]
    say(f"unseen: a prior fitted on the peer caches in {wall:.0f} s (ships {rk['mode']}: {rk['source']}, weight "
        f"{rk['weight']}) on {len(figures)} pools of {unseen} on cards no peer file holds; the baselines read the "
        f"peer caches ({load()})")
    say(_header("card"))
    for card in sorted({f["card"] for f in figures}):
        say(_row(card, [f for f in figures if f["card"] == card]))
    say(_row("all pools (geomean)", figures))
    with_evidence = [f for f in figures if f.get("transfer_top1") is not None]
    say(_row("pools another card measured", with_evidence))
    for f in figures:
        nan = float("nan")
        say(f"    {f['card'][:24]:<24} {f['kernel'][:22]:<22} top1 {f['top1']:.3f} top5 {f['top5'] or nan:.3f} "
            f"transfer {f.get('transfer_top1') or nan:.3f} similar {f.get('similar_slowdown') or nan:.3f} "
            f"reach {f.get('reach_top1') or nan:.3f}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="score,fit,loco,cpu")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--peer", type=Path, default=ROOT.parent / "shared" / "peer")
    ap.add_argument("--cpu-db", type=Path, default=ROOT / "_data" / "cpu.db")
    ap.add_argument("--cpu-prior", type=Path, default=None, help="artifact for the cpu question (default: installed)")
    ap.add_argument("--recheck", type=int, default=21, metavar="ROUNDS",
                    help="cpu: time the prior's pick, the first option and the fastest row again, interleaved (0: not)")
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--unseen", type=Path, default=None,
                    help="Kernel Tuner caches of cards no peer file holds (the unseen question; not run without)")
    ap.add_argument("--unseen-cards", type=Path, default=None, help="a card file describing the unseen cards")
    ap.add_argument("--unseen-card", action="append", default=[], metavar="FILE=CARD",
                    help="the card of an unseen cache (by file name) whose device_name is empty; repeatable")
    args = ap.parse_args()
    try:
        card_of = card_names(args.unseen_card)
    except ValueError as exc:
        ap.error(f"--unseen-card {exc}")
    for name in card_of:
        if args.unseen is None or not (args.unseen / name).is_file():
            ap.error(f"--unseen-card {name!r} is not a cache in --unseen {args.unseen}")
    only = set(args.only.split(","))
    params = Params()
    say(f"bench/prior.py ({load()}); fit parameters {json.dumps(params.to_json(), sort_keys=True)}")
    if "score" in only:
        bench_score(args.repeats)
    if args.unseen is not None:
        only.add("unseen")
    if only & {"fit", "loco", "unseen"}:
        if not args.peer.is_dir():
            say(f"fit, loco: no peer data at {args.peer}; skipped")
        else:
            with tempfile.TemporaryDirectory() as tmp:
                dataset = peer_dataset(args.peer, Path(tmp))
            if "fit" in only:
                bench_fit(dataset, params)
            if "loco" in only:
                bench_loco(dataset, params, [int(s) for s in args.seeds.split(",")])
            if "unseen" in only and args.unseen is not None:
                bench_unseen(dataset, args.unseen, args.unseen_cards, params, card_of)
    if "cpu" in only:
        bench_cpu(args.cpu_db, args.cpu_prior, args.recheck)
    say(f"done; peak {peak_mb():.0f} MB ({load()})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
