"""Rules of the generated C: nothing unvalidated reaches it, IR names only prefixed, exact constants and
roundings, the IR's sequential meaning kept under parallel schedules, knobs read as documented.

Exactness is checked bit for bit: single f16/bf16/f32 operations against torch's CPU results
(computed in float and rounded once, as the C does), double-to-f16 casts against numpy's direct
rounding, double-to-bf16 casts and bf16 constants against an exact rational rounding, integer
arithmetic against torch's wrapping int32.
"""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch

from emmy_core.codegen.backend import BuildError
from emmy_core.codegen.c import CBackend
from emmy_core.codegen.c_expr import _bf16_bits
from emmy_core.dtypes import torch_dtype
from emmy_core.ir import (
    Axis,
    Binary,
    Buffer,
    Cast,
    Const,
    Extent,
    IRError,
    Let,
    Load,
    Loop,
    Program,
    Reduce,
    Ref,
    Store,
    Unary,
    parse,
)
from emmy_core.ir.builders import Dim, elementwise, layernorm, matmul, rmsnorm, softmax
from emmy_core.ir.family import MatmulShape, classify
from emmy_core.ir.interpret import run
from emmy_core.ir.vocab import float_misfit

SCHED = {"vec": 8, "threads": 2}


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CBackend:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("c_source_cache")))
        yield CBackend()


def launch(backend: CBackend, program: Program, ins: dict[str, torch.Tensor], sizes: dict[str, int],
           knobs: dict[str, object] | None = None) -> dict[str, torch.Tensor]:
    ext = {a.name: a.extent or sizes[a.name] for a in program.axes}
    bufs = dict(ins)
    for b in program.outputs:
        shape = [ext[a] for a in b.shape]
        fill = torch.iinfo(torch_dtype(b.dtype)).min if b.dtype.startswith("i") else float("nan")
        bufs[b.name] = torch.full(shape, fill, dtype=torch_dtype(b.dtype))
    backend.build(program, SCHED if knobs is None else knobs, "rank")(bufs, sizes)
    return {b.name: bufs[b.name] for b in program.outputs}


def ew(name: str, dtype: str, values: dict[str, object], in_dtype: str | None = None) -> Program:
    """One-axis kernel: inputs x, z (of in_dtype); one output per entry of `values` (an expression of x, z)."""
    t = in_dtype or dtype
    outs = [Buffer(k, "out", dtype, ("N",)) for k in values]
    body = tuple(Store(k, ("i",), v) for k, v in values.items())  # type: ignore[arg-type]
    return Program(name, (Axis("N", None, 8),), (Buffer("x", "in", t, ("N",)), Buffer("z", "in", t, ("N",)), *outs),
                   (Loop("i", "N", body),))


X, Z = Load("x", ("i",)), Load("z", ("i",))


# ---- nothing unvalidated reaches the source -----------------------------------------------------

def _hostile() -> list[Program]:
    ax, x = (Axis("N", 4),), Buffer("x", "in", "f32", ("N",))

    def prog(name: str = "k", y: str = "y", let: str = "t", dtype: str = "f32", op: str = "exp") -> Program:
        body = (Loop("i", "N", (Let(let, "f32", Unary(op, Load("x", ("i",)))),
                                Store(y, ("i",), Ref(let)))),)
        return Program(name, ax, (x, Buffer(y, "out", dtype, ("N",))), body)

    return [
        prog(name='k(void){system("id");}int f'),
        prog(y="y[0]=1;/*"),
        prog(let="t=0;}//"),
        prog(dtype="float;system"),
        prog(op="system"),
        prog(name="__builtin_trap"),
        prog(let="int"),
    ]


@pytest.mark.parametrize("index", range(len(_hostile())))
def test_a_hostile_name_cannot_reach_the_source(tmp_path, monkeypatch, index: int) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EMMY_BUILD_CACHE", str(tmp_path))
    be = CBackend()
    program = _hostile()[index]
    with pytest.raises(IRError):
        be.source(program, {}, "rank")
    with pytest.raises(IRError):
        be.build(program, {}, "rank")
    assert be.compiles == 0 and not any(tmp_path.iterdir())


