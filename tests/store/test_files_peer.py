"""Every Kernel Tuner cache of the peer data imports: row counts and medians checked against the files.

The files are large (4k to 18k configurations each): they are imported once per test run into one
fresh DuckDB store (`peer_store`, which the prior's and the evaluation's peer tests read exported), and
every test reads that store.
"""

from __future__ import annotations

import gzip
import json
import statistics
from pathlib import Path

import pytest

from emmy_core.exchange.importer import import_db
from emmy_core.formats.kerneltuner import KT_FAILURES, space_digest
from emmy_core.ir import Extern, kernel_id
from emmy_core.knobs.vocab import EXTERN_PREFIX
from emmy_core.store import PLACEHOLDER_US, open_store
from tests.conftest import PeerStore

_CACHE: dict[str, object] = {}


def _read(path: Path) -> dict:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", encoding="utf-8") as fh:
        return json.load(fh)


def _expected(path: Path) -> dict:
    """What a file says, computed directly: its card, extern kernel, and per knob assignment the row."""
    doc = _read(path)
    problem = doc["problem_size"] if isinstance(doc["problem_size"], list) else [doc["problem_size"]]
    rows = {}
    for e in doc["cache"].values():
        knobs = json.dumps({EXTERN_PREFIX + k: e[k] for k in doc["tune_params_keys"]}, sort_keys=True,
                           separators=(",", ":"))
        if isinstance(e["time"], str):
            rows[knobs] = ("failed", KT_FAILURES[e["time"]], PLACEHOLDER_US, 0)
        else:
            rows[knobs] = ("ok", None, statistics.median(e["times"]) * 1000.0, len(e["times"]))
    return {"card": doc["device_name"], "space": (doc["kernel_name"], json.dumps(problem)),
            "kernel_id": kernel_id(Extern(doc["kernel_name"], tuple(problem), space_digest(doc["tune_params"]))),
            "rows": rows}


@pytest.fixture
def peer_db(peer_store: PeerStore) -> tuple[Path, list, dict[str, dict]]:
    """The store holding every peer file (imported once per test run: `peer_store`), the import's outcome per
    file, and what each file says."""
    if "expected" not in _CACHE:
        _CACHE["expected"] = {p.name: _expected(p) for p in peer_store.files}
    return peer_store.db, peer_store.outcomes, _CACHE["expected"]  # type: ignore[return-value]


def test_every_peer_file_imports(peer_db: tuple[Path, list, dict[str, dict]]) -> None:
    _, outcomes, expected = peer_db
    assert len(outcomes) == len(expected) >= 1
    refused = [o.message for o in outcomes if not o.ok]
    assert not refused
    assert {o.kind for o in outcomes} == {"kerneltuner"}


def test_working_and_failed_counts_and_medians_match_each_file(peer_db: tuple[Path, list, dict[str, dict]]) -> None:
    db, _, expected = peer_db
    with open_store(db, "r") as store:
        for name, exp in expected.items():
            got = store.arrow(
                "SELECT s.knobs, m.status, m.failure, m.median_us, m.samples FROM measurements m JOIN schedules s "
                "ON s.schedule_id = m.schedule_id WHERE m.kernel_id = ? AND m.card = ?",
                [exp["kernel_id"], exp["card"]]).to_pylist()
            want = exp["rows"]
            assert sum(r["status"] == "ok" for r in got) == sum(w[0] == "ok" for w in want.values()), name
            assert sum(r["status"] == "failed" for r in got) == sum(w[0] == "failed" for w in want.values()), name
            assert len(got) == len(want), name
            for r in got:
                status, failure, median, samples = want[r["knobs"]]
                assert (r["status"], r["failure"], r["samples"]) == (status, failure, samples), name
                assert r["median_us"] == pytest.approx(median, rel=1e-12), name


def test_card_names_go_in_exactly_as_the_files_say(peer_db: tuple[Path, list, dict[str, dict]]) -> None:
    db, _, expected = peer_db
    with open_store(db, "r") as store:
        cards = {c.name for c in store.cards()}
    assert cards == {e["card"] for e in expected.values()}


def test_each_kernel_size_and_knob_space_is_one_extern_kernel(peer_db: tuple[Path, list, dict[str, dict]]) -> None:
    db, _, expected = peer_db
    with open_store(db, "r") as store:
        stored = store.kernels()
    assert set(stored) == {e["kernel_id"] for e in expected.values()}
    assert all(text.startswith("extern ") for text, _ in stored.values())


def test_the_imported_peer_store_checks_clean_and_survives_an_export(
        peer_db: tuple[Path, list, dict[str, dict]], tmp_path: Path) -> None:
    from emmy_core.exchange.export import export_db
    from emmy_core.store.check import check_db
    from emmy_core.store.stats import db_stats

    db, _, _ = peer_db
    report = check_db(db)
    assert report.ok, report.counts
    manifest = export_db(db, tmp_path / "export")
    assert manifest["tables"]["pools"]["candidates"]["extern"] == manifest["tables"]["pools"]["candidates"]["pools"]
    (outcome,) = import_db(tmp_path / "back.db", [tmp_path / "export"], fresh=True)
    assert outcome.ok, outcome.message
    before, after = db_stats(db), db_stats(tmp_path / "back.db")
    before.pop("path"), after.pop("path")
    assert before == after
