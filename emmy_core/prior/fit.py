"""`emmy fit`: a CatBoost ranker fitted on a dataset export, cross-validated by kernel, tracked in MLflow.

`fit_prior(dataset_dir, out_path, ...)` reads the export's forks (`emmy_core.prior.dataset`),
turns every pool into feature rows with the one feature function, and:

1. cross-validates with scikit-learn's `GroupKFold` grouped by kernel (no kernel in both
   the train and the validation side of any fold, asserted on the folds actually used and
   recorded in `metrics.json`), scoring each validation fork's whole pool;
2. fits the final model on every group, calibrates the price curves on the measured rows
   (`emmy_core.prior.price`) and writes the artifact atomically;
3. writes `_tune/fits/<time>-<digest>/metrics.json`: per fold and mean, top-1 and top-5
   slowdown, Kendall's tau, failure rate of the pick, golden ranks, beside the first
   option's and a random pick's slowdown on the same pools, each with its pool count;
4. logs an MLflow run (`emmy_core.prior.tracking`) unless tracking is off.

Only this module and `training` import catboost; polars and scikit-learn are imported here.
"""

from __future__ import annotations

import datetime as _dt
import hashlib
import json
import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from emmy_core.ir import Extern
from emmy_core.prior import metrics
from emmy_core.prior.artifact import (
    ARTIFACT_FORMAT,
    PriorError,
    artifact_text,
    check_artifact_out,
    write_artifact,
)
from emmy_core.prior.dataset import Dataset, Fork, check_fittable, read_dataset
from emmy_core.prior.features import FEATURE_VERSION, fork_features
from emmy_core.prior.price import curve_key, fit_curve, scale_of
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
from emmy_core.prior.trees import parse_model
from emmy_core.store.safefile import atomic_write_text, fresh_folder

