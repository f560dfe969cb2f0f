"""The installed prior: ships in the package, reproduces from the committed freeze with its recorded seed,
changes no byte when a prior of the same trees and metrics is installed again, and scores and prices
candidates for a card it was not fitted on."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np

from emmy_core.chain.steps import refit_installed
from emmy_core.ir.builders import matmul, rmsnorm
from emmy_core.knobs import candidates
from emmy_core.prior import installed_prior_path, load_installed_prior
from emmy_core.prior.installed import recorded_seed
from emmy_core.prior.provenance import content_digest, content_of, install_artifact
from emmy_core.targets import Card
from tests.prior.conftest import FREEZES

VARIES = ("code_revision",)  # the commit fitted from: not content (emmy_core.prior.provenance)
OTHER_CPU = Card(name="Other CPU x8", target="cpu", arch="x86_64", compute_capability="", tensor_cores=(),
                 source="test", cores=8, l1d_kib=32.0, l2_kib=1024.0, l3_kib=32768.0, simd_bits=256, freq_mhz=3000.0)


def test_the_shipped_prior_reproduces_from_the_committed_freeze_with_its_recorded_seed(tmp_path: Path) -> None:
    """If this fails after a change to the freeze, the features or the candidate space: `emmy fit --install`."""
    shipped_bytes = installed_prior_path().read_bytes()
    shipped = json.loads(shipped_bytes)
    target = tmp_path / "installed.json"
    shutil.copyfile(installed_prior_path(), target)  # a refit installs over a copy of the shipped prior
    result = refit_installed(FREEZES, target, seed=recorded_seed(), tracking_uri="off", fits_dir=tmp_path / "fits")
    again = json.loads(result.artifact_path.read_text())
    assert "time" not in again["provenance"]  # no wall-clock time in an artifact
    assert again["provenance"]["content_digest"] == shipped["provenance"]["content_digest"], \
        "the shipped prior was fitted on another freeze: run `emmy fit --install`"
    for field in ("feature_version", "features"):
        assert again[field] == shipped[field], field
    assert {k: v for k, v in again["provenance"].items() if k not in VARIES} == \
        {k: v for k, v in shipped["provenance"].items() if k not in VARIES}
    assert again["model"] == shipped["model"], "the same freeze and seed must fit the same trees"
    for key, curve in shipped["calibration"].items():
        assert np.allclose([again["calibration"][key][c] for c in "abc"], [curve[c] for c in "abc"], atol=1e-9)
    for field in ("metrics", "ranking", "transfer", "format"):  # every figure a fit records, none missing or new
        assert again[field] == shipped[field], f"the shipped prior's {field} is not what this code fits: " \
            "run `emmy fit --install` and commit emmy_core/prior/installed.json"
    assert content_of(again) == content_of(shipped)
    assert target.read_bytes() == shipped_bytes, "installing the same prior must change no byte of it"


def test_reinstalling_a_prior_of_the_same_trees_and_metrics_changes_no_byte(tmp_path: Path) -> None:
    target = tmp_path / "installed.json"
    shutil.copyfile(installed_prior_path(), target)
    before = target.read_bytes()
    same = json.loads(before)
    same["provenance"]["code_revision"] = "0" * 40  # fitted again at another commit, same trees and metrics
    assert content_digest(same) == content_digest(json.loads(before))
    assert install_artifact(same, target) is False and target.read_bytes() == before
    other = json.loads(before)
    other["metrics"]["folds"] += 1  # another fit: installed, atomically
    assert install_artifact(other, target) is True and json.loads(target.read_text()) == other
    assert content_digest(other) != content_digest(same)


def test_the_installed_prior_scores_and_prices_a_card_it_was_not_fitted_on() -> None:
    prior = load_installed_prior()
    kernel = matmul(512, 512, 512)
    pool = candidates(kernel, OTHER_CPU)
    scores = prior.score(kernel, {}, OTHER_CPU, "deploy", pool)
    prices = prior.price(kernel, {}, OTHER_CPU, "deploy", pool)
    assert scores.shape == (len(pool),) and scores.dtype == np.float64 and np.isfinite(scores).all()
    assert (prices > 0).all()
    # prices follow the trees' own scores (the scale the curves are fitted on), which are the shipped scores
    # only where the prior ranks this card by its model alone; else the shipped order is the rule's or a blend
    own = scores if prior.model_alone(OTHER_CPU) else prior.trees.predict(
        prior.rows(kernel, {}, OTHER_CPU, "deploy", pool))
    assert (np.argsort(prices, kind="stable")[:1] == np.argsort(-own, kind="stable")[:1]).all()
    norm = rmsnorm(4096)
    total = prior.price(kernel, {}, OTHER_CPU, "deploy", pool[:1]) + prior.price(norm, "B=8", OTHER_CPU, "deploy",
                                                                               candidates(norm, OTHER_CPU)[:1])
    assert total.shape == (1,) and np.isfinite(total).all()  # prices of several kernels sum
    described_nowhere = prior.score(kernel, {}, None, "deploy", pool)
    assert np.isfinite(described_nowhere).all()
