"""`emmy graph show` runs for both reference models; its JSON parses; bad input exits 2 with a message."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from emmy_core.cli.main import app

runner = CliRunner()


@pytest.mark.parametrize("model", ["llama_block", "mlp"])
def test_graph_show_runs_for_each_reference_model_and_json_parses(model: str) -> None:
    res = runner.invoke(app, ["graph", "show", "--model", model, "--shape", "B=2,S=8", "--stage", "all", "--json"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.output)
    assert [s["pass"] for s in out["stages"]] == ["capture", "canonicalize", "match_rmsnorm", "fuse_epilogue",
                                                  "fuse_norm", "fuse_elementwise"]
    assert sum(k["count"] for k in out["kernels"]) == out["kernel_count"]
    assert len({k["kernel_id"] for k in out["kernels"]}) == len(out["kernels"])
    assert all(f["options"] >= 2 for f in out["forks"])


def test_graph_show_text_lists_kernels_with_counts_and_forks_with_option_counts() -> None:
    res = runner.invoke(app, ["graph", "show", "--model", "llama_block", "--shape", "B=2,S=8", "--card", "local",
                              "--dtype", "f32"])
    assert res.exit_code == 0, res.output
    assert res.output.count("== after ") == 1 and "== after fuse_elementwise" in res.output  # the final graph only
    assert "== kernels: 12 launches, 9 distinct ==" in res.output
    assert " x3 " in res.output  # q, k, v share one kernel
    assert "cut:epilogue" in res.output and "schedule" in res.output and " options " in res.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--model", "resnet"], "known models: decoder_2048, decoder_4096, decoder_896, llama_block, llama_stack, mlp"),
        (["--model", "mlp", "--shape", "B=2"], "exactly B and S"),
        (["--model", "mlp", "--shape", "B=two"], "--shape"),
        (["--model", "mlp", "--card", "NVIDIA Imaginary"], "unknown card"),
        (["--model", "mlp", "--dtype", "f8"], "--dtype"),
        (["--model", "mlp", "--stage", "fuse_everything"], "the stages are capture, canonicalize"),
    ],
)
def test_graph_show_refuses_bad_input_with_exit_2(args: list[str], message: str) -> None:
    res = runner.invoke(app, ["graph", "show", *args])
    assert res.exit_code == 2
    assert message in res.output


def test_graph_matrix_prints_the_serving_matrix() -> None:
    res = runner.invoke(app, ["graph", "matrix"])
    assert res.exit_code == 0, res.output
    assert "llama_block (f16)" in res.output and "decoder_4096 (bf16)" in res.output and "cases: 192" in res.output


def test_graph_show_stage_prints_that_stage_only() -> None:
    res = runner.invoke(app, ["graph", "show", "--model", "mlp", "--shape", "B=2,S=8", "--stage", "canonicalize"])
    assert res.exit_code == 0, res.output
    assert res.output.count("== after ") == 1 and "== after canonicalize" in res.output


def test_graph_show_of_a_huge_shape_makes_no_tensor_of_that_shape() -> None:
    res = runner.invoke(app, ["graph", "show", "--model", "mlp", "--shape", "B=65536,S=65536", "--json"])
    assert res.exit_code == 0, res.output
    assert "B~65536, S~65536" in json.loads(res.output)["stages"][0]["graph"]
