"""Capture never runs the model at the requested sizes: small stand-ins are traced, then specialised."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch
from torch import nn

from emmy_core.graph.capture import capture
from emmy_core.graph.errors import GraphError
from emmy_core.graph.models import build_model
from emmy_core.graph.pipeline import CAPTURE_SIZES, compile_graph, compile_model, compile_module, specialise
from tests.peak_memory import PRINT_PEAK_KIB

ROOT = Path(__file__).resolve().parents[2]


class OneLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(x) + x


class HardCodesTheExampleSize(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(3, 7, 16) * 2.0  # the example's B and S written as constants


def test_capture_runs_the_model_only_at_the_small_capture_sizes() -> None:
    module = OneLinear()
    seen: list[tuple[int, ...]] = []
    module.fc.register_forward_hook(lambda m, args, out: seen.append(tuple(args[0].shape)))
    low = compile_module(module, (torch.randn(64, 1000, 16),))
    assert seen == [(CAPTURE_SIZES["B"], CAPTURE_SIZES["S"], 16)]
    assert low.graph.hints() == {"B": 64, "S": 1000}  # specialised to the example
    assert low.kernels[0].program.axes[0].hint == 64 * 1000


def test_specialised_kernels_are_the_kernels_captured_at_the_sizes_themselves() -> None:
    module, inputs = build_model("llama_block")
    direct = compile_graph(capture(module, inputs({"B": 3, "S": 11}), name="llama_block"))  # traced at the sizes themselves
    special = specialise(compile_model("llama_block", {"B": 1, "S": 2}), {"B": 3, "S": 11})
    assert [k.program for k in special.kernels] == [k.program for k in direct.kernels]
    assert special.graph == direct.graph


def test_a_dynamic_axis_written_as_a_constant_is_refused() -> None:
    with pytest.raises(GraphError, match="dynamic axis used as a constant") as info:
        compile_module(HardCodesTheExampleSize(), (torch.randn(3, 7, 16),))
    assert "test_specialise.py" in str(info.value) and "x.reshape(3, 7, 16)" in str(info.value)


def test_specialise_refuses_sizes_that_do_not_name_the_graphs_axes() -> None:
    low = compile_model("mlp", {"B": 2, "S": 3})
    with pytest.raises(GraphError, match="dynamic axes B, S"):
        specialise(low, {"B": 2})
    with pytest.raises(GraphError, match=r"integer in 1\.\."):
        specialise(low, {"B": 0, "S": 3})


def test_compiling_a_huge_shape_allocates_nothing_of_its_size() -> None:
    """B=65536,S=65536 would need terabytes if the model ran at it; the compile stays small."""
    script = (
        "from emmy_core.graph.pipeline import compile_model\n"
        "from emmy_core.graph.forks import forks\n"
        "low = compile_model('mlp', {'B': 65536, 'S': 65536})\n"
        "assert low.kernels[0].sizes({'B': 65536, 'S': 65536}) == {'B': 65536 * 65536}\n"
        "print(len(forks(low)))\n" + PRINT_PEAK_KIB
    )
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    peak_kib = int(proc.stdout.split()[-1])
    assert peak_kib < 2 * 1024 * 1024, f"peak memory {peak_kib} KiB"
