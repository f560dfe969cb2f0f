"""`emmy run --bench` records clean hand-runs and refuses flagged ones; `emmy tune` benches a model once per kernel."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.ir import kernel_id, render
from emmy_core.ir.builders import rmsnorm
from emmy_core.knobs.route import library_knobs
from emmy_core.knobs.vocab import schedule_id
from emmy_core.store import open_store
from tests.bench import planted

runner = CliRunner()
LENIENT = ["--setting", "rank", "--spread-limit", "1000", "--timeout", "20", "--max-busy", "1"]  # the machine is shared


@pytest.fixture
def kernel_file(tmp_path: Path) -> Path:
    path = tmp_path / "norm.emmy"
    path.write_text(render(rmsnorm(hidden=16, dtype="f32", batch_hint=4)))
    return path


def _hand(kernel_file: Path, db: Path, *args: str):  # type: ignore[no-untyped-def]
    return runner.invoke(app, ["run", "--bench", "--kernel", str(kernel_file), "--shape", "B=4", "--db", str(db),
                               "--backend", planted.SPEC, *LENIENT, *args])


def test_run_bench_records_a_clean_hand_run_with_source_hand(kernel_file: Path, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    result = _hand(kernel_file, db, "--knob", f"unroll={planted.CORRECT}", "--knob", "vec=4")
    assert result.exit_code == 0, result.output
    assert "recorded (source hand)" in result.output and f"into database {db}" in result.output
    with open_store(db, "r") as store:
        [row] = store.measurements()
        assert (row.status, row.source) == ("ok", "hand")
        assert row.kernel_id == kernel_id(rmsnorm(hidden=16, dtype="f32", batch_hint=4))
        assert store.knobs(row.schedule_id)["unroll"] == planted.CORRECT  # type: ignore[index]
        assert store.knobs(row.schedule_id)["vec"] == 4  # type: ignore[index]


def test_run_bench_refuses_to_record_a_flagged_result(kernel_file: Path, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    result = _hand(kernel_file, db, "--knob", f"unroll={planted.WRONG}")
    assert result.exit_code == 1
    assert "FLAGGED (wrong_result)" in result.output and "not recorded" in result.output
    with open_store(db, "w") as store:
        assert store.measurements() == []


def test_run_without_bench_verifies_and_records_nothing(kernel_file: Path, tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    result = runner.invoke(app, ["run", "--kernel", str(kernel_file), "--shape", "B=4", "--db", str(db),
                                 "--backend", planted.SPEC, "--knob", f"unroll={planted.CORRECT}"])
    assert result.exit_code == 0, result.output
    assert "verified against the reference" in result.output
    assert not db.exists()


@pytest.mark.parametrize(("knob", "why"), [
    ("tile_x=4", "unknown knob"),
    ("unroll=four", "takes an integer"),
    ("vec=3", "power of two"),
    ("num_warps=4", "cuda vocabulary"),
    ("unroll", "not NAME=VALUE"),
])
def test_forced_knobs_are_validated_against_the_vocabulary(kernel_file: Path, tmp_path: Path, knob: str,
                                                           why: str) -> None:
    result = runner.invoke(app, ["run", "--bench", "--kernel", str(kernel_file), "--db", str(tmp_path / "t.db"),
                                 "--knob", knob])
    assert result.exit_code == 2
    assert why in result.output


def test_tune_benches_each_kernel_of_a_model_once_and_records_through_the_writer(tmp_path: Path) -> None:
    """llama_block computes q, k and v with one kernel and normalises twice with another: 12 instances, 9 kernels,
    7 of them matrix products, each measured once more as torch runs it (the library route): 16 variants."""
    db = tmp_path / "t.db"
    result = runner.invoke(app, ["tune", "--model", "llama_block", "--shape", "B=1,S=8", "--budget", "1",
                                 "--db", str(db), "--no-progress", *LENIENT])
    assert result.exit_code == 0, result.output
    assert "kernels: 9 distinct (12 instances); variants run: 16" in result.output
    assert (f"at most 1 candidates per kernel chosen by strategy prior (--budget all: every one), and torch's own "
            f"kernel beside each matrix product; recording into database {db}") in " ".join(result.output.split())
    assert f"rows recorded: 16 into database {db}" in result.output
    with open_store(db, "r") as store:
        rows = store.measurements()
        assert len(rows) == 16 and {r.source for r in rows} == {"tune"}
        assert len({r.kernel_id for r in rows}) == 9
        assert sum(r.schedule_id == schedule_id(library_knobs()) for r in rows) == 7
    again = runner.invoke(app, ["tune", "--model", "llama_block", "--shape", "B=1,S=8", "--budget", "1",
                                "--db", str(db), "--no-progress", *LENIENT])
    assert again.exit_code == 0, again.output
    ok = sum(r.status == "ok" for r in rows)
    assert f"skipped (already measured ok): {ok}" in again.output  # never measured twice: the search goes on
    with open_store(db, "r") as store:
        after = store.measurements()
    run_again = int(re.search(r"variants run: (\d+),", again.output).group(1))  # type: ignore[union-attr]
    assert run_again > 0 and len(after) == len(rows) + run_again  # each a new row: no schedule measured twice


def test_a_hand_run_with_knobs_the_card_cannot_build_is_refused_not_recorded(kernel_file: Path,
                                                                              tmp_path: Path) -> None:
    db = tmp_path / "t.db"
    result = runner.invoke(app, ["run", "--bench", "--kernel", str(kernel_file), "--shape", "B=4", "--db", str(db),
                                 "--knob", "threads=512"])
    assert result.exit_code == 2
    assert "cannot build it here" in result.output and "usable cores" in result.output
    assert not db.exists()


def test_a_hand_run_at_a_decode_shape_builds_the_matmuls_a_tune_of_it_measures() -> None:
    """A dynamic-T matmul is built once for every T: its first option's 64-row tile is masked at T=16 (a tune at
    that shape measures it ok), so a hand run does not skip it as wider than this run's extent."""
    result = runner.invoke(app, ["run", "--model", "mlp", "--shape", "B=1,S=16", "--select", "matmul"])
    assert result.exit_code == 0, result.output
    assert "skipped" not in result.output
    assert result.output.count("built and verified against the reference") == 2, result.output


