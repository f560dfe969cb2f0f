"""User card files: `EMMY_CARDS=FILE` (or `cards_file=`) adds cards of the table's own format, CPUs
included; a card named in both the packaged table and the user's file is an error naming both files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emmy_core.targets import CPU_FIELDS, CardTableError, known_cards, known_table, load_table, resolve_card
from emmy_core.targets.user_cards import CARDS_ENV

EPYC = {"name": "AMD EPYC 7B13 AVX2 x8", "target": "cpu", "arch": "x86_64", "compute_capability": "",
        "tensor_cores": [], "cores": 8, "l1d_kib": 32, "l2_kib": 512, "l3_kib": 32768, "simd_bits": 256,
        "freq_mhz": None, "source": "lscpu on the machine"}


def _file(tmp_path: Path, *cards: dict, name: str = "my-cards.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps({"format": "emmy-gpu-table", "version": 1, "cards": list(cards)}))
    return path


def test_a_cpu_card_in_a_user_file_is_known_by_name_with_unknown_numbers_missing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = _file(tmp_path, EPYC)
    monkeypatch.setenv(CARDS_ENV, str(path))
    card = resolve_card("AMD EPYC 7B13 AVX2 x8")
    assert card.target == "cpu" and card.cores == 8 and card.simd_bits == 256 and card.freq_mhz is None
    assert "hw.freq_mhz" not in {f"hw.{k}" for k in card.numeric()}  # null is unknown, never 0
    assert known_cards()[-1] == "AMD EPYC 7B13 AVX2 x8" and set(load_table()) < set(known_cards())
    monkeypatch.delenv(CARDS_ENV)
    assert "AMD EPYC 7B13 AVX2 x8" not in known_cards()
    assert known_table(path)["AMD EPYC 7B13 AVX2 x8"] == card


def test_a_name_in_both_the_packaged_table_and_the_user_file_is_an_error_naming_both_files(tmp_path: Path) -> None:
    h200 = next(c for c in json.loads((Path(__file__).parents[2] / "emmy_core/targets/gpus.json").read_text())["cards"]
                if c["name"] == "NVIDIA H200")
    path = _file(tmp_path, EPYC, h200)
    with pytest.raises(CardTableError, match=r"my-cards\.json.*'NVIDIA H200'.*gpus\.json"):
        known_table(path)


@pytest.mark.parametrize(("change", "field"), [
    ({"sms": 4}, "sms"),  # a GPU field on a CPU card
    ({"cores": 0}, "cores"),
    ({"tensor_cores": ["mma_m16n8k16"]}, "tensor_cores"),
    ({"target": "tpu"}, "target"),
])
def test_a_bad_user_card_is_refused_naming_file_card_and_field(tmp_path: Path, change: dict, field: str) -> None:
    path = _file(tmp_path, {**EPYC, **change})
    with pytest.raises(CardTableError, match=rf"my-cards\.json: card 'AMD EPYC 7B13 AVX2 x8'.*{field}"):
        known_table(path)


def test_every_cpu_field_must_be_written_null_when_unknown(tmp_path: Path) -> None:
    for field in CPU_FIELDS:
        entry = {k: v for k, v in EPYC.items() if k != field}
        with pytest.raises(CardTableError, match=rf"field '{field}' is missing \(write null"):
            known_table(_file(tmp_path, entry))


def test_a_missing_user_file_is_refused_naming_it(tmp_path: Path) -> None:
    with pytest.raises(CardTableError, match=r"nowhere\.json: cannot read"):
        known_table(tmp_path / "nowhere.json")
