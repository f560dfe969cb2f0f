"""A tune file holds what a tune recorded (ok and failed rows, never flagged ones) as canonical JSON."""

from __future__ import annotations

import json
from pathlib import Path

from emmy_core.bench import PLACEHOLDER_US
from emmy_core.bench.tunefile import TUNE_FORMAT, TuneFileRecorder, canonical_json, tune_file_path
from emmy_core.ir import kernel_id, parse


def test_a_tune_file_holds_recorded_rows_only_as_canonical_json(planted_run, cpu_card, tmp_path: Path) -> None:
    report, _ = planted_run
    path = tune_file_path(tmp_path, cpu_card)
    assert path.parent == tmp_path and path.name.endswith(".json") and ".tune-" in path.name
    rec = TuneFileRecorder(path)
    unit = report.planned[0].unit
    rec.record(unit.program, cpu_card, report.outcomes)
    text = path.read_text()
    assert text.endswith("\n") and text == canonical_json(json.loads(text))
    doc = json.loads(text)
    assert doc["format"] == TUNE_FORMAT and doc["card"]["name"] == cpu_card.name
    [kernel] = doc["kernels"]
    assert kernel_id(parse(kernel["loop_program"])) == unit.kernel_id  # identity recomputed, never stored
    statuses = sorted(r["status"] for r in kernel["rows"])
    assert statuses == sorted(o.status for o in report.outcomes if o.status in ("ok", "failed"))
    assert all(r["median_us"] == PLACEHOLDER_US for r in kernel["rows"] if r["status"] == "failed")
    assert [p.name for p in tmp_path.iterdir()] == [path.name]  # written atomically, nothing left beside it
