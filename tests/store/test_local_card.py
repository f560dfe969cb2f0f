"""One name, one description: a freeze, tune file or database naming this machine's CPU card but
describing other hardware is refused by every reader that feeds this machine's card, showing both
descriptions, and nothing of it is written."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from emmy_core.evidence.freeze import golden_source
from emmy_core.exchange.importer import import_db
from emmy_core.fileio.safefile import FileWriteError
from emmy_core.fileio.sourcefile import SourceError
from emmy_core.formats.cardfile import card_json, parse_card_document
from emmy_core.formats.tunefile import merge_into_tune_file, tune_file_name
from emmy_core.freezefolder.refresh import refresh_freeze
from emmy_core.store import CardRow, open_store
from emmy_core.targets import card_slug, probe_cpu

ROOT = Path(__file__).resolve().parents[2]
REPO_FREEZE = ROOT / "freezes" / "amd-epyc-avx-512-x2.json"


def small_freeze(name: str, numbers: dict, fmt: str = "emmy-freeze") -> dict:
    """Two kernels of the repository's AMD freeze (a 512-bit, 1 MiB-L2 machine), under `name` and `numbers`."""
    doc = json.loads(REPO_FREEZE.read_text())
    doc["format"] = fmt
    doc["kernels"] = doc["kernels"][:2]
    doc["decisions"] = []
    doc["card"]["name"] = name
    doc["card"]["numbers"] = numbers
    if fmt == "emmy-tune":
        for k in doc["kernels"]:
            k["rows"] = [r for r in k["rows"] if r["setting"] == "deploy"]
            k["goldens"] = []
            for r in k["rows"]:
                r.pop("golden", None)
    return doc


@pytest.fixture
def here() -> CardRow:
    return CardRow.from_card(probe_cpu())


@pytest.fixture
def other_numbers(here: CardRow) -> dict:
    """The repository AMD card's description: what another machine measured (differs here in SIMD or caches)."""
    numbers = json.loads(REPO_FREEZE.read_text().splitlines()[1].removeprefix('"card":').rstrip(","))["numbers"]
    numbers["cores"] = here.value("cores")
    if numbers["simd_bits"] == here.value("simd_bits") and numbers["l2_kb"] == here.value("l2_kb"):
        numbers["l2_kb"] = numbers["l2_kb"] * 2  # a machine that happens to match: make the caches differ
    return numbers


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_freeze_naming_this_machines_card_with_another_description_is_refused_and_nothing_is_written(
        tmp_path: Path, here: CardRow, other_numbers: dict) -> None:
    bad = tmp_path / f"{card_slug(here.name)}.json"
    bad.write_text(json.dumps(small_freeze(here.name, other_numbers)))

    (outcome,) = import_db(tmp_path / "fresh.db", [bad], fresh=True)
    assert not outcome.ok and not (tmp_path / "fresh.db").exists()
    assert "$.card.numbers" in outcome.message and "this machine's name" in outcome.message
    assert "this says x86_64" in outcome.message and "this machine is x86_64" in outcome.message  # both
    assert f"L2 {here.value('l2_kb'):g} KiB" in outcome.message

    db = tmp_path / "tune.db"
    with open_store(db, "w") as store:
        store.record(cards=[here])
    before = sha(db)
    (outcome,) = import_db(db, [bad], fresh=True)  # the fresh import leaves the old file byte for byte
    assert not outcome.ok and sha(db) == before
    (outcome,) = import_db(db, [bad])
    assert not outcome.ok
    with open_store(db, "r") as store:
        assert store.counts()["measurements"] == 0 and store.card(here.name) == here.normalized()

    source, notes = golden_source(here.name, "deploy", tmp_path)  # a compile reads none of its goldens
    assert source is None or not source.store.goldens()
    assert any("this machine's name" in n for n in notes)


def test_the_same_file_with_this_machines_own_description_imports(tmp_path: Path, here: CardRow) -> None:
    good = tmp_path / "good.json"
    good.write_text(json.dumps(small_freeze(here.name, card_json(here)["numbers"])))
    (outcome,) = import_db(tmp_path / "db.db", [good], fresh=True)
    assert outcome.ok, outcome.message


def test_a_refresh_refuses_a_tune_file_naming_this_machines_card_with_another_description(
        tmp_path: Path, here: CardRow, other_numbers: dict) -> None:
    folder = tmp_path / "freezes"
    folder.mkdir()
    tune = folder / tune_file_name(here.name, "20261201T120000Z")
    tune.write_text(json.dumps(small_freeze(here.name, other_numbers, "emmy-tune")))
    before = {p.name: sha(p) for p in folder.iterdir()}
    with pytest.raises(SourceError, match="this machine's name"):
        refresh_freeze(folder)
    assert {p.name: sha(p) for p in folder.iterdir()} == before  # no freeze written, the tune file kept


def test_a_tune_never_merges_into_a_tune_file_of_its_name_with_another_description(
        tmp_path: Path, here: CardRow, other_numbers: dict) -> None:
    path = tmp_path / tune_file_name(here.name, "20261201T120000Z")
    path.write_text(json.dumps(small_freeze(here.name, other_numbers, "emmy-tune")))
    before = sha(path)
    doc = parse_card_document(json.loads(path.read_text()), str(path))
    with pytest.raises(FileWriteError, match="the tune's card's name, but this describes other hardware"):
        merge_into_tune_file(path, card=here, setting="deploy", kernels=doc.batch.kernels,
                             measurements=doc.batch.measurements)
    assert sha(path) == before
