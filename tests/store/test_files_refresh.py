"""Tune files, golden records and the nightly refresh that folds tune files into the freeze."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emmy_core.exchange.importer import import_into
from emmy_core.fileio.sourcefile import SourceError
from emmy_core.formats.freeze import freeze_db
from emmy_core.formats.golden import GoldenRecord, Trace, write_golden_file
from emmy_core.formats.tunefile import tune_file_name, write_tune_file
from emmy_core.freezefolder import refresh as refresh_module
from emmy_core.freezefolder.refresh import refresh_freeze
from emmy_core.ir import kernel_id, render
from emmy_core.store import BatchError, MeasurementRow, MemoryStore, RoutingRow, open_store
from tests.store.test_files_freeze import H100, H200, MM, NORM, PIECE_A, PIECE_B, populate


@pytest.fixture
def freezes(tmp_path: Path) -> Path:
    db = tmp_path / "src.db"
    with open_store(db, "w") as s:
        populate(s)
    out = tmp_path / "freezes"
    freeze_db(db, out)
    return out


def tune(path: Path, median: float, knobs: dict | None = None) -> Path:
    return write_tune_file(path, card=H200, kernels=[NORM], measurements=[
        MeasurementRow.ok(kernel_id(NORM), "B=8", knobs or {"block": 64, "num_warps": 4}, H200.name, "deploy", median,
                          samples=7)])


def test_a_tune_file_has_the_freeze_shape_and_imports(tmp_path: Path) -> None:
    path = tune(tmp_path / tune_file_name(H200.name, "20261130T120000Z"), 11.0)
    assert path.name == "nvidia-h200.tune-20261130T120000Z.json"
    doc = json.loads(path.read_text())
    assert doc["format"] == "emmy-tune" and doc["card"]["name"] == H200.name
    assert [k["program"] for k in doc["kernels"]] == [render(NORM)]
    mem = MemoryStore()
    (outcome,) = import_into(mem, [path])
    assert outcome.ok and outcome.kind == "tune"
    assert [m.median_us for m in mem.measurements()] == [11.0]


def test_a_tune_file_is_refused_before_writing_when_the_store_would_refuse_it(tmp_path: Path) -> None:
    path = tmp_path / "x.json"
    with pytest.raises(BatchError):
        tune(path, 11.0, {"block": 64, "split": "split:K=2"})
    with pytest.raises(BatchError, match="one card"):
        write_tune_file(path, card=H200, kernels=[NORM], measurements=[
            MeasurementRow.ok(kernel_id(NORM), "B=8", {"block": 64}, H100.name, "deploy", 1.0)])
    with pytest.raises(BatchError, match="self-contained"):
        write_tune_file(path, card=H200, kernels=[], measurements=[
            MeasurementRow.ok(kernel_id(NORM), "B=8", {"block": 64}, H200.name, "deploy", 1.0)])
    assert not path.exists()


def test_refresh_folds_tune_files_into_the_freeze_and_removes_them(freezes: Path) -> None:
    before = (freezes / "nvidia-h200.json").read_bytes()
    t1 = tune(freezes / tune_file_name(H200.name, "20261130T010000Z"), 10.0)  # better than the frozen 12.5
    t2 = tune(freezes / tune_file_name(H200.name, "20261130T020000Z"), 5.0, {"block": 256, "num_warps": 8})
    report = refresh_freeze(freezes)
    assert sorted(report.folded) == sorted([t1, t2]) and not t1.exists() and not t2.exists()
    after = json.loads((freezes / "nvidia-h200.json").read_text())
    norm = next(k for k in after["kernels"] if k["program"] == render(NORM))
    rows = {(r["sizes"], r["setting"], json.dumps(r["knobs"], sort_keys=True)): r for r in norm["rows"]}
    assert rows[("B=8", "deploy", '{"block": 64, "num_warps": 4}')]["median_us"] == 10.0
    assert rows[("B=8", "deploy", '{"block": 64, "num_warps": 4}')]["golden"] is True
    assert rows[("B=8", "deploy", '{"block": 256, "num_warps": 8}')]["median_us"] == 5.0
    assert (freezes / "nvidia-h200.json").read_bytes() != before
    # folding again with nothing new changes nothing
    again = (freezes / "nvidia-h200.json").read_bytes()
    refresh_freeze(freezes)
    assert (freezes / "nvidia-h200.json").read_bytes() == again


def test_two_refreshes_at_once_take_turns_so_a_tune_file_landing_between_them_keeps_its_rows(freezes: Path) -> None:
    """Refresh A has listed the folder and is folding; a new tune file lands and refresh B starts. Without a
    lock B folded and removed it, then A renamed its older freeze over B's: the new rows were gone."""
    import threading

    tune(freezes / tune_file_name(H200.name, "20261130T010000Z"), 10.0)
    folding, go = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def paused(_: str) -> None:
        folding.set()
        go.wait(30)

    def run(progress: object) -> None:
        try:
            refresh_freeze(freezes, progress)  # type: ignore[arg-type]
        except BaseException as exc:  # reported below
            errors.append(exc)

    a = threading.Thread(target=run, args=(paused,))
    a.start()
    assert folding.wait(30)
    late = tune(freezes / tune_file_name(H200.name, "20261130T020000Z"), 5.0, {"block": 256, "num_warps": 8})
    b = threading.Thread(target=run, args=(None,))
    b.start()
    b.join(1.0)
    assert b.is_alive()  # waiting for A's turn, not folding beside it
    go.set()
    a.join(60)
    b.join(60)
    assert not errors and not a.is_alive() and not b.is_alive()
    assert not late.exists() and not [p for p in freezes.iterdir() if ".tune-" in p.name]
    text = (freezes / "nvidia-h200.json").read_text()
    assert '"median_us":10.0' in text and '"median_us":5.0' in text


