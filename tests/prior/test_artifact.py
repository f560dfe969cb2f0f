"""The artifact: strict loading, the numpy evaluator held to CatBoost, round trips and reproducible trees."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from emmy_core.prior import FEATURE_VERSION, PriorError, load_prior
from emmy_core.prior.artifact import artifact_text
from emmy_core.prior.dataset import read_dataset
from emmy_core.prior.featurize import featurize, transfer_view
from emmy_core.prior.fit import score_forks
from emmy_core.prior.training import design, model_json, train, training_groups
from tests.prior.conftest import SMALL


def _doc(small_fit: tuple) -> dict:
    return json.loads(small_fit[0].artifact_path.read_text())


def _write(tmp_path: Path, doc: dict | str, name: str = "w.json") -> Path:
    p = tmp_path / name
    p.write_text(doc if isinstance(doc, str) else json.dumps(doc))
    return p


def test_a_stale_feature_version_is_refused_naming_both_versions(small_fit: tuple, tmp_path: Path) -> None:
    doc = _doc(small_fit)
    path = _write(tmp_path, {**doc, "feature_version": FEATURE_VERSION + 41})
    with pytest.raises(PriorError, match=rf"w\.json: written with feature version {FEATURE_VERSION + 41}; "
                                         rf"this Emmy computes feature version {FEATURE_VERSION}\b"):
        load_prior(path)


@pytest.mark.parametrize(("change", "why"), [
    (lambda d: d.pop("model"), r"\$\.model is missing"),
    (lambda d: d.update(format="something"), r"\$\.format"),
    (lambda d: d.update(extra=1), r"\$\.extra is not a field"),
    (lambda d: d["model"]["oblivious_trees"][0]["leaf_values"].pop(), r"oblivious_trees\[0\]\.leaf_values"),
    (lambda d: d["model"]["oblivious_trees"][1]["splits"][0].update(float_feature_index=10**6),
     r"float_feature_index must be in"),
    (lambda d: d["model"]["oblivious_trees"][0]["splits"][0].update(split_type="OneHotFeature"),
     "only FloatFeature splits"),
    (lambda d: d["calibration"].update(any={"a": 1.0, "b": 2.0, "c": 0.0, "rows": 9}), "b must be <= 0"),
    (lambda d: d.update(features=d["features"][:-1]), r"float_features|float_feature_index"),
])
def test_a_malformed_artifact_is_refused_naming_the_file_and_the_field(small_fit: tuple, tmp_path: Path,
                                                                       change, why: str) -> None:
    doc = _doc(small_fit)
    change(doc)
    with pytest.raises(PriorError, match=rf"w\.json: .*{why}"):
        load_prior(_write(tmp_path, doc))


def test_a_missing_or_unreadable_artifact_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(PriorError, match=r"absent\.json: no such prior artifact"):
        load_prior(tmp_path / "absent.json")
    with pytest.raises(PriorError, match=r"w\.json: not valid JSON"):
        load_prior(_write(tmp_path, '{"format": "emmy-prior", "x": NaN}'))


def test_an_artifact_nested_too_deeply_or_repeating_a_key_is_refused_naming_the_file(tmp_path: Path) -> None:
    with pytest.raises(PriorError, match=r"deep\.json: not valid JSON: maximum recursion depth"):
        load_prior(_write(tmp_path, "[" * 100_000 + "]" * 100_000, "deep.json"))
    with pytest.raises(PriorError, match=r"twice\.json: not valid JSON: key 'format' repeated"):
        load_prior(_write(tmp_path, '{"format": "emmy-prior", "format": "emmy-prior"}', "twice.json"))


def test_the_numpy_evaluator_equals_catboosts_predict_within_1e_9(freeze_export: Path) -> None:
    dataset = read_dataset(freeze_export)
    names = featurize(dataset.forks)
    model = train(design(dataset.forks, training_groups(dataset.forks, "both", 3), names), SMALL, 3)
    from emmy_core.prior.trees import parse_model

    trees = parse_model(model_json(model), len(names))
    rows = np.vstack([f.features.matrix(names) for f in dataset.forks])
    assert np.isnan(rows).any(), "the rows must exercise missing values"
    np.testing.assert_allclose(trees.predict(rows), model.predict(rows), rtol=0, atol=1e-9)


def test_a_json_round_trip_predicts_the_same_order_in_every_group_within_1e_12(
        small_fit: tuple, freeze_export: Path) -> None:
    from catboost import CatBoostRanker

    result, _ = small_fit
    prior = load_prior(result.artifact_path)
    dataset = read_dataset(freeze_export)
    doc = json.loads(result.artifact_path.read_text())
    featurize(dataset.forks)
    model = CatBoostRanker()
    model_path = result.artifact_path.with_name("model.json")
    model_path.write_text(json.dumps(doc["model"]))
    model.load_model(str(model_path), format="json")  # CatBoost reads the trees the artifact keeps
    forks = transfer_view(dataset.forks, dataset.forks)  # the transfer columns the artifact's table gives
    expected = score_forks(model, forks, prior.features)  # cards the fit measured: the model alone
    for fork, want in zip(dataset.forks, expected, strict=True):
        got = prior.score(fork.kernel, fork.sizes, fork.card, fork.setting, fork.knobs)
        assert np.abs(got - want).max() <= 1e-12, fork.key
        assert (np.argsort(-got, kind="stable") == np.argsort(-want, kind="stable")).all(), fork.key


def test_the_same_seed_fits_identical_trees_and_another_seed_does_not(freeze_export: Path) -> None:
    dataset = read_dataset(freeze_export)
    names = featurize(dataset.forks)

    def trees(seed: int) -> str:
        groups = training_groups(dataset.forks, "golden", seed)
        return json.dumps(model_json(train(design(dataset.forks, groups, names), SMALL, seed)), sort_keys=True)

    first = trees(11)
    assert trees(11) == first
    assert trees(12) != first


def test_the_artifact_text_is_canonical(small_fit: tuple) -> None:
    text = small_fit[0].artifact_path.read_text()
    assert artifact_text(json.loads(text)) == text


def test_the_evaluator_reads_a_constant_tree_and_shallower_trees_beside_deeper_ones() -> None:
    from emmy_core.prior.trees import parse_model

    feature = {"borders": [0.5, 2.0], "feature_index": 0, "flat_feature_index": 0, "nan_value_treatment": "AsTrue"}
    model = {"features_info": {"float_features": [feature]}, "scale_and_bias": [2.0, [1.0]], "oblivious_trees": [
        {"leaf_values": [0.25], "splits": None},
        {"leaf_values": [1.0, 3.0], "splits": [{"border": 0.5, "float_feature_index": 0, "split_type": "FloatFeature"}]},
        {"leaf_values": [0.0, 10.0, 20.0, 30.0], "splits": [
            {"border": 0.5, "float_feature_index": 0, "split_type": "FloatFeature"},
            {"border": 2.0, "float_feature_index": 0, "split_type": "FloatFeature"}]}]}
    trees = parse_model(model, 1)
    got = trees.predict(np.array([[0.0], [1.0], [5.0], [np.nan]]))
    # x=0: 0.25+1+0; x=1: 0.25+3+10; x=5: 0.25+3+30; NaN answers true (AsTrue): as x=5
    np.testing.assert_allclose(got, 2.0 * np.array([1.25, 13.25, 33.25, 33.25]) + 1.0)


def test_a_pools_flat_gather_sums_the_trees_as_the_per_tree_loop_does_bit_for_bit(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Small row counts (a fork's pool) take one gather; a dataset the per-tree loop: the same scores."""
    import emmy_core.prior.trees as trees_module
    from emmy_core.prior import load_installed_prior

    trees = load_installed_prior().trees
    rng = np.random.default_rng(0)
    for n in (1, 2, 24, 300):
        x = rng.normal(size=(n, trees.n_features)) * 4
        x[rng.random(x.shape) < 0.1] = np.nan
        flat = trees.predict(x)
        monkeypatch.setattr(trees_module, "FLAT_ROWS", 0)
        loop = trees.predict(x)
        monkeypatch.undo()
        assert np.array_equal(flat, loop), n


