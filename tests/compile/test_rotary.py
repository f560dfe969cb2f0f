"""Rotary embedding through `torch.compile(backend="emmy")`: Hugging Face's `apply_rotary_pos_emb` (slices, a
negation and a concatenation of halves, cos and sin broadcast over batch and heads) becomes one Emmy kernel per
tensor, reading the halves in place with constant positions (no division or modulo in its loops), and q and k
through the transpose that makes them [B, heads, S, D] (no copy), equal to eager."""

from __future__ import annotations

import re

import pytest
import torch
from torch import nn

from emmy_core.codegen.c_schedule import schedule_of
from emmy_core.codegen.c_source import kernel_source
from emmy_core.compiler.backend import _GRAPHS, GraphReport, emmy_backend
from emmy_core.graph.lower import LayoutStep
from emmy_core.graph.passes.fuse_elementwise import bcast_kind

transformers = pytest.importorskip("transformers")


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


class Rotary(nn.Module):
    def forward(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,
                sin: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

        return apply_rotary_pos_emb(q, k, cos, sin)  # type: ignore[no-any-return]


class TransposedRotary(Rotary):
    """As LlamaAttention: q and k come from their projections as [B, S, heads, D], transposed to [B, heads, S, D];
    `keep` also returns the transposed q (so that copy is needed anyway)."""

    def __init__(self, keep: bool = False) -> None:
        super().__init__()
        self.keep = keep

    def forward(self, q: torch.Tensor, k: torch.Tensor, cos: torch.Tensor,  # type: ignore[override]
                sin: torch.Tensor) -> tuple[torch.Tensor, ...]:
        qt = q.transpose(1, 2)
        out = super().forward(qt, k.transpose(1, 2), cos, sin)
        return (*out, qt * 1.0) if self.keep else out


def inputs(s: int, dtype: torch.dtype = torch.float32, transposed: bool = False) -> tuple[torch.Tensor, ...]:
    gen = torch.Generator().manual_seed(s)
    q, k = ((2, s, 4, 16), (2, s, 2, 16)) if transposed else ((2, 4, s, 16), (2, 2, s, 16))
    return tuple(torch.randn(shape, generator=gen).to(dtype) for shape in
                 (q, k, (1, s, 16), (1, s, 16)))  # q, k, cos, sin as LlamaModel passes them


def run(module: nn.Module, sizes: tuple[int, ...], dtype: torch.dtype = torch.float32,
        transposed: bool = False) -> tuple[list[GraphReport], list]:  # type: ignore[type-arg]
    before = len(_GRAPHS)
    compiled = torch.compile(module, backend=emmy_backend(defer=False, prior=False, library=False, setting="rank"))
    tol = 1e-5 if dtype == torch.float32 else 1e-2
    with torch.no_grad():
        for s in sizes:
            x = inputs(s, dtype, transposed)
            for got, want in zip(compiled(*x), module(*x), strict=True):
                torch.testing.assert_close(got, want, rtol=tol, atol=tol)
    states = _GRAPHS[before:]
    groups = [g for st in states for g in st.live_groups()]
    assert all(g.off is None for g in groups), [g.off for g in groups]
    return [st.report() for st in states], [k for g in groups for k in g.compiled.lowered.steps]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
def test_hf_rotary_is_one_kernel_per_tensor_with_no_division_in_its_loops(dtype: torch.dtype) -> None:
    reports, steps = run(Rotary(), (8,), dtype)
    kernels = [k for k in steps if not isinstance(k, LayoutStep)]
    assert [f.op for r in reports for f in r.fell_back] == []  # slices, neg, cat, broadcasts: all on Emmy
    assert len(kernels) == 2  # q's chain and k's chain, nothing materialised between ops
    for k in kernels:
        body = kernel_source(k.program, schedule_of({"vec": 8, "threads": 2})).split("int emmy_kernel")[1]
        assert not re.search(r"[/%]", body), body  # the halves are constant positions, not index arithmetic
        assert {b.name: b.shape for b in k.program.inputs} == {
            "x0": ("B", "M", "P", "H"), "x1": ("M", "P", "H"), "x2": ("M", "P", "H")}  # cos, sin read per (s, d)


def test_hf_rotary_at_sequence_lengths_never_compiled_equals_eager() -> None:
    # the second length makes Dynamo recompile with the sequence symbolic (the head dimension stays static, as a
    # model's config makes it): the kernels' M axis (sequence x head-dimension rows of cos and sin) is dynamic
    reports, steps = run(Rotary(), (6, 7, 11))
    kernels = [k for k in steps if not isinstance(k, LayoutStep)]
    assert [f.op for r in reports for f in r.fell_back] == []
    assert len(reports) == 2 and len(kernels) == 4
    assert [k.program.axis("M").dynamic for k in kernels] == [False, False, True, True]


@pytest.mark.parametrize("keep", [False, True])
def test_q_and_k_are_read_through_their_transpose_unless_it_is_needed_elsewhere(keep: bool) -> None:
    reports, steps = run(TransposedRotary(keep), (8, 5), transposed=True)
    assert [f.op for r in reports for f in r.fell_back] == []
    copies = [s.op for s in steps if isinstance(s, LayoutStep) and s.op in ("transpose", "permute")]
    kernels = [s for s in steps if not isinstance(s, LayoutStep)]
    # per graph (S=8, then S symbolic): q's and k's chain; the transposed q kept as an output is copied once
    assert len(copies) == (2 if keep else 0) and len(kernels) == (6 if keep else 4)
    permuted = [k for k in kernels if any(b.shape[:3] == ("D0", "D2", "D1") for b in k.program.inputs)]
    assert len(permuted) == (2 if keep else 4)  # with the copy made anyway, q's chain reads the copy


class NotHalves(nn.Module):
    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x[..., :3] * 2.0, torch.cat((x, x), dim=1) * 3.0


def test_a_slice_or_concatenation_other_than_halves_of_the_last_axis_runs_as_torch_and_says_why() -> None:
    before = len(_GRAPHS)
    x = torch.randn(2, 4, 16)
    with torch.no_grad():
        got = torch.compile(NotHalves(), backend=emmy_backend(defer=False, prior=False, library=False, setting="rank"))(x)
    for g, w in zip(got, NotHalves()(x), strict=True):
        torch.testing.assert_close(g, w)
    reasons = {f.node: f.reason for st in _GRAPHS[before:] for f in st.report().fell_back}
    assert "not one of its halves" in reasons["getitem"]
    assert "other than the last axis" in reasons["cat"]


def test_bcast_kind_tail_is_the_outputs_trailing_axes_with_leading_ones() -> None:
    assert bcast_kind((1, 1, 8, 16), (2, 4, 8, 16)) == "tail"
    assert bcast_kind((8, 16), (2, 4, 8, 16)) == "tail"
    assert bcast_kind((1, 16), (2, 4, 8, 16)) == "col"
    assert bcast_kind((2, 1, 8, 16), (2, 4, 8, 16)) is None  # a broadcast inside the leading axes
    assert bcast_kind((1, 4, 1, 16), (2, 4, 8, 16)) is None