def test_a_constant_that_is_not_a_number_cannot_be_made() -> None:
    with pytest.raises((ValueError, TypeError)):
        Const("f32", "1); system(")  # type: ignore[arg-type]


BUILDERS = [matmul(Dim("T", 8), 24, 40, epilogue=("bias", "gelu"), batch=(Dim("G", 2),), b_transposed=True),
            rmsnorm(64, prologue=("residual",)), softmax(50, scale=0.5), layernorm(30, dtype="bf16"),
            elementwise("silu(a) * b + 1", cols=16)]


@pytest.mark.parametrize("program", BUILDERS, ids=lambda p: p.name[:24])
def test_ir_names_appear_in_c_only_with_a_prefix(program: Program) -> None:
    src = CBackend().source(program, SCHED, "deploy")
    body = src[src.index("int emmy_kernel("):]
    names = {a.name for a in program.axes} | {b.name for b in program.buffers}

    def walk(stmts) -> None:  # type: ignore[no-untyped-def]
        for s in stmts:
            if isinstance(s, Loop):
                names.add(s.var)
                walk(s.body)
            elif isinstance(s, Reduce):
                names.update((s.name, s.var))
            elif isinstance(s, Let):
                names.add(s.name)

    walk(program.body)
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", body))
    assert not names & words, f"bare IR names in the C body: {sorted(names & words)}"
    shape = classify(program)
    unused = {shape.k_var} if isinstance(shape, MatmulShape) else set()  # the micro-kernel steps its own k
    for name in names - unused:
        assert any(f"{p}{name}" in words for p in ("n_", "b_", "i_", "v_")), name


# ---- exact arithmetic, casts and constants ------------------------------------------------------

@pytest.mark.parametrize("dtype", ["f16", "bf16", "f32"])
def test_single_operations_round_once_like_torch(backend: CBackend, dtype: str) -> None:
    prog = ew(f"ops_{dtype}", dtype, {"y_add": Binary("add", X, Z), "y_mul": Binary("mul", X, Z),
                                      "y_div": Binary("div", X, Z), "y_sqrt": Unary("sqrt", Unary("abs", X)),
                                      "y_max": Binary("max", X, Z)})
    gen = torch.Generator().manual_seed(1)
    n = 999
    x = (torch.randn(n, generator=gen, dtype=torch.float64) * 300).to(torch_dtype(dtype))
    z = (torch.randn(n, generator=gen, dtype=torch.float64) * 3).to(torch_dtype(dtype))
    out = launch(backend, prog, {"x": x, "z": z}, {"N": n})
    # torch's own f32 sqrt is an approximation; the correctly rounded root is the double one rounded once
    root = x.double().abs().sqrt().to(torch_dtype(dtype))
    want = {"y_add": x + z, "y_mul": x * z, "y_div": x / z, "y_sqrt": root, "y_max": torch.maximum(x, z)}
    for k, w in want.items():
        assert torch.equal(out[k], w), k


