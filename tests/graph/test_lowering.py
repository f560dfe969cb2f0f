"""Lowering: kernels per family, dedupe by identity, and the lowered model computing what torch computes."""

from __future__ import annotations

from collections import Counter

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from emmy_core.graph.execute import run_lowered
from emmy_core.graph.forks import forks
from emmy_core.graph.models import DecomposedRMSNorm, build_model
from emmy_core.graph.pipeline import compile_model, compile_module
from emmy_core.ir import kernel_id
from tests.graph.toy_models import NormEpilogues


def _families(lowered) -> Counter:  # type: ignore[no-untyped-def]
    return Counter(k.family for k in lowered.kernels)


def test_llama_block_lowers_to_the_asserted_kernels_per_family() -> None:
    low = compile_model("llama_block", {"B": 2, "S": 5})
    # q, k, v, scores (+scale), probs @ v, o_proj (+residual), up, gate (+silu, *up), down (+residual)
    assert _families(low) == Counter({"matmul": 9, "rmsnorm": 2, "softmax": 1})
    epilogues = Counter(tuple(k.program.name.split("_bt")[-1].strip("_").split("_")) for k in low.kernels
                        if k.family == "matmul")
    assert epilogues[("residual",)] == 2 and epilogues[("silu", "mul")] == 1
    # both RMSNorm spellings (nn.RMSNorm and the decomposed one) lower to the same kernel
    norms = {k.kernel_id for k in low.kernels if k.family == "rmsnorm"}
    assert len(norms) == 1
    assert len(low.identities()) == 9


def test_stack_of_four_layers_yields_the_identities_of_one_layer() -> None:
    one = compile_model("llama_block", {"B": 2, "S": 5})
    four = compile_model("llama_stack", {"B": 2, "S": 5})
    assert len(four.kernels) == 4 * len(one.kernels)
    assert set(four.identities()) == set(one.identities())
    assert all(len(steps) % 4 == 0 for steps in four.identities().values())


def test_identity_does_not_depend_on_the_example_shape() -> None:
    a = compile_model("llama_block", {"B": 2, "S": 5})
    b = compile_model("llama_block", {"B": 3, "S": 11})
    assert [k.kernel_id for k in a.kernels] == [k.kernel_id for k in b.kernels]


@pytest.mark.parametrize("name", ["llama_block", "mlp"])
@pytest.mark.parametrize("shape", [{"B": 2, "S": 5}, {"B": 1, "S": 17}])
def test_lowered_model_equals_torch_f32(name: str, shape: dict[str, int]) -> None:
    module, inputs = build_model(name)
    low = compile_module(module, inputs({"B": 2, "S": 4}))
    x = inputs(shape)  # B and S are dynamic: run at sizes other than the captured example
    with torch.no_grad():
        want = module(*x)
    got = run_lowered(low, x)
    assert got.shape == want.shape and got.dtype == want.dtype
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(("dtype", "tol"), [(torch.float16, 2e-2), (torch.bfloat16, 6e-2)])
def test_lowered_model_equals_torch_f16(dtype: torch.dtype, tol: float) -> None:
    module, inputs = build_model("llama_block", dtype=dtype)
    x = inputs({"B": 2, "S": 6})
    low = compile_module(module, x)
    with torch.no_grad():
        want = module(*x)
    got = run_lowered(low, x)
    assert got.dtype == dtype
    torch.testing.assert_close(got.float(), want.float(), rtol=tol, atol=tol)


class ResidualNorm(nn.Module):
    def __init__(self, shared: bool) -> None:
        super().__init__()
        self.shared = shared
        self.norm = nn.RMSNorm(32, eps=1e-6)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)

    def forward(self, x: torch.Tensor, r: torch.Tensor) -> torch.Tensor | tuple[torch.Tensor, torch.Tensor]:
        h = x + r
        y = self.norm(h)
        return (y, h * 2.0) if self.shared else y


