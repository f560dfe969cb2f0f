"""A numpy evaluator of CatBoost's oblivious trees, read from CatBoost's own JSON model format.

Scoring needs no catboost (the compile path imports without it). An oblivious tree of depth
d asks the same d questions of every row, `value > border` on one feature each (in float32, as CatBoost compares); the answers
are the bits of the leaf index (the first split is bit 0) and the leaf holds the tree's
value. The model's prediction is `scale * sum of the trees' leaf values + bias`. A missing
value (NaN) answers as the feature's `nan_value_treatment` says: `AsFalse` (CatBoost's
default `nan_mode` Min), `AsTrue` (Max) or `AsIs` (a NaN compares false).

`parse_model` is strict: only float features and `FloatFeature` splits (no categorical
features, no CTRs, no multi-dimensional leaves), every index in range, `2**depth` finite
leaf values per tree, and bounded: at most MAX_TREES trees, MAX_DEPTH levels and MAX_LEAVES
leaf values in all. Leaves are kept tree after tree (a shallow tree holds only its own), and
`predict` works through a pool's rows, or a dataset's trees, in blocks whose tables stay under
BLOCK_ROW_BYTES, so
neither loading nor scoring asks for memory a file did not bring (a 4 MB "bomb" of one
depth-16 tree beside 99,999 constant ones asked for 48.8 GiB of padded leaves). A test holds
`Trees.predict` equal to CatBoost's `predict` within 1e-9.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

NAN_TREATMENTS = ("AsFalse", "AsTrue", "AsIs")
MAX_TREES = 100_000
MAX_DEPTH = 16
MAX_LEAVES = 1 << 22  # leaf values in all the trees (32 MiB of float64)
BLOCK_ROW_BYTES = 16 * 1024 * 1024  # a block of rows' bins and leaf indices
FLAT_ROWS = 512  # rows at most scored by block gathers (a fork's pool); more take the per-tree loop
BLOCK_BYTES = 64 * 1024  # a gather block's temporaries, well under malloc's 128 KiB mmap threshold


class ModelFormatError(ValueError):
    """The model is not one this evaluator reads; the message names the JSON path at fault."""


@dataclass(frozen=True)
class Trees:
    """Oblivious trees as arrays, evaluated on binned features.

    Each feature a split reads (`used`) has its sorted distinct `borders`; a value's bin is the
    count of borders below it, so `value > border` is `bin > rank of the border`. A missing
    value's bin answers false to every question (AsFalse, AsIs) or true (AsTrue). `level_feature`
    and `level_rank` are (trees, depth): the used feature and the border rank each level asks
    (a padded level of a shallower tree reads the all-false row `len(used)`). `leaves` holds each
    tree's `2**its depth` values after the previous tree's, from `offsets[tree]` (a leaf index
    never passes its own tree's count: the padded levels answer false)."""

    n_features: int
    used: np.ndarray
    borders: tuple[np.ndarray, ...]
    nan_false: np.ndarray
    level_feature: np.ndarray
    level_rank: np.ndarray
    leaves: np.ndarray
    offsets: np.ndarray
    scale: float
    bias: float

    def predict(self, x: np.ndarray) -> np.ndarray:
        """One raw score per row of `x` (rows x n_features, float64)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"expected rows of {self.n_features} features, got shape {x.shape}")
        n = x.shape[0]
        trees = self.level_feature.shape[0]
        if trees == 0:
            return np.full(n, self.bias)
        columns = np.ascontiguousarray(x.T, dtype=np.float32)  # CatBoost compares features as float32
        if n > FLAT_ROWS:  # a dataset: tree after tree (a small leaf table stays in cache), in blocks of trees
            bins = self._bins(columns)
            step = max(1, BLOCK_ROW_BYTES // (5 * n))  # a block's leaf index, its bit, an answer
            total = np.zeros(n)
            for first in range(0, trees, step):  # the sum runs in tree order whatever the blocks
                index = self._leaf_index(bins, first, min(trees, first + step))
                for t in range(index.shape[0]):
                    total += self.leaves.take(index[t].astype(np.intp) + self.offsets[first + t])
            return self.scale * total + self.bias
        # a fork's pool: gathers over all trees at once, in blocks of rows (each row's sum is its own)
        step = max(1, BLOCK_ROW_BYTES // (5 * trees + len(self.used) + 1))
        total = np.empty(n)
        for start in range(0, n, step):
            stop = min(n, start + step)
            total[start:stop] = self._gather_sum(self._leaf_index(self._bins(columns[:, start:stop]), 0, trees))
        return self.scale * total + self.bias

    def _bins(self, columns: np.ndarray) -> np.ndarray:
        """(used features + 1, rows): each used feature's bin per row of `columns` (features x rows, float32);
        the last row is the padding levels' all-false row."""
        most = max((len(b) for b in self.borders), default=0)
        bins = np.zeros((len(self.used) + 1, columns.shape[1]), dtype=np.uint8 if most < 255 else np.int32)
        for j, f in enumerate(self.used):
            col = columns[f]
            bins[j] = np.searchsorted(self.borders[j], col, side="left")  # NaN sorts last: above every border
            if self.nan_false[j]:
                bins[j][np.isnan(col)] = 0
        return bins

    def _leaf_index(self, bins: np.ndarray, first: int, stop: int) -> np.ndarray:
        """(stop - first, rows): the leaf each of trees first..stop-1 gives each row of `bins`."""
        features, ranks = self.level_feature[first:stop], self.level_rank[first:stop].astype(bins.dtype)
        depth = features.shape[1]
        index = np.zeros((stop - first, bins.shape[1]), dtype=np.uint8 if depth <= 8 else np.uint16)
        bit = np.empty_like(index)
        for level in range(depth):
            answer = np.greater(bins[features[:, level]], ranks[:, level, None])
            np.left_shift(answer.view(np.uint8) if index.dtype == np.uint8 else answer.astype(index.dtype), level,
                          out=bit)
            index |= bit
        return index

    def _gather_sum(self, index: np.ndarray) -> np.ndarray:
        """Each row's leaf values summed in tree order, one gather per block of rows.

        numpy adds a (trees, w) block down axis 0 row after row (the per-tree loop's order) when
        w >= 2; one column alone it would sum pairwise, so a lone row takes `cumsum`. Blocks stay
        under BLOCK_BYTES: temporaries past malloc's mmap threshold cost a page fault per page."""
        trees, n = index.shape
        flat = self.leaves
        offsets = self.offsets[:, None]
        if n == 1:
            return np.cumsum(flat.take(index + offsets), axis=0)[-1]
        step = max(2, BLOCK_BYTES // (8 * trees))
        total = np.empty(n)
        start = 0
        while start < n:
            stop = min(n, start + step)
            if n - stop == 1:  # never leave one row to a block of its own
                stop = n
            total[start:stop] = flat.take(index[:, start:stop] + offsets).sum(axis=0)
            start = stop
        return total


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
    n_leaves = 0
    questions: dict[tuple[int, float], int] = {}
    levels: list[list[int]] = []
    leaves: list[list[float]] = []
    depth = 0
    for t, tree in enumerate(trees):
        path = f"$.model.oblivious_trees[{t}]"
        if not isinstance(tree, dict):
            raise _fail(path, "must be an object")
        raw = tree.get("splits")  # a tree of no split (a constant) has null splits
        splits = [] if raw is None else _list(raw, path + ".splits", MAX_DEPTH)
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
        n_leaves += len(values)
        if n_leaves > MAX_LEAVES:
            raise _fail(path + ".leaf_values", f"brings the trees' leaf values past {MAX_LEAVES} in all")
        leaves.append([_number(v, f"{path}.leaf_values[{i}]") for i, v in enumerate(values)])
        levels.append(row)
        depth = max(depth, len(splits))
    sb = model.get("scale_and_bias", [1.0, [0.0]])
    if not (isinstance(sb, list) and len(sb) == 2 and isinstance(sb[1], list) and len(sb[1]) == 1):
        raise _fail("$.model.scale_and_bias", "must be [scale, [bias]] (one output dimension)")
    scale, bias = _number(sb[0], "$.model.scale_and_bias[0]"), _number(sb[1][0], "$.model.scale_and_bias[1][0]")
    by_feature: dict[int, list[float]] = {}
    for feature, border in questions:
        by_feature.setdefault(feature, []).append(border)
    used = sorted(by_feature)
    borders = tuple(np.array(sorted(set(by_feature[f])), dtype=np.float32) for f in used)
    slot = {f: j for j, f in enumerate(used)}
    rank = {(f, b): int(np.searchsorted(borders[slot[f]], np.float32(b))) for f, b in questions}
    keys = list(questions)
    level_feature = np.full((len(trees), depth), len(used), dtype=np.intp)  # len(used): the all-false row
    level_rank = np.zeros((len(trees), depth), dtype=np.int32)
    leaf_arr = np.array([v for vals in leaves for v in vals], dtype=np.float64)
    offsets = np.zeros(len(trees), dtype=np.intp)
    np.cumsum([len(vals) for vals in leaves[:-1]], out=offsets[1:])
    for t, row in enumerate(levels):
        for d, q in enumerate(row):
            f, b = keys[q]
            level_feature[t, d], level_rank[t, d] = slot[f], rank[(f, b)]
    nan_false = np.array([not nan_true[f] for f in used], dtype=bool)
    return Trees(n_features, np.array(used, dtype=np.intp), borders, nan_false, level_feature, level_rank, leaf_arr,
                 offsets, scale, bias)