def test_a_refresh_waits_for_a_held_folder_only_as_long_as_it_says_and_then_changes_nothing(freezes: Path) -> None:
    """A hung refresh (or merge) holding the folder's lock used to hold every later refresh without a word."""
    from emmy_core.fileio.safefile import FolderBusyError, locked_folder

    pending = tune(freezes / tune_file_name(H200.name, "20261130T010000Z"), 10.0)
    before = {p.name: p.read_bytes() for p in freezes.iterdir()}
    said: list[str] = []
    with locked_folder(freezes):  # another process's lock: flock conflicts across open descriptions
        with pytest.raises(FolderBusyError, match=r"held its lock .* for the 0.3 s this waits; nothing was changed"):
            refresh_freeze(freezes, said.append, wait_s=0.3)
    assert said and said[0].startswith("waiting for another process's lock on")
    assert {p.name: p.read_bytes() for p in freezes.iterdir()} == before and pending.exists()
    assert refresh_freeze(freezes).folded == [pending]  # once let go, the same refresh goes through


def test_a_crash_before_the_freeze_is_written_loses_nothing(freezes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    before = {p.name: p.read_bytes() for p in freezes.iterdir()}
    t1 = tune(freezes / tune_file_name(H200.name, "20261130T010000Z"), 10.0)

    def crash(*args: object, **kw: object) -> None:
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(refresh_module, "freeze_store", crash)
    with pytest.raises(KeyboardInterrupt):
        refresh_freeze(freezes)
    assert t1.exists()
    assert {p.name: p.read_bytes() for p in freezes.iterdir() if p != t1} == before
    monkeypatch.undo()
    refresh_freeze(freezes)
    assert not t1.exists() and '"median_us":10.0' in (freezes / "nvidia-h200.json").read_text()


def test_a_crash_after_the_freeze_but_before_removal_folds_the_same_again(freezes: Path) -> None:
    t1 = tune(freezes / tune_file_name(H200.name, "20261130T010000Z"), 10.0)
    kept = t1.read_bytes()
    refresh_freeze(freezes)
    folded = (freezes / "nvidia-h200.json").read_bytes()
    t1.write_bytes(kept)  # as if the process died before removing it
    refresh_freeze(freezes)
    assert (freezes / "nvidia-h200.json").read_bytes() == folded and not t1.exists()


def test_a_bad_tune_file_stops_the_refresh_with_nothing_changed(freezes: Path) -> None:
    before = {p.name: p.read_bytes() for p in freezes.iterdir()}
    bad = freezes / tune_file_name(H200.name, "20261130T030000Z")
    bad.write_text('{"format": "emmy-tune", "version": 1')
    with pytest.raises(SourceError, match="not valid JSON"):
        refresh_freeze(freezes)
    assert {p.name: p.read_bytes() for p in freezes.iterdir()} == {**before, bad.name: bad.read_bytes()}


def test_a_tune_file_named_for_another_card_is_refused(freezes: Path) -> None:
    wrong = tune(freezes / tune_file_name(H100.name, "20261130T040000Z"), 9.0)
    with pytest.raises(SourceError, match="belongs in nvidia-h200"):
        refresh_freeze(freezes)
    assert wrong.exists()


def test_a_golden_record_keeps_its_trace_and_imports_the_golden(tmp_path: Path) -> None:
    records = [
        GoldenRecord(Trace("tiny-llama", {"input_ids": (8, 512)}), NORM, "B=8", "deploy",
                     knobs={"block": 64, "num_warps": 4}),
        GoldenRecord(Trace("tiny-llama", {"input_ids": (8, 512)}), MM, "", "deploy", decision="split:K=2",
                     pieces=(PIECE_A, PIECE_B)),
    ]
    path = write_golden_file(tmp_path / "goldens.json", H200, records)
    doc = json.loads(path.read_text())
    assert doc["format"] == "emmy-golden"
    assert {g["trace"]["model"] for g in doc["goldens"]} == {"tiny-llama"}
    mem = MemoryStore()
    (outcome,) = import_into(mem, [path])
    assert outcome.ok and outcome.kind == "golden", outcome.message
    goldens = {(g.kernel_id, g.decision) for g in mem.goldens()}
    assert goldens == {(kernel_id(NORM), None), (kernel_id(MM), "split:K=2")}
    assert mem.routing() == [RoutingRow(kernel_id(MM), "split:K=2", 0, kernel_id(PIECE_A)),
                             RoutingRow(kernel_id(MM), "split:K=2", 1, kernel_id(PIECE_B))]


def test_contradictions_a_golden_record_with_two_goldens_for_one_pool_is_refused(tmp_path: Path) -> None:
    trace = Trace("tiny-llama", {"input_ids": (8, 512)})
    path = write_golden_file(tmp_path / "goldens.json", H200, [
        GoldenRecord(trace, NORM, "B=8", "deploy", knobs={"block": 64, "num_warps": 4})])
    doc = json.loads(path.read_text())
    doc["goldens"].append({**doc["goldens"][0], "knobs": {"block": 128, "num_warps": 8}})
    path.write_text(json.dumps(doc))
    (outcome,) = import_into(MemoryStore(), [path])
    assert not outcome.ok and "$.goldens[1]" in outcome.message and "second golden" in outcome.message
