"""The fit: groups per fork, folds by kernel, metrics.json beside the artifact, an MLflow run, the CLI."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.ir.builders import matmul
from emmy_core.knobs import candidates
from emmy_core.prior import load_prior
from emmy_core.prior.dataset import DatasetFork
from emmy_core.prior.training import GOLDEN_SAMPLE, Params, training_groups
from emmy_core.targets import load_table
from tests.prior.conftest import SMALL


def test_no_kernel_is_in_both_train_and_validation_of_any_fold(small_fit: tuple) -> None:
    result, dataset = small_fit
    folds = result.metrics["kernel_folds"]  # the kernel split (the card split: test_card_split)
    assert len(folds) == 3
    seen: set[str] = set()
    for fold in folds:  # recorded from the index arrays the fold actually trained and validated on
        assert not set(fold["train_kernels"]) & set(fold["validation_kernels"])
        assert set(fold["train_kernels"]) | set(fold["validation_kernels"]) == {f.kernel_id for f in dataset.forks}
        seen |= set(fold["validation_kernels"])
    assert seen == {f.kernel_id for f in dataset.forks}  # every kernel validated exactly once


def test_the_fit_writes_the_artifact_a_fresh_metrics_folder_and_an_mlflow_run(small_fit: tuple, mlflow_uri: str,
                                                                              tmp_path: Path) -> None:
    from emmy_core.prior.tracking import ALL_METRICS, HEADLINE, PER_CARD, client

    result, dataset = small_fit
    prior = load_prior(result.artifact_path)
    assert prior.info["provenance"]["dataset_digest"] == dataset.digest and prior.info["provenance"]["seed"] == 7
    on_disk = json.loads((result.fit_dir / "metrics.json").read_text())
    assert on_disk == json.loads(json.dumps(result.metrics))
    mean = on_disk["mean"]
    for name in ("top1", "top5", "tau", "pick_failed", "first_slowdown", "random_slowdown"):
        assert mean[name] is not None, name
    assert mean["top1"] >= 1.0 and on_disk["split"] == "card"  # the headline: cards the fit never saw
    kernel = on_disk["kernel_mean"]
    # on known cards the prior beats a random pick; the first option's figure covers only the pools where the
    # (card-sized) first option was measured, a different set of pools, so it is no yardstick here
    assert 1.0 <= kernel["top1"] < kernel["random_slowdown"]
    for fold in on_disk["folds"] + on_disk["kernel_folds"]:
        assert fold["top1_pools"] == fold["validation_forks"] and fold["tau_pools"] > 0
    run = client(mlflow_uri).get_run(result.run_id)
    assert run.info.status == "FINISHED"
    assert run.data.tags["feature_version"] == str(prior.info["feature_version"])
    assert run.data.tags["dataset_digest"] == dataset.digest and run.data.tags["dagster_run_id"] == "run-123"
    assert run.data.params["seed"] == "7" and run.data.params["pools"] == "golden"
    assert abs(run.data.metrics["cv.top1"] - mean["top1"]) < 1e-12
    assert set(run.data.metrics) <= set(HEADLINE) and "cv.top5" in run.data.metrics  # a handful, not 180 charts
    names = {a.path for a in client(mlflow_uri).list_artifacts(result.run_id)}
    assert names == {"prior.json", "metrics.json", ALL_METRICS, PER_CARD}
    table = json.loads(Path(client(mlflow_uri).download_artifacts(result.run_id, ALL_METRICS, str(tmp_path)))
                       .read_text())  # every other figure, counts included
    figures = {row[0]: row[1] for row in table["data"]}
    spread = on_disk["ranking"]["diverse_top5"]  # whether the shipped order's head is spread, and on what figures
    assert figures["ranking.diverse"] == on_disk["ranking"]["diverse"]
    assert figures["ranking.diverse_top5.spread"] == pytest.approx(spread["spread"])
    assert figures["cv.top1_pools"] == mean["top1_pools"]


def _fork(times: list[float], ok: list[bool], golden: int | None) -> DatasetFork:
    kernel = matmul(256, 256, 256)
    pool = list(candidates(kernel, load_table()["NVIDIA H200"]))[: len(times) + 40]
    n = len(pool)
    measured = np.zeros(n, dtype=bool)
    measured[: len(times)] = True
    okm = np.zeros(n, dtype=bool)
    okm[: len(ok)] = ok
    t = np.full(n, np.nan)
    t[: len(times)] = np.where(ok, times, np.nan)
    return DatasetFork("k", "B=8", "NVIDIA H200", "deploy", kernel, None, pool, [str(i) for i in range(n)], measured, okm, t,
                golden=golden)


def test_golden_pools_rank_the_golden_above_a_seeded_sample_of_the_other_candidates() -> None:
    fork = _fork([3.0, 1.0, 2.0], [True, True, True], golden=1)
    (group,) = training_groups([fork], "golden", seed=5)
    assert group.members[0] == 1 and list(group.relevance) == [1.0] + [0.0] * (len(group.members) - 1)
    assert len(group.members) == min(GOLDEN_SAMPLE + 1, len(fork.knobs))
    (again,) = training_groups([fork], "golden", seed=5)
    (other,) = training_groups([fork], "golden", seed=6)
    assert list(again.members) == list(group.members) and list(other.members) != list(group.members)


def test_measured_pools_follow_the_measured_order_and_failed_rows_rank_last() -> None:
    fork = _fork([4.0, 1.0, 2.0, 99.0], [True, True, True, False], golden=1)
    (group,) = training_groups([fork], "measured", seed=0)
    assert list(group.members) == [0, 1, 2, 3]
    assert list(group.relevance) == [0.25, 1.0, 0.5, 0.0]
    (both,) = training_groups([fork], "both", seed=0)
    assert list(both.members) == [0, 1, 2, 3]  # a fork with a measured order teaches it
    lone = _fork([1.0], [True], golden=0)
    (fallback,) = training_groups([lone], "both", seed=0)
    assert fallback.members[0] == 0 and fallback.relevance[0] == 1.0  # else its golden pool
    with pytest.raises(ValueError, match="pools must be one of"):
        training_groups([fork], "all", seed=0)


def test_emmy_fit_writes_and_emmy_prior_info_reads(freeze_export: Path, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "w.json"
    done = CliRunner().invoke(app, ["fit", str(freeze_export), str(out), "--pools", "measured", "--folds", "2",
                                    "--seed", "3", "--tracking-uri", "off", "--iterations", str(SMALL.iterations),
                                    "--depth", str(SMALL.depth)])  # any fitted model will do: a quick recipe
    assert done.exit_code == 0, done.output
    assert f"wrote {out}" in done.output and (tmp_path / "_tune" / "fits").is_dir()
    assert '"mlflow_run": null' in done.output
    recipe = json.loads(out.read_text())["provenance"]["params"]
    assert recipe == {**Params().to_json(), "iterations": SMALL.iterations, "depth": SMALL.depth}
    info = CliRunner().invoke(app, ["prior", "info", "--file", str(out)])
    assert info.exit_code == 0, info.output
    assert "feature version" in info.output and "pools measured, seed 3" in info.output
    shipped = json.loads(out.read_text())["ranking"]  # which ranking won on the card split, and by how much
    assert f"ranking of a card the fit never saw: {shipped['mode']}" in info.output
    assert "against the rule's first option" in info.output and "runner-up:" in info.output
    reach = shipped["lookup_reach_top1"]  # what a lookup of the other cards' bests reaches, where any measured
    assert (f"top-1 {reach:.3f}; below it, a pick no other card found best" in info.output) \
        if reach is not None else "the lookup's reach" not in info.output
    assert (f"the top {shipped['diverse']} places of the shipped order go to candidates that differ" if shipped["diverse"]
            else "the top of the shipped order is not spread over knob values (its held-out top-5") in info.output
    for r in shipped["refused"]:  # every choice with a lower top-1 the selection refused, and why, in both
        line = f"not shipped though its top-1 was lower: {r['mode']} ({r['source']}, weight {r['weight']})"
        assert line in info.output and line in done.output and r["why"] in info.output
    bad = CliRunner().invoke(app, ["fit", str(tmp_path / "nothing"), str(out), "--tracking-uri", "off"])
    assert bad.exit_code == 2 and "not a dataset export" in bad.output and "Traceback" not in bad.output


def test_emmy_fit_install_refits_the_shipped_recipe_and_refuses_iterations_or_depth(tmp_path: Path) -> None:
    for flag in ("--iterations", "--depth"):
        done = CliRunner().invoke(app, ["fit", "--install", flag, "3", "--freeze-dir", str(tmp_path)])
        assert done.exit_code == 2 and "refits the shipped recipe" in done.output, done.output


def test_a_recipe_sized_out_of_range_is_refused_naming_the_field() -> None:
    assert Params().sized() == Params() and Params().sized(60, 4) == Params(iterations=60, depth=4)
    with pytest.raises(ValueError, match=r"iterations must be in 1\.\.100000, not 0"):
        Params().sized(iterations=0)
    with pytest.raises(ValueError, match=r"depth must be in 1\.\.16, not 17"):
        Params().sized(depth=17)


def test_emmy_fit_compare_prints_two_runs_side_by_side(small_fit: tuple, mlflow_uri: str) -> None:
    run = small_fit[0].run_id
    done = CliRunner().invoke(app, ["fit", "--compare", run, run, "--tracking-uri", mlflow_uri])
    assert done.exit_code == 0, done.output
    line = next(ln for ln in done.output.splitlines() if ln.startswith("cv.top1 "))
    assert line.split()[1] == line.split()[2] and line.split()[3] == "+0.0%"


def test_emmy_fit_compare_is_told_where_no_run_can_be_and_creates_no_store(tmp_path: Path) -> None:
    off = CliRunner().invoke(app, ["fit", "--compare", "a", "b", "--tracking-uri", "off"])
    assert off.exit_code == 2 and "--tracking-uri off tracks nothing" in off.output
    missing = tmp_path / "typo.db"
    typo = CliRunner().invoke(app, ["fit", "--compare", "a", "b", "--tracking-uri", f"sqlite:///{missing}"])
    assert typo.exit_code == 2 and f"no MLflow store at {missing}" in typo.output
    assert not missing.exists() and not (tmp_path / "mlartifacts").exists()


def test_a_card_the_dataset_does_not_describe_is_read_from_the_cards_file_else_counted(tmp_path: Path) -> None:
    from emmy_core.exchange.export import export_db
    from emmy_core.ir import kernel_id
    from emmy_core.prior.dataset import read_dataset
    from emmy_core.store import CardRow, MeasurementRow, open_store

    kernel = matmul(64, 64, 64)
    rows = [MeasurementRow.ok(kernel_id(kernel), "", {"block": b, "num_warps": 4}, "Mystery GPU", "deploy", 10.0 + b)
            for b in (64, 128)]
    with open_store(tmp_path / "m.db", "w") as s:
        s.record(rows, kernels=[kernel], cards=[CardRow("Mystery GPU", "cuda", {})])
    export_db(tmp_path / "m.db", tmp_path / "ds")
    nowhere = read_dataset(tmp_path / "ds")
    assert nowhere.undescribed_pools == 1 and nowhere.undescribed_cards == ["Mystery GPU"]
    assert nowhere.forks[0].card is None
    entry = {**json.loads((Path(__file__).parents[2] / "emmy_core/targets/gpus.json").read_text())["cards"][2],
             "name": "Mystery GPU"}
    cards = tmp_path / "cards.json"
    cards.write_text(json.dumps({"format": "emmy-gpu-table", "version": 1, "cards": [entry]}))
    described = read_dataset(tmp_path / "ds", cards_file=cards)
    assert described.undescribed_pools == 0 and described.forks[0].card is not None
    assert described.forks[0].card.sms == entry["sms"]