def test_f16_and_bf16_conversions_are_exact_over_every_bit_pattern(backend: CBackend) -> None:
    """f16 -> f32 for all 65536 patterns; f32 -> f16 / bf16 for floats across every binade and at ties."""
    widen = ew("widen_f16", "f32", {"y": Cast("f32", X)}, in_dtype="f16")
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.float16)
    got = launch(backend, widen, {"x": bits, "z": bits}, {"N": bits.numel()})["y"]
    want = bits.float()
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan) and torch.equal(got[~nan], want[~nan])
    narrow = ew("narrow_f32", "f16", {"y": Cast("f16", X)}, in_dtype="f32")
    narrow = Program(narrow.name, narrow.axes, (*narrow.buffers, Buffer("g", "out", "bf16", ("N",))),
                     (Loop("i", "N", (Store("y", ("i",), Cast("f16", X)), Store("g", ("i",), Cast("bf16", Z)))),))
    gen = torch.Generator().manual_seed(5)
    mags = torch.exp2(torch.empty(200_000, dtype=torch.float64).uniform_(-30, 18, generator=gen))
    ties = torch.arange(0, 2**16, dtype=torch.int32).to(torch.float32) * 2.0**-25  # every f16 subnormal tie
    halves = (bits.float()[~nan].double() + torch.rand(bits.numel() - int(nan.sum()), generator=gen,
                                                         dtype=torch.float64) * 2.0**-11)
    x = torch.cat([mags, -mags, ties.double(), halves, torch.tensor([65504.0, 65519.99, 65520.0, 1e30])]).float()
    x = torch.cat([x, torch.tensor([float("inf"), -float("inf"), float("nan")])])
    out = launch(backend, narrow, {"x": x, "z": x}, {"N": x.numel()})
    for got, want in ((out["y"], x.to(torch.float16)), (out["g"], x.to(torch.bfloat16))):
        nan = want.isnan()
        assert torch.equal(got.isnan(), nan) and torch.equal(got[~nan], want[~nan])


HALFWAY = [1 + 2**-8 + 2**-30, 1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8 + 2**-40), 3.3961e38, 3.4e38, 1e-40,
           1e-45, 65519.99, 65520.0, 2**-24 * 0.5000001, 0.1, -0.0, 1e300, math.pi]


def test_casts_from_double_round_once(backend: CBackend) -> None:
    prog = ew("casts_f64", "f16", {"h": Cast("f16", X)}, in_dtype="f64")
    prog = Program(prog.name, prog.axes, (*prog.buffers, Buffer("g", "out", "bf16", ("N",))),
                   (Loop("i", "N", (Store("h", ("i",), Cast("f16", X)), Store("g", ("i",), Cast("bf16", X)),
                                    Store("bits", ("i",), Cast("f32", Z)))),))
    prog = Program(prog.name, prog.axes, (*prog.buffers, Buffer("bits", "out", "f32", ("N",))), prog.body)
    vals = torch.tensor(HALFWAY + [-v for v in HALFWAY], dtype=torch.float64)
    out = launch(backend, prog, {"x": vals, "z": vals}, {"N": len(vals)})
    with np.errstate(over="ignore"):  # numpy rounds a double to f16 once; overflow gives inf, as wanted
        np.testing.assert_array_equal(out["h"].numpy(), vals.numpy().astype(np.float16))
    want_bits = [_bf16_bits(float(v)) for v in vals]
    got_bits = out["g"].view(torch.int16).numpy().astype(np.uint16).tolist()
    assert got_bits == want_bits
    assert out["bits"].tolist() == vals.to(torch.float32).tolist()


def test_bf16_rounding_of_constants_matches_torch_on_float_values() -> None:
    rng = np.random.default_rng(0)
    vals = np.concatenate([rng.standard_normal(2000).astype(np.float32) * 1e3,
                           np.array([1 + 2**-8, 1 + 3 * 2**-8, 3.4e38, 1e-40, np.inf, -np.inf], np.float32)])
    want = torch.from_numpy(vals).to(torch.bfloat16).view(torch.int16).numpy().astype(np.uint16).tolist()
    assert [_bf16_bits(float(v)) for v in vals] == want


def test_constants_are_printed_exactly(backend: CBackend) -> None:
    every = [0.1, -1e-6, 1 / 3, 6.02e23, 5e-324, math.inf, -math.inf, 65504.0, 1e5]
    for dtype in ("f16", "bf16", "f32", "f64"):
        values = [v for v in every if float_misfit(dtype, v) is None]  # a constant its type cannot hold is refused
        for v in set(every) - set(values):
            with pytest.raises(ValueError, match=f"constant .* {dtype}"):
                Const(dtype, v)
        prog = ew(f"consts_{dtype}", dtype, {f"c{i}": Const(dtype, v) for i, v in enumerate(values)})
        x = torch.zeros(1, dtype=torch_dtype(dtype))
        out = launch(backend, prog, {"x": x, "z": x}, {"N": 1}, {"threads": 1})
        for i, v in enumerate(values):
            got = out[f"c{i}"]
            if dtype == "f16":
                with np.errstate(over="ignore"):
                    want = torch.from_numpy(np.array([v]).astype(np.float16))
            elif dtype == "bf16":
                want = torch.tensor([_bf16_bits(v)], dtype=torch.int32).to(torch.int16).view(torch.bfloat16)
            else:
                want = torch.tensor([v], dtype=torch_dtype(dtype))
            assert torch.equal(got, want), (dtype, v, got, want)


