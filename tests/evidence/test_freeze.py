"""The freeze a compile reads: shipped with the package (the repository's folder), overridable, read strictly."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from emmy_core.evidence.freeze import FREEZES_ENV, card_files, golden_source, shipped_freeze_dir
from tests.evidence.conftest import CARD, Setup, kernels_of, write_freeze

ROOT = Path(__file__).resolve().parents[2]


def test_the_shipped_freeze_is_the_repository_folder_itself() -> None:
    assert shipped_freeze_dir().resolve() == (ROOT / "freezes").resolve()
    repo_files = sorted(p.name for p in (ROOT / "freezes").glob("*.json"))
    assert repo_files and sorted(p.name for p in shipped_freeze_dir().glob("*.json")) == repo_files


def test_the_repository_freeze_answers_for_its_own_card() -> None:
    name = json.loads(next((ROOT / "freezes").glob("*.json")).read_text())["card"]["name"]
    source, notes = golden_source(name, "deploy")
    assert source is not None and notes == []
    assert source.store.counts()["goldens"] > 0 and len(source.recordings()) > 0


def test_emmy_freezes_overrides_the_shipped_freeze(proj, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    k = kernels_of(proj[2])[0]
    write_freeze(tmp_path, Setup().golden(k, {"threads": 1, "tile_m": 8, "tile_n": 64, "tile_k": 128, "vec": 4,
                                              "unroll": 1}))
    monkeypatch.setenv(FREEZES_ENV, str(tmp_path))
    files, _ = card_files(CARD.name)
    assert files == [tmp_path / "test-cpu-x2.json"]


def test_tune_files_beside_the_freeze_are_not_reviewed_evidence(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    path = write_freeze(tmp_path, Setup())
    (tmp_path / "test-cpu-x2.tune-20261130T000000Z-1.json").write_text(path.read_text())
    files, _ = card_files(CARD.name, tmp_path)
    assert files == [path]


def test_a_refused_freeze_file_is_skipped_whole_naming_file_record_and_field(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    k = kernels_of(proj[2])[0]
    knobs = {"threads": 1, "tile_m": 8, "tile_n": 64, "tile_k": 128, "vec": 4, "unroll": 1}
    path = write_freeze(tmp_path, Setup().row(k, knobs, 5.0).golden(k, knobs))
    doc = json.loads(path.read_text())
    doc["kernels"][0]["rows"][0]["median_us"] = "fast"
    path.write_text(json.dumps(doc))
    source, notes = golden_source(CARD.name, "deploy", tmp_path)
    assert source is not None and source.store.counts()["goldens"] == 0  # nothing of it half-read
    assert len(notes) == 1 and "test-cpu-x2.json" in notes[0] and "$.kernels[0].rows[0]" in notes[0]
    assert "median_us" in notes[0]


def test_reading_the_freeze_imports_no_database_module(tmp_path: Path) -> None:
    import subprocess

    script = (
        "import sys, json\n"
        "from pathlib import Path\n"
        "from emmy_core.evidence.freeze import golden_source\n"
        "p = next(Path('freezes').glob('*.json'))\n"
        "src, notes = golden_source(json.loads(p.read_text())['card']['name'], 'deploy')\n"
        "assert src is not None and not notes\n"
        "leaked = [m for m in ('duckdb', 'pyarrow', 'polars') if m in sys.modules]\n"
        "assert not leaked, leaked\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
