"""One rule says which files of a freeze folder are freezes, golden records and tune files
(`freezefolder.freeze_names`): the chain's import, the fold, the folder's digest and a compile's golden tier
all read a folder by it, so a golden record beside the freeze is imported and compiled from alike."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from emmy_core.chain import steps
from emmy_core.chain.paths import ChainPaths
from emmy_core.evidence.freeze import card_files
from emmy_core.freezefolder.fold import folder_digest
from emmy_core.freezefolder.freeze_names import file_kind, freeze_folder

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("name", "kind"), [
    ("nvidia-h200.json", ("freeze", "nvidia-h200")),
    ("nvidia-h200.reviewed-1.json", ("golden", "nvidia-h200")),
    ("nvidia-h200.tune-20261130T000000Z-1.json", ("tune", "nvidia-h200")),
    ("README.md", None), ("Nvidia-H200.json", None), ("nvidia-h200.tune-.json", None), (".json", None),
])
def test_one_rule_names_a_freeze_folders_files(name: str, kind: tuple[str, str] | None) -> None:
    assert file_kind(name) == kind


def test_the_import_the_digest_and_a_compiles_golden_tier_read_a_folder_by_the_same_rule(tmp_path: Path) -> None:
    folder = tmp_path / "freezes"
    folder.mkdir()
    src = next(p for p in sorted((ROOT / "freezes").glob("*.json")) if p.name.startswith("intel"))
    slug = src.name.removesuffix(".json")
    shutil.copyfile(src, folder / src.name)
    shutil.copyfile(src, folder / f"{slug}.reviewed.json")  # a golden record: reviewed, read beside the freeze
    (folder / f"{slug}.tune-x1.json").write_text("{}")  # unreviewed: never imported, never compiled from
    (folder / "Notes.json").write_text("{}")  # not a card slug, so not the freeze's: ignored by everyone
    files = freeze_folder(folder)
    assert [p.name for p in files.reviewed] == [f"{slug}.json", f"{slug}.reviewed.json"]
    assert [p.name for p in files.tunes] == [f"{slug}.tune-x1.json"]
    assert card_files(slug, folder)[0] == files.reviewed  # the compile's golden tier
    done = steps.import_freeze(ChainPaths(freezes=folder, data=tmp_path / "data"))
    assert [Path(s).name for s in done.sources] == [p.name for p in files.reviewed]
    before = folder_digest(folder)
    (folder / "Notes.json").write_text("[]")
    assert folder_digest(folder) == before  # a file that is not the freeze's changes nothing
    (folder / f"{slug}.reviewed.json").unlink()
    assert folder_digest(folder) != before
