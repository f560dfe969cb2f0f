"""Cut decisions: the unfused pieces, composed in order, compute what the fused parent computes."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from emmy_core.graph.cuts import cut_epilogue, cut_rmsnorm_prologue, cut_softmax_scale
from emmy_core.graph.decisions import Decision, run_pieces
from emmy_core.graph.kernels import dynamic_row
from emmy_core.graph.pipeline import compile_model, compile_module
from emmy_core.ir import kernel_id, parse, render
from emmy_core.ir.builders import Dim, matmul, rmsnorm, softmax
from emmy_core.ir.family import classify
from emmy_core.ir.interpret import random_inputs, run

# Intermediates are stored in the model's type, as the unfused graph stores them: exact in f32 up
# to summation order, one f16 rounding of the product in f16.
TOL = {"f32": 1e-5, "f16": 1e-2}
EPILOGUES = [("bias",), ("bias", "gelu"), ("silu", "mul"), ("residual",), ("scale:0.125",),
             ("bias", "relu", "residual"), ("gelu_tanh", "scale:-2.0", "mul")]


def assert_pieces_equal_parent(decision: Decision, sizes: dict[str, int], seed: int) -> None:
    ins = random_inputs(decision.parent, sizes, seed=seed)
    want = run(decision.parent, ins, sizes)
    got = run_pieces(decision, ins, sizes)
    assert set(got) == set(want)
    for name, ref in want.items():
        tol = TOL[decision.parent.buffer(name).dtype]
        assert not np.isnan(got[name]).any(), f"{name}: an element no piece wrote"
        np.testing.assert_allclose(got[name].astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol)


def assert_well_formed(decision: Decision, seam: str) -> None:
    assert decision.decision == f"cut:{seam}"
    for piece in decision.pieces:
        assert parse(render(piece)) == piece
        classify(piece)  # every piece is a kernel of a template family
    rows = decision.routing_rows()
    assert [r[2] for r in rows] == list(range(len(decision.pieces)))
    assert {r[0] for r in rows} == {kernel_id(decision.parent)}


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("epilogue", EPILOGUES)
def test_cut_epilogue_pieces_composed_equal_the_fused_parent(dtype: str, epilogue: tuple[str, ...]) -> None:
    parent = matmul(Dim("T", 8), 40, 24, dtype=dtype, epilogue=epilogue, b_transposed=True)
    decision = cut_epilogue(parent)
    assert_well_formed(decision, "epilogue")
    assert len(decision.pieces) == 2 and [b.name for b in decision.intermediates()] == ["mm"]
    for seed, t in enumerate((1, 7, 37)):  # token counts that are not multiples of any tile
        assert_pieces_equal_parent(decision, {"T": t}, seed)


def test_cut_epilogue_of_a_batched_attention_product_with_dynamic_axes() -> None:
    parent = matmul(Dim("S", 16), Dim("S", 16), 24, dtype="f32", epilogue=("scale:0.125",),
                    batch=(Dim("B", 2), 3), b_transposed=True)
    decision = cut_epilogue(parent)
    assert_well_formed(decision, "epilogue")
    for seed, (b, s) in enumerate(((1, 5), (3, 13))):
        assert_pieces_equal_parent(decision, {"B": b, "S": s}, seed)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("hidden", [40, 257])
def test_cut_prologue_of_rmsnorm_pieces_composed_equal_the_fused_parent(dtype: str, hidden: int) -> None:
    parent = rmsnorm(hidden, dtype, 8, 1e-6, ("residual",))
    decision = cut_rmsnorm_prologue(parent, rmsnorm(hidden, dtype, 8, 1e-6), dtype)
    assert_well_formed(decision, "prologue")
    assert decision.intermediates() == ()  # the sum is the parent's own output h
    for seed, rows in enumerate((1, 13)):
        assert_pieces_equal_parent(decision, {"B": rows}, seed)


@pytest.mark.parametrize("dynamic", [False, True])
def test_cut_prologue_of_scaled_softmax_pieces_composed_equal_the_fused_parent(dynamic: bool) -> None:
    parent, plain = softmax(40, "f32", 8, 0.3), softmax(40, "f32", 8)
    sizes = [{"B": 1}, {"B": 11}]
    if dynamic:
        parent = dynamic_row(parent, "C", 40, "softmax", "f32", "scale0.3")
        plain = dynamic_row(plain, "C", 40, "softmax", "f32")
        sizes = [{"B": 3, "C": 1}, {"B": 5, "C": 19}]
    decision = cut_softmax_scale(parent, plain, "f32", 0.3)
    assert_well_formed(decision, "prologue")
    for seed, s in enumerate(sizes):
        assert_pieces_equal_parent(decision, s, seed)


def test_every_cut_the_llama_block_offers_composes_to_its_parent() -> None:
    low = compile_model("llama_block", {"B": 2, "S": 5})
    cuts = {k.kernel_id: c for k in low.kernels for c in k.cuts}
    assert len(cuts) == 4  # scores (scale), o_proj (residual), gate (silu, mul), down (residual)
    for seed, decision in enumerate(cuts.values()):
        assert_well_formed(decision, "epilogue")
        sizes = {a.name: 3 + seed for a in decision.parent.dynamic_axes}
        assert_pieces_equal_parent(decision, sizes, seed)


def test_every_cut_of_fused_norms_composes_to_its_parent() -> None:

    from tests.graph.test_lowering import NormEpilogues

    low = compile_module(NormEpilogues(), (torch.randn(2, 3, 24), torch.randn(2, 3, 24)))
    decisions = [c for k in low.kernels for c in k.cuts]
    assert len(decisions) == 5
    for seed, decision in enumerate(decisions):
        assert_well_formed(decision, decision.decision.split(":")[1])
        for rows in (1, 7):
            assert_pieces_equal_parent(decision, {a.name: rows for a in decision.parent.dynamic_axes}, seed)
