"""The GPU table: loaded strictly, exact runtime names, the numbers a card is described by."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emmy_core.knobs.vocab import TENSOR_CORE_INSTRUCTIONS
from emmy_core.targets import GPU_FIELDS, CardTableError, load_table
from emmy_core.targets.table import TABLE_PATH

REQUIRED = (
    "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe", "NVIDIA H200", "NVIDIA A100-SXM4-40GB", "NVIDIA A100-SXM4-80GB",
    "NVIDIA L4", "NVIDIA L40S", "NVIDIA GeForce RTX 4090", "NVIDIA GeForce RTX 3090", "NVIDIA GeForce RTX 2080 Ti",
    "NVIDIA RTX A4000", "NVIDIA RTX A6000", "AMD Instinct MI250X", "AMD Radeon PRO W6600", "AMD Radeon PRO W7800",
)
PEER_NAMES = ("NVIDIA GeForce RTX 2080 Ti", "NVIDIA GeForce RTX 3090", "NVIDIA RTX A4000", "NVIDIA RTX A6000",
              "AMD Radeon PRO W6600")


def _raw() -> dict:
    return json.loads(TABLE_PATH.read_text())


def _write(tmp_path: Path, doc: dict) -> Path:
    p = tmp_path / "gpus.json"
    p.write_text(json.dumps(doc))
    return p


def test_table_holds_every_required_card_under_its_runtime_name() -> None:
    table = load_table()
    assert set(REQUIRED) <= set(table)
    for name, card in table.items():
        assert card.name == name and card.target == "cuda" and card.source


def test_peer_files_card_names_are_table_names(peer_dir: Path) -> None:
    import gzip

    table = load_table()
    seen = set()
    for f in sorted(peer_dir.glob("*.json.gz")):
        with gzip.open(f, "rt") as fh:
            head = fh.read(4096)
        name = head.split('"device_name"', 1)[1].split('"', 2)[1]
        seen.add(name)
        assert name in table, f"{f.name}: device_name {name!r} not in the GPU table"
    assert seen == set(PEER_NAMES)


def test_gpu_name_is_the_identity_h100_and_h200_share_a_die_but_are_two_cards() -> None:
    # Seed 09: compute capability and SM count cannot separate an H100 from an H200; the name does.
    t = load_table()
    h100, h200 = t["NVIDIA H100 80GB HBM3"], t["NVIDIA H200"]
    assert (h100.compute_capability, h100.sms) == (h200.compute_capability, h200.sms)
    assert h100.name != h200.name
    assert h100.numeric() != h200.numeric()  # memory size and bandwidth differ


def test_datasheet_figures_are_plausible_and_consistent() -> None:
    for card in load_table().values():
        n = card.numeric()
        assert set(GPU_FIELDS) <= set(n), card.name
        assert n["smem_per_block_kib"] <= n["smem_per_sm_kib"]
        assert n["max_threads_per_block"] <= n["max_threads_per_sm"]
        assert n["warp_size"] in (32, 64)
        assert n["fp16_tflops"] >= n["fp32_tflops"] or card.arch.startswith("rdna")
        assert n["fp16_acc16_tflops"] >= n["fp16_tflops"]
        assert all(i in TENSOR_CORE_INSTRUCTIONS for i in card.tensor_cores)


def test_tensor_core_instructions_follow_the_architecture() -> None:
    for card in load_table().values():
        wg = any(i.startswith("wgmma") for i in card.tensor_cores)
        mfma = any(i.startswith("mfma") for i in card.tensor_cores)
        assert wg == (card.arch == "hopper"), card.name
        assert mfma == card.arch.startswith("cdna"), card.name


def test_numeric_description_omits_what_a_card_lacks_instead_of_zero() -> None:
    n = load_table()["AMD Instinct MI250X"].numeric()
    assert "compute_capability" not in n  # gfx90a has no numeric compute capability
    assert n["is_amd"] == 1.0 and n["has_mfma"] == 1.0 and n["has_wgmma"] == 0.0
    assert all(v > 0 for k, v in n.items() if not k.startswith(("has_", "is_")))
    assert "cores" not in n


def test_malformed_entry_is_refused_naming_card_and_field(tmp_path: Path) -> None:
    doc = _raw()
    doc["cards"][2]["smem_per_block_kib"] = "lots"
    with pytest.raises(CardTableError, match=r"gpus.json: card 'NVIDIA H200': field 'smem_per_block_kib'"):
        load_table(_write(tmp_path, doc))


@pytest.mark.parametrize(
    ("mutate", "field"),
    [
        (lambda c: c.pop("sms"), "sms"),
        (lambda c: c.__setitem__("sms", 131.5), "sms"),
        (lambda c: c.__setitem__("mem_bw_gbs", -1), "mem_bw_gbs"),
        (lambda c: c.__setitem__("warp_size", True), "warp_size"),
        (lambda c: c.__setitem__("tensor_cores", ["tcgen05"]), "tensor_cores"),
        (lambda c: c.__setitem__("target", "cpu"), "target"),
        (lambda c: c.__setitem__("bogus", 1), "bogus"),
        (lambda c: c.__setitem__("compute_capability", "nine"), "compute_capability"),
        (lambda c: c.__setitem__("smem_per_block_kib", 1000), "smem_per_block_kib"),
    ],
)
def test_every_field_is_checked_strictly(tmp_path: Path, mutate, field: str) -> None:
    doc = _raw()
    mutate(doc["cards"][0])
    with pytest.raises(CardTableError, match=rf"card 'NVIDIA H100 80GB HBM3': .*'{field}'"):
        load_table(_write(tmp_path, doc))


def test_duplicate_names_nan_and_bad_envelopes_are_refused(tmp_path: Path) -> None:
    doc = _raw()
    doc["cards"].append(dict(doc["cards"][0]))
    with pytest.raises(CardTableError, match="appears twice"):
        load_table(_write(tmp_path, doc))
    p = tmp_path / "nan.json"
    p.write_text(TABLE_PATH.read_text().replace('"fp32_tflops": 66.9', '"fp32_tflops": NaN', 1))
    with pytest.raises(CardTableError, match="not valid JSON"):
        load_table(p)
    with pytest.raises(CardTableError, match="'version'"):
        load_table(_write(tmp_path, {**_raw(), "version": 2}))
    with pytest.raises(CardTableError, match=r"absent\.json: no such card table"):
        load_table(tmp_path / "absent.json")


def test_a_card_table_nested_too_deeply_or_repeating_a_key_is_refused_naming_the_file(tmp_path: Path) -> None:
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(CardTableError, match=r"deep\.json: not valid JSON: maximum recursion depth"):
        load_table(deep)
    twice = tmp_path / "twice.json"
    twice.write_text(TABLE_PATH.read_text().replace('"version": 1,', '"version": 1, "version": 1,', 1))
    with pytest.raises(CardTableError, match=r"twice\.json: not valid JSON: key 'version' repeated"):
        load_table(twice)
