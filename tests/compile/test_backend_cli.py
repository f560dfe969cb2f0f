"""`emmy explain` and `emmy compile --run` print the emmy backend's coverage."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from emmy_core.cli.main import app

runner = CliRunner()


def test_explain_prints_the_backends_coverage_resolved_not_built(tmp_path: Path) -> None:
    args = ["explain", "--model", "mlp", "--shape", "B=2,S=16", "--dtype", "f32", "--db", str(tmp_path / "none.db"),
            "--no-prior"]
    res = runner.invoke(app, args)
    assert res.exit_code == 0, res.output
    assert "torch.compile(backend='emmy') coverage" in res.output
    assert "ops on Emmy kernels (planned: resolved, not built)" in res.output and "(100.0%)" in res.output
    out = json.loads(runner.invoke(app, [*args, "--json"]).output)
    (graph,) = out["coverage"]
    assert graph["built"] is False and graph["matmul_flops"] == graph["matmul_flops_on_emmy"] > 0


def test_compile_run_prints_the_backends_coverage(tmp_path: Path) -> None:
    res = runner.invoke(app, ["compile", "--model", "mlp", "--shape", "B=1,S=8", "--dtype", "f32", "--run",
                              "--repeats", "1", "--no-inductor", "--db", str(tmp_path / "none.db"), "--no-prior",
                              "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output[res.output.index("{"):])
    (graph,) = out["coverage"]
    # every op on Emmy, but where torch's ops were measured faster for the group here (the group route)
    raced = [f for f in graph["fell_back"] if "measured fastest" in f["reason"]]
    assert graph["built"] is True and graph["ops_on_emmy"] + len(raced) == graph["ops"] > 0
    assert len(raced) == len(graph["fell_back"]) and graph["sizes"] == {}  # static: B=1,S=8
    assert raced or graph["matmul_flops_on_emmy"] == graph["matmul_flops"] > 0
