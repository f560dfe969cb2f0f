"""`emmy db export DB URL` (issue 24): the export published behind an fsspec URL (its files as blobs, then one
pointer), read back by `emmy eval prior` and the fit as the local export; a URL Emmy cannot use, or a folder
there of another kind, refused naming the URL with nothing written."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import fsspec
import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.fileio.urlfolder import OBJECTS, POINTER, publish_folder, read_pointer
from emmy_core.prior.dataset import read_dataset


@pytest.fixture
def mem() -> str:
    """A fresh memory:// folder (the memory file system is one per process: tests invoke the CLI in process)."""
    return f"memory://emmy-{uuid.uuid4().hex[:12]}"


def db_of(export: Path) -> Path:
    return export.parent / "toy.db"  # the database the toy export was written from


def export(db: Path, out: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["db", "export", out, "--db", str(db)])
    return result.exit_code, result.output


def keys(url: str) -> set[str]:
    root = url.removeprefix("memory://")
    return {k.removeprefix(f"/{root}/") for k in fsspec.filesystem("memory").find(url)}


def test_emmy_db_export_to_a_memory_url_publishes_blobs_then_one_pointer_read_back_as_the_local_export(
        toy_export: Path, mem: str) -> None:
    code, out = export(db_of(toy_export), f"{mem}/export")
    local = json.loads((toy_export / "manifest.json").read_text())
    assert code == 0 and f"exported to {mem}/export:" in out and local["digest"][:16] in out, out
    files = read_pointer(f"{mem}/export")
    assert sorted(files) == sorted(p.name for p in toy_export.iterdir())
    assert keys(f"{mem}/export") == {POINTER} | {f"{OBJECTS}/{sha}" for sha in files.values()}  # no partial key
    assert read_dataset(f"{mem}/export").digest == read_dataset(toy_export).digest
    code, _ = export(db_of(toy_export), f"{mem}/export")  # an export there is replaced by the next
    assert code == 0 and read_pointer(f"{mem}/export") == files
    there = CliRunner().invoke(app, ["eval", "prior", f"{mem}/export", "--pools", "measured"])
    assert there.exit_code == 0 and f"dataset {local['digest'][:12]}" in there.stdout, there.output
    assert "| NVIDIA L4 / deploy" in there.stdout


def test_the_fit_reads_its_dataset_from_the_url_the_export_wrote(toy_export: Path, mem: str, tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """`chain.steps.fit` (what `emmy fit DATASET OUT` calls with the URL as given) fits the same prior from the
    URL as from the folder; `emmy fit` passes a URL through whole (a path would fold its `//`)."""
    from emmy_core.chain import steps
    from emmy_core.prior.training import Params

    monkeypatch.chdir(tmp_path)
    assert export(db_of(toy_export), f"{mem}/export")[0] == 0
    fit = {"pools": "measured", "folds": 2, "seed": 3, "tracking_uri": "off", "fits_dir": tmp_path / "fits",
           "params": Params(iterations=10, depth=2)}
    steps.fit(toy_export, tmp_path / "here.json", **fit)
    steps.fit(f"{mem}/export", tmp_path / "there.json", **fit)
    assert (tmp_path / "there.json").read_bytes() == (tmp_path / "here.json").read_bytes()
    missing = CliRunner().invoke(app, ["fit", f"{mem}/nothing", str(tmp_path / "x.json"), "--tracking-uri", "off"])
    assert missing.exit_code == 2 and f"{mem}/nothing: nothing is published there" in missing.output, missing.output
    assert not (tmp_path / "x.json").exists()


def test_emmy_db_export_to_a_file_url_writes_the_local_export(toy_export: Path, tmp_path: Path) -> None:
    code, out = export(db_of(toy_export), f"file://{tmp_path}/dataset")
    assert code == 0, out
    assert json.loads((tmp_path / "dataset" / "manifest.json").read_text()) == json.loads(
        (toy_export / "manifest.json").read_text())


@pytest.mark.parametrize(("url", "why"), [
    ("foo://bucket/export", "not a file system Emmy can use (Protocol not known: foo)"),
    ("ftp://127.0.0.1:1/export", "cannot be reached: ConnectionRefusedError"),  # nothing listens on port 1
])
def test_an_export_url_emmy_cannot_use_or_reach_is_refused_naming_the_url(toy_export: Path, url: str,
                                                                          why: str) -> None:
    code, out = export(db_of(toy_export), url)
    assert code == 2 and out.startswith(f"emmy: error: {url}: {why}") and "Traceback" not in out, out


def test_an_export_replaces_only_an_export_at_its_url(toy_export: Path, mem: str, tmp_path: Path) -> None:
    """A published folder of another kind (no manifest.json: a freeze folder) and keys with no pointer are
    refused before the export is made; nothing there changes."""
    (tmp_path / "freeze").mkdir()
    (tmp_path / "freeze" / "card.json").write_text("{}\n")
    publish_folder(tmp_path / "freeze", f"{mem}/freezes")
    before = keys(f"{mem}/freezes")
    code, out = export(db_of(toy_export), f"{mem}/freezes")
    assert code == 2 and f"{mem}/freezes/{POINTER} does not name manifest.json" in out, out
    assert keys(f"{mem}/freezes") == before
    fsspec.filesystem("memory").pipe_file(f"{mem}/notes/readme.txt", b"someone's notes")
    code, out = export(db_of(toy_export), f"{mem}/notes")
    assert code == 2 and f"{mem}/notes holds keys and no {POINTER}" in out, out
    assert keys(f"{mem}/notes") == {"readme.txt"}
