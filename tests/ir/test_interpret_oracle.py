"""The vectorised interpreter equals a plain scalar loop interpreter on every generated program.

The oracle below executes statements one iteration at a time, exactly as the IR reads, using
the same per-type arithmetic (`as_dtype`, `apply_unary`, `apply_binary`) and summing each
reduction's lanes in the same order; so any fault in the interpreter's broadcasting, window
masking, scoping or store semantics shows as a difference, compared bit for bit.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings

from emmy_core.ir import (
    Axis,
    Binary,
    Cast,
    Const,
    Extent,
    Let,
    Load,
    Loop,
    Program,
    Reduce,
    Ref,
    Store,
    Unary,
)
from emmy_core.ir.interpret import (
    NUMPY_DTYPES,
    apply_binary,
    apply_unary,
    as_dtype,
    random_inputs,
    reduce_identity,
    run,
)
from emmy_core.ir.sizes import extents
from tests.ir.strategies import programs


def scalar_run(program: Program, inputs: dict[str, np.ndarray], sizes: dict[str, int]) -> dict[str, np.ndarray]:
    ext = extents(program, sizes)
    outs = {}
    for b in program.outputs:
        t = NUMPY_DTYPES[b.dtype]
        fill = np.iinfo(t).min if b.dtype.startswith("i") else np.nan
        outs[b.name] = np.full(tuple(ext[a] for a in b.shape), fill, dtype=t)
    at: dict[str, int] = {}
    values: dict[str, tuple[np.ndarray, str]] = {}

    def ev(e):  # type: ignore[no-untyped-def]
        """(value, IR type) of an expression at the current iteration."""
        if isinstance(e, Load):
            return np.asarray(inputs[e.buffer][tuple(at[v] if isinstance(v, str) else v for v in e.index)]), program.buffer(e.buffer).dtype
        if isinstance(e, Ref):
            return values[e.name]
        if isinstance(e, Const):
            raw = np.asarray(e.value, dtype=np.float64 if isinstance(e.value, float) else np.int64)
            return as_dtype(raw, e.dtype), e.dtype
        if isinstance(e, Extent):
            return np.asarray(ext[e.axis], dtype=np.int64), "i64"
        if isinstance(e, Cast):
            return as_dtype(ev(e.x)[0], e.dtype), e.dtype
        if isinstance(e, Unary):
            x, t = ev(e.x)
            return as_dtype(apply_unary(e.op, x), t), t
        assert isinstance(e, Binary)
        (a, t), (b, _) = ev(e.a), ev(e.b)
        return as_dtype(apply_binary(e.op, a, b), t), t

    def execute(stmts) -> None:  # type: ignore[no-untyped-def]
        declared = []
        for s in stmts:
            if isinstance(s, Loop):
                for v in range(ext[s.axis]):
                    at[s.var] = v
                    execute(s.body)
                del at[s.var]
            elif isinstance(s, Let):
                values[s.name] = as_dtype(ev(s.value)[0], s.dtype), s.dtype
                declared.append(s.name)
            elif isinstance(s, Reduce):
                lanes = []
                start = None
                if s.window is not None:
                    start = s.window.start.offset + sum(c * at[v] for v, c in s.window.start.terms)
                for v in range(ext[s.axis]):
                    if start is not None and not start <= v < start + s.window.length:
                        lanes.append(np.asarray(reduce_identity(s.op, s.dtype)))
                        continue
                    at[s.var] = v
                    lanes.append(as_dtype(ev(s.body)[0], s.dtype))
                at.pop(s.var, None)
                row = np.array([as_dtype(x, s.dtype) for x in lanes], dtype=NUMPY_DTYPES[s.dtype])
                if s.op == "sum":
                    acc = np.sum(row, dtype=NUMPY_DTYPES[s.dtype])
                else:
                    acc = np.max(row) if s.op == "max" else np.min(row)
                values[s.name] = as_dtype(np.asarray(acc), s.dtype), s.dtype
                declared.append(s.name)
            else:
                assert isinstance(s, Store)
                outs[s.buffer][tuple(at[v] if isinstance(v, str) else v for v in s.index)] = ev(s.value)[0]
        for name in declared:
            values.pop(name)

    with np.errstate(all="ignore"):
        execute(program.body)
    return outs


def small(program: Program) -> Program:
    """The same program with every static extent cut to at most 4 (windows and indices stay valid)."""
    axes = tuple(a if a.extent is None else Axis(a.name, min(a.extent, 4)) for a in program.axes)
    return Program(program.name, axes, program.buffers, program.body)


@settings(max_examples=150, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(programs())
def test_interpreter_equals_a_scalar_loop_interpreter_on_any_valid_program(program: Program) -> None:
    program = small(program)
    sizes = {a.name: 1 + (i * 2) % 4 for i, a in enumerate(program.dynamic_axes)}
    ins = random_inputs(program, sizes, seed=3)
    got, want = run(program, ins, sizes), scalar_run(program, ins, sizes)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name], err_msg=f"buffer {name}")


def _structured() -> list[tuple[Program, dict[str, int]]]:
    from emmy_core.graph.decisions import split_k, split_rows
    from emmy_core.ir.builders import Dim, elementwise, layernorm, matmul, rmsnorm, softmax

    mm = matmul(Dim("T", 3), 5, 7, dtype="bf16", epilogue=("bias", "gelu", "residual"), batch=(2,), b_transposed=True)
    progs = [
        (mm, {"T": 3}), (rmsnorm(7, prologue=("residual",)), {"B": 3}), (softmax(6, scale=0.7), {"B": 2}),
        (layernorm(5, dtype="f64"), {"B": 2}), (elementwise("silu(a)*b - max(a, c)", cols=3), {"B": 2}),
    ]
    for d in (split_k(mm, 3), split_rows(layernorm(7), 3), split_rows(softmax(10), 4)):
        progs += [(p, {"T": 3} if "T" in {a.name for a in p.axes} else {"B": 2}) for p in d.pieces]
    return progs


def test_interpreter_equals_the_scalar_interpreter_on_nested_and_windowed_kernels() -> None:
    for program, sizes in _structured():
        ins = random_inputs(program, sizes, seed=5)
        got, want = run(program, ins, sizes), scalar_run(program, ins, sizes)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{program.name}: buffer {name}")
