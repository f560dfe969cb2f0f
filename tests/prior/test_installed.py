"""The installed prior: ships in the package, reproduces from the committed freeze with its recorded seed,
and scores and prices candidates for a card it was not fitted on."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from emmy_core.ir.builders import matmul, rmsnorm
from emmy_core.knobs import candidates
from emmy_core.prior import installed_prior_path, load_installed_prior
from emmy_core.prior.installed import recorded_seed, refit_installed
from emmy_core.targets import Card
from tests.prior.conftest import FREEZES

VARIES = ("time", "code_revision", "dataset_digest")  # an import stamps its rows: each export's digest differs
OTHER_CPU = Card(name="Other CPU x8", target="cpu", arch="x86_64", compute_capability="", tensor_cores=(),
                 source="test", cores=8, l1d_kib=32.0, l2_kib=1024.0, l3_kib=32768.0, simd_bits=256, freq_mhz=3000.0)


def test_the_shipped_prior_reproduces_from_the_committed_freeze_with_its_recorded_seed(tmp_path: Path) -> None:
    """If this fails after a change to the freeze, the features or the candidate space: `emmy fit --install`."""
    shipped = json.loads(installed_prior_path().read_text())
    result = refit_installed(FREEZES, tmp_path / "again.json", seed=recorded_seed(), tracking_uri="off",
                             fits_dir=tmp_path / "fits")
    again = json.loads(result.artifact_path.read_text())
    assert again["provenance"]["content_digest"] == shipped["provenance"]["content_digest"], \
        "the shipped prior was fitted on another freeze: run `emmy fit --install`"
    for field in ("feature_version", "features"):
        assert again[field] == shipped[field], field
    assert {k: v for k, v in again["provenance"].items() if k not in VARIES} == \
        {k: v for k, v in shipped["provenance"].items() if k not in VARIES}
    assert again["model"] == shipped["model"], "the same freeze and seed must fit the same trees"
    for key, curve in shipped["calibration"].items():
        assert np.allclose([again["calibration"][key][c] for c in "abc"], [curve[c] for c in "abc"], atol=1e-9)


def test_the_installed_prior_scores_and_prices_a_card_it_was_not_fitted_on() -> None:
    prior = load_installed_prior()
    kernel = matmul(512, 512, 512)
    pool = candidates(kernel, OTHER_CPU)
    scores = prior.score(kernel, {}, OTHER_CPU, "deploy", pool)
    prices = prior.price(kernel, {}, OTHER_CPU, "deploy", pool)
    assert scores.shape == (len(pool),) and scores.dtype == np.float64 and np.isfinite(scores).all()
    assert (prices > 0).all()
    assert (np.argsort(prices, kind="stable")[:1] == np.argsort(-scores, kind="stable")[:1]).all()
    norm = rmsnorm(4096)
    total = prior.price(kernel, {}, OTHER_CPU, "deploy", pool[:1]) + prior.price(norm, "B=8", OTHER_CPU, "deploy",
                                                                               candidates(norm, OTHER_CPU)[:1])
    assert total.shape == (1,) and np.isfinite(total).all()  # prices of several kernels sum
    described_nowhere = prior.score(kernel, {}, None, "deploy", pool)
    assert np.isfinite(described_nowhere).all()