@pytest.mark.parametrize("shared", [False, True])
def test_fuse_norm_folds_the_residual_add_into_rmsnorm(shared: bool) -> None:
    module = ResidualNorm(shared)
    x, r = torch.randn(3, 5, 32), torch.randn(3, 5, 32)
    low = compile_module(module, (x, r))
    norm = next(k for k in low.kernels if k.family == "rmsnorm")
    assert [b for b, _ in norm.inputs] == ["x", "res", "w"] and [c.decision for c in norm.cuts] == ["cut:prologue"]
    assert not any(k.family == "elementwise" and "x1" in str(k.program.name) and "add" in k.program.name
                   for k in low.kernels)
    with torch.no_grad():
        want = module(x, r)
    torch.testing.assert_close(run_lowered(low, (x, r)), want, rtol=1e-5, atol=1e-5)


class Leftovers(nn.Module):
    """Elementwise ops no matmul or norm takes, with row and column broadcasts and row reductions."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-1.0, 1.0, 24))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        s = x.sum(-1, keepdim=True)
        y = torch.exp(-x) / (s.pow(2) + 1.0) - 0.5 * self.w
        z = torch.rsqrt(x * x + 1.0) * F.gelu(x, approximate="tanh") + F.relu(x) - (2.0 - x)
        return y, z, x.mean(-1)


def test_leftover_elementwise_chains_and_reductions_equal_torch() -> None:
    module = Leftovers()
    x = torch.randn(2, 3, 24)
    low = compile_module(module, (x,))
    fams = _families(low)
    assert fams["rowreduce"] == 2 and fams["elementwise"] >= 2
    with torch.no_grad():
        want = module(x)
    for got, ref in zip(run_lowered(low, (x,)), want, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


class ScaledSoftmax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.softmax(x / 3.0, dim=-1)


def test_fuse_norm_folds_a_scale_into_softmax() -> None:
    x = torch.randn(2, 3, 20)
    low = compile_module(ScaledSoftmax(), (x,))
    assert [k.family for k in low.kernels] == ["softmax"] and [c.decision for c in low.kernels[0].cuts] == ["cut:prologue"]
    torch.testing.assert_close(run_lowered(low, (x,)), ScaledSoftmax()(x), rtol=1e-5, atol=1e-6)


def test_decomposed_rmsnorm_is_matched_into_the_rmsnorm_family() -> None:
    module = DecomposedRMSNorm(48, eps=1e-6)
    x = torch.randn(2, 3, 48)
    low = compile_module(module, (x,))
    assert [k.family for k in low.kernels] == ["rmsnorm"]
    ref = compile_module(nn.RMSNorm(48, eps=1e-6), (x,))
    assert low.kernels[0].kernel_id == ref.kernels[0].kernel_id
    torch.testing.assert_close(run_lowered(low, (x,)), module(x), rtol=1e-5, atol=1e-5)


def test_fuse_norm_folds_epilogues_into_the_norm_kernels_and_equals_torch() -> None:
    module = NormEpilogues()
    x, r = torch.randn(2, 3, 24), torch.randn(2, 3, 24)
    low = compile_module(module, (x, r))
    assert [k.family for k in low.kernels] == ["rmsnorm", "layernorm", "softmax"]
    seams = {k.family: sorted(c.decision for c in k.cuts) for k in low.kernels}
    assert seams == {"rmsnorm": ["cut:epilogue", "cut:prologue"], "layernorm": ["cut:epilogue"],
                     "softmax": ["cut:epilogue", "cut:prologue"]}
    with torch.no_grad():
        want = module(x, r)
    for got, ref in zip(run_lowered(low, (x, r)), want, strict=True):
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rule", ["cut:epilogue", "split"])
def test_lowered_model_with_structural_decisions_taken_still_equals_torch(rule: str) -> None:
    module, inputs = build_model("llama_block")
    x = inputs({"B": 2, "S": 5})
    low = compile_module(module, x)
    taken = {kernel_id(f.kernel): f.options[-1].decision for f in forks(low) if f.rule == rule}
    assert len(taken) == (4 if rule == "cut:epilogue" else 1)
    with torch.no_grad():
        want = module(*x)
    torch.testing.assert_close(run_lowered(low, x, taken), want, rtol=1e-4, atol=1e-4)
