"""The inbox, the freeze folder and the export behind fsspec URLs (issue 24): the same bytes as local folders,
and never a half-written key a reader can see."""

from __future__ import annotations

import uuid
from pathlib import Path

import fsspec
import pytest

from emmy_core.fileio.urlfolder import POINTER, UrlFolderError, fetch_folder, publish_folder, read_pointer
from emmy_core.freezefolder.fold import fold_tune_files

ROOT = Path(__file__).resolve().parents[2]
FROZEN = ROOT / "freezes" / "intel-r-xeon-r-processor-avx-512-x2.json"


def small_tune_file(out: Path) -> tuple[Path, int]:
    """A tune file of the Xeon card: the first kernel's deploy rows of its committed freeze."""
    from emmy_core.fileio.sourcefile import load_json_file
    from emmy_core.formats.cardfile import parse_card_document
    from emmy_core.formats.tunefile import tune_file_name, write_tune_file
    from emmy_core.ir import kernel_id

    doc = parse_card_document(load_json_file(FROZEN), str(FROZEN))
    kernel = doc.batch.kernels[0]
    kernel = kernel[0] if isinstance(kernel, tuple) else kernel
    rows = [r for r in doc.batch.measurements if r.kernel_id == kernel_id(kernel) and r.setting == "deploy"]
    out.mkdir(parents=True, exist_ok=True)
    path = out / tune_file_name(doc.card.name, "20261201T000000Z-1")
    return write_tune_file(path, card=doc.card, kernels=[kernel], measurements=rows), len(rows)


@pytest.fixture
def mem() -> str:
    """A fresh memory:// folder (the memory file system is one per process)."""
    return f"memory://emmy-{uuid.uuid4().hex[:12]}"


def test_a_fold_from_a_memory_inbox_gives_the_same_freeze_bytes_as_from_a_local_folder(tmp_path: Path,
                                                                                      mem: str) -> None:
    tune, _ = small_tune_file(tmp_path / "inbox")
    fs = fsspec.filesystem("memory")
    fs.pipe_file(f"{mem}/inbox/{tune.name}", tune.read_bytes())
    fs.pipe_file(f"{mem}/inbox/notes.txt", b"not a tune file: left alone")
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    fold_tune_files(tmp_path / "a", tmp_path / "inbox")
    fold_tune_files(tmp_path / "b", f"{mem}/inbox")
    a, b = sorted((tmp_path / "a").iterdir()), sorted((tmp_path / "b").iterdir())
    assert [p.name for p in a] == [p.name for p in b] == [FROZEN.name]
    assert a[0].read_bytes() == b[0].read_bytes()
    assert sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{mem}/inbox", detail=False)) == ["notes.txt"]


def test_a_fold_into_a_memory_freeze_folder_publishes_the_local_bytes_behind_one_pointer(tmp_path: Path,
                                                                                         mem: str) -> None:
    _tune, _ = small_tune_file(tmp_path / "inbox")
    (tmp_path / "local").mkdir()
    fold_tune_files(tmp_path / "local", tmp_path / "inbox")
    small_tune_file(tmp_path / "inbox")  # the fold took it: write it again for the URL fold
    fold_tune_files(f"{mem}/freezes", str(tmp_path / "inbox"))
    fetched = fetch_folder(f"{mem}/freezes", tmp_path / "fetched")
    assert list(fetched) == [FROZEN.name]
    assert (tmp_path / "fetched" / FROZEN.name).read_bytes() == (tmp_path / "local" / FROZEN.name).read_bytes()
    names = {p.rsplit("/", 1)[-1] for p in fsspec.filesystem("memory").find(f"{mem}/freezes")}
    assert names == {POINTER, fetched[FROZEN.name]}  # the pointer and one blob: no partial key left


