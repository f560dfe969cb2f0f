"""Conversions between float types lower into Emmy's graph as `cast`s, so they split no group; Hugging Face's f16
`LlamaRMSNorm` (cast to f32, normalise, cast back, weight) is one rmsnorm kernel rounding as torch does; a conversion
Emmy does not express (to or from an integer type, a device move, a non-blocking copy) stays with torch, with why."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from emmy_core.compiler.backend import _GRAPHS, emmy_backend
from emmy_core.graph.execute import run_lowered
from emmy_core.graph.lower import KernelStep
from emmy_core.graph.ops import Graph, Node, TensorType
from emmy_core.graph.pipeline import compile_graph
from emmy_core.ir import builders
from emmy_core.ir.errors import IRError

transformers = pytest.importorskip("transformers")

H = 64
F16_TOL = 1e-2  # the project's f16 tolerance (tests/compile/test_equals_torch.py)


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


def _compiled(module: nn.Module, dynamic: bool | None = None) -> tuple[nn.Module, int]:
    return torch.compile(module, backend=emmy_backend(defer=False, prior=False, library=False, setting="rank"), dynamic=dynamic), len(_GRAPHS)


def _kernels(before: int) -> list[KernelStep]:
    groups = [g for st in _GRAPHS[before:] for g in st.live_groups()]
    assert all(g.off is None for g in groups), [g.off for g in groups]
    return [k for g in groups for k in g.compiled.lowered.kernels]


def _fell_back(before: int) -> dict[str, str]:
    return {f.node: f.reason for st in _GRAPHS[before:] for f in st.report().fell_back}


def test_hf_f16_llama_rmsnorm_is_one_emmy_rmsnorm_kernel_rounding_as_torch_at_1_and_odd_rows() -> None:
    from transformers.models.llama.modeling_llama import LlamaRMSNorm

    torch.manual_seed(0)
    m = LlamaRMSNorm(H, eps=1e-6).half().eval()
    with torch.no_grad():
        m.weight.copy_(torch.randn(H).half())
    compiled, before = _compiled(m, dynamic=True)
    with torch.no_grad():
        compiled(torch.randn(1, 6, H, dtype=torch.float16))
        for rows in (1, 7, 11):
            x = torch.randn(1, rows, H, dtype=torch.float16) * 3
            got, want = compiled(x), m(x)
            torch.testing.assert_close(got, want, rtol=F16_TOL, atol=F16_TOL)
            # the weight multiplies the row already rounded to f16, as torch does: all but a rare element whose
            # f32 sum of squares (summed in another order) lands on the other side of a rounding are bit-equal
            assert (got != want).sum().item() <= max(1, got.numel() // 100), (rows, (got != want).sum().item())
    assert _fell_back(before) == {}  # both casts, the reduction and the weight: all on Emmy
    names = [k.program.name for k in _kernels(before)]
    assert names and all(n == f"rmsnorm_f16_H{H}_eps1em06_roundw" for n in names), names
    assert all({b.name: b.dtype for b in k.program.buffers} == {"x": "f16", "w": "f16", "y": "f16"}
               for k in _kernels(before))


class Casts(nn.Module):
    """f16 in, a step in f32, back to f16 and to bf16: every conversion between float types."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        wide = x.float() * 3.0
        return wide.half() + x, wide.to(torch.bfloat16).type_as(wide) - 1.0


def test_a_conversion_between_float_types_is_an_emmy_cast_in_the_same_group() -> None:
    compiled, before = _compiled(Casts())
    x = torch.randn(3, 5, 16, dtype=torch.float16)
    with torch.no_grad():
        for got, want in zip(compiled(x), Casts()(x), strict=True):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=F16_TOL, atol=F16_TOL)
    assert _fell_back(before) == {}
    assert sum(len(st.live_groups()) for st in _GRAPHS[before:]) == 1
    casts = sorted(k.program.name for k in _kernels(before) if k.family == "cast")
    assert casts == ["cast_bf16_to_f32_C240", "cast_f16_to_f32_C240", "cast_f32_to_bf16_C240",
                     "cast_f32_to_f16_C240"]  # static shapes: one row of all 3 x 5 x 16 values


