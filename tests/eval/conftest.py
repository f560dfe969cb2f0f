"""Fixtures of the evaluation's tests: the repository freeze as an export (the prior tests' fixture),
small exports built from Kernel Tuner caches written here (pools of known sizes, times and failures,
imported through the real importer), and prior artifacts written by hand whose scores are known (a
constant one; one that ranks by a single extern knob)."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import pytest

from emmy_core.prior import FEATURE_VERSION
from emmy_core.prior.artifact import ARTIFACT_FORMAT, write_artifact
from tests.prior.conftest import freeze_export  # noqa: F401  (the repository freeze as an export)

CARD = "NVIDIA RTX A4000"  # in the packaged card table, so its pools are described
Entry = tuple[int, float | str]  # (value of knob `tile`, time in ms or a Kernel Tuner failure string)


def cache_doc(kernel: str, entries: Sequence[Entry], card: str = CARD, problem: int = 4096) -> dict:
    """A Kernel Tuner cache of one knob `tile`, its entries in the order given (the file's own order)."""
    cache = {}
    for tile, time in entries:
        entry: dict[str, object] = {"tile": tile, "time": time, "compile_time": 1.0, "benchmark_time": 1.0}
        if not isinstance(time, str):
            entry["times"] = [time, time]
        cache[str(tile)] = entry
    return {"device_name": card, "kernel_name": kernel, "problem_size": [problem],
            "tune_params_keys": ["tile"], "tune_params": {"tile": sorted(t for t, _ in entries)},
            "objective": "time", "cache": cache}


@pytest.fixture
def caches_export(tmp_path: Path) -> Callable[..., tuple[Path, list[Path]]]:
    """Writes caches (kernel name -> entries), imports and exports them: (export folder, cache files)."""

    def make(pools: Mapping[str, Sequence[Entry]], card: str = CARD) -> tuple[Path, list[Path]]:
        from emmy_core.exchange.export import export_db
        from emmy_core.exchange.importer import import_db

        files = []
        for kernel, entries in pools.items():
            f = tmp_path / f"{kernel}.json"
            f.write_text(json.dumps(cache_doc(kernel, entries, card)))
            files.append(f)
        outcomes = import_db(tmp_path / "toy.db", files, fresh=True)
        assert all(o.ok for o in outcomes), [o.message for o in outcomes]
        export_db(tmp_path / "toy.db", tmp_path / "export")
        return tmp_path / "export", files

    return make


def artifact(path: Path, features: list[str], trees: list[dict], scale: float = 1.0) -> Path:
    """A prior artifact with the trees given (CatBoost's JSON tree format), no price curves."""
    doc = {"format": ARTIFACT_FORMAT, "feature_version": FEATURE_VERSION, "features": features,
           "provenance": {"dataset_digest": "hand-written", "pools": "measured", "seed": 0, "time": "test"},
           "metrics": {}, "calibration": {}, "transfer": {"version": 1, "cards": {}, "pools": []},
           "ranking": {"weight": 0.0, "mode": "ranker", "source": "tr.score"},
           "model": {"features_info": {"float_features": [
               {"feature_index": i, "flat_feature_index": i, "nan_value_treatment": "AsFalse"}
               for i in range(len(features))]}, "oblivious_trees": trees, "scale_and_bias": [scale, [0.0]]}}
    return write_artifact(doc, path)


@pytest.fixture
def constant_prior(tmp_path: Path) -> Path:
    """A prior whose every score is equal: every pool is one plateau."""
    tree = {"splits": [{"split_type": "FloatFeature", "float_feature_index": 0, "border": 1.5}],
            "leaf_values": [0.5, 0.5]}  # one tree whose leaves agree (a prior with no trees is refused)
    return artifact(tmp_path / "constant.json", ["x.tile"], [tree])


@pytest.fixture
def tile_prior(tmp_path: Path) -> Path:
    """A prior that scores tile 1 < tile 2 < tile 3 (a larger tile first)."""
    tree = {"splits": [{"split_type": "FloatFeature", "float_feature_index": 0, "border": 1.5},
                       {"split_type": "FloatFeature", "float_feature_index": 0, "border": 2.5}],
            "leaf_values": [0.0, 1.0, 0.0, 2.0]}
    return artifact(tmp_path / "tile.json", ["x.tile"], [tree])
