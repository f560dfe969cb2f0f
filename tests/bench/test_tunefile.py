"""`emmy tune --tune-file` writes the store's tune-file format: ok and failed rows, never flagged ones,
and the store's importer reads it back row for row."""

from __future__ import annotations

from pathlib import Path

from emmy_core.bench import PLACEHOLDER_US
from emmy_core.exchange.importer import import_into
from emmy_core.exchange.recorders import TuneFileRecorder
from emmy_core.store import MemoryStore


def test_a_tune_file_holds_the_recorded_rows_and_imports_back(planted_run, cpu_card, tmp_path: Path) -> None:
    report, _ = planted_run
    rec = TuneFileRecorder(tmp_path)
    unit = report.planned[0].unit
    rec.record_kernel(unit.program, cpu_card, report.outcomes)
    assert rec.path is not None and rec.path.parent == tmp_path and ".tune-" in rec.path.name
    assert [p.name for p in tmp_path.iterdir()] == [rec.path.name]  # written atomically, nothing beside it
    store = MemoryStore()
    [outcome] = import_into(store, [rec.path])
    assert outcome.ok and outcome.kind == "tune", outcome.message
    rows = store.measurements()
    recordable = [o for o in report.outcomes if o.status in ("ok", "failed")]
    assert len(rows) == len(recordable) < len(report.outcomes)  # the flagged ones are not in the file
    assert sorted((r.status, r.failure) for r in rows) == sorted((o.status, o.failure) for o in recordable)
    assert all(r.median_us == PLACEHOLDER_US for r in rows if r.status == "failed")
    assert {r.kernel_id for r in rows} == {unit.kernel_id}  # identity recomputed from the text on import
