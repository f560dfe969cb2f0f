"""`emmy explain`, `emmy compile --run` and `emmy gate` on the command line."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch
from typer.testing import CliRunner

from emmy_core.cli.main import app
from emmy_core.graph.forks import schedule_fork
from emmy_core.graph.pipeline import compile_model
from emmy_core.ir import format_sizes
from emmy_core.store import CardRow, MeasurementRow, open_store
from emmy_core.targets import local_card
from tests.peak_memory import PRINT_PEAK_KIB

ROOT = Path(__file__).resolve().parents[2]
runner = CliRunner()


def _matrix(path: Path, cards: list[str], shape: dict[str, int]) -> Path:
    path.write_text(json.dumps({"version": 1, "models": [{"name": "mlp", "dtype": "f16", "shapes": [shape]}],
                                "cards": cards, "settings": ["deploy"]}))
    return path


def _measure_first_options(db: Path, shape: dict[str, int]) -> None:
    """A tuning database holding one ok row per kernel of mlp at `shape` on this machine's card."""
    card = local_card()
    low = compile_model("mlp", shape, torch.float16)
    with open_store(db, "w") as store:
        for k in {k.kernel_id: k for k in low.kernels}.values():
            knobs = schedule_fork(k.program, card).options[0].knobs
            store.record([MeasurementRow.ok(k.kernel_id, format_sizes(k.sizes(shape)), knobs, card.name, "deploy",
                                            10.0, samples=3)], kernels=[k.program], cards=[CardRow.from_card(card)])


def test_explain_prints_the_record_and_its_json_parses(tmp_path: Path) -> None:
    args = ["explain", "--model", "mlp", "--shape", "B=2,S=16", "--db", str(tmp_path / "none.db"), "--no-prior"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "tier" in res.output and "forks by tier: golden 0, local 0, prior 0, first 6" in res.output
    res = runner.invoke(app, [*args, "--json"])
    out = json.loads(res.output)
    assert out["sizes"] == ["B=2,S=16"] and len(out["forks"]) == 6
    assert {f["tier"] for f in out["forks"]} == {"first"} and all(f["tried"] for f in out["forks"])


def test_explain_takes_a_users_module_by_path(tmp_path: Path) -> None:
    res = runner.invoke(app, ["explain", "--model", "tests.compile.test_equals_torch:UserBlock", "--input", "B,S,48",
                              "--dtype", "f32", "--shape", "B=3,S=7", "--db", str(tmp_path / "none.db"), "--no-prior"])
    assert res.exit_code == 0, res.output
    assert res.output.startswith("UserBlock on ") and "B=3,S=7" in res.output


def test_explain_under_strict_evidence_exits_1_when_a_fork_falls_through(tmp_path: Path) -> None:
    res = runner.invoke(app, ["explain", "--model", "mlp", "--shape", "B=1,S=4", "--db", str(tmp_path / "none.db"),
                              "--no-prior", "--strict-evidence"])
    assert res.exit_code == 1


def test_explaining_a_huge_shape_allocates_nothing_of_its_size(tmp_path: Path) -> None:
    script = (
        "from typer.testing import CliRunner\n"
        "from emmy_core.cli.main import app\n"
        "res = CliRunner().invoke(app, ['explain', '--model', 'llama_block', '--shape', 'B=65536,S=65536', "
        f"'--card', 'NVIDIA H200', '--db', {str(tmp_path / 'none.db')!r}, '--no-prior'])\n"
        "assert res.exit_code == 0, res.output\n"
        "assert 'B·S=4294967296' in res.output  # the rows axis T, named by the model's axes\n"
        + PRINT_PEAK_KIB
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout.split()[-1]) < 2 * 1024 * 1024  # KiB: far below the terabytes the shape would take


def test_compile_run_compares_with_torch(tmp_path: Path) -> None:
    res = runner.invoke(app, ["compile", "--model", "mlp", "--shape", "B=1,S=8", "--dtype", "f32", "--run",
                              "--repeats", "3", "--no-inductor", "--db", str(tmp_path / "none.db"), "--no-prior",
                              "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    assert out["max_error"] < 1e-4
    assert set(out["median_us"]) == {"emmy", "eager"} and out["vs_eager"] > 0


def test_compile_run_refuses_a_shape_that_does_not_fit_before_making_inputs(tmp_path: Path) -> None:
    res = runner.invoke(app, ["compile", "--model", "llama_block", "--shape", "B=64,S=65536", "--run",
                              "--db", str(tmp_path / "none.db"), "--no-prior"])
    assert res.exit_code == 2
    assert "bytes" in res.output and "refused before allocating" in res.output


def test_gate_passes_when_every_fork_is_measured_and_fails_naming_what_fell_through(tmp_path: Path) -> None:
    shape = {"B": 1, "S": 4}
    db = tmp_path / "tune.db"
    _measure_first_options(db, shape)
    empty = tmp_path / "freezes"
    empty.mkdir()
    base = ["gate", "--db", str(db), "--freezes", str(empty), "--no-prior"]
    res = runner.invoke(app, [*base, "--matrix", str(_matrix(tmp_path / "m1.json", ["local"], shape))])
    assert res.exit_code == 0, res.output
    assert "gate: 1 of 1 cases pass" in res.output and "built" in res.output
    res = runner.invoke(app, [*base, "--matrix", str(_matrix(tmp_path / "m2.json", ["local", "NVIDIA H200"], shape)),
                              "--json"])
    assert res.exit_code == 1
    out = json.loads(res.output)
    by_card = {c["card"]: c for c in out["cases"]}
    assert by_card[local_card().name]["passed"] and by_card[local_card().name]["built"]
    h200 = by_card["NVIDIA H200"]
    assert not h200["passed"] and not h200["built"]  # an absent card is resolved only
    assert {f["tier"] for f in h200["record"]["forks"]} == {"first"}


def test_gate_refuses_a_bad_matrix_naming_the_field(tmp_path: Path) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"version": 1, "models": [{"name": "mlp", "dtype": "f16", "shapes": [{"B": 0, "S": 1}]}],
                               "cards": ["local"], "settings": ["deploy"]}))
    res = runner.invoke(app, ["gate", "--matrix", str(bad)])
    assert res.exit_code == 2 and "shapes[0]: field B" in res.output


def test_compile_run_at_a_shape_past_a_kernels_index_range_is_refused_without_a_traceback() -> None:
    result = runner.invoke(app, ["compile", "--model", "mlp", "--shape", "B=100000,S=100000", "--run",
                                 "--no-inductor", "--repeats", "1"])
    assert result.exit_code == 2, result.output
    assert "exceeds the largest extent a kernel indexes" in result.output and "Traceback" not in result.output


def test_explain_with_a_refused_prior_prints_its_one_error_line_and_no_stray_exit_code(tmp_path: Path) -> None:
    text = tmp_path / "notes.txt"
    text.write_text("hello\n")
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100_000 + "]" * 100_000)
    base = ["explain", "--model", "mlp", "--shape", "B=1,S=16", "--db", str(tmp_path / "none.db")]
    for extra, why in ((["--prior", str(text)], "notes.txt: not valid JSON"),
                       (["--prior", str(tmp_path / "absent.json")], "absent.json: no such prior artifact"),
                       (["--prior", str(text), "--no-prior"], "give --prior or --no-prior, not both"),
                       (["--prior", str(deep)], "deep.json: not valid JSON")):
        res = runner.invoke(app, [*base, *extra])
        assert res.exit_code == 2, res.output
        lines = [line for line in res.output.splitlines() if line.strip()]
        assert len(lines) == 1 and lines[0].startswith("emmy: error: ") and why in lines[0], res.output