Progress = Callable[[str], None]
FITS_DIR = Path("_tune") / "fits"
HEADLINE = ("top1", "top5", "tau", "pick_failed", "first_slowdown", "random_slowdown", "golden_rank",
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


def featurize(forks: Sequence[Fork], progress: Progress | None = None) -> list[str]:
    """Fills every fork's feature rows (the one feature function); returns the union of column names."""
    names: dict[str, None] = {}
    for i, fork in enumerate(forks):
        fork.features = fork_features(fork.kernel, fork.sizes, fork.card, fork.setting, fork.knobs)
        names.update(dict.fromkeys(fork.features.names))
        if progress is not None and (i + 1) % 50 == 0:
            progress(f"features of {i + 1}/{len(forks)} forks")
    fixed = [n for n in names if not n.startswith("x.")]
    return [*fixed, *sorted(n for n in names if n.startswith("x."))]


def score_forks(model: Any, forks: Sequence[Fork], names: Sequence[str]) -> list[np.ndarray]:
    """Scores of every member of each fork's pool (CatBoost's own predict, as the fit sees it)."""
    return [np.asarray(model.predict(f.features.matrix(names)), dtype=np.float64) for f in forks]


def cross_validate(forks: Sequence[Fork], names: Sequence[str], pools: str, folds: int, seed: int,
                   params: Params, progress: Progress | None = None) -> list[dict[str, Any]]:
    """Per fold: the kernels on each side, its training groups, and the summary of its validation forks."""
    from sklearn.model_selection import GroupKFold

    kernels = np.array([f.kernel_id for f in forks])
    distinct = sorted(set(kernels.tolist()))
    n = min(folds, len(distinct))
    if n < 2:
        return []
    out: list[dict[str, Any]] = []
    for k, (train_idx, val_idx) in enumerate(GroupKFold(n_splits=n).split(np.zeros(len(forks)), groups=kernels)):
        train_k, val_k = set(kernels[train_idx].tolist()), set(kernels[val_idx].tolist())
        assert not train_k & val_k, f"fold {k}: kernels in both train and validation: {sorted(train_k & val_k)}"
        train_forks = [forks[i] for i in train_idx]
        groups = groups_of(train_forks, pools, seed, params)
        if not groups:
            continue
        if progress is not None:
            progress(f"fold {k + 1}/{n}: training on {len(groups)} forks")
        model = train(design(train_forks, groups, names, params.balance), params, seed)
        val = [forks[i] for i in val_idx]
        figures = [fork_figures(f, s) for f, s in zip(val, score_forks(model, val, names), strict=True)]
        out.append({"fold": k, "train_kernels": sorted(train_k), "validation_kernels": sorted(val_k),
                    "train_groups": len(groups), "validation_forks": len(val), **metrics.summarize(figures)})
    return out


def calibrate(forks: Sequence[Fork], scores: Sequence[np.ndarray], names: Sequence[str]) -> dict[str, Any]:
    """Price curves per target (and `any`) on the measured working rows, from the final model's scores."""
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
    for name in HEADLINE:
        values = [f[name] for f in folds if f.get(name) is not None]
        if name.startswith("top") or name.endswith("slowdown"):
            out[name] = metrics.geomean(values)
        else:
            out[name] = sum(values) / len(values) if values else None
    return out


def fit_prior(dataset_dir: Path | str, out_path: Path | str, *, pools: str = DEFAULT_POOLS, folds: int = 5, seed: int = 0,
              cards_file: Path | str | None = None, tracking_uri: str | None = None,
              tags: Mapping[str, str] | None = None, progress: Progress | None = None) -> FitResult:
    """Fits the prior on a dataset export and writes it to `out_path` (see the module's docstring).

    `tracking_uri`: MLflow's tracking URI (default `$MLFLOW_TRACKING_URI`, else
    `sqlite:///_tune/mlflow.db`); `off` logs nothing (`run_id` None). `tags` are added to the run.
    """
    check_pools(pools)
    return fit_dataset(read_dataset(dataset_dir, cards_file, progress), out_path, pools=pools, folds=folds, seed=seed,
                       tracking_uri=tracking_uri, tags=tags, progress=progress)


def fit_dataset(dataset: Dataset, out_path: Path | str, *, pools: str = DEFAULT_POOLS, folds: int = 5, seed: int = 0,
                params: Params | None = None, tracking_uri: str | None = None, tags: Mapping[str, str] | None = None,
                progress: Progress | None = None, fits_dir: Path = FITS_DIR, install: bool = False) -> FitResult:
    """`fit_prior` on forks already read (the bench and the installed prior's refit use it directly).

    `install`: `out_path` may be the installed prior (only the install steps pass it)."""
    params = params or Params()
    check_pools(pools)
    forks = dataset.forks
    check_fittable(dataset)
    check_artifact_out(out_path, install=install)
    if progress is not None:
        progress(f"{len(forks)} forks; features")
    names = featurize(forks, progress)
    fold_figures = cross_validate(forks, names, pools, folds, seed, params, progress)
    if not fold_figures:
        raise PriorError(f"dataset {dataset.digest[:16]}: no cross-validation fold had a pool to train on "
                         f"({pools} pools): a fit with 0 folds is not judged, so it is not written")
    groups = groups_of(forks, pools, seed, params)
    if progress is not None:
        progress(f"final model on {len(groups)} forks")
    model = train(design(forks, groups, names, params.balance), params, seed)
    scores = score_forks(model, forks, names)
    in_sample = metrics.summarize([fork_figures(f, s) for f, s in zip(forks, scores, strict=True)])
    headline = {"cv": _mean_of_folds(fold_figures), "folds": len(fold_figures), "train_groups": len(groups),
                "undescribed_pools": dataset.undescribed_pools}
    now = _dt.datetime.now(_dt.UTC).replace(microsecond=0)
    doc: dict[str, Any] = {
        "format": ARTIFACT_FORMAT, "feature_version": FEATURE_VERSION, "features": list(names),
        "provenance": {"dataset_digest": dataset.digest, "content_digest": dataset.content_digest(), "pools": pools, "folds": folds, "seed": seed,
                       "params": params.to_json(), "code_revision": code_revision()},
        "metrics": headline, "calibration": calibrate(forks, scores, names), "model": model_json(model)}
    trees = parse_model(doc["model"], len(names))
    for fork, s in zip(forks[:3], scores, strict=False):
        if not np.allclose(trees.predict(fork.features.matrix(names)), s, rtol=0, atol=1e-9):
            raise RuntimeError(f"the numpy evaluator disagrees with CatBoost on fork {fork.key}: not written")
    digest = hashlib.sha256(artifact_text(doc).encode("utf-8")).hexdigest()[:12]
    fit_dir = Path(fits_dir) / f"{now.strftime('%Y%m%dT%H%M%SZ')}-{digest}"
    report = {"feature_version": FEATURE_VERSION, "dataset_digest": dataset.digest, "pools": pools, "seed": seed,
              "params": params.to_json(), "folds": fold_figures, "mean": headline["cv"], "in_sample": in_sample,
              "undescribed_pools": dataset.undescribed_pools, "undescribed_cards": dataset.undescribed_cards,
              "train_groups": len(groups), "forks": len(forks)}
    artifact = write_artifact(doc, out_path, install=install)
    fit_dir = fresh_folder(fit_dir.parent, fit_dir.name)  # two identical fits in one second get two folders
    metrics_path = fit_dir / "metrics.json"
    atomic_write_text(metrics_path, json.dumps(report, indent=1, sort_keys=True, allow_nan=False) + "\n")
    run_id = None
    uri = tracking_uri if tracking_uri is not None else os.environ.get("MLFLOW_TRACKING_URI")
    if uri != "off":
        from emmy_core.prior.tracking import log_fit

        run_id = log_fit(uri, doc, report, artifact, metrics_path, dict(tags or {}))
    return FitResult(artifact, fit_dir, report, run_id)
