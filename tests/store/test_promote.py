"""Goldens promoted from measurements: the fastest clean row of each pool, through the one writer."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.freezefolder.promote import promote_fastest
from emmy_core.store import GoldenRow, MeasurementRow, MeasurementStore, open_store
from tests.store.conftest import ADD, ADD_ID, CARDS, H100, H200, KNOBS_A, KNOBS_B, MUL, MUL_ID

FAST = {"block": 256, "num_warps": 4}


def rows() -> list[MeasurementRow]:
    return [
        MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H100, "deploy", 10.0, samples=5, source="tune"),
        MeasurementRow.ok(ADD_ID, "B=8", KNOBS_B, H100, "deploy", 7.0, samples=5, source="tune"),
        MeasurementRow.failed(ADD_ID, "B=8", FAST, H100, "deploy", failure="timeout", source="tune"),
        MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H200, "deploy", 5.0, samples=5, source="tune"),
        MeasurementRow.ok(ADD_ID, "B=64", KNOBS_A, H100, "deploy", 30.0, samples=5, source="tune"),
        MeasurementRow.failed(MUL_ID, "B=8", KNOBS_A, H100, "deploy", failure="crash", source="tune"),
    ]


def test_golden_is_the_fastest_clean_row_of_each_pool(store: MeasurementStore) -> None:
    store.record(rows())
    result = promote_fastest(store, min_pool=1)
    got = {(g.kernel_id, g.sizes, g.card, g.setting): store.knobs(g.schedule_id) for g in store.goldens()}
    assert got == {
        (ADD_ID, "B=8", H100, "deploy"): KNOBS_B,  # faster than A; the failed variant never wins
        (ADD_ID, "B=8", H200, "deploy"): KNOBS_A,  # the card is part of the pool
        (ADD_ID, "B=64", H100, "deploy"): KNOBS_A,  # sizes are part of the pool
    }
    assert (result.pools, result.skipped) == (4, 1)  # MUL has no clean row: no golden


def test_a_pool_smaller_than_min_pool_gets_no_golden(store: MeasurementStore) -> None:
    store.record(rows())
    result = promote_fastest(store, min_pool=2)
    assert [(g.sizes, g.card) for g in store.goldens()] == [("B=8", H100)]
    assert result.skipped == 3


def test_promoting_again_after_a_better_row_moves_the_golden(store: MeasurementStore) -> None:
    store.record(rows())
    promote_fastest(store, card=H100, min_pool=1)
    store.record([MeasurementRow.ok(ADD_ID, "B=8", FAST, H100, "deploy", 1.0, samples=5, source="hand")])
    again = promote_fastest(store, card=H100, min_pool=1)
    (change,) = again.changes
    assert change.kind == "replaced" and change.old_knobs == KNOBS_B and change.old_median_us == 7.0
    assert change.median_us == 1.0 and change.runner_up_us == 7.0 and again.unchanged == 1
    golden = {(g.sizes, g.card): g for g in store.goldens()}[("B=8", H100)]
    assert store.knobs(golden.schedule_id) == FAST
    assert all(g.card == H100 for g in store.goldens())


def test_promote_defaults_to_the_designs_min_pool_of_16(tmp_path: Path) -> None:
    """Issue 9, item 10: with --min-pool 1 by default, a single noisy sample became the 'reviewed' golden."""
    db = tmp_path / "t.db"
    with open_store(db, "w") as s:
        s.record(rows(), kernels=[ADD, MUL], cards=CARDS)
    result = CliRunner().invoke(app, ["db", "promote", "--db", str(db)])
    assert result.exit_code == 0, result.output
    assert "0 goldens written from 4 pools (4 skipped: fewer than 16 ok rows" in result.output
    many = [MeasurementRow.ok(ADD_ID, "B=8", {"block": 2 ** (4 + i % 7), "num_warps": 2 ** (i // 7)}, H200,
                              "deploy", 50.0 - i, samples=5) for i in range(16)]
    with open_store(db, "w") as s:
        s.record(many)
    result = CliRunner().invoke(app, ["db", "promote", "--db", str(db)])
    assert "1 goldens written from 4 pools (3 skipped" in result.output, result.output
    assert f"new      ew_add [{ADD_ID[:12]}] B=8 'NVIDIA H200' deploy:" in result.output
    assert "5 us (beat 16 rows, the next best 35 us)" in result.output


def test_emmy_db_promote_prints_each_new_or_replaced_golden_with_the_time_it_beat(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with open_store(db, "w") as s:
        s.record(rows(), kernels=[ADD, MUL], cards=CARDS)
    result = CliRunner().invoke(app, ["db", "promote", "--db", str(db), "--setting", "deploy", "--min-pool", "1"])
    assert result.exit_code == 0, result.output
    assert "3 goldens written from 4 pools" in result.output
    assert '{"block":128,"num_warps":8} 7 us (beat 1 rows, the next best 10 us)' in result.output
    with open_store(db, "w") as s:
        assert len(s.goldens()) == 3
        s.record([MeasurementRow.ok(ADD_ID, "B=8", FAST, H100, "deploy", 2.0, samples=5)])
    again = CliRunner().invoke(app, ["db", "promote", "--db", str(db), "--min-pool", "1"])
    assert "replaced ew_add" in again.output and 'replaces {"block":128,"num_warps":8} (7 us)' in again.output
    assert "1 goldens written from 4 pools (1 skipped: fewer than 1 ok rows; 2 unchanged" in again.output


def test_promote_keeps_a_decision_golden(store: MeasurementStore) -> None:
    store.record(rows())
    store.record(goldens=[GoldenRow(ADD_ID, "B=8", H100, "deploy", decision="split:C=2")])
    result = promote_fastest(store, card=H100, min_pool=1)
    assert result.decisions_kept == 1
    kept = {(g.sizes, g.card): g for g in store.goldens()}[("B=8", H100)]
    assert kept.decision == "split:C=2"


def test_db_promote_refuses_a_store_that_does_not_exist_and_creates_no_file_or_folder(tmp_path: Path) -> None:
    for db in (tmp_path / "brandnew.db", tmp_path / "nodir" / "x.db"):
        result = CliRunner().invoke(app, ["db", "promote", "--db", str(db)])
        assert result.exit_code == 2, result.output
        assert f"no store at {db}" in result.output and "goldens written" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_db_promote_refuses_an_unknown_setting_and_a_card_the_store_does_not_describe(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with open_store(db, "w") as s:
        s.record(rows(), kernels=[ADD, MUL], cards=CARDS)
    before = db.read_bytes()
    result = CliRunner().invoke(app, ["db", "promote", "--db", str(db), "--setting", "nope", "--min-pool", "1"])
    assert result.exit_code == 2 and "--setting 'nope': known settings: deploy, rank" in result.output
    result = CliRunner().invoke(app, ["db", "promote", "--db", str(db), "--card", "nope", "--min-pool", "1"])
    assert result.exit_code == 2 and f"{db}: card 'nope' is not described in this store" in result.output
    assert "goldens written" not in result.output
    assert db.read_bytes() == before
