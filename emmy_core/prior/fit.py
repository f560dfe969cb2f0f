"""`emmy fit`: a CatBoost ranker fitted on a dataset export, validated on unseen cards and unseen kernels.

`fit_prior(dataset_dir, out_path, ...)` reads the export's forks (`emmy_core.prior.dataset`),
turns every pool into feature rows with the one feature function, and:

1. validates on the card split, the question a new machine asks: scikit-learn's `GroupKFold`
   grouped by card (one card per fold up to `folds` cards: leave one card out; no card on both
   sides of any fold, asserted on the folds actually used and recorded in `metrics.json`). The
   transfer features (`tr.*`) of every fork come from the fold's training cards only, the fork's
   own card left out, so a held-out card is scored from what the other cards measured;
2. selects the ranking of a card it never saw on that split (`emmy_core.prior.ranking`): the
   transfer orders, blends, the ranker, whichever picks best on the held-out cards (never
   in-sample); a card the fit measured is ranked by the model alone (`Prior.seen`);
3. validates on the kernel split as well (`GroupKFold` by kernel: a new shape on known cards);
4. fits the final model on every group (transfer features from every other card of the dataset),
   calibrates the price curves on the shipped scores (`emmy_core.prior.price`) and writes the
   artifact atomically, with its transfer table and the selected ranking;
5. writes `_tune/fits/<time>-<digest>/metrics.json`: the headline (`mean`) is the card split,
   per fold, per card and per family, beside the baselines on the same pools (first option,
   random pick, most similar card, transfer); the kernel split beside it, each with pool counts;
6. logs an MLflow run (`emmy_core.prior.tracking`) unless tracking is off.

Only this module and `training` import catboost; polars and scikit-learn are imported here.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from emmy_core.compute import Scheduler, parse_scheduler, task_map
from emmy_core.fileio.safefile import atomic_write_text, fresh_folder
from emmy_core.ir import Extern
from emmy_core.prior import metrics
from emmy_core.prior.artifact import (
    ARTIFACT_FORMAT,
    PriorError,
    artifact_text,
    check_artifact_out,
    write_artifact,
)
from emmy_core.prior.dataset import Dataset, DatasetFork, check_fittable, read_dataset
from emmy_core.prior.features import FEATURE_VERSION
from emmy_core.prior.featurize import featurize, transfer_view
from emmy_core.prior.fold_tasks import DaskTrainer, DatasetRef, FoldTrainer, train_here
from emmy_core.prior.price import curve_key, fit_curve, scale_of
from emmy_core.prior.ranking import (
    DIVERSE_HEAD,
    FIRST,
    NO_EVIDENCE,
    RANKER,
    SELECT_MARGIN,
    SIGN_LEVEL,
    SOURCES,
    choices,
    mode_of,
    ranked,
    select,
    selection,
    sign_tail,
    tuned,
)
from emmy_core.prior.training import (
    DEFAULT_POOLS,
    Params,
    check_pools,
    design,
    fork_figures,
    groups_of,
    model_json,
    train,
)
from emmy_core.prior.transfer import Held, card_split, fork_knobs, score_forks, transfer_column
from emmy_core.prior.transfer_features import TransferTable
from emmy_core.prior.trees import parse_model

Progress = Callable[[str], None]
FITS_DIR = Path("_tune") / "fits"
BARE_MODELS = [name == RANKER for name in NO_EVIDENCE]  # which no-evidence choices are fitted (the ranker)
HEADLINE_FIGURES = ("top1", "top5", "tau", "pick_failed", "first_slowdown", "random_slowdown",
                    "similar_slowdown", "transfer_top1", "transfer_top5", "reach_top1", "reach_top5", "golden_rank",
                    "golden_rank_ties")


@dataclass(frozen=True)
class FitResult:
    artifact_path: Path
    fit_dir: Path
    metrics: dict[str, Any]
    run_id: str | None


def code_revision() -> str:
    """The commit the code was fitted from (`+dirty` when the work tree differs), or `unknown`."""
    root = Path(__file__).resolve().parents[2]
    try:
        rev = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10,
                             check=False)
        if rev.returncode != 0:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10, check=False)
        return rev.stdout.strip() + ("+dirty" if dirty.stdout.strip() else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def kernel_split(forks: Sequence[DatasetFork], names: Sequence[str], pools: str, folds: int, seed: int, params: Params,
                 choice: tuple[str, float], progress: Progress | None = None,
                 trainer: FoldTrainer | None = None) -> tuple[list[dict[str, Any]], list[Held]]:
    """Validation grouped by kernel (a new shape on known cards): per fold the kernels on each side, its
    training groups and the summary of its validation forks, ranked as the shipped prior ranks (`choice`);
    and every validation fork scored by a ranker fitted without its kernel (`Held`, no baselines). No card
    measured a held-out kernel in its fold, so these pools have no transfer evidence: they are where the
    fit judges what ranks a kernel no card measured (`no_evidence_figures`).
    `trainer` fits the folds' rankers (default: one after the other in this process)."""
    from sklearn.model_selection import GroupKFold

    kernels = np.array([f.kernel_id for f in forks])
    n = min(folds, len(set(kernels.tolist())))
    if n < 2:
        return [], []
    out: list[dict[str, Any]] = []
    held: list[Held] = []
    splits = list(GroupKFold(n_splits=n).split(np.zeros(len(forks)), groups=kernels))
    fitted = (trainer or train_here)(forks, names, pools, seed, params, [t for t, _ in splits])
    for k, ((train_idx, val_idx), trained) in enumerate(zip(splits, fitted, strict=True)):
        train_k, val_k = set(kernels[train_idx].tolist()), set(kernels[val_idx].tolist())
        assert not train_k & val_k, f"fold {k}: kernels in both train and validation: {sorted(train_k & val_k)}"
        if trained is None:
            continue
        model, n_groups = trained
        source = [forks[i] for i in train_idx]
        if progress is not None:
            progress(f"kernel fold {k + 1}/{n}: trained on {n_groups} groups")
        val = transfer_view([forks[i] for i in val_idx], source)
        scores = score_forks(model, val, names)
        held += [Held(f, s, {}, k) for f, s in zip(val, scores, strict=True)]
        figures = [fork_figures(f, ranked(*choice, s, None if choice[0] == FIRST else transfer_column(f, choice[0]),
                                          f.first, knobs=fork_knobs(f)))
                   for f, s in zip(val, scores, strict=True)]
        out.append({"fold": k, "train_kernels": sorted(train_k), "validation_kernels": sorted(val_k),
                    "train_groups": n_groups, "validation_forks": len(val), **metrics.summarize(figures)})
    return out, held


