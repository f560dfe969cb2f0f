"""Family recognition: each builder's kernel lands in its template family with the right parts."""

from __future__ import annotations

import re

import pytest
from hypothesis import given, settings

from emmy_core.ir import Extern, IRError, parse
from emmy_core.ir.builders import Dim, day_one_kernels, elementwise, layernorm, matmul, rmsnorm, softmax
from emmy_core.ir.family import ElementwiseShape, ExternShape, MatmulShape, RowShape, classify
from tests.ir.strategies import programs


def test_every_day_one_kernel_has_a_family() -> None:
    expected = {"matmul": "matmul", "rmsnorm": "row", "softmax": "row", "layernorm": "row", "ew": "elementwise"}
    for _, program in day_one_kernels():
        assert classify(program).family == expected[program.name.split("_")[0]]


def test_matmul_family_names_axes_buffers_and_epilogue() -> None:
    shape = classify(matmul(Dim("T", 8), 64, 32, epilogue=("bias", "gelu", "residual")))
    assert isinstance(shape, MatmulShape)
    assert (shape.batch, shape.m, shape.n, shape.k) == ((), "T", "N", "K")
    assert (shape.a, shape.b, shape.b_transposed, shape.reduce) == ("a", "b", False, "acc")
    assert [s.name for s in shape.epilogue] == ["e0", "e1", "e2"]
    assert [s.buffer for s in shape.stores] == ["y"]
    assert shape.parts is None and shape.window is None


def test_batched_transposed_matmul_is_recognised() -> None:
    p = matmul(Dim("S", 16), Dim("S", 16), Dim("D", extent=8), batch=(Dim("B", 2), Dim("NH", extent=4)),
               b_transposed=True)
    shape = classify(p)
    assert isinstance(shape, MatmulShape)
    assert (shape.batch, shape.m, shape.n, shape.k, shape.b_transposed) == (("B", "NH"), "S", "S", "D", True)


def test_operands_in_swapped_order_are_still_a_matmul() -> None:
    text = """kernel mm_swapped {
      axis M = 4
      axis N = 8
      axis K = 16
      in a: f32[M, K]
      in b: f32[K, N]
      out y: f32[M, N]
      for i in M { for j in N {
        reduce acc: f32 = sum(k in K) mul(b[k, j], a[i, k])
        y[i, j] = acc } } }"""
    shape = classify(parse(text))
    assert isinstance(shape, MatmulShape) and (shape.a, shape.b, shape.m, shape.n) == ("a", "b", "M", "N")


@pytest.mark.parametrize("build, n_red", [(lambda: rmsnorm(64), 1), (lambda: softmax(64), 2),
                                          (lambda: layernorm(64), 2),
                                          (lambda: rmsnorm(64, prologue=("residual",)), 1)])
def test_row_family_counts_reductions_along_the_row(build, n_red: int) -> None:  # type: ignore[no-untyped-def]
    shape = classify(build())
    assert isinstance(shape, RowShape)
    assert shape.rows == ("B",) and shape.n_reductions == n_red and shape.row_var == "j"
    assert shape.row in ("H", "C") and set(shape.reduce_axes) == {shape.row} and not shape.windowed


def test_elementwise_and_extern_families() -> None:
    shape = classify(elementwise("silu(a)*b", cols=16))
    assert isinstance(shape, ElementwiseShape) and shape.axes == ("B", "C")
    ext = classify(Extern("vector_add", (1024,), "0" * 64))
    assert isinstance(ext, ExternShape) and ext.problem == (1024,)


def test_a_self_product_reduction_is_a_row_kernel_not_a_matmul() -> None:
    text = """kernel sumsq {
      axis B = dyn(4)
      axis H = 32
      in x: f32[B, H]
      out y: f32[B]
      for i in B {
        reduce ss: f32 = sum(j in H) mul(x[i, j], x[i, j])
        y[i] = ss } }"""
    shape = classify(parse(text))
    assert isinstance(shape, RowShape) and shape.row == "H" and shape.row_var is None


@pytest.mark.parametrize("text, reason", [
    ("""kernel two_nests { axis N = 4 in x: f32[N] out y: f32[N] out z: f32[N]
        for i in N { y[i] = x[i] } for j in N { z[j] = x[j] } }""", "not a loop nest|no reduction"),
    ("""kernel nested_red { axis N = 4 axis M = 3 in x: f32[N, M] out y: f32[N, M]
        for i in N { reduce r: f32 = sum(k in M) x[i, k]
          for j in M { reduce q: f32 = sum(k in M) x[i, k] y[i, j] = add(q, r) } } }""",
     "inner loop holds something other"),
])
def test_kernels_outside_every_family_are_refused_with_a_reason(text: str, reason: str) -> None:
    with pytest.raises(IRError, match="no template family fits kernel") as err:
        classify(parse(text))
    assert re.search(reason, str(err.value))


@settings(max_examples=200, deadline=None, derandomize=True)
@given(programs())
def test_classify_is_total_a_shape_or_an_error_naming_the_kernel(program) -> None:  # type: ignore[no-untyped-def]
    try:
        shape = classify(program)
    except IRError as exc:
        assert str(exc).startswith(f"no template family fits kernel {program.name}: ")
        return
    assert shape.family in ("matmul", "row", "elementwise")
    assert isinstance(shape, MatmulShape | RowShape | ElementwiseShape)


INTERLEAVED = """kernel mm_two_outs {
  axis T = dyn(4)
  axis N = 6
  axis K = 40
  in a: f32[T, K]
  in b: f32[K, N]
  out pre: f32[T, N]
  out y: f32[T, N]
  for i in T { for j in N {
    reduce acc: f32 = sum(k in K) mul(a[i, k], b[k, j])
    pre[i, j] = acc
    let e0: f32 = relu(acc)
    y[i, j] = e0 } } }"""


def test_matmul_epilogue_may_interleave_lets_and_stores() -> None:
    shape = classify(parse(INTERLEAVED))
    assert isinstance(shape, MatmulShape)
    assert [s.name for s in shape.epilogue] == ["e0"] and [s.buffer for s in shape.stores] == ["pre", "y"]