def test_integer_arithmetic_wraps_like_torch(backend: CBackend) -> None:
    big = Const("i32", 2**31 - 1)
    prog = ew("wrap_i32", "i32", {"y_add": Binary("add", X, big), "y_mul": Binary("mul", X, big),
                                  "y_sub": Binary("sub", Const("i32", -(2**31)), X), "y_min": Binary("min", X, Z)})
    x = torch.tensor([-3, -1, 0, 1, 2, 1000], dtype=torch.int32)
    z = torch.tensor([5, -7, 0, 1, -2, 2000], dtype=torch.int32)
    out = launch(backend, prog, {"x": x, "z": z}, {"N": 6})
    assert torch.equal(out["y_add"], x + (2**31 - 1))
    assert torch.equal(out["y_mul"], x * (2**31 - 1))
    assert torch.equal(out["y_sub"], torch.full_like(x, -(2**31)) - x)
    assert torch.equal(out["y_min"], torch.minimum(x, z))


def test_an_extent_is_the_run_time_size(backend: CBackend) -> None:
    mean = Binary("div", X, Cast("f32", Extent("N")))
    prog = ew("extent_f32", "f32", {"y": mean, "n": Cast("f32", Binary("mul", Extent("N"), Cast("i64", Z)))})
    x, z = torch.randn(11), torch.tensor([float(v) for v in range(11)])
    out = launch(backend, prog, {"x": x, "z": z}, {"N": 11})
    assert torch.equal(out["y"], x / 11)
    assert out["n"].tolist() == [11.0 * v for v in range(11)]


# ---- the IR's sequential meaning under parallel schedules ---------------------------------------

def _against_interpreter(backend: CBackend, text: str, sizes: dict[str, int], reference=None) -> str:  # type: ignore[no-untyped-def]
    prog = parse(text)
    rng = np.random.default_rng(3)
    ins = {b.name: rng.standard_normal([a.extent or sizes[a.name] for a in (prog.axis(n) for n in b.shape)])
           .astype(np.float32) for b in prog.inputs}
    want = run(prog, ins, sizes) if reference is None else reference(ins)
    got = launch(backend, prog, {k: torch.from_numpy(v) for k, v in ins.items()}, sizes)
    for k, w in want.items():
        np.testing.assert_array_equal(got[k].numpy(), w)
    src = backend.source(prog, SCHED, "rank")
    return src[src.index("int emmy_kernel("):]  # the kernel itself, after the prelude's helpers


def test_a_loop_whose_iterations_write_the_same_element_keeps_sequential_order(backend: CBackend) -> None:
    src = _against_interpreter(backend, """kernel last { axis N = dyn(3) axis M = 37 in x: f32[N, M] out y: f32[N]
      for i in N { for j in M { y[i] = x[i, j] } } }""", {"N": 5})
    assert "omp parallel for schedule(static)" in src and "omp simd" not in src  # over i only, j in order