def test_run_without_bench_verifies_triton_kernels_for_a_gpu_card_here(kernel_file: Path) -> None:
    result = runner.invoke(app, ["run", "--kernel", str(kernel_file), "--shape", "B=4", "--card", "NVIDIA H200",
                                 "--knob", "num_warps=2"])
    assert result.exit_code == 0, result.output
    assert "num_warps=2" in result.output and "verified against the reference" in result.output
    refused = runner.invoke(app, ["run", "--bench", "--kernel", str(kernel_file), "--card", "NVIDIA H200"])
    assert refused.exit_code == 2 and "benches time the local device only" in refused.output


def test_run_bench_on_a_models_kernels_forces_the_knobs_over_the_first_option(tmp_path: Path) -> None:
    """The real C backend: the model's layernorm, built with vec forced, recorded as a hand-run."""
    db = tmp_path / "t.db"
    result = runner.invoke(app, ["run", "--bench", "--model", "mlp", "--shape", "B=1,S=8", "--select", "layernorm",
                                 "--knob", "vec=8", "--knob", "threads=1", "--db", str(db), *LENIENT])
    assert result.exit_code == 0, result.output
    assert "layernorm" in result.output and "recorded (source hand)" in result.output
    with open_store(db, "r") as store:
        [row] = store.measurements()
        knobs = store.knobs(row.schedule_id)
        assert knobs is not None and knobs["vec"] == 8 and knobs["threads"] == 1 and "unroll" in knobs
        assert row.source == "hand" and row.sizes == "B=8"


@pytest.mark.parametrize("what", ["a user's file", "a folder", "a file as the folder"])
def test_run_bench_refuses_a_db_that_is_not_a_store_before_timing_anything(kernel_file: Path, tmp_path: Path,
                                                                            what: str) -> None:
    user = tmp_path / "notes.txt"
    user.write_text("my notes\n")
    (tmp_path / "folder").mkdir()
    db = {"a user's file": user, "a folder": tmp_path / "folder", "a file as the folder": user / "x.db"}[what]
    result = _hand(kernel_file, db, "--knob", f"unroll={planted.CORRECT}", "--force")
    assert result.exit_code == 2, result.output
    assert "--db: " in result.output and str(db) in result.output and "nothing was timed" in result.output
    assert "timing" not in result.output and "recorded" not in result.output
    assert user.read_text() == "my notes\n" and list((tmp_path / "folder").iterdir()) == []


@pytest.mark.parametrize("knob", ["threads=２", "threads=1_0", "threads=+2"])
def test_a_forced_integer_knob_takes_ascii_digits_only(kernel_file: Path, knob: str) -> None:
    result = runner.invoke(app, ["run", "--kernel", str(kernel_file), "--shape", "B=4", "--knob", knob])
    assert result.exit_code == 2, result.output
    assert f"--knob {knob!r}: threads takes an integer, not {knob.split('=')[1]!r}" in result.output


def test_a_forced_knob_too_large_for_any_integer_gets_the_range_message(kernel_file: Path) -> None:
    result = runner.invoke(app, ["run", "--kernel", str(kernel_file), "--shape", "B=4", "--knob",
                                 "threads=" + "9" * 5000])
    assert result.exit_code == 2, result.output
    assert "threads must be in 1..512" in result.output and len(result.output) < 300
