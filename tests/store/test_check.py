"""`emmy db check`: zero on a clean store; each kind of corruption, planted by raw SQL, is found and counted."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.knobs.vocab import canonical_knobs, schedule_id
from emmy_core.store import GoldenRow, MeasurementRow, RoutingRow, open_store
from emmy_core.store.check import KINDS, check_db
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

runner = CliRunner()


@pytest.fixture
def clean(tmp_path: Path) -> Path:
    """A store with a little of everything, written through the writer."""
    path = tmp_path / "clean.db"
    with open_store(path, "w") as s:
        s.record(
            [MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H200, "deploy", 4.0, samples=3),
             MeasurementRow.ok(ADD_ID, "B=8", KNOBS_A, H100, "deploy", 5.0, samples=3),
             MeasurementRow.failed(ADD_ID, "B=8", KNOBS_B, H200, "deploy", "timeout"),
             MeasurementRow.ok(MUL_ID, "B=8", KNOBS_A, H200, "deploy", 2.0, samples=3),
             MeasurementRow.ok(SUB_ID, "B=8", {"tile_m": 8, "threads": 2}, CPU, "deploy", 2.0, samples=3)],
            kernels=[ADD, MUL, SUB], cards=CARDS,
            routing=[RoutingRow(ADD_ID, "split:C=2", 0, MUL_ID), RoutingRow(ADD_ID, "split:C=2", 1, SUB_ID)],
            goldens=[GoldenRow(ADD_ID, "B=8", H200, "deploy", knobs=KNOBS_A),
                     GoldenRow(MUL_ID, "B=8", H200, "deploy", decision="cut:epilogue")])
    return path


def _plant(path: Path, *statements: tuple[str, list]) -> None:
    con = duckdb.connect(str(path))
    for sql, params in statements:
        con.execute(sql, params)
    con.close()


def _only(path: Path, kind: str) -> int:
    report = check_db(path)
    others = {k: v for k, v in report.counts.items() if k != kind and v}
    assert not others, f"planting {kind} also tripped {others}"
    return report.counts[kind]


def test_check_reports_zero_on_a_clean_store(clean: Path) -> None:
    report = check_db(clean)
    assert report.ok and report.counts == dict.fromkeys(KINDS, 0)
    result = runner.invoke(app, ["db", "check", "--db", str(clean), "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)["counts"] == dict.fromkeys(KINDS, 0)


def test_check_finds_a_schedule_whose_digest_does_not_match_its_knobs(clean: Path) -> None:
    sid = schedule_id(KNOBS_A)
    _plant(clean, ("UPDATE schedules SET knobs = ? WHERE schedule_id = ?",
                   [canonical_knobs({"block": 32, "num_warps": 4}), sid]))
    assert _only(clean, "schedule_digest") == 1


def test_check_finds_non_canonical_knob_text(clean: Path) -> None:
    _plant(clean, ("UPDATE schedules SET knobs = ? WHERE schedule_id = ?",
                   ['{"num_warps": 4, "block": 64}', schedule_id(KNOBS_A)]))
    assert _only(clean, "schedule_digest") == 1


def test_check_finds_a_reference_that_does_not_resolve(clean: Path) -> None:
    _plant(clean, ("DELETE FROM kernels WHERE kernel_id = ?", [MUL_ID]))
    # MUL's measurement, its golden and its routing row all point at the deleted kernel
    assert _only(clean, "dangling_reference") == 3


def test_check_finds_a_measurement_of_a_missing_schedule(clean: Path) -> None:
    _plant(clean, ("UPDATE measurements SET schedule_id = ? WHERE card = ?", ["0" * 64, CPU]))
    assert _only(clean, "dangling_reference") == 1


def test_check_finds_a_card_with_no_description(clean: Path) -> None:
    _plant(clean, ("DELETE FROM cards WHERE name = ?", [H100]))
    assert _only(clean, "undescribed_card") == 1


def test_check_finds_a_knob_name_outside_its_vocabulary(clean: Path) -> None:
    knobs = {"block": 64, "warps": 4}
    sid = schedule_id(knobs)
    _plant(clean, ("INSERT INTO schedules VALUES (?, ?)", [sid, canonical_knobs(knobs)]),
           ("UPDATE measurements SET schedule_id = ? WHERE kernel_id = ?", [sid, MUL_ID]))
    assert _only(clean, "unknown_knob") == 1


def test_check_finds_knobs_of_the_other_targets_vocabulary(clean: Path) -> None:
    _plant(clean, ("UPDATE measurements SET schedule_id = ? WHERE card = ?", [schedule_id(KNOBS_A), CPU]))
    # the CPU's own schedule is now unused, which is fine; the cuda knobs on a cpu card are not
    assert _only(clean, "unknown_knob") == 1


def test_check_finds_a_measurement_that_spells_a_decision(clean: Path) -> None:
    knobs = {"block": 64, "split_k": 2}
    sid = schedule_id(knobs)
    _plant(clean, ("INSERT INTO schedules VALUES (?, ?)", [sid, canonical_knobs(knobs)]),
           ("UPDATE measurements SET schedule_id = ? WHERE kernel_id = ?", [sid, MUL_ID]))
    assert _only(clean, "decision_measurement") == 1


def test_check_finds_a_stale_version(clean: Path) -> None:
    _plant(clean, ("UPDATE meta SET value = '0' WHERE key = 'identity_version'", []))
    assert _only(clean, "stale_version") == 1
    _plant(clean, ("DELETE FROM meta WHERE key = 'schema_version'", []))
    assert _only(clean, "stale_version") == 2


def test_check_finds_a_duplicate_measurement_key(clean: Path) -> None:
    _plant(clean, ("INSERT INTO measurements SELECT * FROM measurements WHERE kernel_id = ?", [MUL_ID]))
    assert _only(clean, "duplicate_key") == 1


def test_check_finds_a_row_that_breaks_a_writer_rule(clean: Path) -> None:
    _plant(clean, ("UPDATE measurements SET median_us = 3.0 WHERE status = 'failed'", []),
           ("UPDATE measurements SET sizes = 'B=08' WHERE kernel_id = ?", [MUL_ID]),
           ("UPDATE routing SET decision = 'fuse:x' WHERE piece_index = 1", []))
    assert _only(clean, "malformed_row") == 3


def test_check_command_exits_1_and_prints_the_counts(clean: Path) -> None:
    _plant(clean, ("DELETE FROM cards WHERE name = ?", [H100]))
    result = runner.invoke(app, ["db", "check", "--db", str(clean)])
    assert result.exit_code == 1
    assert "undescribed_card" in result.output and "FAILED" in result.output
    assert "NVIDIA H100 80GB HBM3" in result.output  # an example names the card


def test_check_command_on_a_missing_file_fails_cleanly(tmp_path: Path) -> None:
    result = runner.invoke(app, ["db", "check", "--db", str(tmp_path / "none.db")])
    assert result.exit_code == 2
    assert "no store at" in result.output and "Traceback" not in result.output


def test_check_reads_a_file_of_another_version_instead_of_refusing(clean: Path) -> None:
    _plant(clean, ("UPDATE meta SET value = '0' WHERE key = 'schema_version'", []))
    result = runner.invoke(app, ["db", "check", "--db", str(clean), "--json"])
    assert result.exit_code == 1
    assert json.loads(result.output)["counts"]["stale_version"] == 1


def test_check_finds_a_setting_outside_the_compile_settings(clean: Path) -> None:
    _plant(clean, ("UPDATE measurements SET setting = 'turbo' WHERE kernel_id = ?", [MUL_ID]),
           ("UPDATE goldens SET setting = 'turbo' WHERE kernel_id = ?", [MUL_ID]))
    assert _only(clean, "malformed_row") == 2