class Unexpressed(nn.Module):
    """Conversions Emmy does not express, each next to a float step it does."""

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        y = x * 2.0
        n = y.to(torch.int32)  # to an integer type
        back = n.to(torch.float32)  # from one
        moved = y.to(device="cpu", dtype=torch.float16)  # names a device
        later = y.to(torch.float16, non_blocking=True)  # a copy torch may complete later
        return n, back + 1.0, moved * 3.0, later * 3.0


def test_a_conversion_emmy_does_not_express_runs_as_torch_with_its_reason() -> None:
    compiled, before = _compiled(Unexpressed())
    x = torch.randn(2, 3, 8) * 10
    with torch.no_grad():
        for got, want in zip(compiled(x), Unexpressed()(x), strict=True):
            assert got.dtype == want.dtype
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    fell = _fell_back(before)
    assert "torch.int32" in fell["n"] and "Emmy's kernels take f32, f16, bf16" in fell["n"]
    assert "converts from torch.int32" in fell["back"]
    assert fell["moved"] == "moves the tensor"
    assert "non-blocking" in fell["later"]
    assert not {"y", "add", "mul"} & set(fell)  # the float steps around them still run on Emmy


def test_weight_after_round_refuses_f32_where_there_is_nothing_to_round() -> None:
    with pytest.raises(IRError, match="nothing to round"):
        builders.rmsnorm(64, "f32", 8, 1e-6, weight_after_round=True)
    assert builders.rmsnorm(64, "f16", 8, 1e-6, weight_after_round=True).name == "rmsnorm_f16_H64_eps1em06_roundw"


def _hf_f16_norm_of_a_residual_sum(hidden: int) -> Graph:
    """`h = a + r`, then `(h.float() * rsqrt(mean(h.float()**2) + eps)).half() * w` (weight on the right), h kept."""
    f16, f32 = (TensorType(("B", hidden), d) for d in ("f16", "f32"))
    row = TensorType(("B", 1), "f32")
    nodes = (Node("a", "input", (), f16), Node("r", "input", (), f16),
             Node("w", "param", (), TensorType((hidden,), "f16"), (("path", "w"),)),
             Node("h", "add", ("a", "r"), f16), Node("xf", "cast", ("h",), f32),
             Node("sq", "pow", ("xf",), f32, (("scalar", 2.0), ("scalar_first", False))),
             Node("var", "mean", ("sq",), row, (("keepdim", True),)),
             Node("ve", "add", ("var",), row, (("scalar", 1e-6), ("scalar_first", False))),
             Node("inv", "rsqrt", ("ve",), row), Node("n", "mul", ("xf", "inv"), f32),
             Node("n16", "cast", ("n",), f16), Node("y", "mul", ("n16", "w"), f16))
    return Graph("hf_norm", nodes, ("y", "h"), (("B", 5),))


def test_hf_f16_rmsnorm_of_a_residual_sum_folds_the_sum_and_its_cut_keeps_the_rounding_order() -> None:
    torch.manual_seed(1)
    w = torch.randn(32).half()
    low = compile_graph(_hf_f16_norm_of_a_residual_sum(32), {"w": w})
    (k,) = low.kernels
    assert k.program.name == "rmsnorm_f16_H32_eps1em06_res_roundw"
    (cut,) = [c for c in k.cuts if c.decision == "cut:prologue"]
    assert [p.name for p in cut.pieces] == ["residual_add_f16_H32", "rmsnorm_f16_H32_eps1em06_roundw_of_h"]
    a, r = (torch.randn(5, 32).half() * 3 for _ in range(2))
    h = a + r
    hf = h.float()
    want = (hf * torch.rsqrt(hf.pow(2).mean(-1, keepdim=True) + 1e-6)).half() * w
    for taken in ({}, {k.kernel_id: cut}):
        y, got_h = run_lowered(low, (a, r), taken)
        assert torch.equal(got_h, h)
        torch.testing.assert_close(y, want, rtol=F16_TOL, atol=F16_TOL)
        assert (y != want).sum().item() <= 2  # bit-equal but for a rare sum of squares rounded the other way


class OnlyConverts(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x.float().view(-1)


def test_a_group_of_nothing_but_conversions_and_views_stays_with_torch() -> None:
    compiled, before = _compiled(OnlyConverts())
    x = torch.randn(2, 3, 8, dtype=torch.float16)
    with torch.no_grad():
        assert torch.equal(compiled(x), OnlyConverts()(x))
    fell = _fell_back(before)
    assert set(fell) == {"float_1", "view"} and all("no other Emmy kernel" in why for why in fell.values()), fell
