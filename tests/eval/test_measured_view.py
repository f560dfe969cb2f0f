"""The measured view: what a pick costs on pools of configurations all actually measured, per card and
setting, beside the baselines on the same pools, each figure with the count of pools behind it."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from emmy_core.eval import evaluate
from emmy_core.eval.extern_order import file_order
from emmy_core.fileio.sourcefile import SourceError
from emmy_core.prior import load_installed_prior
from emmy_core.prior import metrics as m
from tests.conftest import PeerStore

A4000 = "NVIDIA RTX A4000 / deploy"


def test_a_pool_with_one_member_is_excluded_from_the_correlation_and_counted_nowhere(
        caches_export: Callable, constant_prior: Path) -> None:
    export, _ = caches_export({"lonely": [(1, 1.0)], "full": [(1, 4.0), (2, 2.0), (3, 1.0), (4, 3.0)]})
    report = evaluate(export, constant_prior, pools="measured")
    doc = report.to_json()
    lonely = next(r for r in doc["per_pool"] if r["kernel"].startswith("lonely"))
    assert all(lonely[n] is None for n in ("tau", "top1", "top5", "top10", "pick_failed", "first_slowdown",
                                           "random_slowdown"))
    for summary in (doc["by_card"][A4000], doc["mean"]):
        assert summary["measured_pools"] == summary["pools_used"] == 1 and summary["pools_excluded"] == 1
        for name in ("tau", "top1", "pick_failed", "random_slowdown"):
            assert summary[f"{name}_pools"] == 1, name  # the pools actually used, the lonely one in none
        assert summary["top5_pools"] == summary["top10_pools"] == 0  # four members: too few for a top-5
    text = report.markdown()
    assert "| all pools" in text and "1 pools too small for every figure are counted nowhere" in text
    assert "top5 6 working members" in text and "tau 3 working members" in text  # the minimum sizes are stated


def test_a_failed_top_pick_is_counted_and_replaced_by_the_next_working_candidate(
        caches_export: Callable, tile_prior: Path) -> None:
    # the prior ranks tile 3 first, then 2, then 1; tile 3 failed on the card, so tile 2 stands in
    export, _ = caches_export({"k": [(1, 2.0), (2, 4.0), (3, "RuntimeFailedConfig")]})
    (pool,) = evaluate(export, tile_prior, pools="measured").to_json()["per_pool"]
    assert pool["pick_failed"] == 1.0
    assert pool["top1"] == pytest.approx(4.0 / 2.0)  # the stand-in's time over the fastest working one
    assert pool["measured_members"] == 3 and pool["working_members"] == 2


def test_scores_that_tie_at_the_top_pick_the_first_emitted_candidate() -> None:
    scores, times, ok = [1.0, 2.0, 2.0], [1.0, 3.0, 2.0], [True, True, True]
    assert m.top_k_slowdown(scores, times, ok, 1) == 3.0  # index 1 is emitted before index 2


def test_an_extern_kernels_first_option_is_the_first_entry_of_its_cache_file(caches_export: Callable,
                                                                            constant_prior: Path) -> None:
    # the file's first entry is tile 3 (not the first by schedule id or value), and it failed: the next entry
    # of the file, tile 2, stands in for it
    export, files = caches_export({"k": [(3, "CompilationFailedConfig"), (2, 5.0), (1, 1.0), (4, 2.0)]})
    without = evaluate(export, constant_prior, pools="measured")
    (pool,) = without.to_json()["per_pool"]
    assert pool["first_slowdown"] is None and "--extern-order" in without.markdown()
    (pool,) = evaluate(export, constant_prior, pools="measured", extern_order=file_order(files)).to_json()["per_pool"]
    assert pool["first_slowdown"] == pytest.approx(5.0)
    assert pool["random_slowdown"] == pytest.approx((1 + 5 + 2) / 3)


def test_a_file_that_is_not_a_kernel_tuner_cache_gives_no_order(tmp_path: Path) -> None:
    bad = tmp_path / "x.json"
    bad.write_text('{"format": "emmy-freeze"}')
    with pytest.raises(SourceError, match=r"x\.json: \$\.cache: not a Kernel Tuner cache"):
        file_order([bad])


def test_a_cache_with_no_device_name_gives_its_order_for_the_card_named_for_its_file(tmp_path: Path) -> None:
    import json

    from tests.store.test_files_import import kt_cache

    path = tmp_path / "conv_mi250x.json"
    path.write_text(json.dumps(kt_cache(device="")))
    with pytest.raises(SourceError, match=r"device_name: is empty or missing"):
        file_order([path])
    ((_kernel, card), positions), = file_order([path], {"conv_mi250x.json": "AMD Instinct MI250X"}).items()
    assert card == "AMD Instinct MI250X" and sorted(positions.values()) == list(range(len(positions)))
    with pytest.raises(SourceError, match=r"device_name: is empty or missing"):
        file_order([path], {"another.json": "AMD Instinct MI250X"})


def test_the_measured_view_on_the_peer_data_reports_every_card(peer_store: PeerStore) -> None:
    assert peer_store.files and all(o.ok for o in peer_store.outcomes)  # imported fresh and exported
    report = evaluate(peer_store.export, load_installed_prior(), pools="measured")
    doc = report.to_json()
    cards = {f"{r['card']} / deploy" for r in doc["per_pool"]}
    assert len(cards) >= 5 and set(doc["by_card"]) == cards
    for key, summary in doc["by_card"].items():
        assert summary["measured_pools"] >= 1 and summary["top1_pools"] == summary["measured_pools"], key
        assert summary["similar_slowdown_pools"] >= 1 and summary["transfer_top1_pools"] >= 1, key
        assert summary["reach_top1_pools"] >= 1 and 1.0 <= summary["reach_top5"] <= summary["reach_top1"], key
        assert f"| {key}" in report.markdown()
    assert doc["mean"]["measured_pools"] == len(doc["per_pool"]) == doc["forks"]
    assert f"lookup reach: top-1 {doc['mean']['reach_top1']:.3f} ({doc['mean']['reach_top1_pools']})" in report.markdown()
