"""Structural decisions: the pieces of a split compute what the parent computes, and are proper kernels.

Parent and pieces both run under the reference interpreter; they differ only in the order
of summation, so outputs agree to about one unit in the last place of the output type:
relative and absolute tolerance 2e-3 (f16), 1e-2 (bf16), 1e-5 (f32), 1e-12 (f64).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from emmy_core.graph.decisions import (
    Decision,
    apply,
    legal_splits,
    run_pieces,
    split_k,
    split_rows,
)
from emmy_core.ir import Buffer, IRError, Program, kernel_id, parse, render, validate
from emmy_core.ir.builders import Dim, elementwise, layernorm, matmul, rmsnorm, softmax
from emmy_core.ir.family import MatmulShape, RowShape, classify
from emmy_core.ir.interpret import random_inputs, run
from emmy_core.knobs.vocab import parse_decision

TOL = {"f16": 2e-3, "bf16": 1e-2, "f32": 1e-5, "f64": 1e-12}
DTYPES = ("f16", "bf16", "f32", "f64")
EPILOGUES = [(), ("bias", "gelu"), ("silu", "mul"), ("scale:0.5", "residual", "relu"), ("gelu_tanh",)]


def assert_same(decision: Decision, sizes: dict[str, int], seed: int, scale: float = 1.0) -> None:
    ins = random_inputs(decision.parent, sizes, seed=seed, scale=scale)
    want = run(decision.parent, ins, sizes)
    got = run_pieces(decision, ins, sizes)
    assert set(got) == set(want)
    for name, ref in want.items():
        tol = TOL[decision.parent.buffer(name).dtype]
        assert not np.isnan(got[name]).any(), f"{name} has elements no piece wrote"
        np.testing.assert_allclose(got[name].astype(np.float64), ref.astype(np.float64), rtol=tol, atol=tol)


def assert_well_formed(decision: Decision) -> None:
    for piece in decision.pieces:
        validate(piece)
        assert parse(render(piece)) == piece
    rows = decision.routing_rows()
    assert [r[2] for r in rows] == list(range(len(decision.pieces)))
    for parent_id, text, _, piece_id in rows:
        assert parent_id == kernel_id(decision.parent)
        assert re.fullmatch(r"[0-9a-f]{64}", piece_id)
        assert parse_decision(text)[0] == "split"
        assert text == decision.decision


@pytest.mark.parametrize("seed", range(8))
def test_split_k_pieces_compute_what_the_parent_computes(seed: int) -> None:
    rng = np.random.default_rng(seed)
    k = int(rng.integers(5, 70))
    parts = int(rng.integers(2, 6))
    while (parts - 1) * -(-k // parts) >= k:  # every part must be non-empty
        parts -= 1
    dtype = DTYPES[seed % 4]
    batch = (Dim("B", 2),) if seed % 3 == 2 else ()
    parent = matmul(Dim("T", 4), int(rng.integers(1, 13)), k, dtype=dtype, epilogue=EPILOGUES[seed % len(EPILOGUES)],
                    batch=batch, b_transposed=bool(seed % 2))
    decision = split_k(parent, parts)
    assert decision.decision == f"split:K={parts}"
    assert_well_formed(decision)
    sizes = {"T": int(rng.integers(1, 7)), **({"B": 3} if batch else {})}
    assert_same(decision, sizes, seed)


ROW_BUILDERS = [
    lambda n, dt: rmsnorm(hidden=n, dtype=dt, batch_hint=4),
    lambda n, dt: rmsnorm(hidden=n, dtype=dt, batch_hint=4, prologue=("residual",)),
    lambda n, dt: layernorm(n, dtype=dt),
    lambda n, dt: softmax(n, dtype=dt),
    lambda n, dt: softmax(n, dtype=dt, scale=0.3),
]


@pytest.mark.parametrize("seed", range(10))
def test_split_rows_pieces_compute_what_the_parent_computes(seed: int) -> None:
    rng = np.random.default_rng(50 + seed)
    n = int(rng.integers(6, 150))
    parts = int(rng.integers(2, 5))
    while (parts - 1) * -(-n // parts) >= n:
        parts -= 1
    parent = ROW_BUILDERS[seed % len(ROW_BUILDERS)](n, DTYPES[seed % 4])
    decision = split_rows(parent, parts)
    assert_well_formed(decision)
    assert_same(decision, {"B": int(rng.integers(1, 6))}, seed, scale=3.0)


def test_softmax_split_combines_online_with_each_window_max() -> None:
    # Rows whose windows have very different maxima: a naive sum of partial sums would be wrong.
    parent = softmax(9, dtype="f32")
    decision = split_rows(parent, 3)
    x = np.array([[50.0, 1, 2, -30, -31, -32, 10, 11, 12]], dtype=np.float32)
    want = run(parent, {"x": x}, {"B": 1})["y"]
    np.testing.assert_allclose(run_pieces(decision, {"x": x}, {"B": 1})["y"], want, rtol=1e-6, atol=1e-30)


def test_minted_pieces_belong_to_their_template_families() -> None:
    part, comb = split_k(matmul(Dim("T", 4), 16, 100, epilogue=("bias",)), 4).pieces
    ps = classify(part)
    assert isinstance(ps, MatmulShape) and ps.parts == "P" and ps.window is not None and ps.window.length == 25
    cs = classify(comb)
    assert isinstance(cs, RowShape) and cs.reduce_axes == ("P",) and cs.rows == ("T", "N") and cs.row_var is None
    part, comb = split_rows(layernorm(100), 4).pieces
    ps = classify(part)
    assert isinstance(ps, RowShape) and ps.windowed and ps.rows == ("B", "P") and ps.row == "H"
    cs = classify(comb)
    assert isinstance(cs, RowShape) and not cs.windowed and cs.row == "H" and set(cs.reduce_axes) == {"P"}


def test_the_same_minted_kernel_reached_from_two_parents_has_one_identity() -> None:
    a = split_k(matmul(Dim("T", 4), 16, 64, epilogue=("bias", "gelu")), 4)
    b = split_k(matmul(Dim("T", 4), 16, 64, epilogue=("residual",)), 4)
    assert kernel_id(a.pieces[0]) == kernel_id(b.pieces[0])  # same partial products, different epilogues
    assert kernel_id(a.pieces[1]) != kernel_id(b.pieces[1])
    again = split_k(matmul(Dim("T", 4096), 16, 64, epilogue=("bias", "gelu")), 4)  # only the hint differs
    assert again.routing_rows() == a.routing_rows()
    assert split_k(a.parent, 2).routing_rows() != a.routing_rows()


def test_a_minted_kernel_with_decisions_of_its_own_is_the_parent_of_further_rows() -> None:
    parent = matmul(Dim("T", 4), 6, 96, dtype="f32", epilogue=("silu",))
    first = split_k(parent, 8)
    second = split_rows(first.pieces[1], 2)  # the combine reduces over P: split it again
    assert second.decision == "split:P=2"
    assert {r[0] for r in second.routing_rows()} == {first.routing_rows()[1][3]}
    assert_well_formed(second)
    ins = random_inputs(parent, {"T": 3}, seed=1)
    partials = run(first.pieces[0], {"a": ins["a"], "b": ins["b"]}, {"T": 3})
    want = run(first.pieces[1], partials, {"T": 3})["y"]
    np.testing.assert_allclose(run_pieces(second, partials, {"T": 3})["y"], want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("call, fragment", [
    (lambda: split_k(matmul(8, 8, Dim("K", 64)), 2), "dynamic"),
    (lambda: split_k(matmul(8, 8, 64), 1), "parts must be an integer >= 2"),
    (lambda: split_k(matmul(8, 8, 9), 4), "empty"),
    (lambda: split_k(rmsnorm(64), 2), "needs a matmul-family kernel"),
    (lambda: split_rows(matmul(8, 8, 64), 2), "needs a row-family kernel"),
    (lambda: split_rows(split_rows(rmsnorm(64), 2).pieces[0], 2), "windowed"),
    (lambda: split_k(split_k(matmul(8, 8, 64), 2).pieces[0], 2), "already windowed"),
    (lambda: apply(rmsnorm(64), "split:K=2"), "no splittable reduction over 'K'"),
    (lambda: apply(rmsnorm(64), "cut:norm"), "fusion passes"),
    (lambda: apply(rmsnorm(64), "split:H=1"), "not a structural decision"),
])
def test_splits_refuse_what_they_cannot_split(call, fragment: str) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(IRError, match=fragment):
        call()


def test_split_rows_refuses_a_reduction_with_no_known_combine() -> None:
    text = """kernel odd_row { axis B = dyn(2) axis H = 64 in x: f32[B, H] out y: f32[B]
      for i in B { reduce m: f32 = max(j in H) x[i, j]
        reduce s: f32 = sum(j in H) mul(x[i, j], m) y[i] = s } }"""
    with pytest.raises(IRError, match="no combine is known for reduction 's'"):
        split_rows(parse(text), 2)


def test_legal_splits_offer_only_long_static_reductions() -> None:
    assert legal_splits(matmul(Dim("T", 8), 64, 4096)) == ["split:K=2", "split:K=4", "split:K=8", "split:K=16"]
    assert legal_splits(matmul(Dim("T", 8), 64, 1024)) == ["split:K=2", "split:K=4"]
    assert legal_splits(matmul(Dim("T", 8), 64, 128)) == []
    assert legal_splits(matmul(8, 8, Dim("K", 4096))) == []
    assert legal_splits(rmsnorm(8192)) == ["split:H=2", "split:H=4", "split:H=8"]
    assert legal_splits(layernorm(4096)) == ["split:H=2", "split:H=4"]
    assert legal_splits(softmax(1024)) == []
    assert legal_splits(elementwise("a+b", cols=65536)) == []
    for text in legal_splits(softmax(2048)):  # every offered decision can be applied
        assert apply(softmax(2048), text).decision == text


def test_decision_wiring_is_checked() -> None:
    parent = rmsnorm(64)
    part, comb = split_rows(parent, 2).pieces
    with pytest.raises(IRError, match="neither the parent nor an earlier piece"):
        Decision(parent, "split:H=2", (comb, part))
    with pytest.raises(IRError, match="no piece writes parent output"):
        Decision(parent, "split:H=2", (part,))
    with pytest.raises(IRError, match="not a structural decision"):
        Decision(parent, "split-H", (part, comb))
    wrong = Program(comb.name, comb.axes,
                    tuple(Buffer(b.name, b.role, "f64" if b.name == "ss_part" else b.dtype, b.shape)
                          for b in comb.buffers), comb.body)
    with pytest.raises(IRError):
        Decision(parent, "split:H=2", (part, wrong))
    d = Decision(parent, "split:H=2", (part, comb))
    assert [b.name for b in d.intermediates()] == ["ss_part"]


def test_split_k_keeps_every_output_of_a_multi_output_matmul() -> None:
    parent = parse("""kernel mm_two_outs { axis T = dyn(4) axis N = 6 axis K = 40
      in a: f32[T, K] in b: f32[K, N] out pre: f32[T, N] out y: f32[T, N]
      for i in T { for j in N { reduce acc: f32 = sum(k in K) mul(a[i, k], b[k, j])
        pre[i, j] = acc let e0: f32 = relu(acc) y[i, j] = e0 } } }""")
    decision = split_k(parent, 3)
    assert_well_formed(decision)
    assert_same(decision, {"T": 3}, seed=7)
