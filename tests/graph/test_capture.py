"""Capture: supported ops become graph nodes with dynamic axes B and S; anything else is refused by name and line."""

from __future__ import annotations

import inspect

import pytest
import torch
from torch import nn

from emmy_core.graph.capture import capture
from emmy_core.graph.errors import GraphError, UnsupportedOp
from emmy_core.graph.models import MODEL_NAMES, build_model


class UsesSin(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + 1.0
        return torch.sin(y)  # the unsupported line


class UsesSoftplusModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = nn.Softplus()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x) * 2.0


class MergesDynamicAxes(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1, x.shape[-1]) * 2.0


class SoftmaxOverRows(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def _line_of(cls: type, marker: str) -> int:
    lines, start = inspect.getsourcelines(cls)
    return start + next(i for i, line in enumerate(lines) if marker in line)


def test_unsupported_op_fails_with_op_name_and_source_line() -> None:
    with pytest.raises(UnsupportedOp) as info:
        capture(UsesSin(), (torch.randn(2, 3, 8),))
    err = info.value
    assert "sin" in err.op
    line = _line_of(UsesSin, "the unsupported line")
    assert err.source.endswith(f"test_capture.py:{line}: return torch.sin(y)  # the unsupported line")
    assert "sin" in str(err) and f":{line}:" in str(err)


def test_unsupported_module_is_named_by_its_type_and_call_line() -> None:
    with pytest.raises(UnsupportedOp) as info:
        capture(UsesSoftplusModule(), (torch.randn(2, 3, 8),))
    assert "Softplus" in info.value.op
    assert f":{_line_of(UsesSoftplusModule, 'self.act(x)')}:" in info.value.source


def test_unsupported_reshape_that_merges_dynamic_axes() -> None:
    with pytest.raises(UnsupportedOp, match="dynamic axis"):
        capture(MergesDynamicAxes(), (torch.randn(2, 3, 8),))


def test_unsupported_softmax_not_over_the_last_axis() -> None:
    with pytest.raises(UnsupportedOp, match="last dimension"):
        capture(SoftmaxOverRows(), (torch.randn(2, 3, 8),))


def test_dynamic_axes_are_B_and_S_with_expected_sizes_from_the_example() -> None:
    module, inputs = build_model("llama_block")
    g = capture(module, inputs({"B": 2, "S": 5})).graph
    x = g.node("x")
    assert x.type.shape == ("B", "S", 256)
    assert g.hints() == {"B": 2, "S": 5}
    assert g.node(g.outputs[0]).type.shape == ("B", "S", 256)
    # attention scores are [B, heads, S, S]: the shape rules carry S through view and transpose
    assert any(n.type.shape == ("B", 4, "S", "S") for n in g.nodes)


def test_capture_with_equal_batch_and_sequence_sizes_keeps_axes_apart() -> None:
    module, inputs = build_model("llama_block")
    g = capture(module, inputs({"B": 4, "S": 4})).graph
    assert g.node("x").type.shape == ("B", "S", 256)
    assert any(n.type.shape == ("B", 4, "S", "S") for n in g.nodes)


def test_unknown_model_name_lists_the_known_ones() -> None:
    with pytest.raises(GraphError) as info:
        build_model("resnet")
    for name in MODEL_NAMES:
        assert name in str(info.value)


def test_weights_are_carried_beside_the_graph_by_parameter_path() -> None:
    module, inputs = build_model("mlp")
    cap = capture(module, inputs({"B": 1, "S": 3}))
    params = [n for n in cap.graph.nodes if n.op == "param"]
    assert {str(n.attr("path")) for n in params} == set(cap.weights)
    assert torch.equal(cap.weights["fc1.weight"], module.fc1.weight.detach())


def test_unsupported_op_inside_a_torch_module_traced_whole_names_its_forward() -> None:
    with pytest.raises(UnsupportedOp) as info:
        capture(nn.Softplus(), (torch.randn(2, 3, 8),))
    assert "softplus" in info.value.op
    assert "def forward" in info.value.source and "activation.py:" in info.value.source
