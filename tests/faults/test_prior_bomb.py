"""A prior artifact cannot make Emmy ask for memory it did not bring: trees, depth and leaf values are
bounded at load (refused naming the file and the field), leaves are kept per tree (no padding to the
deepest), and scoring works through rows (a pool) or trees (a dataset) in blocks, with the same scores
to the bit."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import numpy as np
import pytest

from emmy_core.prior import trees as trees_mod
from emmy_core.prior.artifact import PriorError, installed_prior_path, load_installed_prior, load_prior

BOMB_MIB = 128  # what loading and scoring the bomb may hold at its peak (it asked for 48.8 GiB)


def _deep(depth: int, value: float = 0.5) -> dict:
    return {"leaf_values": [value] * 2**depth, "splits": [
        {"border": 0.5 + i, "float_feature_index": 0, "split_index": i, "split_type": "FloatFeature"}
        for i in range(depth)]}


def _artifact(tmp_path: Path, name: str, trees: list) -> Path:
    doc = json.loads(installed_prior_path().read_text())
    doc["model"]["oblivious_trees"] = trees
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path


def test_a_prior_bomb_loads_and_scores_in_bounded_memory(tmp_path: Path) -> None:
    """One depth-16 tree beside 99,999 constant trees: 4 MB of JSON, scored within BOMB_MIB."""
    path = _artifact(tmp_path, "bomb.json", [_deep(16)] + [{"leaf_values": [0.25], "splits": None}] * 99_999)
    prior = load_prior(path)
    held = sum(a.nbytes for a in (prior.trees.leaves, prior.trees.offsets, prior.trees.level_feature,
                                  prior.trees.level_rank))
    assert held < BOMB_MIB * 2**20, f"the bomb's trees hold {held / 2**20:.0f} MiB"
    tracemalloc.start()  # numpy reports its buffers to tracemalloc
    try:
        rows = np.zeros((7, prior.trees.n_features))  # a fork's pool, as a compile scores it
        scores = prior.trees.predict(rows)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < BOMB_MIB * 2**20, f"scoring the bomb held {peak / 2**20:.0f} MiB at its peak"
    assert prior.trees.leaves.size == 2**16 + 99_999
    want = prior.trees.scale * (0.5 + 99_999 * 0.25) + prior.trees.bias
    assert np.allclose(scores, want)


def test_trees_past_the_bound_on_leaf_values_are_refused_naming_the_file_and_the_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bound (32 MiB of leaf values) lowered to three deep trees' worth, so the file stays small."""
    assert trees_mod.MAX_LEAVES * 8 <= 32 * 2**20
    monkeypatch.setattr(trees_mod, "MAX_LEAVES", 2 * 2**16 + 5)
    over = 3
    path = _artifact(tmp_path, "too-many-leaves.json", [_deep(16, 0.0)] * over)
    with pytest.raises(PriorError, match=rf"too-many-leaves\.json: .*oblivious_trees\[{over - 1}\]\.leaf_values: "
                                         rf"brings the trees' leaf values past {trees_mod.MAX_LEAVES}"):
        load_prior(path)


def test_a_tree_deeper_than_the_bound_is_refused_naming_the_file_and_the_field(tmp_path: Path) -> None:
    path = _artifact(tmp_path, "too-deep.json", [_deep(17)])
    with pytest.raises(PriorError, match=r"too-deep\.json: .*oblivious_trees\[0\]\.splits: must be a list of at "
                                         r"most 16"):
        load_prior(path)


def test_more_trees_than_the_bound_are_refused_naming_the_file_and_the_field(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trees_mod, "MAX_TREES", 1000)
    path = _artifact(tmp_path, "too-many-trees.json", [{"leaf_values": [0.0], "splits": None}] *
                     (trees_mod.MAX_TREES + 1))
    with pytest.raises(PriorError, match=r"too-many-trees\.json: .*oblivious_trees: must be a list of at most"):
        load_prior(path)


def test_scoring_in_blocks_gives_the_installed_priors_scores_bit_for_bit(monkeypatch: pytest.MonkeyPatch) -> None:
    """Blocks of one or a few rows (a pool) or trees (a dataset) give the scores one block gives, to the bit."""
    trees = load_installed_prior().trees
    rng = np.random.default_rng(0)
    rows = rng.normal(size=(700, trees.n_features)) * 100
    rows[rng.random(size=rows.shape) < 0.1] = np.nan
    whole = [trees.predict(rows[:n]) for n in (1, 2, 33, 700)]
    per_row = 5 * trees.level_feature.shape[0] + 4 * (len(trees.used) + 1)
    for rows_per_block in (1, 3):
        monkeypatch.setattr(trees_mod, "BLOCK_ROW_BYTES", per_row * rows_per_block)
        blocked = [trees.predict(rows[:n]) for n in (1, 2, 33, 700)]
        assert all(a.tobytes() == b.tobytes() for a, b in zip(whole, blocked, strict=True))