def test_pricing_a_row_of_a_scored_pool_equals_pricing_that_candidate_alone() -> None:
    """The resolver prices a pool's top from the rows it scored: a row does not depend on its pool."""
    from emmy_core.ir.builders import matmul
    from emmy_core.knobs import candidates
    from emmy_core.prior import load_installed_prior
    from tests.prior.test_installed import OTHER_CPU

    prior = load_installed_prior()
    kernel = matmul("T", 688, 256, "f32", b_transposed=True, hints={"T": 128})
    pool = [dict(c) for c in candidates(kernel, OTHER_CPU)]
    rows = prior.rows(kernel, {"T": 128}, OTHER_CPU, "deploy", pool)
    scores = prior.score_rows(rows)
    shipped, own = prior.scored(rows, OTHER_CPU)
    assert shipped.tolist() == prior.score_rows(rows, OTHER_CPU).tolist()
    for i in (0, len(pool) // 2, len(pool) - 1):
        alone = prior.price(kernel, {"T": 128}, OTHER_CPU, "deploy", [pool[i]])
        assert prior.price_rows(kernel, OTHER_CPU, rows[i:i + 1], scores[i:i + 1]).tolist() == alone.tolist()
        # the trees' own scores kept from scoring the pool price a row as predicting it again does
        assert prior.price_rows(kernel, OTHER_CPU, rows[i:i + 1], shipped[i:i + 1], own=own[i:i + 1]).tolist() \
            == alone.tolist()
