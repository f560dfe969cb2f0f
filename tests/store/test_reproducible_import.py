"""The same freeze is the same dataset: a row imported from a file carries the file's own time or none,
never the import's, so importing one freeze twice, an hour apart, exports byte-identical Parquet and
the same digest. A row measured now (a tune) is still stamped with the time it was written."""

from __future__ import annotations

import datetime as dt
import json
import types
from pathlib import Path

import pytest

import emmy_core.store.batch as batch_module
from emmy_core.exchange.export import export_db
from emmy_core.exchange.importer import import_db
from emmy_core.store import MeasurementRow, open_store
from tests.store.conftest import ADD, ADD_ID, CARDS, H100, KNOBS_A

ROOT = Path(__file__).resolve().parents[2]
FREEZES = sorted(p for p in (ROOT / "freezes").glob("*.json") if ".tune-" not in p.name)


def small_freeze(tmp: Path) -> Path:
    """Six kernels of the repository's AMD freeze with their rows and goldens (decisions left out)."""
    doc = json.loads((ROOT / "freezes" / "amd-epyc-avx-512-x2.json").read_text())
    doc["kernels"], doc["decisions"] = doc["kernels"][:6], []
    path = tmp / "amd-epyc-avx-512-x2.json"
    path.write_text(json.dumps(doc))
    return path


def clock_at(monkeypatch: pytest.MonkeyPatch, at: dt.datetime) -> None:
    """The store writer's clock (the only one an import could read) set to `at`."""

    class Clock(dt.datetime):
        @classmethod
        def now(cls, tz: dt.tzinfo | None = None) -> dt.datetime:  # type: ignore[override]
            return at.astimezone(tz) if tz is not None else at.replace(tzinfo=None)

    monkeypatch.setattr(batch_module, "_dt", types.SimpleNamespace(datetime=Clock, UTC=dt.UTC))


def test_a_row_imported_from_a_file_carries_the_files_time_or_none_never_the_imports(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clock_at(monkeypatch, dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC))
    db = tmp_path / "a.db"
    (outcome,) = import_db(db, [small_freeze(tmp_path)])
    assert outcome.ok, outcome.message
    with open_store(db, "w") as store:
        rows = store.measurements()
        assert rows and all(r.measured_at is None for r in rows)  # a freeze keeps no time
        store.record([MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H100, "deploy", 3.0, samples=5)],
                     kernels=[ADD], cards=CARDS)
        (tuned,) = store.measurements(kernel_id=ADD_ID)
    assert tuned.measured_at == dt.datetime(2026, 12, 1, 12, 0)  # measured now: the write's time


def test_importing_the_same_freeze_twice_an_hour_apart_exports_identical_parquet_and_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    freeze = small_freeze(tmp_path)
    manifests, files = [], []
    for n, hour in enumerate((12, 13)):
        clock_at(monkeypatch, dt.datetime(2026, 12, 1, hour, 0, 7, tzinfo=dt.UTC))
        (outcome,) = import_db(tmp_path / "tune.db", [freeze], fresh=True)
        assert outcome.ok, outcome.message
        out = tmp_path / f"export{n}"
        manifests.append(export_db(tmp_path / "tune.db", out))
        files.append({p.name: p.read_bytes() for p in sorted(out.glob("*.parquet"))})
    assert manifests[0]["digest"] == manifests[1]["digest"]
    assert files[0] == files[1] and set(files[0]) >= {"measurements.parquet", "pools.parquet"}


def test_the_repository_freeze_exports_the_same_digest_on_every_fresh_import(tmp_path: Path) -> None:
    digests = set()
    for n in range(2):
        assert all(o.ok for o in import_db(tmp_path / "tune.db", FREEZES, fresh=True))
        digests.add(export_db(tmp_path / "tune.db", tmp_path / f"export{n}")["digest"])
    assert len(digests) == 1
