"""The schema as analysts see it: the data dictionary, the card columns, and the views."""

from __future__ import annotations

from pathlib import Path

import pytest

from emmy_core.store import CardRow, MeasurementRow, RoutingRow, Schedule, open_store
from emmy_core.store.rows import CARD_FIELDS_FROM_TARGETS, CARD_NUMBERS
from emmy_core.store.schema import TABLES, VIEWS, data_dictionary
from emmy_core.targets import load_table
from emmy_core.targets.card import NUMERIC_FIELDS
from tests.store.conftest import (
    ADD,
    ADD_ID,
    CARDS,
    CPU,
    H100,
    H200,
    KNOBS_A,
    KNOBS_B,
    MUL,
    MUL_ID,
    SUB,
    SUB_ID,
)

DOC = Path(__file__).resolve().parents[2] / "docs" / "data-dictionary.md"


def test_data_dictionary_is_generated_from_the_schema() -> None:
    assert DOC.read_text(encoding="utf-8") == data_dictionary(), (
        "docs/data-dictionary.md is stale: regenerate it with "
        "python -c 'from emmy_core.store.schema import data_dictionary as d; print(d(), end=\"\")'")


def test_every_table_column_and_view_of_a_file_is_in_the_dictionary(tmp_path: Path) -> None:
    with open_store(tmp_path / "s.db", "w") as s:
        live = s.arrow("SELECT table_name, column_name FROM information_schema.columns "
                       "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position").to_pylist()
    got: dict[str, list[str]] = {}
    for row in live:
        got.setdefault(row["table_name"], []).append(row["column_name"])
    want = {t.name: [c.name for c in t.columns] for t in (*TABLES, *VIEWS)}
    assert got == want
    text = DOC.read_text(encoding="utf-8")
    for name, columns in want.items():
        assert f"### `{name}`" in text
        assert all(f"| `{c}` |" in text for c in columns)


def test_card_columns_hold_every_number_a_target_card_has(tmp_path: Path) -> None:
    assert set(CARD_FIELDS_FROM_TARGETS.values()) == set(NUMERIC_FIELDS)
    assert set(CARD_FIELDS_FROM_TARGETS) | {"cc_major", "cc_minor"} == set(CARD_NUMBERS)
    table = load_table()
    rows = [CardRow.from_card(card) for card in table.values()]
    with open_store(tmp_path / "cards.db", "w") as s:
        s.record(cards=rows)
        stored = {c.name: c for c in s.cards()}
    h200 = stored["NVIDIA H200"]
    assert h200.numbers["sm_count"] == table["NVIDIA H200"].sms and h200.numbers["cc_major"] == 9
    assert h200.arch == "hopper" and "wgmma_m64n64k16" in h200.tensor_cores
    assert stored == {r.name: r.normalized() for r in rows}


@pytest.fixture
def filled(tmp_path: Path):  # type: ignore[no-untyped-def]
    s = open_store(tmp_path / "v.db", "w")
    k3 = {"block": 256, "num_warps": 4}
    s.record([
        MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H200, "deploy", 12.0, samples=3),
        MeasurementRow.ok(ADD_ID, "B=8", KNOBS_B, H200, "deploy", 9.0, samples=3),
        MeasurementRow.failed(ADD_ID, "B=8", k3, H200, "deploy", "timeout"),
        MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H100, "deploy", 14.0, samples=3),
        MeasurementRow.failed(ADD_ID, "B=8", KNOBS_B, H100, "deploy", "build_error"),
        MeasurementRow.ok(MUL_ID, "B=8", KNOBS_A, H200, "deploy", 4.0, samples=3),
        MeasurementRow.ok(SUB_ID, "B=8", KNOBS_B, H200, "deploy", 3.0, samples=3),
        MeasurementRow.ok(SUB_ID, "B=8", {"tile_m": 8}, CPU, "deploy", 30.0, samples=3),
    ], kernels=[ADD, MUL, SUB], cards=CARDS,
        routing=[RoutingRow(ADD_ID, "split:C=2", 0, MUL_ID), RoutingRow(ADD_ID, "split:C=2", 1, SUB_ID)])
    yield s
    s.close()


def test_fastest_view_gives_the_fastest_working_row_per_kernel_sizes_card_and_setting(filled) -> None:  # type: ignore[no-untyped-def]
    rows = filled.arrow("SELECT kernel_id, card, schedule_id, knobs, median_us FROM fastest "
                        "WHERE kernel_id = ? ORDER BY card", [ADD_ID]).to_pylist()
    assert [(r["card"], r["median_us"]) for r in rows] == [(H100, 14.0), (H200, 9.0)]
    assert rows[1]["schedule_id"] == Schedule(KNOBS_B).schedule_id and rows[1]["knobs"] == Schedule(KNOBS_B).text


def test_failure_rates_view_counts_failures_per_card(filled) -> None:  # type: ignore[no-untyped-def]
    rows = {r["card"]: r for r in filled.arrow("SELECT * FROM failure_rates").to_pylist()}
    assert (rows[H200]["variants"], rows[H200]["failed"], rows[H200]["timeout"]) == (5, 1, 1)
    assert rows[H100]["failure_rate"] == pytest.approx(0.5) and rows[H100]["build_error"] == 1
    assert rows[CPU]["failed"] == 0


def test_decision_prices_view_sums_the_pieces_fastest_rows(filled) -> None:  # type: ignore[no-untyped-def]
    rows = filled.arrow("SELECT * FROM decision_prices").to_pylist()
    # on the H200 both pieces are measured (4.0 + 3.0); elsewhere a piece is missing, so no price
    assert [(r["decision"], r["card"], r["price_us"], r["pieces"]) for r in rows] == [("split:C=2", H200, 7.0, 2)]


def test_variants_view_joins_knobs_and_kernel_names(filled) -> None:  # type: ignore[no-untyped-def]
    rows = filled.arrow("SELECT c_name, knobs, status FROM variants WHERE card = ? ORDER BY c_name", [CPU]).to_pylist()
    assert rows == [{"c_name": "ew_sub", "knobs": '{"tile_m":8}', "status": "ok"}]
