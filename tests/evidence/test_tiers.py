"""The evidence hierarchy, one rule per test: golden, local row, (prior), first option; strict evidence."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from emmy_core.compiler import StrictEvidenceError
from emmy_core.graph.forks import ScheduleOption, schedule_fork
from tests.evidence.conftest import (
    CARD,
    SIZES,
    Setup,
    explain_with,
    kernels_of,
    schedule_of,
    write_db,
)


def _pool(lowered):  # type: ignore[no-untyped-def]
    return [o.knobs for o in schedule_fork(kernels_of(lowered)[0], CARD, library=False).options]


def _explain(proj, tmp_path: Path, freeze: Setup | None = None, db: Setup | None = None, **kw):  # type: ignore[no-untyped-def]
    kw.setdefault("library", False)  # the tiers over Emmy's own pool (the route beside it: test_library_route.py)
    return explain_with(proj, tmp_path, freeze, db, **kw)


def test_a_golden_answers_over_a_faster_local_row(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    k = kernels_of(proj[2])[0]
    pool = _pool(proj[2])
    freeze = Setup().row(k, pool[3], 80.0).row(k, pool[4], 90.0).golden(k, pool[3])
    db = Setup().row(k, pool[5], 10.0)  # faster, but only a local measurement
    r = schedule_of(_explain(proj, tmp_path, freeze, db))
    assert r.tier == "golden" and isinstance(r.choice, ScheduleOption) and dict(r.choice.knobs) == pool[3]
    assert r.time_us == 80.0 and r.measurements[0].median_us == 80.0
    assert r.measurements[0].key.card == CARD.name and r.measurements[0].key.sizes == "T=16"
    assert r.runner_up == ScheduleOption.of(pool[4]).label and r.margin == pytest.approx(90 / 80 - 1)


def test_a_local_row_answers_when_no_golden_exists(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    k = kernels_of(proj[2])[0]
    pool = _pool(proj[2])
    db = Setup().row(k, pool[6], 30.0).row(k, pool[2], 12.5).row(k, pool[1], 40.0)
    compiled = _explain(proj, tmp_path, None, db)
    r = schedule_of(compiled)
    assert r.tier == "local" and dict(r.choice.knobs) == pool[2] and r.time_us == 12.5  # type: ignore[union-attr]
    assert r.source == str(tmp_path / "tune.db") and r.measurements[0].measured_at  # the row's time is kept
    assert r.runner_up == ScheduleOption.of(pool[6]).label and r.margin == pytest.approx(30 / 12.5 - 1)
    assert r.tried[0][0] == "golden" and "no file for Test CPU x2" in r.tried[0][1]


def test_the_first_option_answers_with_no_prior(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    compiled = _explain(proj, tmp_path)
    r = schedule_of(compiled)
    assert r.tier == "first" and r.choice == schedule_fork(kernels_of(proj[2])[0], CARD, library=False).options[0]
    assert [t for t, _ in r.tried] == ["golden", "local", "prior"]
    assert "turned off" in r.tried[2][1]
    assert all(res.tier == "first" for res in compiled.record.resolutions)
    assert compiled.record.tiers()["first"] == len(compiled.record.resolutions) == 2  # schedule and split


def test_the_match_is_by_exact_identity_and_compile_context_only(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Rows of the kernel at other sizes, on another setting or another card are not evidence for this fork."""
    k = kernels_of(proj[2])[0]
    pool = _pool(proj[2])
    db = Setup().row(k, pool[1], 5.0, sizes={"T": 32})
    write_db(tmp_path / "tune.db", db)
    other = Setup().row(k, pool[1], 5.0)
    with __import__("emmy_core.store", fromlist=["open_store"]).open_store(tmp_path / "tune.db", "w") as store:
        other.write(store, setting="rank")
    r = schedule_of(_explain(proj, tmp_path))
    assert r.tier == "first" and "no measured row for this pool" in dict(r.tried)["local"]


def test_strict_evidence_fails_listing_every_fork_that_fell_through(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    module, example, _ = proj
    from emmy_core.compiler import compile as emmy_compile

    with pytest.raises(StrictEvidenceError) as info:
        emmy_compile(module, example, card=CARD, freezes=tmp_path, tuning_db=tmp_path / "none.db", prior=False,
                     strict_evidence=True, torch_ops="refuse")
    err = info.value
    assert {(r.rule, r.tier) for r in err.forks} == {("schedule", "first"), ("split", "first")}
    text = str(err)
    assert "2 fork(s)" in text and "[schedule]" in text and "[split]" in text and "T=16" in text


def test_strict_evidence_passes_when_every_fork_is_measured(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    k = kernels_of(proj[2])[0]
    db = Setup().row(k, _pool(proj[2])[1], 20.0)
    compiled = _explain(proj, tmp_path, None, db)
    assert [r.tier for r in compiled.record.resolutions] == ["local", "local"]  # the split: keep, measured
    assert compiled.record.fell_through() == []


def test_a_missing_tuning_database_is_skipped_with_a_note(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    compiled = _explain(proj, tmp_path)
    assert any("no tuning database at" in n and "tune.db" in n for n in compiled.record.notes)


def test_a_locked_tuning_database_is_skipped_with_a_note(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    k = kernels_of(proj[2])[0]
    db = write_db(tmp_path / "tune.db", Setup().row(k, _pool(proj[2])[1], 20.0))
    holder = subprocess.Popen(
        [sys.executable, "-c", "import duckdb, sys, time; c = duckdb.connect(sys.argv[1]); print('ready', flush=True); "
         "time.sleep(60)", str(db)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "ready"
        t0 = time.monotonic()
        compiled = _explain(proj, tmp_path)
        assert time.monotonic() - t0 < 30  # it does not wait for the tune to finish
    finally:
        holder.kill()
        holder.wait()
    r = schedule_of(compiled)
    assert r.tier == "first" and "locked" in dict(r.tried)["local"]
    assert any("locked" in n for n in compiled.record.notes)


def test_explaining_resolves_any_size_without_building(proj, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    compiled = _explain(proj, tmp_path)
    assert compiled.builder is None
    res = compiled.resolve({"B": 4096, "S": 65536})
    assert {r.key.sizes for r in res} == {"T=268435456"}
    assert compiled.record.sizes == ["B=2,S=8", "B=4096,S=65536"]
    assert SIZES == {"B": 2, "S": 8}