def readable(h: Held) -> bool:
    """Whether the rule's pick can be read on a held-out pool: its first option was measured, or no rule
    ordered the pool (an imported cache: the rule's order is judged by a random pick's expectation). A
    pool measured before the rule's first option changed lacks it, and there the first measured member in
    the rule's order would stand in for it: some other candidate, not what a machine would run."""
    return h.fork.first is None or bool(h.fork.measured[h.fork.first])


def choice_figures(held: Sequence[Held], no_evidence: str = RANKER) -> list[dict[str, Any]]:
    """Every choice of `ranking.choices()` with its top-1 and top-5 over the pools of `held` where the rule's
    pick can be read (`readable`: every choice is judged on the same pools, the rule's order among them)
    and each such pool's top-1 (`per_pool`, in `held`'s order), a pool without transfer evidence ranked by
    `no_evidence`."""
    rows = []
    judged = [h for h in held if readable(h)]
    for src, w in choices():
        figures = [h.figures(src, w, no_evidence) for h in judged]
        summary = metrics.summarize(figures)
        rows.append({"source": src, "weight": w, "mode": mode_of(w, src), "top1": summary.get("top1"),
                     "top5": summary.get("top5"), "per_pool": [f.get("top1") for f in figures],
                     "model": tuned(src, w)})
    return rows


