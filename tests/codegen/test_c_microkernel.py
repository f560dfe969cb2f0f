"""Rules of the packed matmul and the row kernels: every micro-kernel shape equals the f64 reference on odd
sizes; no knob changes a result bit; where the order of accumulation is fixed the results equal the
interpreter's bit for bit; prepared launches equal checked ones and pack their constants once.

Micro-kernel shapes are those the candidate pools offer on the CPU cards the tests describe (AVX-512,
AVX2-only, 128-bit x86 and Arm), for f32 and f64 accumulators. Programs take M, N and K as dynamic axes,
so one build per shape serves every size: M, N and K not multiples of the tile, M = 1, K = 1, K deeper
than one panel. The whole matrix builds at the `rank` setting (-O1, the baseline instruction set: products
rounded, then summed); the card's own first options also build at `deploy` (-O3 -march=native: fused
multiply-adds by the target's instructions, F16C conversions).
"""

from __future__ import annotations

import platform

import numpy as np
import pytest
import torch

from emmy_core.codegen.backend import LaunchError
from emmy_core.codegen.c import CBackend
from emmy_core.codegen.c_schedule import schedule_of
from emmy_core.codegen.c_source import kernel_source
from emmy_core.dtypes import torch_dtype
from emmy_core.ir.builders import Dim, elementwise, matmul, rmsnorm, softmax
from emmy_core.ir.interpret import run
from emmy_core.ir.sizes import extents
from emmy_core.knobs import candidates
from emmy_core.targets import Card, probe_cpu

TOL = {"f16": 1e-2, "bf16": 2e-2, "f32": 1e-4, "f64": 1e-10}
CARDS = (
    Card("AVX-512 Part x2", "cpu", "x86_64", "", (), "test card", cores=2, simd_bits=512, l2_kib=2048.0),
    Card("AVX2 Only Part x2", "cpu", "x86_64", "", (), "test card", cores=2, simd_bits=256, l2_kib=512.0),
    Card("SSE Only Part x2", "cpu", "x86_64", "", (), "test card", cores=2, simd_bits=128, l2_kib=256.0),
    Card("Arm Part x2", "cpu", "aarch64", "", (), "test card", cores=2, simd_bits=128, l2_kib=1024.0),
)
SIZES = [(1, 1, 1), (1, 37, 53), (7, 19, 1), (29, 70, 45)]  # (M, N, K); the last runs two panels (tile_k 32)


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CBackend:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("c_micro_cache")))
        yield CBackend()


def dynamic_matmul(dtype: str, bt: bool = False, epilogue: tuple[str, ...] = ()):  # type: ignore[no-untyped-def]
    return matmul(Dim("T", 16), Dim("N", 16), Dim("K", 16), dtype=dtype, b_transposed=bt, epilogue=epilogue)


def shapes(dtype: str) -> list[tuple[int, int, int]]:
    """(unroll, vec, simd) of every micro-kernel the pools offer on the test cards, first options included."""
    k = dynamic_matmul(dtype)
    return sorted({(o["unroll"], o["vec"], o["simd"]) for c in CARDS for o in candidates(k, c)})


def knobs_of(shape: tuple[int, int, int], **over: object) -> dict[str, object]:
    mr, nr, simd = shape
    return {"tile_m": 16, "tile_n": max(64, nr), "tile_k": 32, "vec": nr, "unroll": mr, "simd": simd,
            "threads": 2, "par_axis": "m", **over}