def test_a_blob_nobody_points_to_is_invisible_and_a_tampered_blob_is_refused(tmp_path: Path, mem: str) -> None:
    """Publishing writes the blobs, then swaps the pointer: a half-published folder reads as the old one."""
    (tmp_path / "v1").mkdir()
    (tmp_path / "v1" / "x.json").write_text("{\"v\": 1}\n")
    publish_folder(tmp_path / "v1", mem)
    fs = fsspec.filesystem("memory")
    fs.pipe_file(f"{mem}/objects/.{'0' * 64}.partial", b"{\"v\": 2, half")  # a crash mid-upload of v2
    assert fetch_folder(mem, tmp_path / "read") == read_pointer(mem)
    assert (tmp_path / "read" / "x.json").read_text() == "{\"v\": 1}\n"
    fs.pipe_file(f"{mem}/objects/{read_pointer(mem)['x.json']}", b"{\"v\": 3}\n")
    with pytest.raises(UrlFolderError, match="does not have that digest"):
        fetch_folder(mem, tmp_path / "again")


def test_an_export_to_a_memory_url_reads_back_as_the_local_export(tmp_path: Path, mem: str) -> None:
    from emmy_core.exchange.export import export_db
    from emmy_core.exchange.importer import import_db
    from emmy_core.prior.dataset import read_dataset

    tune, _rows = small_tune_file(tmp_path / "inbox")
    outcomes = import_db(tmp_path / "t.db", [tune], fresh=True)
    assert all(o.ok for o in outcomes)
    local = export_db(tmp_path / "t.db", tmp_path / "export")
    remote = export_db(tmp_path / "t.db", f"{mem}/export")
    assert remote["digest"] == local["digest"]
    a, b = read_dataset(tmp_path / "export"), read_dataset(f"{mem}/export")
    assert a.digest == b.digest and len(b.forks) == len(a.forks) > 0


def test_a_tune_into_a_memory_inbox_delivers_whole_files_the_fold_takes(tmp_path: Path, mem: str) -> None:
    """The tune job's replay partition with a memory:// inbox: the file lands under its name only whole; the
    chain's observer sees it waiting (digest of its content) and the chain's fold takes it from the URL."""
    import hashlib

    from assets.resources import EmmyPaths
    from emmy_core.chain import steps
    from pipelines.jobs import build_tune_job, card_partitions

    cache, _rows = small_tune_file(tmp_path / "cache")
    card = "Intel(R) Xeon(R) Processor AVX-512 x2"
    job = build_tune_job(card_partitions([card]))
    paths = EmmyPaths(tune_inbox=f"{mem}/inbox", data_dir=str(tmp_path / "data"),
                      freeze_dir=str(tmp_path / "freezes"))
    result = job.execute_in_process(partition_key=card, resources={"paths": paths}, run_config={
        "ops": {"tune": {"config": {"replay_from": str(cache), "settings": ["deploy"]}}}})
    assert result.success
    fs = fsspec.filesystem("memory")
    (key,) = fs.ls(f"{mem}/inbox", detail=False)
    name = key.rsplit("/", 1)[-1]
    assert name.startswith("intel-r-xeon-r-processor-avx-512-x2.tune-")
    assert not any((tmp_path / "data" / "outbox").iterdir())
    (tmp_path / "freezes").mkdir()
    chain = paths.chain()
    assert chain.inbox_url == f"{mem}/inbox" and chain.inbox == tmp_path / "data" / "outbox"
    seen = steps.look(chain)
    assert [p.name for p in seen.waiting] == [p.name for p in seen.inbox.files] == [name]
    content = hashlib.sha256(fs.cat_file(key)).hexdigest()
    assert seen.inbox.digest == hashlib.sha256(f"{name}:{content}".encode()).hexdigest()
    report = steps.fold(chain)
    assert len(report.moved) == 1 and not fs.find(f"{mem}/inbox")
    assert not steps.look(chain).waiting and (tmp_path / "freezes" / "intel-r-xeon-r-processor-avx-512-x2.json").is_file()