def bare_pools(held: Sequence[Held]) -> list[Held]:
    """The held-out pools that can judge what ranks a pool no other card measured: no transfer evidence in
    their fold, ordered by a rule, and the rule's first option measured (`readable`)."""
    return [h for h in held if not h.evidence and h.fork.first is not None and readable(h)]


def no_evidence_figures(held: Sequence[Held], kernel_held: Sequence[Held] = ()) -> list[dict[str, Any]]:
    """What may rank a pool no other card measured (`ranking.NO_EVIDENCE`), each with its top-1, top-5 and
    each pool's top-1 (`per_pool`) over the `bare_pools` of both splits: the card split's (a new card whose
    kernel no other card measured) and the kernel split's (`kernel_held`: a kernel no card measured, on a
    card the fold knew). A kernel nobody measured is what such a pool is on any card, and the kernel split
    is where a fit sees many; none at all: no figures."""
    card, kernel = bare_pools(held), bare_pools(kernel_held)
    rows = []
    for name in NO_EVIDENCE:
        figures = [h.figures(SOURCES[0], 0.0, name) for h in [*card, *kernel]]
        summary = metrics.summarize(figures)
        rows.append({"no_evidence": name, "pools": len(figures), "card_pools": len(card), "kernel_pools": len(kernel),
                     "top1": summary.get("top1"), "top5": summary.get("top5"),
                     "per_pool": [f.get("top1") for f in figures]})
    return rows


def select_no_evidence(held: Sequence[Held], kernel_held: Sequence[Held] = ()) -> str:
    """`ranking.select` between the rule's order and the ranker on the held-out pools without transfer
    evidence (`no_evidence_figures`): the ranker must pick clearly better there, on enough pools to pass
    the sign test, to replace the rule's order (the default)."""
    rows = no_evidence_figures(held, kernel_held)
    return NO_EVIDENCE[select([(r["top1"], r["top5"], r["per_pool"]) for r in rows], BARE_MODELS)]


def select_choice(held: Sequence[Held], kernel_held: Sequence[Held] = ()) -> tuple[str, float, str]:
    """The (source, weight, no_evidence) `ranking.select` takes on these held-out forks (the first choice
    with none); `kernel_held` the kernel split's, for `no_evidence` alone."""
    if not held:
        return (*choices()[0], NO_EVIDENCE[0])
    bare = select_no_evidence(held, kernel_held)
    rows = choice_figures(held, bare)
    best = rows[select([(r["top1"], r["top5"], r["per_pool"]) for r in rows], [r["model"] for r in rows])]
    return best["source"], best["weight"], bare


def spread_head(held: Sequence[Held], source: str, weight: float, no_evidence: str,
                spread_top5: float | None = None) -> tuple[int, dict[str, float | None]]:
    """How many places at the top of the chosen order to spread (`ranking.diversified`): DIVERSE_HEAD, unless
    the held-out cards' top-5 of the same order unspread clearly beats `spread_top5` (the chosen's, spread;
    computed here unless the caller has it), then none; with both top-5 figures. The top-1 is the same either
    way. The spread is the default (measured on three sets of unseen cards, it never lost a top-5 by more than
    SELECT_MARGIN), and the unspread order replaces it as any later choice replaces an earlier one
    (`ranking.verdict`): a top-5 better by more than SELECT_MARGIN, on enough of the held-out pools where the
    two differ that a fair coin per pool would do as well with probability at most SIGN_LEVEL. On a card split
    of a few pools a hair's difference is which pools fell in it: the search bench's two-fold priors refused
    the spread on 0.26% and on 1.6% (one pool of three) under the margin alone."""
    spread_rows = [h.figures(source, weight, no_evidence) for h in held] if spread_top5 is None else None
    if spread_rows is not None:
        spread_top5 = metrics.summarize(spread_rows).get("top5")
    plain_rows = [h.figures(source, weight, no_evidence, head=0) for h in held]
    plain = metrics.summarize(plain_rows).get("top5")
    clear = spread_top5 is not None and plain is not None and plain * (1.0 + SELECT_MARGIN) < spread_top5
    if clear:
        if spread_rows is None:
            spread_rows = [h.figures(source, weight, no_evidence) for h in held]
        pairs = [(a.get("top5"), b.get("top5")) for a, b in zip(plain_rows, spread_rows, strict=True)]
        pairs = [(a, b) for a, b in pairs if a is not None and b is not None and a != b]
        clear = sign_tail(sum(a < b for a, b in pairs), len(pairs)) <= SIGN_LEVEL
    return (0 if clear else DIVERSE_HEAD), {"spread": spread_top5, "plain": plain}


