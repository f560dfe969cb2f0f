"""The coverage report counts every matrix product that runs, on either side: Tensor methods as well as functions,
`einsum`, `baddbmm`, a grouped product (a mixture of experts'), `nn.MultiheadAttention` left to torch; and its
`torch_calls` counts calls of the graph, the unit of `calls`, so it never exceeds them."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from emmy_core.compiler import NoGradientsWarning
from emmy_core.compiler.backend import compile_reports, emmy_backend
from emmy_core.compiler.coverage import GraphReport, render_reports

B, S, E = 2, 5, 16


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


def _reports(module: nn.Module, *inputs: torch.Tensor) -> list[GraphReport]:
    before = len(compile_reports())
    c = torch.compile(module, backend=emmy_backend(prior=False, library=False, build=False), dynamic=False)
    with torch.no_grad():
        c(*inputs)
    return compile_reports()[before:]


def _flops(reports: list[GraphReport]) -> int:
    return sum(r.matmul_flops for r in reports)


class BaddbmmMethod(nn.Module):
    """BLOOM's alibi scores: `alibi.baddbmm(q, k)` as a Tensor method."""

    def forward(self, alibi: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return alibi.baddbmm(batch1=q, batch2=k, beta=1.0, alpha=0.5)


class MethodProducts(nn.Module):
    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.mm(b) + a.matmul(b) + a.__matmul__(b)


class Einsums(nn.Module):
    """Mamba2's chunked scan writes its products as einsums."""

    def forward(self, c: torch.Tensor, b: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        g = torch.einsum("bln,bsn->bls", c, b)
        return torch.einsum("bls,bsp->blp", g, x)


class Grouped(nn.Module):
    """Qwen3-MoE's experts: each token times its expert's weight, one grouped product (torch's takes bf16)."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, E, 8, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return F.grouped_mm(x, self.w, offs=offs)


@torch.library.custom_op("emmy_test::grouped_mm_fallback", mutates_args=())
def _grouped_fallback(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """A library's own grouped product (transformers registers `transformers::grouped_mm_fallback` in f32)."""
    out, start = [], 0
    for i, end in enumerate(offs.tolist()):
        out.append(x[start:end] @ w[i])
        start = end
    return torch.cat(out)


@_grouped_fallback.register_fake
def _(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return x.new_empty(x.shape[0], w.shape[-1])


class GroupedByALibrary(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(2, E, 8))

    def forward(self, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
        return torch.ops.emmy_test.grouped_mm_fallback(x, self.w, offs)


def test_a_tensor_method_baddbmm_is_counted() -> None:
    alibi, q, k = torch.randn(4, S, S), torch.randn(4, S, 8), torch.randn(4, 8, S)
    assert _flops(_reports(BaddbmmMethod(), alibi, q, k)) == 2 * 4 * S * S * 8


def test_mm_and_matmul_as_methods_are_counted() -> None:
    a, b = torch.randn(S, 8), torch.randn(8, 3)
    assert _flops(_reports(MethodProducts(), a, b)) == 3 * 2 * S * 3 * 8


def test_einsum_products_are_counted_by_their_indices() -> None:
    c, b, x = torch.randn(B, S, 4), torch.randn(B, S, 4), torch.randn(B, S, 6)
    assert _flops(_reports(Einsums(), c, b, x)) == 2 * B * S * S * 4 + 2 * B * S * S * 6


@pytest.mark.skipif(not hasattr(F, "grouped_mm"), reason="this torch has no grouped_mm")
def test_a_grouped_product_is_counted() -> None:
    x, offs = torch.randn(8, E, dtype=torch.bfloat16), torch.tensor([3, 8], dtype=torch.int32)
    reports = _reports(Grouped(), x, offs)
    assert _flops(reports) == 2 * 8 * 8 * E and sum(r.matmul_flops_on_emmy for r in reports) == 0


def test_a_libraries_own_grouped_product_is_counted_by_its_name() -> None:
    x, offs = torch.randn(8, E), torch.tensor([3, 8])
    reports = _reports(GroupedByALibrary(), x, offs)
    assert _flops(reports) == 2 * 8 * 8 * E and sum(r.matmul_flops_on_emmy for r in reports) == 0


def test_multi_head_attention_left_to_torch_counts_its_projections_and_attention() -> None:
    m = nn.MultiheadAttention(E, 2).train()  # in training it stays torch's, whole
    x = torch.randn(S, B, E)
    want = 2 * E * E * 4 * S * B + 4 * S * B * S * E
    assert _flops(_reports(m, x, x, x)) == want


class TwoGroups(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(E, E)
        self.b = nn.Linear(E, E)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(torch.cumsum(torch.relu(self.a(x)), dim=1)))


def test_in_training_torch_calls_count_calls_of_the_graph_never_more_than_calls() -> None:
    m = TwoGroups().train()
    c = torch.compile(m, backend=emmy_backend(prior=False, library=False), dynamic=True)
    before = len(compile_reports())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", NoGradientsWarning)
        for _ in range(3):
            c(torch.randn(B, S, E)).sum().backward()
    (report,) = compile_reports()[before:]
    assert report.groups == 2 and report.calls == 3 and report.torch_calls == 3
    assert "torch ran Emmy's groups in 3 of 3 call(s)" in render_reports([report])
