"""Goldens promoted from measurements: the fastest clean row of each pool, through the one writer."""

from __future__ import annotations

from pathlib import Path

from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.store import MeasurementRow, Store, open_store
from emmy_core.store.promote import promote_fastest
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


def test_golden_is_the_fastest_clean_row_of_each_pool(store: Store) -> None:
    store.record(rows())
    result = promote_fastest(store)
    got = {(g.kernel_id, g.sizes, g.card, g.setting): store.knobs(g.schedule_id) for g in store.goldens()}
    assert got == {
        (ADD_ID, "B=8", H100, "deploy"): KNOBS_B,  # faster than A; the failed variant never wins
        (ADD_ID, "B=8", H200, "deploy"): KNOBS_A,  # the card is part of the pool
        (ADD_ID, "B=64", H100, "deploy"): KNOBS_A,  # sizes are part of the pool
    }
    assert (result.pools, result.skipped) == (4, 1)  # MUL has no clean row: no golden


def test_a_pool_smaller_than_min_pool_gets_no_golden(store: Store) -> None:
    store.record(rows())
    result = promote_fastest(store, min_pool=2)
    assert [(g.sizes, g.card) for g in store.goldens()] == [("B=8", H100)]
    assert result.skipped == 3


def test_promoting_again_after_a_better_row_moves_the_golden(store: Store) -> None:
    store.record(rows())
    promote_fastest(store, card=H100)
    store.record([MeasurementRow.ok(ADD_ID, "B=8", FAST, H100, "deploy", 1.0, samples=5, source="hand")])
    promote_fastest(store, card=H100)
    golden = {(g.sizes, g.card): g for g in store.goldens()}[("B=8", H100)]
    assert store.knobs(golden.schedule_id) == FAST
    assert all(g.card == H100 for g in store.goldens())


def test_emmy_db_promote_writes_goldens(tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    with open_store(db, "w") as s:
        s.record(rows(), kernels=[ADD, MUL], cards=CARDS)
    result = CliRunner().invoke(app, ["db", "promote", "--db", str(db), "--setting", "deploy"])
    assert result.exit_code == 0, result.output
    assert "3 goldens written from 4 pools" in result.output
    with open_store(db, "r") as s:
        assert len(s.goldens()) == 3