def choose_ranking(held: Sequence[Held], kernel_held: Sequence[Held] = ()) -> dict[str, Any]:
    """The ranking that picks best on the held-out cards (`ranking.select`), with every choice's figures and
    its margins (top-1, relative) to the rule's first option, the ranker alone, the transfer order alone,
    the transfer baseline and the best choice of another mode (`runner_up`: which won and by how much).
    What ranks a pool no other card measured (`no_evidence`) is selected first, on those pools alone, of the
    card split and the kernel split (`kernel_held`)."""
    if not held:
        src, w = choices()[0]
        return {"source": src, "weight": w, "mode": mode_of(w, src), "split": "none", "no_evidence": NO_EVIDENCE[0],
                "diverse": DIVERSE_HEAD, "why": "fewer than two cards: no card split", "candidates": [],
                "no_evidence_candidates": []}
    bare_rows = no_evidence_figures(held, kernel_held)
    bare_index, bare_why = selection([(r["top1"], r["top5"], r["per_pool"]) for r in bare_rows], BARE_MODELS)
    bare = NO_EVIDENCE[bare_index]
    rows = choice_figures(held, bare)
    index, why = selection([(r["top1"], r["top5"], r["per_pool"]) for r in rows], [r["model"] for r in rows])
    chosen = rows[index]
    refused = [{"source": r["source"], "weight": r["weight"], "mode": r["mode"], "top1": r["top1"], "why": w}
               for r, w in zip(rows, why, strict=True)
               if w is not None and chosen["top1"] is not None and r["top1"] < chosen["top1"]]
    head, spread = spread_head(held, chosen["source"], chosen["weight"], bare, chosen["top5"])
    first = next(r for r in rows if r["source"] == FIRST)
    order = next(r for r in rows if r["source"] == SOURCES[0] and r["weight"] == 1.0)
    alone = next(r for r in rows if r["weight"] == 0.0)
    others = [r for r in rows if r["mode"] != chosen["mode"] and r["top1"] is not None]
    runner = min(others, key=lambda r: r["top1"]) if others else None
    base = metrics.summarize([h.baselines for h in held if readable(h)])  # on the pools the choices were judged on

    def margin(other: float | None) -> float | None:
        return None if other is None or chosen["top1"] is None else chosen["top1"] / other - 1.0

    return {"source": chosen["source"], "weight": chosen["weight"], "mode": chosen["mode"], "split": "card",
            "first_pools": sum(h.fork.first is not None for h in held),
            "held_pools": len(held), "judged_pools": sum(readable(h) for h in held), "no_evidence": bare, "diverse": head,
            "diverse_top5": spread,
            "no_evidence_candidates": [{**{k: v for k, v in r.items() if k != "per_pool"}, "why": w}
                                       for r, w in zip(bare_rows, bare_why, strict=True)],
            "top1": chosen["top1"], "top5": spread["spread" if head else "plain"],
            "candidates": [{k: v for k, v in r.items() if k not in ("per_pool", "model")} for r in rows],
            "refused": refused,
            "transfer_baseline_top1": base.get("transfer_top1"), "lookup_reach_top1": base.get("reach_top1"),
            "vs_first": margin(first["top1"]),
            "vs_ranker": margin(alone["top1"]), "vs_transfer_order": margin(order["top1"]),
            "vs_transfer_baseline": margin(base.get("transfer_top1")),
            "runner_up": None if runner is None else {"mode": runner["mode"], "source": runner["source"],
                                                      "weight": runner["weight"], "top1": runner["top1"],
                                                      "margin": margin(runner["top1"])}}


