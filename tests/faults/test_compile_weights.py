"""A compiled model never runs on stale weights: an edit in place (torch's version counter), a fused optimizer's
step (which bumps no version counter), a replaced parameter, new data or a replaced submodule is taken in on
the next call (a CPU matmul packs its weight again); a replacement of another shape or type is refused naming
the parameter. A compiled model holds no weak reference to a parameter, so torch can swap parameters. Real
builds, real packing."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from torch import nn

import emmy_core
from emmy_core.compiler.backend import emmy_backend
from emmy_core.graph.errors import GraphError

X = torch.randn(16, 64, generator=torch.Generator().manual_seed(0))


@pytest.fixture(autouse=True)
def _own_build_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """One build cache for these tests, and no gradients asked for (Emmy computes none)."""
    monkeypatch.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.getbasetemp() / "weights_build_cache"))
    with torch.no_grad():
        yield


def _model() -> nn.Sequential:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 64), nn.LayerNorm(64), nn.Linear(64, 32))


def _compiled(model: nn.Module) -> emmy_core.Compiled:
    compiled = emmy_core.compile(model, (X,), prior=False, library=False, torch_ops="refuse")
    compiled(X)  # the runner exists and has packed its matmuls' weights
    assert compiled.runner({"B": 16}).prepared, "the CPU launches pack their weights once"
    return compiled


def _error(compiled: emmy_core.Compiled, model: nn.Module) -> float:
    return float((compiled(X) - model(X)).abs().max())


def test_an_in_place_edit_of_a_packed_matmul_weight_is_followed() -> None:
    model = _model()
    compiled = _compiled(model)
    before = compiled(X).clone()
    model[0].weight.add_(1.0)
    assert not torch.allclose(compiled(X), before), "the compiled output did not move with the weight"
    assert _error(compiled, model) < 1e-3
    model[1].weight.mul_(2.0)  # a norm's weight (read in place, not packed)
    model[2].bias.sub_(0.5)
    assert _error(compiled, model) < 1e-3
    assert compiled.follow_weights() == []  # each change taken in once


def test_a_replaced_parameter_is_followed() -> None:
    model = _model()
    compiled = _compiled(model)
    model[0].weight = nn.Parameter(torch.randn(64, 64))
    assert _error(compiled, model) < 1e-3


def test_new_data_assigned_to_a_parameter_is_followed() -> None:
    model = _model()
    compiled = _compiled(model)
    model[2].weight.data = torch.randn(32, 64)
    assert _error(compiled, model) < 1e-3


def test_a_replaced_submodule_is_followed() -> None:
    model = _model()
    compiled = _compiled(model)
    model[0] = nn.Linear(64, 64)
    assert _error(compiled, model) < 1e-3


def test_a_parameter_of_another_shape_is_refused_naming_it() -> None:
    model = _model()
    compiled = _compiled(model)
    model[2].weight = nn.Parameter(torch.randn(48, 64))
    with pytest.raises(GraphError, match=r"parameter 2\.weight changed .*\(32, 64\).*\(48, 64\).*compile"):
        compiled(X)


def test_a_parameter_removed_from_the_module_is_refused_naming_it() -> None:
    model = _model()
    compiled = _compiled(model)
    del model[0].bias
    with pytest.raises(GraphError, match=r"parameter 0\.bias is no longer in the module"):
        compiled(X)


def _train_step(model: nn.Module, opt: torch.optim.Optimizer) -> None:
    with torch.enable_grad():
        model(X).pow(2).sum().backward()
    opt.step()
    opt.zero_grad()


@pytest.mark.parametrize("optimizer", [torch.optim.AdamW, torch.optim.SGD])
def test_a_fused_optimizers_step_which_bumps_no_version_counter_is_followed(optimizer: type) -> None:
    model = _model()
    compiled = _compiled(model)
    opt = optimizer(model.parameters(), lr=0.1, fused=True)
    version = model[0].weight._version
    _train_step(model, opt)
    assert model[0].weight._version == version  # the fused kernel wrote the weight and bumped nothing
    assert _error(compiled, model) < 1e-3
    torch._dynamo.reset()
    model = _model()
    backend = torch.compile(model, backend=emmy_backend(prior=False, library=False))
    backend(X)
    opt = optimizer(model.parameters(), lr=0.1, fused=True)
    _train_step(model, opt)
    assert float((backend(X) - model(X)).abs().max()) < 1e-3


def test_parameters_swapped_by_to_and_load_state_dict_after_a_compiled_call() -> None:
    torch._dynamo.reset()
    model = _model()
    backend = torch.compile(model, backend=emmy_backend(prior=False, library=False))
    backend(X)
    fresh = _model()
    fresh[0].weight.add_(1.0)
    swap = torch.__future__.get_swap_module_params_on_conversion()
    torch.__future__.set_swap_module_params_on_conversion(True)
    try:  # torch.utils.swap_tensors refuses a tensor a weak reference points to
        model.load_state_dict(fresh.state_dict())
        model.to(torch.float64)
        model.to(torch.float32)
    finally:
        torch.__future__.set_swap_module_params_on_conversion(swap)
    assert float((backend(X) - fresh(X)).abs().max()) < 1e-3