def operands(dtype: str, m: int, n: int, k: int, bt: bool, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    a = torch.randn(m, k, generator=g, dtype=torch.float64).to(torch_dtype(dtype))
    b = torch.randn(*((n, k) if bt else (k, n)), generator=g, dtype=torch.float64).to(torch_dtype(dtype))
    return a, b


def product(backend: CBackend, prog, knobs, a, b, setting: str = "rank", bt: bool = False) -> torch.Tensor:  # type: ignore[no-untyped-def]
    n = b.shape[0] if bt else b.shape[1]
    y = torch.full((a.shape[0], n), float("nan"), dtype=a.dtype)
    backend.build(prog, knobs, setting)({"a": a, "b": b, "y": y}, {"T": a.shape[0], "N": n, "K": a.shape[1]})
    return y


@pytest.mark.parametrize("dtype", ["f32", "f64"])
def test_every_micro_kernel_shape_equals_the_f64_reference_on_odd_sizes(backend: CBackend, dtype: str) -> None:
    prog = dynamic_matmul(dtype)
    found = shapes(dtype)
    assert len(found) >= 8 and {s[2] for s in found} == {128, 256, 512}
    for m, n, k in SIZES:
        a, b = operands(dtype, m, n, k, False, seed=m * n * k)
        want = a.double() @ b.double()
        first = None
        for shape in found:
            got = product(backend, prog, knobs_of(shape), a, b)
            torch.testing.assert_close(got.double(), want, rtol=TOL[dtype], atol=TOL[dtype])
            if first is None:
                first = got
            assert torch.equal(got, first), (shape, (m, n, k))  # the same bits from every shape


def test_no_knob_changes_a_result_bit(backend: CBackend) -> None:
    """Panel sizes, thread split, thread count and layout of B change where work happens, never the sum."""
    prog = dynamic_matmul("f32", bt=True, epilogue=("bias", "silu"))
    m, n, k = 29, 70, 45
    g = torch.Generator().manual_seed(3)
    a, b = operands("f32", m, n, k, True, seed=5)
    bias = torch.randn(n, generator=g)
    results = []
    for over in ({}, {"tile_m": 32, "tile_k": 16}, {"par_axis": "n", "tile_n": 32}, {"threads": 1},
                 {"tile_k": 64, "tile_n": 32, "par_axis": "n", "threads": 2}):
        kn = knobs_of((6, 16, 256), **over)
        y = torch.full((m, n), float("nan"))
        backend.build(prog, kn, "rank")({"a": a, "b": b, "bias": bias, "y": y}, {"T": m, "N": n, "K": k})
        results.append(y)
    want = torch.nn.functional.silu(a.double() @ b.double().T + bias.double())
    torch.testing.assert_close(results[0].double(), want, rtol=1e-4, atol=1e-4)
    assert all(torch.equal(r, results[0]) for r in results[1:])


def test_the_cards_first_options_at_deploy_equal_the_reference_and_each_other(backend: CBackend) -> None:
    """-march=native: the target's own FMA and F16C; this machine's first option and two others, f16 and f32."""
    card = probe_cpu()
    for dtype in ("f16", "f32"):
        prog = dynamic_matmul(dtype, bt=True, epilogue=("scale:0.5", "relu"))
        pool = candidates(prog, card)
        picks = [pool[0], *[o for o in pool if o["simd"] != pool[0]["simd"]][:1], pool[len(pool) // 2]]
        for m, n, k in [(1, 37, 53), (29, 70, 45)]:
            a, b = operands(dtype, m, n, k, True, seed=k)
            want = torch.relu(0.5 * (a.double() @ b.double().T))
            outs = [product(backend, prog, kn, a, b, "deploy", bt=True) for kn in picks]
            for got in outs:
                torch.testing.assert_close(got.double(), want, rtol=TOL[dtype], atol=TOL[dtype])
                assert torch.equal(got, outs[0])


# ---- bit for bit with the interpreter where the order is fixed -----------------------------------
# The interpreter sums with numpy, sequentially up to 7 terms (pairwise beyond). The matmul adds each
# element's products in increasing k; 16-bit products are exact in f32, so fused or not they equal the
# interpreter's; f32 products at `rank` (the baseline x86-64 instruction set has no FMA) are rounded
# first, as the interpreter rounds them. Row kernels at vec=1 add in sequential order.

def _interp(prog, ins: dict[str, torch.Tensor], sizes: dict[str, int]) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    arrays = {n: (t.float().numpy() if t.dtype == torch.bfloat16 else t.numpy()) for n, t in ins.items()}
    return run(prog, arrays, sizes)


def _launch(backend: CBackend, prog, ins, sizes, knobs, setting):  # type: ignore[no-untyped-def]
    ext = extents(prog, sizes)
    bufs = dict(ins)
    for b in prog.outputs:
        bufs[b.name] = torch.full([ext[a] for a in b.shape], float("nan"), dtype=torch_dtype(b.dtype))
    backend.build(prog, knobs, setting)(bufs, sizes)
    return {b.name: bufs[b.name] for b in prog.outputs}


def _equal_bits(got: torch.Tensor, want: np.ndarray) -> None:
    mine = got.float().numpy() if got.dtype == torch.bfloat16 else got.numpy()
    np.testing.assert_array_equal(mine, want)


@pytest.mark.parametrize("dtype, setting", [("f16", "deploy"), ("bf16", "deploy"), ("f16", "rank"),
                                            ("f32", "rank"), ("f64", "rank")])
def test_matmul_equals_the_interpreter_bit_for_bit_where_the_order_is_fixed(backend: CBackend, dtype: str,
                                                                           setting: str) -> None:
    if setting == "rank" and dtype in ("f32", "f64") and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("the baseline instruction set of this machine fuses multiply-adds; the interpreter does not")
    prog = dynamic_matmul(dtype, epilogue=("bias", "residual"))
    pool = candidates(prog, probe_cpu())
    for m, n, k in [(1, 5, 1), (9, 37, 4), (13, 70, 7)]:
        g = torch.Generator().manual_seed(m + n + k)
        ins = {"a": torch.randn(m, k, generator=g, dtype=torch.float64).to(torch_dtype(dtype)),
               "b": torch.randn(k, n, generator=g, dtype=torch.float64).to(torch_dtype(dtype)),
               "bias": torch.randn(n, generator=g, dtype=torch.float64).to(torch_dtype(dtype)),
               "residual": torch.randn(m, n, generator=g, dtype=torch.float64).to(torch_dtype(dtype))}
        sizes = {"T": m, "N": n, "K": k}
        want = _interp(prog, ins, sizes)["y"]
        for knobs in (pool[0], pool[-1], knobs_of((3, 8, 256))):
            _equal_bits(_launch(backend, prog, ins, sizes, knobs, setting)["y"], want)


@pytest.mark.parametrize("dtype", ["f16", "f32", "bf16"])
def test_row_and_elementwise_kernels_equal_the_interpreter_bit_for_bit(backend: CBackend, dtype: str) -> None:
    """Sequential row sums (vec=1) of up to 7 terms, and chains without library calls, at deploy."""
    cases = [(rmsnorm(7, dtype=dtype), {"vec": 1, "unroll": 1, "threads": 2}, 5),
             (rmsnorm(5, dtype=dtype, prologue=("residual",)), {"vec": 1, "unroll": 2, "threads": 1}, 3),
             (elementwise("a * b + c / (abs(a) + 1)", dtype=dtype, cols=37), {"vec": 16, "threads": 2}, 4)]
    for prog, knobs, rows in cases:
        g = torch.Generator().manual_seed(rows)
        ext = extents(prog, {"B": rows})
        ins = {b.name: torch.randn([ext[a] for a in b.shape], generator=g, dtype=torch.float64).to(torch_dtype(b.dtype))
               for b in prog.inputs}
        want = _interp(prog, ins, {"B": rows})
        got = _launch(backend, prog, ins, {"B": rows}, knobs, "deploy")
        for name, w in want.items():
            _equal_bits(got[name], w)


# ---- rows: one conversion and one exp per element -------------------------------------------------

def test_softmax_computes_exp_once_per_element_and_equals_torch(backend: CBackend) -> None:
    prog = softmax(130, dtype="f16", scale=0.125)
    src = backend.source(prog, {"vec": 16, "threads": 2}, "deploy")
    body = src[src.index("int emmy_kernel("):]
    assert body.count("expf(") == 1  # the sum keeps exp(x - max) per element; the store reads it back
    assert "em_h2f_run(" in body  # the row converted in once
    assert body.count("em_scale_f2h_run(") == 1 and "em_f2h_run(" not in body  # out once, inside the scale pass
    x = torch.randn(6, 130, dtype=torch.float64).half()
    got = _launch(backend, prog, {"x": x}, {"B": 6}, {"vec": 16, "threads": 2}, "deploy")["y"]
    torch.testing.assert_close(got.double(), torch.softmax(x.double() * 0.125, -1), rtol=1e-2, atol=1e-3)


def test_half_conversions_of_whole_runs_are_exact_over_every_bit_pattern(backend: CBackend) -> None:
    """The row form's runs (F16C at deploy on x86) widen all 65536 f16 patterns exactly and round like torch."""
    widen = elementwise("a * 1", dtype="f16", cols=256)
    bits = torch.arange(-(2**15), 2**15, dtype=torch.int32).to(torch.int16).view(torch.float16).reshape(256, 256)
    got = _launch(backend, widen, {"a": bits}, {"B": 256}, {"vec": 16, "threads": 2}, "deploy")["y"]
    nan = bits.isnan()
    assert torch.equal(got.isnan(), nan) and torch.equal(got[~nan], bits[~nan])
    narrow = elementwise("a * 0.5", dtype="f16", cols=1000)
    x = torch.cat([torch.randn(500 * 1000, dtype=torch.float64) * 10.0 ** torch.randint(-9, 6, (500 * 1000,)),
                   torch.arange(1, 500 * 1000 + 1, dtype=torch.float64) * 2.0**-25]).half()
    got = _launch(backend, narrow, {"a": x.reshape(1000, 1000)}, {"B": 1000}, {"vec": 16, "threads": 2},
                  "deploy")["y"]
    assert torch.equal(got.reshape(-1), (x.float() * 0.5).half())


# ---- prepared launches ------------------------------------------------------------------------------

def test_a_prepared_launch_equals_the_checked_one_and_packs_its_constant_once(backend: CBackend) -> None:
    prog = matmul(Dim("T", 16), 70, 45, dtype="f16", b_transposed=True, epilogue=("silu",))
    knobs = candidates(prog, probe_cpu())[0]
    built = backend.build(prog, knobs, "deploy")
    a, b = operands("f16", 13, 70, 45, True, seed=1)
    y1, y2 = torch.empty(13, 70, dtype=torch.float16), torch.empty(13, 70, dtype=torch.float16)
    built({"a": a, "b": b, "y": y1}, {"T": 13})
    launch = built.prepare({"T": 13}, {"b": b})
    assert launch.buffers == ("a", "y")
    launch({"a": a, "y": y2})
    assert torch.equal(y1, y2)
    b.zero_()  # packed once: the launch reads its panels, not the tensor
    launch({"a": a, "y": y2})
    assert torch.equal(y1, y2)
    plain = built.prepare({"T": 13})  # nothing constant: B is packed at every launch, as checked ones do
    y3 = torch.empty_like(y1)
    plain({"a": a, "b": b, "y": y3})
    assert not y3.isnan().any() and not torch.equal(y3, y1)


def test_prepare_checks_what_it_binds_once(backend: CBackend) -> None:
    prog = rmsnorm(48, dtype="f32")
    built = backend.build(prog, {"vec": 8, "threads": 1}, "rank")
    w = torch.randn(48)
    with pytest.raises(LaunchError, match="constants must be input buffers; y is not"):
        built.prepare({"B": 2}, {"y": torch.empty(2, 48)})
    with pytest.raises(LaunchError, match="'w' has shape"):
        built.prepare({"B": 2}, {"w": torch.randn(47)})
    with pytest.raises(LaunchError, match="no size given"):
        built.prepare({}, {"w": w})
    launch = built.prepare({"B": 2}, {"w": w})
    x, y = torch.randn(2, 48), torch.empty(2, 48)
    launch({"x": x, "y": y})
    torch.testing.assert_close(y, x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * w)



def test_the_bench_times_the_launch_a_compile_makes(backend: CBackend) -> None:
    """Weights (inputs with no dynamic axis) are bound and packed once; activations go per call."""
    prog = matmul(Dim("T", 16), 70, 45, dtype="f32", b_transposed=True, epilogue=("bias",))
    built = backend.build(prog, candidates(prog, probe_cpu())[0], "rank")
    a, b = operands("f32", 9, 70, 45, True, seed=2)
    bias, y = torch.randn(70), torch.empty(9, 70)
    run_it = backend.timed_launch(built, {"a": a, "b": b, "bias": bias, "y": y}, {"T": 9})
    b.zero_()
    bias.zero_()  # bound, not packed: read at each launch
    run_it()
    torch.testing.assert_close(y.double(), a.double() @ operands("f32", 9, 70, 45, True, seed=2)[1].double().T,
                               rtol=1e-4, atol=1e-4)


# ---- 16-bit panels ----------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", ["f16", "bf16"])
@pytest.mark.parametrize("bt", [False, True])
@pytest.mark.parametrize("setting", ["rank", "deploy"])
def test_a_16_bit_b_is_packed_as_16_bit_panels_and_gives_the_widened_products_bits(
        backend: CBackend, dtype: str, bt: bool, setting: str) -> None:
    """Panels of a 16-bit B keep its values (half the bytes a pass streams: a decode step's projection is
    bound by them), widened as the micro-kernel loads them; widening is exact, so every sum is the one over
    B widened to f32 beforehand, bit for bit, whatever the load (F16C, AVX2 shifts or the scalar one)."""
    shape = shapes("f32")[0]
    knobs = knobs_of(shape)
    half, wide = dynamic_matmul(dtype, bt), dynamic_matmul("f32", bt)
    source = kernel_source(half, schedule_of(knobs))
    assert "uint16_t *restrict em_bp" in source and "EM_LOAD_B" in source
    for m, n, k in SIZES:
        a, b = operands(dtype, m, n, k, bt, seed=m + n + k)
        got = product(backend, half, knobs, a, b, setting, bt)
        want = product(backend, wide, knobs, a.float(), b.float(), setting, bt)
        assert torch.equal(got, want.to(got.dtype)), (m, n, k)