def calibrate(forks: Sequence[DatasetFork], scores: Sequence[np.ndarray], names: Sequence[str]) -> dict[str, Any]:
    """Price curves per target (and `any`) on the measured working rows, from the shipped scores."""
    per_key: dict[str, list[tuple[np.ndarray, ...]]] = {}
    for g, (fork, s) in enumerate(zip(forks, scores, strict=True)):
        ok = np.flatnonzero(fork.ok)
        if not len(ok):
            continue
        rows = fork.features.matrix(names)[ok]
        part = (s[ok], np.log(fork.times[ok]), scale_of(rows, names), np.full(len(ok), g))
        for key in {curve_key(fork.target, isinstance(fork.kernel, Extern)), "any"}:
            per_key.setdefault(key, []).append(part)
    curves: dict[str, Any] = {}
    for key, parts in sorted(per_key.items()):
        curve = fit_curve(*(np.concatenate(p) for p in zip(*parts, strict=True)))
        if curve is not None:
            curves[key] = curve.to_json()
    return curves


def _mean_of_folds(folds: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in HEADLINE_FIGURES:
        values = [f[name] for f in folds if f.get(name) is not None]
        if metrics.is_slowdown(name):
            out[name] = metrics.geomean(values)
        else:
            out[name] = sum(values) / len(values) if values else None
    return out


def _headline(summary: Mapping[str, Any]) -> dict[str, Any]:
    return {k: summary.get(k) for k in HEADLINE_FIGURES}


def card_report(held: Sequence[Held], card_folds: list[dict[str, Any]],
                kernel_held: Sequence[Held] = ()) -> dict[str, Any]:
    """The card split's figures beside the baselines: per fold, per card, per family, and over every held-out
    pool (the headline). Each card is ranked with the choice selected on the other cards' held-out forks
    (`choices`; of both splits, `kernel_held` the kernel split's, and whether its head is spread:
    `spread_head`), so the selection never sees the card it is judged on."""
    chosen: dict[str, tuple[str, float, str, int]] = {}
    for card in sorted({h.fork.card_name for h in held}):
        others = [h for h in held if h.fork.card_name != card]
        src, w, bare = select_choice(others, [h for h in kernel_held if h.fork.card_name != card])
        chosen[card] = (src, w, bare, spread_head(others, src, w, bare)[0])
    figures = [(h, h.figures(*chosen[h.fork.card_name])) for h in held]
    for fold in card_folds:
        fold.update(metrics.summarize([f for h, f in figures if h.fold == fold["fold"]]))
    by_card: dict[str, list[dict[str, Any]]] = {}
    by_family: dict[str, list[dict[str, Any]]] = {}
    for h, f in figures:
        by_card.setdefault(h.fork.card_name, []).append(f)
        by_family.setdefault(h.fork.family, []).append(f)
    return {"mean": metrics.summarize([f for _, f in figures]),
            "choices": {c: {"source": src, "weight": w, "no_evidence": bare, "diverse": head}
                        for c, (src, w, bare, head) in chosen.items()},
            "by_card": {c: metrics.summarize(v) for c, v in sorted(by_card.items())},
            "by_family": {c: metrics.summarize(v) for c, v in sorted(by_family.items())}}


def fit_prior(dataset_dir: Path | str, out_path: Path | str, *, pools: str = DEFAULT_POOLS, folds: int = 5, seed: int = 0,
              cards_file: Path | str | None = None, tracking_uri: str | None = None,
              tags: Mapping[str, str] | None = None, progress: Progress | None = None,
              params: Params | None = None, scheduler: str | Scheduler | None = None) -> FitResult:
    """Fits the prior on a dataset export and writes it to `out_path` (see the module's docstring).

    `tracking_uri`: MLflow's tracking URI (default `$MLFLOW_TRACKING_URI`, else
    `sqlite:///_tune/mlflow.db`); `off` logs nothing (`run_id` None). `tags` are added to the run.
    `scheduler`: where the folds and seed members are trained (`emmy_core.compute`: inprocess, the default,
    local:N or tcp://HOST:PORT); each worker reads the export at `dataset_dir` itself, and the artifact is
    the same bit for bit.
    """
    check_pools(pools)
    where = parse_scheduler(scheduler)
    dataset = read_dataset(dataset_dir, cards_file, progress)
    if where.kind == "inprocess":
        return fit_dataset(dataset, out_path, pools=pools, folds=folds, seed=seed, params=params,
                           tracking_uri=tracking_uri, tags=tags, progress=progress)
    from emmy_core.fileio.urlfolder import shared_location

    ref = DatasetRef(shared_location(dataset_dir), None if cards_file is None else str(Path(cards_file).resolve()), dataset.digest)
    if progress is not None:
        progress(f"training on the Dask scheduler {where}")
    with task_map(where) as run:
        return fit_dataset(dataset, out_path, pools=pools, folds=folds, seed=seed, params=params,
                           tracking_uri=tracking_uri, tags=tags, progress=progress, trainer=DaskTrainer(ref, run))


def fit_dataset(dataset: Dataset, out_path: Path | str, *, pools: str = DEFAULT_POOLS, folds: int = 5, seed: int = 0,
                params: Params | None = None, tracking_uri: str | None = None, tags: Mapping[str, str] | None = None,
                progress: Progress | None = None, fits_dir: Path = FITS_DIR, install: bool = False,
                trainer: FoldTrainer | None = None) -> FitResult:
    """`fit_prior` on forks already read (the bench and the installed prior's refit use it directly).

    `install`: `out_path` may be the installed prior (only the install steps pass it). `trainer`: where the
    folds' and the final model's rankers are trained (`emmy_core.prior.fold_tasks`; default in this process).
    Nothing is written until every training came back."""
    params = params or Params()
    check_pools(pools)
    check_fittable(dataset)
    check_artifact_out(out_path, install=install)
    if progress is not None:
        progress(f"{len(dataset.forks)} forks; features")
    names = featurize(dataset.forks, progress)
    card_folds, held = card_split(dataset.forks, names, pools, folds, seed, params, progress, trainer)
    seen = choices()[-1]  # a card the fit measured is ranked by the model alone (Prior.seen)
    kernel_folds, kernel_held = kernel_split(dataset.forks, names, pools, folds, seed, params, seen, progress, trainer)
    ranking = choose_ranking(held, kernel_held)
    choice = (str(ranking["source"]), float(ranking["weight"]))
    cards = card_report(held, card_folds, kernel_held)
    if not card_folds and not kernel_folds:
        raise PriorError(f"dataset {dataset.digest[:16]}: no cross-validation fold had a pool to train on "
                         f"({pools} pools): a fit with 0 folds is not judged, so it is not written")
    forks = transfer_view(dataset.forks, dataset.forks)
    groups = groups_of(forks, pools, seed, params)
    if progress is not None:
        progress(f"final model on {len(groups)} groups; ranking of unseen cards: {ranking['mode']} ({choice[0]}, "
                 f"weight {choice[1]})")
    if trainer is None:
        model = train(design(forks, groups, names, params.balance, params.residual), params, seed)
    else:  # the final model is the fold whose training side is every fork
        final = next(iter(trainer(dataset.forks, names, pools, seed, params, [np.arange(len(dataset.forks))])))
        assert final is not None and final[1] == len(groups), "the final model's groups differ from the fit's"
        model = final[0]
    ranker = score_forks(model, forks, names)
    scores = ranker  # every fork of the dataset is on a card the fit measured: the model alone
    in_sample = metrics.summarize([fork_figures(f, s) for f, s in zip(forks, scores, strict=True)])
    split = "card" if held else "kernel"
    mean = _headline(cards["mean"]) if held else _mean_of_folds(kernel_folds)
    headline = {"split": split, "cv": mean, "folds": len(card_folds) if held else len(kernel_folds),
                "kernel_cv": _mean_of_folds(kernel_folds), "kernel_folds": len(kernel_folds),
                "train_groups": len(groups), "undescribed_pools": dataset.undescribed_pools}
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
    table = TransferTable.from_forks(dataset.forks)
    doc: dict[str, Any] = {
        "format": ARTIFACT_FORMAT, "feature_version": FEATURE_VERSION, "features": list(names),
        "provenance": {"dataset_digest": dataset.digest, "content_digest": dataset.content_digest(), "pools": pools,
                       "folds": folds, "seed": seed, "params": params.to_json(), "code_revision": code_revision()},
        "metrics": headline, "calibration": calibrate(forks, scores, names), "model": model_json(model),
        "transfer": table.to_json(), "ranking": ranking}
    trees = parse_model(doc["model"], len(names))
    for fork, s in zip(forks[:3], ranker, strict=False):
        if not np.allclose(trees.predict(fork.features.matrix(names)), s, rtol=0, atol=1e-9):
            raise RuntimeError(f"the numpy evaluator disagrees with CatBoost on fork {fork.key}: not written")
    digest = hashlib.sha256(artifact_text(doc).encode("utf-8")).hexdigest()[:12]
    fit_dir = Path(fits_dir) / f"{now.strftime('%Y%m%dT%H%M%SZ')}-{digest}"
    report = {"feature_version": FEATURE_VERSION, "dataset_digest": dataset.digest, "pools": pools, "seed": seed,
              "params": params.to_json(), "split": split, "folds": card_folds if held else kernel_folds,
              "mean": cards["mean"] if held else mean, "by_card": cards["by_card"], "by_family": cards["by_family"],
              "card_choices": cards.get("choices", {}),
              "kernel_folds": kernel_folds, "kernel_mean": _mean_of_folds(kernel_folds), "ranking": ranking,
              "in_sample": in_sample, "undescribed_pools": dataset.undescribed_pools,
              "undescribed_cards": dataset.undescribed_cards, "train_groups": len(groups),
              "forks": len(dataset.forks)}
    # the fit's folder and metrics first, the artifact last: a folder that cannot be made replaces nothing,
    # and an artifact that cannot be written leaves no folder of a fit that was not written
    fit_dir = fresh_folder(fit_dir.parent, fit_dir.name)  # two identical fits in one second get two folders
    metrics_path = fit_dir / "metrics.json"
    try:
        atomic_write_text(metrics_path, json.dumps(report, indent=1, sort_keys=True, allow_nan=False) + "\n")
        artifact = write_artifact(doc, out_path, install=install)
    except BaseException:
        shutil.rmtree(fit_dir, ignore_errors=True)
        raise
    run_id = None
    uri = tracking_uri if tracking_uri is not None else os.environ.get("MLFLOW_TRACKING_URI")
    if uri != "off":
        from emmy_core.prior.tracking import log_fit

        run_id = log_fit(uri, doc, report, artifact, metrics_path, dict(tags or {}))
    return FitResult(artifact, fit_dir, report, run_id)
