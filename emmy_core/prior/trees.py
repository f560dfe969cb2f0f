"""A numpy evaluator of CatBoost's oblivious trees, read from CatBoost's own JSON model format.

Scoring needs no catboost (the compile path imports without it). An oblivious tree of depth
d asks the same d questions of every row, `value > border` on one feature each; the answers
are the bits of the leaf index (the first split is bit 0) and the leaf holds the tree's
value. The model's prediction is `scale * sum of the trees' leaf values + bias`. A missing
value (NaN) answers as the feature's `nan_value_treatment` says: `AsFalse` (CatBoost's
default `nan_mode` Min), `AsTrue` (Max) or `AsIs` (a NaN compares false).

`parse_model` is strict: only float features and `FloatFeature` splits (no categorical
features, no CTRs, no multi-dimensional leaves), every index in range, `2**depth` finite
leaf values per tree. A test holds `Trees.predict` equal to CatBoost's `predict` within 1e-9.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

NAN_TREATMENTS = ("AsFalse", "AsTrue", "AsIs")
MAX_TREES = 100_000
MAX_DEPTH = 16


class ModelFormatError(ValueError):
    """The model is not one this evaluator reads; the message names the JSON path at fault."""


@dataclass(frozen=True)
class Trees:
    """Oblivious trees as arrays: per (tree, level) the split's binary-feature index; per tree its leaves.

    `split_feature`/`split_border` list the distinct (feature, border) questions; `levels` is
    (trees, depth) indexes into them (-1: a padded level that always answers false);
    `leaves` is (trees, 2**depth)."""

    n_features: int
    split_feature: np.ndarray
    split_border: np.ndarray
    split_nan_true: np.ndarray
    levels: np.ndarray
    leaves: np.ndarray
    scale: float
    bias: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        """One raw score per row of `x` (rows x n_features, float64)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"expected rows of {self.n_features} features, got shape {x.shape}")
        n = x.shape[0]
        if self.levels.shape[0] == 0:
            return np.full(n, self.bias)
        values = x[:, self.split_feature]
        answers = values > self.split_border
        nan = np.isnan(values)
        if nan.any():
            answers = np.where(nan, self.split_nan_true, answers)
        answers = np.concatenate([answers, np.zeros((n, 1), dtype=bool)], axis=1)  # column -1: padded levels
        depth = self.levels.shape[1]
        index = np.zeros((n, self.levels.shape[0]), dtype=np.int64)
        for level in range(depth):
            index |= answers[:, self.levels[:, level]].astype(np.int64) << level
        picked = np.take_along_axis(self.leaves[None, :, :], index[:, :, None], axis=2)[:, :, 0]
        return self.scale * picked.sum(axis=1) + self.bias


def _fail(path: str, why: str) -> ModelFormatError:
    return ModelFormatError(f"{path}: {why}")


def _number(value: object, path: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _fail(path, "must be a finite number")
    return float(value)


def _list(value: object, path: str, limit: int) -> list:
    if not isinstance(value, list) or len(value) > limit:
        raise _fail(path, f"must be a list of at most {limit} items")
    return value


def parse_model(model: object, n_features: int) -> Trees:
    """Reads CatBoost's JSON model (the dict `save_model(format='json')` writes) for `n_features` inputs."""
    if not isinstance(model, dict):
        raise _fail("$.model", "must be an object")
    info = model.get("features_info")
    if not isinstance(info, dict) or set(info) - {"float_features"}:
        raise _fail("$.model.features_info", "must hold float_features only (no categorical or text features)")
    floats = _list(info.get("float_features", []), "$.model.features_info.float_features", n_features)
    nan_true: list[bool] = []
    for i, f in enumerate(floats):
        path = f"$.model.features_info.float_features[{i}]"
        if not isinstance(f, dict) or f.get("feature_index") != i or f.get("flat_feature_index") != i:
            raise _fail(path, f"must describe feature {i} (feature_index and flat_feature_index)")
        treatment = f.get("nan_value_treatment", "AsIs")
        if treatment not in NAN_TREATMENTS:
            raise _fail(path, f"nan_value_treatment must be one of {', '.join(NAN_TREATMENTS)}")
        nan_true.append(treatment == "AsTrue")
    nan_true += [False] * (n_features - len(floats))
    trees = _list(model.get("oblivious_trees"), "$.model.oblivious_trees", MAX_TREES)
    questions: dict[tuple[int, float], int] = {}
    levels: list[list[int]] = []
    leaves: list[list[float]] = []
    depth = 0
    for t, tree in enumerate(trees):
        path = f"$.model.oblivious_trees[{t}]"
        if not isinstance(tree, dict):
            raise _fail(path, "must be an object")
        splits = _list(tree.get("splits"), path + ".splits", MAX_DEPTH)
        row: list[int] = []
        for s, split in enumerate(splits):
            sp = f"{path}.splits[{s}]"
            if not isinstance(split, dict) or split.get("split_type") != "FloatFeature":
                raise _fail(sp, "only FloatFeature splits are read")
            feature = split.get("float_feature_index")
            if isinstance(feature, bool) or not isinstance(feature, int) or not 0 <= feature < n_features:
                raise _fail(sp, f"float_feature_index must be in 0..{n_features - 1}")
            key = (feature, _number(split.get("border"), sp + ".border"))
            row.append(questions.setdefault(key, len(questions)))
        values = _list(tree.get("leaf_values"), path + ".leaf_values", 2**MAX_DEPTH)
        if len(values) != 2 ** len(splits):
            raise _fail(path + ".leaf_values", f"must hold 2**{len(splits)} values (one output dimension)")
        leaves.append([_number(v, f"{path}.leaf_values[{i}]") for i, v in enumerate(values)])
        levels.append(row)
        depth = max(depth, len(splits))
    sb = model.get("scale_and_bias", [1.0, [0.0]])
    if not (isinstance(sb, list) and len(sb) == 2 and isinstance(sb[1], list) and len(sb[1]) == 1):
        raise _fail("$.model.scale_and_bias", "must be [scale, [bias]] (one output dimension)")
    scale, bias = _number(sb[0], "$.model.scale_and_bias[0]"), _number(sb[1][0], "$.model.scale_and_bias[1][0]")
    level_arr = np.full((len(trees), depth), -1, dtype=np.int64)
    leaf_arr = np.zeros((len(trees), 2**depth))
    for t, (row, vals) in enumerate(zip(levels, leaves, strict=True)):
        level_arr[t, : len(row)] = row
        leaf_arr[t, : len(vals)] = vals
    feats = np.array([f for f, _ in questions], dtype=np.int64)
    borders = np.array([b for _, b in questions], dtype=np.float64)
    return Trees(n_features, feats, borders, np.array(nan_true, dtype=bool)[feats] if len(feats) else
                 np.zeros(0, dtype=bool), level_arr, leaf_arr, scale, bias)
