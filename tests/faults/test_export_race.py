"""Readers racing `emmy db export`: an export is built beside its folder and swapped in whole, and a reader
opens one snapshot (the manifest and every table from the same folder, hashed on the bytes it parses), so
it never pairs a manifest of one export with tables of another, nor fails half-way."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from emmy_core.exchange.export import export_db, open_snapshot
from emmy_core.store import MeasurementRow, open_store
from tests.store.test_files_freeze import H200, NORM, populate


def two_stores(tmp: Path) -> tuple[Path, Path]:
    """Two stores whose exports differ in every table that counts (rows, cards)."""
    from emmy_core.ir import kernel_id

    a, b = tmp / "a.db", tmp / "b.db"
    with open_store(a, "w") as s:
        populate(s)
    with open_store(b, "w") as s:
        populate(s)
        s.record([MeasurementRow.ok(kernel_id(NORM), f"B={i + 1}", {"block": 64, "num_warps": 4}, H200.name,
                                    "deploy", 1.0 + i, samples=3) for i in range(300)])
    return a, b


def test_a_reader_never_mixes_the_manifest_of_one_export_with_the_tables_of_another(tmp_path: Path) -> None:
    a, b = two_stores(tmp_path)
    out = tmp_path / "dataset"
    digests = {export_db(a, tmp_path / "ref-a")["digest"]: "a", export_db(b, tmp_path / "ref-b")["digest"]: "b"}
    rows = {"a": open_snapshot(tmp_path / "ref-a").tables["measurements"].num_rows,
            "b": open_snapshot(tmp_path / "ref-b").tables["measurements"].num_rows}
    export_db(a, out)
    stop = threading.Event()
    errors: list[BaseException] = []
    swaps = [0]

    def writer() -> None:
        try:
            i = 0
            while not stop.is_set():
                export_db(b if i % 2 == 0 else a, out)
                i += 1
                swaps[0] = i
        except BaseException as exc:  # reported by the test, never swallowed
            errors.append(exc)

    thread = threading.Thread(target=writer)
    thread.start()
    seen: dict[str, int] = {"a": 0, "b": 0}
    try:
        reads = 0
        while (swaps[0] < 6 or reads < 60) and reads < 100_000 and not errors:
            reads += 1
            snap = open_snapshot(out)
            which = digests[snap.manifest["digest"]]  # a manifest of one of the two exports, whole
            assert snap.tables["measurements"].num_rows == rows[which]  # and the tables of that same export
            seen[which] += 1
    finally:
        stop.set()
        thread.join()
    assert not errors, errors
    assert seen["a"] and seen["b"], seen  # the reads did race the swaps


def test_an_export_is_written_beside_its_folder_and_leaves_nothing_behind(tmp_path: Path) -> None:
    a, b = two_stores(tmp_path)
    out = tmp_path / "dataset"
    export_db(a, out)
    export_db(b, out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db", "b.db", "dataset"]


def test_ctrl_c_inside_duckdbs_write_is_a_keyboard_interrupt_and_the_old_export_stands(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """DuckDB turns Ctrl-C during a query into its own exception (InterruptException, or a RuntimeError 'Query
    interrupted' from a relation's write); the export makes it a KeyboardInterrupt (exit 130), not an error."""
    import duckdb

    from emmy_core.exchange import export

    a, b = two_stores(tmp_path)
    out = tmp_path / "dataset"
    export_db(a, out)
    before = {p.name: p.read_bytes() for p in out.iterdir()}
    for fault in (duckdb.InterruptException("INTERRUPT Error: Interrupted!"), RuntimeError("Query interrupted")):
        def interrupted(*_: object, fault: BaseException = fault) -> None:
            raise fault

        monkeypatch.setattr(export, "_write", interrupted)
        with pytest.raises(KeyboardInterrupt):
            export_db(b, out)
        assert {p.name: p.read_bytes() for p in out.iterdir()} == before
        assert sorted(p.name for p in tmp_path.iterdir()) == ["a.db", "b.db", "dataset"]
    monkeypatch.setattr(export, "_write", lambda *_: (_ for _ in ()).throw(RuntimeError("another fault")))
    with pytest.raises(RuntimeError, match="another fault"):
        export_db(b, out)
