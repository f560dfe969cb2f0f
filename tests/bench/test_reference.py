"""The f64 reference: the program itself with floats widened, evaluated in slices when large; strict compare."""

from __future__ import annotations

import numpy as np
import pytest

from emmy_core.bench.protocol import FrameReader, ProtocolError, decode, encode
from emmy_core.bench.reference import make_inputs, mismatch, promote_f64, reference, slice_axes, tolerance
from emmy_core.ir import validate
from emmy_core.ir.builders import Dim, elementwise, matmul, rmsnorm, softmax
from emmy_core.ir.interpret import run


def test_the_reference_is_the_program_computed_in_float64() -> None:
    p = rmsnorm(hidden=32, dtype="f16", batch_hint=4)
    wide = promote_f64(p)
    validate(wide)
    assert {b.dtype for b in wide.buffers} == {"f64"}
    inputs = make_inputs(p, {"B": 4}, seed=3)
    ref = reference(p, inputs, {"B": 4})["y"]
    assert ref.dtype == np.float64
    own = run(p, inputs, {"B": 4})["y"]  # the kernel's own types: within f16 rounding of the reference
    assert mismatch(own, ref, tolerance(p), "f16") is None
    assert not np.array_equal(own.astype(np.float64), ref)


def test_fresh_random_inputs_are_never_zeros() -> None:
    p = elementwise("a*b", dtype="f32", batch_hint=4, cols=16)
    a = make_inputs(p, {"B": 4}, seed=1)
    b = make_inputs(p, {"B": 4}, seed=2)
    assert all(np.count_nonzero(v) == v.size for v in a.values())
    assert not np.array_equal(a["a"], b["a"])


@pytest.mark.parametrize("program", [
    matmul(Dim("T", 8), 24, 40, dtype="f32", epilogue=("bias", "gelu")),
    softmax(64, dtype="f32", batch_hint=16),
    matmul(Dim("S", 8), Dim("S", 8), Dim("D", extent=16), batch=(Dim("B", 2), Dim("NH", extent=3)),
           b_transposed=True, epilogue=("scale:0.125",)),
])
def test_a_large_kernel_is_evaluated_in_slices_with_the_same_result(program) -> None:  # type: ignore[no-untyped-def]
    sizes = {a.name: 13 for a in program.dynamic_axes}
    assert slice_axes(promote_f64(program))
    inputs = make_inputs(program, sizes, seed=0)
    whole = reference(program, inputs, sizes)
    sliced = reference(program, inputs, sizes, max_elements=64)
    for name, value in whole.items():
        np.testing.assert_array_equal(sliced[name], value)


def test_tolerance_follows_the_narrowest_float_type() -> None:
    assert tolerance(elementwise("a+b", dtype="f16", cols=16)) == 1e-2
    assert tolerance(elementwise("a+b", dtype="bf16", cols=16)) == 3e-2
    assert tolerance(elementwise("a+b", dtype="f64", cols=16)) == 1e-9


def test_mismatch_names_wrong_and_unwritten_elements() -> None:
    ref = np.linspace(-1, 1, 12).reshape(3, 4)
    assert mismatch(ref.astype(np.float32), ref, 1e-4, "f32") is None
    poisoned = ref.copy()
    poisoned[1, 2] = np.nan
    why = mismatch(poisoned, ref, 1e-4, "f32")
    assert why is not None and "1 left unwritten" in why and "(1, 2)" in why
    off = ref * 1.01
    assert "12 of 12" in (mismatch(off, ref, 1e-4, "f32") or "")
    assert mismatch(np.array([np.inf]), np.array([1e6]), 1e-2, "f16") is None  # overflow to inf is the type's


def test_frames_round_trip_and_garbage_is_refused() -> None:
    r = FrameReader()
    data = encode({"op": "variant", "knobs": {"vec": 4}}) + encode({"x": [1.5]})
    r.feed(data[:5])
    assert r.pop() is None
    r.feed(data[5:])
    assert r.pop() == {"op": "variant", "knobs": {"vec": 4}}
    assert r.pop() == {"x": [1.5]}
    with pytest.raises(ProtocolError):
        decode(b"[1, 2]")
    with pytest.raises(ProtocolError):
        decode(b"\xff")
