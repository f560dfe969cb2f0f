"""Rule: every family's generated Triton kernel, and every piece of a split, equals torch.

The kernels run under Triton's interpreter on CPU tensors (conftest sets TRITON_INTERPRET)
at small shapes chosen so that no size is a multiple of the block (M=33, N=17, K=40; rows
of 100 with blocks of 32), under two or three knob settings per family. References are
torch in float64 on the same inputs; outputs start poisoned with NaN so an element the
kernel never writes fails. Tolerances: f32 rtol=atol=1e-5; f16 rtol=atol=1e-2 (the f16
output's rounding, and f16 accumulation under acc=f16).
"""

from __future__ import annotations

import random

import pytest
import torch
import torch.nn.functional as F

from emmy_core.codegen.backend import LaunchError
from emmy_core.codegen.triton_gen import TritonBackend
from emmy_core.dtypes import torch_dtype
from emmy_core.graph.decisions import split_k, split_rows
from emmy_core.ir import (
    Axis,
    Binary,
    Buffer,
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
    validate,
)
from emmy_core.ir.builders import Dim, elementwise, layernorm, matmul, rmsnorm, softmax
from emmy_core.ir.sizes import extents

TOL = {"f32": 1e-5, "f16": 1e-2}


def random_inputs(program: Program, sizes: dict[str, int], seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ext = extents(program, sizes)
    return {b.name: torch.randn([ext[a] for a in b.shape], generator=gen, dtype=torch.float64).to(torch_dtype(b.dtype))
            for b in program.inputs}


def launch(program: Program, knobs: dict[str, object], env: dict[str, torch.Tensor],
           sizes: dict[str, int]) -> dict[str, torch.Tensor]:
    """Runs `program` on the tensors it reads from `env`; adds its (NaN-poisoned, then written) outputs to env."""
    dyn = {a.name for a in program.dynamic_axes}
    sz = {k: v for k, v in sizes.items() if k in dyn}
    ext = extents(program, sz)
    bufs = {b.name: env[b.name] for b in program.inputs}
    for b in program.outputs:
        bufs[b.name] = torch.full([ext[a] for a in b.shape], float("nan"), dtype=torch_dtype(b.dtype))
    TritonBackend(check_types=True).build(program, knobs, "deploy")(bufs, sz)
    out = {b.name: bufs[b.name] for b in program.outputs}
    env.update(out)
    return out


def close(got: torch.Tensor, want: torch.Tensor, dtype: str) -> None:
    torch.testing.assert_close(got.double(), want.double(), rtol=TOL[dtype], atol=TOL[dtype])


def d(x: torch.Tensor) -> torch.Tensor:
    return x.double()


# ---- matmul with epilogue ---------------------------------------------------------------------------

MM_KNOBS = [
    {"block_m": 16, "block_n": 16, "block_k": 16},
    {"block_m": 32, "block_n": 16, "block_k": 32, "group_m": 2, "num_warps": 2},
    {"block_m": 16, "block_n": 32, "block_k": 16, "group_m": 1, "mma": "none", "num_stages": 2},
]


def _epilogue_ref(y: torch.Tensor, steps: tuple[str, ...], ins: dict[str, torch.Tensor]) -> torch.Tensor:
    for step in steps:
        if step == "bias":
            y = y + d(ins["bias"])
        elif step == "residual":
            y = y + d(ins["residual"])
        elif step == "mul":
            y = y * d(ins["gate"])
        elif step == "gelu":
            y = F.gelu(y)
        elif step == "gelu_tanh":
            y = F.gelu(y, approximate="tanh")
        elif step == "silu":
            y = F.silu(y)
        elif step == "relu":
            y = F.relu(y)
        elif step.startswith("scale:"):
            y = y * float(step[6:])
    return y


@pytest.mark.parametrize("knobs", MM_KNOBS, ids=["16x16x16", "32x16x32_g2", "16x32x16_nomma"])
@pytest.mark.parametrize("dtype,steps", [
    ("f32", ("bias", "gelu")),
    ("f16", ("bias", "gelu_tanh", "residual")),
])
def test_matmul_with_epilogue_equals_torch(dtype: str, steps: tuple[str, ...], knobs: dict[str, object]) -> None:
    program = matmul(Dim("T", 8), 17, 40, dtype=dtype, epilogue=steps)
    sizes = {"T": 33}
    ins = random_inputs(program, sizes, seed=1)
    out = launch(program, knobs, dict(ins), sizes)
    close(out["y"], _epilogue_ref(d(ins["a"]) @ d(ins["b"]), steps, ins), dtype)


def test_matmul_batched_transposed_at_random_shapes_equals_torch() -> None:
    rng = random.Random(7)
    for trial in range(2):
        s, b = rng.randint(17, 40), rng.randint(1, 3)
        program = matmul(Dim("S", 8), Dim("S", 8), Dim("D", extent=24), dtype="f32",
                         batch=(Dim("B", 2), Dim("NH", extent=3)), b_transposed=True, epilogue=("scale:0.125",))
        sizes = {"S": s, "B": b}
        ins = random_inputs(program, sizes, seed=trial)
        out = launch(program, {"block_m": 16, "block_n": 32, "block_k": 16}, dict(ins), sizes)
        close(out["y"], (d(ins["a"]) @ d(ins["b"]).transpose(-1, -2)) * 0.125, "f32")


def test_matmul_f16_accumulator_knob_equals_torch() -> None:
    program = matmul(Dim("T", 8), 17, 40, dtype="f16", epilogue=("silu", "mul"))
    sizes = {"T": 33}
    ins = random_inputs(program, sizes, seed=3)
    out = launch(program, {"block_m": 16, "block_n": 16, "block_k": 16, "acc": "f16"}, dict(ins), sizes)
    close(out["y"], _epilogue_ref(d(ins["a"]) @ d(ins["b"]), ("silu", "mul"), ins), "f16")


# ---- row reductions ---------------------------------------------------------------------------------

def _rms_ref(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    x = d(x)
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * d(w)


@pytest.mark.parametrize("block", [32, 128])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_row_rmsnorm_equals_torch(dtype: str, block: int) -> None:
    program = rmsnorm(100, dtype=dtype, prologue=("residual",))
    sizes = {"B": 7}
    ins = random_inputs(program, sizes, seed=2)
    out = launch(program, {"block": block, "num_warps": 2}, dict(ins), sizes)
    h = ins["x"] + ins["res"]  # the residual stream is added in the kernel's dtype
    close(out["h"], h, dtype)
    close(out["y"], _rms_ref(h, ins["w"], 1e-6), dtype)


@pytest.mark.parametrize("block", [32, 128])
def test_row_softmax_equals_torch(block: int) -> None:
    program = softmax(100, dtype="f32", scale=0.5)
    sizes = {"B": 6}
    ins = random_inputs(program, sizes, seed=4)
    out = launch(program, {"block": block}, dict(ins), sizes)
    close(out["y"], torch.softmax(d(ins["x"]) * 0.5, dim=-1), "f32")


@pytest.mark.parametrize("dtype,block", [("f32", 32), ("f16", 128), ("f32", 16)])
def test_row_layernorm_equals_torch(dtype: str, block: int) -> None:
    program = layernorm(100, dtype=dtype)
    sizes = {"B": 5}
    ins = random_inputs(program, sizes, seed=5)
    out = launch(program, {"block": block}, dict(ins), sizes)
    close(out["y"], F.layer_norm(d(ins["x"]), (100,), d(ins["w"]), d(ins["bias"]), 1e-5), dtype)


# ---- elementwise chains -----------------------------------------------------------------------------

EW_CASES = [
    ("silu(a)*b", lambda a, b: F.silu(a) * b),
    ("gelu(a) + tanh(b) - sigmoid(a*b) / 3", lambda a, b: F.gelu(a) + torch.tanh(b) - torch.sigmoid(a * b) / 3),
    ("max(a, b) - min(a, 0.5) + abs(b) * exp(-a) + erf(b)",
     lambda a, b: torch.maximum(a, b) - torch.clamp(a, max=0.5) + b.abs() * torch.exp(-a) + torch.erf(b)),
    ("pow(a, 2) + pow(abs(b) + 1, 1.5) + sqrt(abs(a)) + rsqrt(abs(b) + 1) + log(abs(a) + 1) + recip(abs(b) + 1)",
     lambda a, b: a ** 2 + (b.abs() + 1) ** 1.5 + a.abs().sqrt() + torch.rsqrt(b.abs() + 1)
     + torch.log(a.abs() + 1) + 1 / (b.abs() + 1)),
    ("relu(a) + gelu_tanh(b) - neg(a)", lambda a, b: F.relu(a) + F.gelu(b, approximate="tanh") + a),
]


@pytest.mark.parametrize("knobs", [{"block": 16}, {"block": 64, "num_warps": 2}], ids=["b16", "b64"])
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_elementwise_chain_equals_torch(dtype: str, knobs: dict[str, object]) -> None:
    for i, (text, ref) in enumerate(EW_CASES):
        program = elementwise(text, dtype=dtype, cols=37)
        sizes = {"B": 5}
        ins = random_inputs(program, sizes, seed=10 + i)
        out = launch(program, knobs, dict(ins), sizes)
        a, b = d(ins["a"]), d(ins["b"]) if "b" in ins else None
        close(out["y"], ref(a, b), dtype)


def test_elementwise_tanh_is_accurate_near_zero_and_far_out() -> None:
    program = elementwise("tanh(a)", dtype="f32", cols=64)
    x = torch.cat([torch.logspace(-8, 1.5, 60), torch.tensor([0.0, 0.0624, 0.0626, 30.0])])
    x = torch.cat([x, -x]).reshape(2, 64).to(torch.float32)
    out = launch(program, {"block": 32}, {"a": x}, {"B": 2})
    torch.testing.assert_close(out["y"].double(), torch.tanh(d(x)), rtol=2e-6, atol=1e-7)


# ---- decision pieces ---------------------------------------------------------------------------------

def test_split_k_pieces_equal_torch() -> None:
    parent = matmul(Dim("T", 8), 17, 40, dtype="f32", epilogue=("bias", "gelu"))
    decision = split_k(parent, 3)
    sizes = {"T": 33}
    env = random_inputs(parent, sizes, seed=6)
    ins = dict(env)
    launch(decision.pieces[0], {"block_m": 16, "block_n": 16, "block_k": 16}, env, sizes)
    launch(decision.pieces[1], {"block": 64}, env, sizes)
    close(env["y"], F.gelu(d(ins["a"]) @ d(ins["b"]) + d(ins["bias"])), "f32")


@pytest.mark.parametrize("builder,parts,knobs", [
    ("rmsnorm", 4, ({"block": 16}, {"block": 32})),
    ("softmax", 3, ({"block": 16}, {"block": 32})),
    ("layernorm", 2, ({"block": 32}, {"block": 16})),
    ("rmsnorm_long", 2, ({"block": 32}, {"block": 128})),
])
def test_split_rows_pieces_equal_torch(builder: str, parts: int, knobs: tuple[dict, dict]) -> None:
    parent = {
        "rmsnorm": lambda: rmsnorm(100, dtype="f32"),
        "softmax": lambda: softmax(100, dtype="f32"),
        "layernorm": lambda: layernorm(100, dtype="f32"),
        "rmsnorm_long": lambda: rmsnorm(300, dtype="f32"),
    }[builder]()
    decision = split_rows(parent, parts)
    sizes = {"B": 5}
    env = random_inputs(parent, sizes, seed=8)
    ins = dict(env)
    for piece, kn in zip(decision.pieces, knobs, strict=True):
        launch(piece, kn, env, sizes)
    x = d(ins["x"])
    n = x.shape[-1]
    want = {
        "rmsnorm": lambda: _rms_ref(x, ins["w"], 1e-6),
        "rmsnorm_long": lambda: _rms_ref(x, ins["w"], 1e-6),
        "softmax": lambda: torch.softmax(x, dim=-1),
        "layernorm": lambda: F.layer_norm(x, (n,), d(ins["w"]), d(ins["bias"]), 1e-5),
    }[builder]()
    close(env["y"], want, "f32")


# ---- programs written by hand: dynamic row axes, extents, integers, bf16, f64 ------------------------

def dynrow_program() -> Program:
    """A row kernel over a dynamic row axis, with an extent, two reductions and a scalar store per row."""
    xs = Load("x", ("i", "j"))
    body = (Loop("i", "R", (
        Reduce("s", "f32", "sum", "j", "S", xs),
        Let("mean", "f32", Binary("div", Ref("s"), Cast("f32", Extent("S")))),
        Reduce("mx", "f32", "max", "j", "S", xs),
        Store("m", ("i",), Ref("mx")),
        Loop("j", "S", (Store("y", ("i", "j"), Binary("sub", xs, Ref("mean"))),)),
    )),)
    return validate(Program("dynrow", (Axis("R", 3), Axis("S", None, 8)),  # type: ignore[return-value]
                            (Buffer("x", "in", "f32", ("R", "S")), Buffer("y", "out", "f32", ("R", "S")),
                             Buffer("m", "out", "f32", ("R",))), body))


def ints_program() -> Program:
    """Integer arithmetic in i32 and i64, with a float result divided by a static extent."""
    a, b = Load("a", ("i", "j")), Load("b", ("i", "j"))
    t = Binary("add", Binary("mul", a, Const("i32", 3)), Binary("max", a, b))
    body = (Loop("i", "B", (Loop("j", "C", (
        Let("t", "i32", t),
        Store("y", ("i", "j"), Binary("sub", Ref("t"), Binary("min", a, b))),
        Store("z", ("i", "j"), Binary("div", Cast("f32", Ref("t")), Cast("f32", Extent("C")))),
        Store("w", ("i", "j"), Binary("mul", Cast("i64", a), Const("i64", 2**40))),
    )),)),)
    return validate(Program("ints", (Axis("B", None, 4), Axis("C", 19)),  # type: ignore[return-value]
                            (Buffer("a", "in", "i32", ("B", "C")), Buffer("b", "in", "i32", ("B", "C")),
                             Buffer("y", "out", "i32", ("B", "C")), Buffer("z", "out", "f32", ("B", "C")),
                             Buffer("w", "out", "i64", ("B", "C"))), body))


def test_row_over_a_dynamic_axis_with_extent_and_scalar_store_equals_torch() -> None:
    program = dynrow_program()
    for s, block in ((45, 16), (16, 16), (5, 32)):
        x = torch.randn(3, s, dtype=torch.float32)
        out = launch(program, {"block": block}, {"x": x}, {"S": s})
        close(out["y"], d(x) - d(x).mean(-1, keepdim=True), "f32")
        close(out["m"], d(x).amax(-1), "f32")


def test_integer_elementwise_equals_torch() -> None:
    program = ints_program()
    gen = torch.Generator().manual_seed(3)
    x, y = (torch.randint(-50, 50, (6, 19), generator=gen, dtype=torch.int32) for _ in range(2))
    env = {"a": x, "b": y}
    ext = {"y": torch.int32, "z": torch.float32, "w": torch.int64}
    bufs = {**env, **{n: torch.zeros(6, 19, dtype=dt) for n, dt in ext.items()}}
    TritonBackend().build(program, {"block": 32}, "deploy")(bufs, {"B": 6})
    t_ref = x * 3 + torch.maximum(x, y)
    assert torch.equal(bufs["y"], t_ref - torch.minimum(x, y))
    torch.testing.assert_close(bufs["z"], t_ref.float() / 19)
    assert torch.equal(bufs["w"], x.long() * 2**40)


def test_bf16_kernels_that_cast_before_computing_equal_torch() -> None:
    program = elementwise("silu(a)*b", dtype="bf16", cols=37)
    ins = {n: torch.randn(5, 37).bfloat16() for n in ("a", "b")}
    out = launch(program, {"block": 64}, dict(ins), {"B": 5})
    torch.testing.assert_close(d(out["y"]), F.silu(d(ins["a"])) * d(ins["b"]), rtol=2e-2, atol=2e-2)


def test_bf16_arithmetic_is_refused_by_the_interpreter_not_computed_wrong() -> None:
    program = matmul(Dim("T", 8), 17, 40, dtype="bf16", epilogue=("bias",))
    built = TritonBackend().build(program, {"block_m": 16, "block_n": 16, "block_k": 16}, "deploy")
    bufs = {"a": torch.randn(33, 40).bfloat16(), "b": torch.randn(40, 17).bfloat16(),
            "bias": torch.randn(17).bfloat16(), "y": torch.empty(33, 17).bfloat16()}
    with pytest.raises(LaunchError, match="raw bits"):
        built(bufs, {"T": 33})


def test_f64_matmul_equals_torch() -> None:
    program = matmul(Dim("T", 8), 17, 40, dtype="f64", epilogue=("bias", "gelu"))
    ins = random_inputs(program, {"T": 33}, seed=9)
    out = launch(program, {"block_m": 16, "block_n": 16, "block_k": 16}, dict(ins), {"T": 33})
    torch.testing.assert_close(out["y"], F.gelu(ins["a"] @ ins["b"] + ins["bias"]), rtol=1e-12, atol=1e-12)


def test_a_name_reused_after_the_inner_loop_gets_its_new_value() -> None:
    x3 = Binary("mul", Ref("t"), Const("f32", 3.0))  # the same expression inside and after the loop
    body = (Loop("i", "R", (
        Reduce("s", "f32", "sum", "j", "C", Load("x", ("i", "j"))),
        Loop("j", "C", (Let("t", "f32", Binary("add", Load("x", ("i", "j")), Ref("s"))), Store("y", ("i", "j"), x3))),
        Let("t", "f32", Binary("mul", Ref("s"), Const("f32", 5.0))),
        Store("z", ("i",), x3),
    )),)
    program = validate(Program("reuse", (Axis("R", None, 4), Axis("C", 20)),
                               (Buffer("x", "in", "f32", ("R", "C")), Buffer("y", "out", "f32", ("R", "C")),
                                Buffer("z", "out", "f32", ("R",))), body))
    x = torch.randn(3, 20)
    for block in (32, 16):  # the loop in one chunk (row scope), and in chunks
        out = launch(program, {"block": block}, {"x": x}, {"R": 3})
        s = d(x).sum(-1, keepdim=True)
        close(out["y"], (d(x) + s) * 3, "f32")
        close(out["z"], s[:, 0] * 15, "f32")


def test_half_precision_arithmetic_rounds_each_operation_to_f16() -> None:
    a, b, c = (Load(n, ("i", "j")) for n in ("a", "b", "c"))
    value = Binary("add", Binary("div", a, b), Binary("mul", Unary("recip", b), c))
    body = (Loop("i", "B", (Loop("j", "C", (Store("y", ("i", "j"), Binary("sub", value, c)),)),)),)
    program = validate(Program("half", (Axis("B", None, 4), Axis("C", 250)),
                               (*(Buffer(n, "in", "f16", ("B", "C")) for n in "abc"),
                                Buffer("y", "out", "f16", ("B", "C"))), body))
    gen = torch.Generator().manual_seed(4)
    ins = {n: (torch.rand(4, 250, generator=gen) * 4 + 0.5).half() for n in "abc"}
    out = launch(program, {"block": 256}, dict(ins), {"B": 4})
    want = (ins["a"] / ins["b"] + (1 / ins["b"]) * ins["c"]) - ins["c"]  # torch rounds every f16 op
    assert torch.equal(out["y"], want)


@pytest.mark.parametrize("block", [256, 64])
def test_half_precision_reductions_keep_their_type(block: int) -> None:
    x = Load("x", ("i", "j"))
    dev = Binary("sub", x, Ref("mx"))
    body = (Loop("i", "B", (
        Reduce("mx", "f16", "max", "j", "C", x),
        Reduce("mn", "f16", "min", "j", "C", x),
        Loop("j", "C", (Store("y", ("i", "j"), Binary("mul", Binary("mul", dev, dev), Binary("sub", x, Ref("mn")))),)),
    )),)
    program = validate(Program("halfred", (Axis("B", None, 4), Axis("C", 200)),
                               (Buffer("x", "in", "f16", ("B", "C")), Buffer("y", "out", "f16", ("B", "C"))), body))
    xs = (torch.randn(5, 200, generator=torch.Generator().manual_seed(5)) * 3).half()
    out = launch(program, {"block": block}, {"x": xs}, {"B": 5})
    dv = xs - xs.amax(-1, keepdim=True)
    assert torch.equal(out["y"], (dv * dv) * (xs - xs.amin(-1, keepdim=True)))  # f16 rounding at every op


def test_one_token_and_one_row_equal_torch() -> None:
    mm = matmul(Dim("T", 8), 17, 40, dtype="f32", epilogue=("bias", "relu"))
    ins = random_inputs(mm, {"T": 1}, seed=12)
    out = launch(mm, {"block_m": 16, "block_n": 16, "block_k": 16, "group_m": 4}, dict(ins), {"T": 1})
    close(out["y"], F.relu(d(ins["a"]) @ d(ins["b"]) + d(ins["bias"])), "f32")
    rn = rmsnorm(100, dtype="f32")
    ins = random_inputs(rn, {"B": 1}, seed=13)
    out = launch(rn, {"block": 32}, dict(ins), {"B": 1})
    close(out["y"], _rms_ref(ins["x"], ins["w"], 1e-6), "f32")
