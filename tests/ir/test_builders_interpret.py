"""The reference interpreter agrees with torch on every builder family, and checks its inputs strictly.

Tolerances (relative and absolute, against a float64 torch reference on the same inputs):
f16 outputs 1e-2, bf16 outputs 2e-2, f32 outputs 1e-4, f64 outputs 1e-10. Shapes are drawn
from a seeded generator and include sizes that are not powers of two.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from emmy_core.ir import IRError, parse
from emmy_core.ir.builders import Dim, elementwise, layernorm, matmul, rmsnorm, softmax
from emmy_core.ir.interpret import random_inputs, round_bf16, run

TOL = {"f16": 1e-2, "bf16": 2e-2, "f32": 1e-4, "f64": 1e-10}
SEEDS = range(5)
DTYPES = ("f16", "bf16", "f32", "f64")


def t64(x: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.asarray(x, dtype=np.float64))


def close(got: np.ndarray, want: torch.Tensor, dtype: str) -> None:
    tol = TOL[dtype]
    np.testing.assert_allclose(got.astype(np.float64), want.numpy(), rtol=tol, atol=tol)


def _epilogue_ref(acc: torch.Tensor, steps: tuple[str, ...], ins: dict[str, np.ndarray]) -> torch.Tensor:
    for step in steps:
        if step == "bias":
            acc = acc + t64(ins["bias"])
        elif step == "residual":
            acc = acc + t64(ins["residual"])
        elif step == "mul":
            acc = acc * t64(ins["gate"])
        elif step.startswith("scale:"):
            acc = acc * float(step[6:])
        elif step == "gelu":
            acc = F.gelu(acc)
        elif step == "gelu_tanh":
            acc = F.gelu(acc, approximate="tanh")
        else:
            acc = {"relu": F.relu, "silu": F.silu}[step](acc)
    return acc


EPILOGUES = [(), ("bias",), ("bias", "gelu"), ("gelu_tanh", "residual"), ("silu", "mul"), ("scale:0.125", "relu"),
             ("bias", "silu", "scale:-1.5", "residual", "mul")]


@pytest.mark.parametrize("seed", SEEDS)
def test_interpreter_matches_torch_on_matmul_with_every_epilogue(seed: int) -> None:
    rng = np.random.default_rng(seed)
    m, n, k = (int(v) for v in rng.integers(1, 40, size=3))
    dtype = DTYPES[seed % 4]
    steps = EPILOGUES[seed % len(EPILOGUES)] if seed else EPILOGUES[-1]
    bt = bool(seed % 2)
    batch = (Dim("B", 2), 3) if seed % 3 == 1 else ()
    prog = matmul(Dim("T", 8), n, k, dtype=dtype, epilogue=steps, batch=batch, b_transposed=bt)
    sizes = {"T": m, **({"B": int(rng.integers(1, 4))} if batch else {})}
    ins = random_inputs(prog, sizes, seed=seed)
    got = run(prog, ins, sizes)["y"]
    b = t64(ins["b"])
    acc = t64(ins["a"]) @ (b.transpose(-1, -2) if bt else b)
    close(got, _epilogue_ref(acc, steps, ins), dtype)


@pytest.mark.parametrize("seed", SEEDS)
def test_interpreter_matches_torch_on_rmsnorm(seed: int) -> None:
    rng = np.random.default_rng(100 + seed)
    hidden, rows, dtype = int(rng.integers(3, 200)), int(rng.integers(1, 9)), DTYPES[seed % 4]
    residual = seed % 2 == 0
    prog = rmsnorm(hidden=hidden, dtype=dtype, batch_hint=4, prologue=("residual",) if residual else ())
    ins = random_inputs(prog, {"B": rows}, seed=seed)
    out = run(prog, ins, {"B": rows})
    x = t64(ins["x"])
    if residual:  # the sum is taken in the kernel's dtype, as the model does
        x = t64(round_bf16(ins["x"] + ins["res"]) if dtype == "bf16" else ins["x"] + ins["res"])
        close(out["h"], x, dtype)
    ref = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * t64(ins["w"])
    close(out["y"], ref, dtype)


@pytest.mark.parametrize("seed", SEEDS)
def test_interpreter_matches_torch_on_softmax(seed: int) -> None:
    rng = np.random.default_rng(200 + seed)
    cols, rows, dtype = int(rng.integers(1, 300)), int(rng.integers(1, 7)), DTYPES[seed % 4]
    scale = None if seed % 2 else 0.37
    prog = softmax(cols, dtype=dtype, scale=scale)
    ins = random_inputs(prog, {"B": rows}, seed=seed, scale=4.0)
    ref = torch.softmax(t64(ins["x"]) * (1.0 if scale is None else scale), dim=-1)
    close(run(prog, ins, {"B": rows})["y"], ref, dtype)


@pytest.mark.parametrize("seed", SEEDS)
def test_interpreter_matches_torch_on_layernorm(seed: int) -> None:
    rng = np.random.default_rng(300 + seed)
    hidden, rows, dtype = int(rng.integers(2, 200)), int(rng.integers(1, 7)), DTYPES[seed % 4]
    prog = layernorm(hidden, dtype=dtype)
    ins = random_inputs(prog, {"B": rows}, seed=seed)
    ref = F.layer_norm(t64(ins["x"]), (hidden,), t64(ins["w"]), t64(ins["bias"]), eps=1e-5)
    close(run(prog, ins, {"B": rows})["y"], ref, dtype)


EXPRS = {
    "silu(a)*b": lambda v: F.silu(v["a"]) * v["b"],
    "a+b": lambda v: v["a"] + v["b"],
    "gelu(a)": lambda v: F.gelu(v["a"]),
    "gelu_tanh(x) - 2*y/(abs(z)+1)": lambda v: F.gelu(v["x"], approximate="tanh") - 2 * v["y_"] / (v["z"].abs() + 1),
    "max(a, 0.5) * rsqrt(abs(b) + 1) + -c": lambda v: torch.clamp(v["a"], min=0.5) * torch.rsqrt(v["b"].abs() + 1)
    - v["c"],
    "tanh(exp(a) - log(abs(b) + 0.25)) + sigmoid(a) * erf(b)": lambda v: torch.tanh(v["a"].exp() - (v["b"].abs() + 0.25)
                                                                                    .log()) + torch.sigmoid(v["a"])
    * torch.erf(v["b"]),
}


@pytest.mark.parametrize("seed, text", list(enumerate(EXPRS)))
def test_interpreter_matches_torch_on_elementwise_chains(seed: int, text: str) -> None:
    cols, rows, dtype = 3 + 7 * seed, 1 + seed % 5, DTYPES[seed % 4]
    text = text.replace("y/", "y_/") if "y/" in text else text  # 'y' names the result buffer
    prog = elementwise(text, dtype=dtype, cols=cols)
    ins = random_inputs(prog, {"B": rows}, seed=seed)
    ref = EXPRS[text.replace("y_/", "y/")]({k: t64(v) for k, v in ins.items()})
    close(run(prog, ins, {"B": rows})["y"], ref, dtype)


def test_operations_are_computed_in_their_declared_type() -> None:
    text = """kernel f16_add { axis N = 2 in x: f16[N] out y: f16[N] out z: f32[N]
      for i in N { y[i] = add(x[i], const(f16, 1.0)) z[i] = add(cast(f32, x[i]), const(f32, 1.0)) } }"""
    out = run(parse(text), {"x": np.array([2048.0, 1.0], dtype=np.float16)})
    assert out["y"].tolist() == [2048.0, 2.0]  # 2049 is not an f16
    assert out["z"].tolist() == [2049.0, 2.0]


def test_bf16_rounding_matches_torch_round_to_nearest_even() -> None:
    rng = np.random.default_rng(0)
    x = np.concatenate([rng.standard_normal(4096).astype(np.float32) * 100,
                        np.array([1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 65504.0, 3.4e38, np.inf], np.float32)])
    ref = torch.from_numpy(x).to(torch.bfloat16).to(torch.float32).numpy()
    np.testing.assert_array_equal(round_bf16(x), ref)


WINDOWED = """kernel win { axis B = dyn(2) axis P = 3 axis H = 10 in x: f32[B, H] out y: f32[B, P] out z: f32[B, P]
  for i in B { for p in P {
    reduce s: f32 = sum(j in H[p * 4 : 4]) x[i, j]
    reduce m: f32 = max(j in H[p * 4 + 1 : 4]) x[i, j]
    y[i, p] = s z[i, p] = m } } }"""


def test_windowed_reduce_clips_to_the_axis_and_uses_the_identity_outside() -> None:
    x = np.arange(20, dtype=np.float32).reshape(2, 10)
    out = run(parse(WINDOWED), {"x": x}, {"B": 2})
    for i in range(2):
        row = x[i]
        assert out["y"][i].tolist() == [row[0:4].sum(), row[4:8].sum(), row[8:10].sum()]
        assert out["z"][i].tolist() == [row[1:5].max(), row[5:9].max(), row[9:10].max()]


def test_a_value_stored_at_every_iteration_of_an_unindexed_loop_keeps_the_last() -> None:
    text = """kernel last { axis N = 3 axis M = 4 in x: f32[N, M] out y: f32[N]
      for i in N { for j in M { y[i] = x[i, j] } } }"""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert run(parse(text), {"x": x})["y"].tolist() == [3.0, 7.0, 11.0]


@pytest.mark.parametrize("change, fragment", [
    (lambda ins: ins.pop("w"), "missing input buffer.*w"),
    (lambda ins: ins.update(extra=np.zeros(3)), "not input buffers.*extra"),
    (lambda ins: ins.update(x=np.zeros((4, 7), np.float16)), "input 'x' has shape"),
    (lambda ins: ins.update(x=np.zeros((4, 8), np.float32)), "input 'x' has dtype"),
    (lambda ins: ins.update(w=[1.0] * 8), "input 'w' must be a numpy array"),
])
def test_inputs_are_checked_strictly_naming_the_buffer(change, fragment: str) -> None:  # type: ignore[no-untyped-def]
    prog = rmsnorm(hidden=8, batch_hint=4)
    ins = random_inputs(prog)
    change(ins)
    with pytest.raises(IRError, match=fragment):
        run(prog, ins)


def test_bf16_inputs_must_hold_bfloat16_values() -> None:
    prog = elementwise("a+b", dtype="bf16", cols=4)
    ins = random_inputs(prog, {"B": 2})
    ins["a"] = ins["a"] + np.float32(1e-4)
    with pytest.raises(IRError, match=r"input 'a' \(bf16\) holds float32 values"):
        run(prog, ins, {"B": 2})


def test_outputs_are_fresh_and_inputs_untouched() -> None:
    prog = softmax(16)
    ins = random_inputs(prog, {"B": 3})
    before = ins["x"].copy()
    first, second = run(prog, ins, {"B": 3})["y"], run(prog, ins, {"B": 3})["y"]
    assert first is not second and np.array_equal(first, second)
    np.testing.assert_array_equal(ins["x"], before)
    assert math.isclose(float(first.astype(np.float64).sum()), 3.0, rel_tol=1e-2)


@pytest.mark.parametrize("sizes, fragment", [({"B": 0}, "positive integer"), ({"B": 2.0}, "positive integer"),
                                             ({"Q": 2}, "not dynamic axes")])
def test_sizes_are_checked_strictly(sizes: dict, fragment: str) -> None:
    prog = softmax(4)
    with pytest.raises(IRError, match=fragment):
        run(prog, random_inputs(prog, {"B": 2}), sizes)


def test_only_loop_programs_are_interpreted() -> None:
    from emmy_core.ir import Extern

    with pytest.raises(IRError, match="only loop programs"):
        run(Extern("vadd", (8,), "0" * 64), {})  # type: ignore[arg-type]