def _cross_reference(ins: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Plain sequential loops (the reference interpreter runs each store over the whole nest instead)."""
    x, z = ins["x"], ins["z"]
    y = np.full_like(x, np.nan)
    for i in range(x.shape[0]):
        for k in range(x.shape[1]):
            y[i, k] = x[i, k]
            y[k, i] = z[i, k]
    return {"y": y}


def test_stores_that_cross_iterations_are_not_parallelised(backend: CBackend) -> None:
    src = _against_interpreter(backend, """kernel cross { axis N = 9 in x: f32[N, N] in z: f32[N, N] out y: f32[N, N]
      for i in N { for k in N { y[i, k] = x[i, k] y[k, i] = z[i, k] } } }""", {}, _cross_reference)
    assert "omp parallel" not in src and "omp simd" not in src


def test_windowed_reductions_clip_to_the_axis(backend: CBackend) -> None:
    _against_interpreter(backend, """kernel win { axis B = dyn(2) axis P = 3 axis H = 10 in x: f32[B, H]
      out y: f32[B, P] out z: f32[B, P]
      for i in B { for p in P {
        reduce s: f32 = sum(j in H[p * 4 : 4]) x[i, j]
        reduce m: f32 = max(j in H[p * 4 + 1 : 4]) x[i, j]
        y[i, p] = s z[i, p] = m } } }""", {"B": 3})


# ---- knobs --------------------------------------------------------------------------------------

MM = matmul(Dim("T", 8), 48, 96, dtype="f32", epilogue=("relu",))


def test_knobs_shape_the_source() -> None:
    be = CBackend()
    src = be.source(MM, {"tile_m": 16, "tile_n": 32, "tile_k": 64, "vec": 8, "unroll": 4, "threads": 3}, "deploy")
    for fragment in ("em_blk * 16", "em_n0 += 32", "em_pc += 64", "vector_size(32)", "em_ir += 4", "em_c3_0 =",
                     ": 3)))", "schedule(dynamic, 1)"):  # a micro-kernel of 4 rows x 8 f32 columns
        assert fragment in src, fragment
    assert "typedef float em_vec;" in be.source(MM, {"vec": 1, "unroll": 4}, "deploy")  # one lane: scalars
    wide = be.source(MM, {"vec": 32, "unroll": 2}, "deploy")  # 32 f32 lanes: two 64-byte vectors per row
    assert "vector_size(64)" in wide and "em_c1_1 =" in wide and "em_c2_0" not in wide
    narrow = be.source(MM, {"vec": 32, "unroll": 2, "simd": 256}, "deploy")  # the same in 256-bit registers
    assert "vector_size(32)" in narrow and "em_c1_3 =" in narrow and "em_c1_4" not in narrow
    assert "em_blk * 18" in be.source(MM, {"tile_m": 16, "unroll": 6, "vec": 8}, "deploy")  # M_c up to 6 x 3
    assert "em_n0 = em_blk * 32" in be.source(MM, {"tile_n": 32, "vec": 8, "par_axis": "n"}, "deploy")
    assert "omp parallel" not in be.source(MM, {"threads": 1}, "deploy")
    assert "simdlen" not in be.source(softmax(64), {"vec": 1}, "deploy")
    assert "reduction(+:v_se)" in be.source(softmax(64), {"vec": 16}, "deploy")


def test_missing_knobs_take_the_documented_defaults_and_unused_ones_are_ignored() -> None:
    be = CBackend()
    assert be.source(MM, {}, "deploy") == be.source(
        MM, {"tile_m": 32, "tile_n": 64, "tile_k": 256, "vec": 1, "unroll": 1}, "deploy")
    prog = elementwise("a * b", cols=40)
    assert be.source(prog, {"vec": 4, "tile_m": 8, "tile_k": 2}, "deploy") == be.source(prog, {"vec": 4}, "deploy")


@pytest.mark.parametrize("knobs", [{"block_m": 64}, {"tile_m": 3}, {"split:K": 2}, {"extern.X": 1},
                                   {"threads": 0}, {"vec": "8"}])
def test_knobs_outside_the_cpu_vocabulary_are_refused(knobs: dict[str, object]) -> None:
    with pytest.raises(BuildError, match="cpu knobs refused"):
        CBackend().source(MM, knobs, "deploy")


def test_an_unknown_setting_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown setting"):
        CBackend().source(MM, {}, "fast")
