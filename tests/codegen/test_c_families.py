"""Rule: every family's generated C, and every piece of a split run in order, equals torch.

Kernels are built by the cpu backend (setting `rank`, -O1, to keep the suite quick; one
case per family also at `deploy`) into a module-scoped cache folder, and run on CPU
tensors. Shapes are drawn from seeded generators so that sizes are not multiples of the
tiles (partial tiles on both edges). Knob settings per kernel: a seeded sample of the
candidate pool for this machine (its first, safe option included) plus a hand setting
with tiny tiles, simd, unroll and two threads (for matmul also one with two vectors per
register-block row and a row group that does not divide the tile). References are torch in float64 on the
same (rounded) inputs; outputs start poisoned with NaN so an element never written
fails. Tolerances (rtol = atol): f16 1e-2, bf16 2e-2, f32 1e-4, f64 1e-10.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from emmy_core.codegen.c import CBackend
from emmy_core.dtypes import torch_dtype
from emmy_core.graph.decisions import split_k, split_rows
from emmy_core.ir import Program
from emmy_core.ir.builders import Dim, elementwise, layernorm, matmul, rmsnorm, softmax
from emmy_core.ir.sizes import extents
from emmy_core.targets.cpu import probe_cpu

TOL = {"f16": 1e-2, "bf16": 2e-2, "f32": 1e-4, "f64": 1e-10}
HAND_MATMUL = {"tile_m": 4, "tile_n": 8, "tile_k": 16, "vec": 8, "unroll": 4, "threads": 2}
HAND_WIDE = {"tile_m": 8, "tile_n": 64, "tile_k": 32, "vec": 32, "unroll": 3, "threads": 2}  # 2 vectors a row
HAND_ROW = {"vec": 8, "unroll": 2, "threads": 2}
HAND_EW = {"vec": 4, "threads": 2}


@pytest.fixture(scope="module")
def backend(tmp_path_factory: pytest.TempPathFactory) -> CBackend:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("c_build_cache")))
        yield CBackend()


def pool(kernel: Program, seed: int, n: int = 2) -> list[dict[str, object]]:
    """A seeded sample of this machine's candidate pool (the first option always included)."""
    try:
        from emmy_core.knobs.candidates import sample_candidates  # type: ignore[import-not-found]
    except ImportError:
        from emmy_core.knobs.space import sample_candidates
    return [dict(k) for k in sample_candidates(kernel, probe_cpu(), n, seed)]


def inputs(program: Program, sizes: dict[str, int], seed: int) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    ext = extents(program, sizes)
    return {b.name: torch.randn([ext[a] for a in b.shape], generator=gen, dtype=torch.float64).to(torch_dtype(b.dtype))
            for b in program.inputs}


def launch(backend: CBackend, program: Program, knobs: dict[str, object], env: dict[str, torch.Tensor],
           sizes: dict[str, int], setting: str = "rank") -> dict[str, torch.Tensor]:
    """Runs `program` on what it reads from `env`; its outputs (NaN-poisoned first) are added to env."""
    dyn = {a.name for a in program.dynamic_axes}
    sz = {k: v for k, v in sizes.items() if k in dyn}
    ext = extents(program, sz)
    bufs = {b.name: env[b.name] for b in program.inputs}
    for b in program.outputs:
        bufs[b.name] = torch.full([ext[a] for a in b.shape], float("nan"), dtype=torch_dtype(b.dtype))
    backend.build(program, knobs, setting)(bufs, sz)
    out = {b.name: bufs[b.name] for b in program.outputs}
    env.update(out)
    return out


def close(got: torch.Tensor, want: torch.Tensor, dtype: str) -> None:
    torch.testing.assert_close(got.double(), want.double(), rtol=TOL[dtype], atol=TOL[dtype])


def d(x: torch.Tensor) -> torch.Tensor:
    return x.double()


# ---- matmul with epilogue -----------------------------------------------------------------------

def epilogue_ref(acc: torch.Tensor, steps: tuple[str, ...], env: dict[str, torch.Tensor]) -> torch.Tensor:
    for step in steps:
        if step == "bias":
            acc = acc + d(env["bias"])
        elif step == "residual":
            acc = acc + d(env["residual"])
        elif step == "mul":
            acc = acc * d(env["gate"])
        elif step.startswith("scale:"):
            acc = acc * float(step[6:])
        elif step == "gelu_tanh":
            acc = F.gelu(acc, approximate="tanh")
        else:
            acc = {"relu": F.relu, "silu": F.silu, "gelu": F.gelu}[step](acc)
    return acc


MATMULS = [  # dtype, epilogue, batched, b transposed
    ("f32", ("bias", "gelu"), False, False),
    ("f16", ("silu", "mul"), False, True),
    ("bf16", ("bias", "relu", "residual"), False, False),
    ("f64", ("gelu_tanh",), False, False),
    ("f32", ("scale:0.125",), True, True),
    ("f16", (), True, False),
]


@pytest.mark.parametrize("case", range(len(MATMULS)))
def test_matmul_with_epilogue_equals_torch(backend: CBackend, case: int) -> None:
    dtype, steps, batched, bt = MATMULS[case]
    rng = np.random.default_rng(case)
    m, n, k = int(rng.integers(5, 40)), int(rng.integers(9, 70)), int(rng.integers(17, 90))
    batch = (Dim("G", 2), 3) if batched else ()
    prog = matmul(Dim("T", 16), n, k, dtype=dtype, epilogue=steps, batch=batch, b_transposed=bt)
    sizes = {"T": m, **({"G": 2} if batched else {})}
    env = inputs(prog, sizes, seed=case)
    b = d(env["b"])
    want = epilogue_ref(d(env["a"]) @ (b.transpose(-1, -2) if bt else b), steps, env)
    for knobs in [*pool(prog, case), HAND_MATMUL, HAND_WIDE]:
        close(launch(backend, prog, knobs, env, sizes)["y"], want, dtype)


def test_matmul_at_the_deploy_setting_equals_torch(backend: CBackend) -> None:
    prog = matmul(Dim("T", 16), 37, 53, dtype="f32", epilogue=("bias", "silu"))
    env = inputs(prog, {"T": 19}, seed=7)
    want = epilogue_ref(d(env["a"]) @ d(env["b"]), ("bias", "silu"), env)
    close(launch(backend, prog, HAND_MATMUL, env, {"T": 19}, "deploy")["y"], want, "f32")


# ---- row reductions -----------------------------------------------------------------------------

ROWS = [("rmsnorm", "f32"), ("rmsnorm_res", "f16"), ("softmax", "bf16"), ("softmax", "f32"),
        ("layernorm", "f64"), ("layernorm", "f16")]


def row_case(kind: str, dtype: str, hidden: int) -> Program:
    if kind == "rmsnorm":
        return rmsnorm(hidden, dtype=dtype)
    if kind == "rmsnorm_res":
        return rmsnorm(hidden, dtype=dtype, prologue=("residual",))
    if kind == "softmax":
        return softmax(hidden, dtype=dtype, scale=0.37)
    return layernorm(hidden, dtype=dtype)


def row_ref(kind: str, env: dict[str, torch.Tensor], dtype: str) -> dict[str, torch.Tensor]:
    x = d(env["x"])
    if kind == "rmsnorm_res":
        h = env["x"] + env["res"]  # added in the kernel's dtype, as the model does
        x = d(h)
        return {"y": x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * d(env["w"]), "h": h}
    if kind == "rmsnorm":
        return {"y": x * torch.rsqrt((x * x).mean(-1, keepdim=True) + 1e-6) * d(env["w"])}
    if kind == "softmax":
        return {"y": torch.softmax(x * 0.37, dim=-1)}
    return {"y": F.layer_norm(x, (x.shape[-1],), d(env["w"]), d(env["bias"]), eps=1e-5)}


@pytest.mark.parametrize("case", range(len(ROWS)))
def test_row_reductions_equal_torch(backend: CBackend, case: int) -> None:
    kind, dtype = ROWS[case]
    rng = np.random.default_rng(100 + case)
    hidden, rows = int(rng.integers(20, 300)), int(rng.integers(1, 9))
    prog = row_case(kind, dtype, hidden)
    env = inputs(prog, {"B": rows}, seed=case)
    want = row_ref(kind, env, dtype)
    for knobs in [*pool(prog, case), HAND_ROW]:
        got = launch(backend, prog, knobs, env, {"B": rows})
        close(got["y"], want["y"], dtype)
        if "h" in want:  # one f16 add per element: bit-exact with torch's
            assert torch.equal(got["h"], want["h"])


# ---- elementwise chains -------------------------------------------------------------------------

CHAINS = {
    "silu(a)*b": lambda v: F.silu(v["a"]) * v["b"],
    "gelu(a) + max(b, 0.5) / (abs(c) + 1)": lambda v: F.gelu(v["a"]) + torch.clamp(v["b"], min=0.5) / (v["c"].abs() + 1),
    "tanh(exp(a) - log(abs(b) + 0.25)) + sigmoid(a) * erf(b) - rsqrt(abs(a) + 2) + pow(abs(b) + 1, 1.5)":
        lambda v: torch.tanh(v["a"].exp() - (v["b"].abs() + 0.25).log()) + torch.sigmoid(v["a"]) * torch.erf(v["b"])
        - torch.rsqrt(v["a"].abs() + 2) + (v["b"].abs() + 1) ** 1.5,
}


@pytest.mark.parametrize("case, dtype", [(0, "f16"), (1, "bf16"), (2, "f32"), (0, "f64")])
def test_elementwise_chains_equal_torch(backend: CBackend, case: int, dtype: str) -> None:
    text = list(CHAINS)[case]
    cols, rows = 13 + 17 * case, 1 + case
    prog = elementwise(text, dtype=dtype, cols=cols)
    env = inputs(prog, {"B": rows}, seed=case)
    want = CHAINS[text]({k: d(v) for k, v in env.items()})
    for knobs in [*pool(prog, case), HAND_EW]:
        close(launch(backend, prog, knobs, env, {"B": rows})["y"], want, dtype)


# ---- decisions: the pieces of a split, run in order ---------------------------------------------

def run_decision(backend: CBackend, decision, env: dict[str, torch.Tensor], sizes: dict[str, int],  # type: ignore[no-untyped-def]
                 knobs_of) -> None:  # type: ignore[no-untyped-def]
    for i, piece in enumerate(decision.pieces):
        launch(backend, piece, knobs_of(piece, i), env, sizes)


@pytest.mark.parametrize("dtype, parts, steps", [("f32", 4, ("bias", "gelu")), ("f16", 3, ("residual",))])
def test_split_k_pieces_through_c_equal_torch(backend: CBackend, dtype: str, parts: int,
                                              steps: tuple[str, ...]) -> None:
    prog = matmul(Dim("T", 8), 23, 301, dtype=dtype, epilogue=steps)
    dec = split_k(prog, parts)
    env = inputs(prog, {"T": 7}, seed=parts)
    want = epilogue_ref(d(env["a"]) @ d(env["b"]), steps, env)
    for which in (0, 1):  # the pool's safe default, then the hand setting with partial tiles
        env = {k: v for k, v in env.items() if k in {b.name for b in prog.inputs}}
        run_decision(backend, dec, env, {"T": 7},
                     lambda p, i, w=which: pool(p, i, 1)[0] if w == 0 else HAND_MATMUL if i == 0 else HAND_ROW)
        close(env["y"], want, dtype)


@pytest.mark.parametrize("kind, dtype, parts", [("softmax", "f32", 3), ("layernorm", "f32", 4),
                                                ("rmsnorm_res", "f16", 2)])
def test_split_rows_pieces_through_c_equal_torch(backend: CBackend, kind: str, dtype: str, parts: int) -> None:
    prog = row_case(kind, dtype, 1001)
    dec = split_rows(prog, parts)
    env = inputs(prog, {"B": 5}, seed=parts)
    want = row_ref(kind, env, dtype)
    run_decision(backend, dec, env, {"B": 5}, lambda p, i: HAND_ROW if i == 0 else pool(p, i, 1)[0])
    for name, ref in want.items():
        close(env[name], ref, dtype)


def test_windowed_reduce_parts_cover_the_row_exactly(backend: CBackend) -> None:
    """A split whose last window is short (1001 = 3 x 334 - 1): every partial matches its slice."""
    prog = softmax(1001, dtype="f64")
    part = split_rows(prog, 3).pieces[0]
    env = inputs(part, {"B": 2}, seed=0)
    out = launch(backend, part, HAND_ROW, env, {"B": 2})
    x = env["x"]
    for p, (lo, hi) in enumerate(((0, 334), (334, 668), (668, 1001))):
        torch.testing.assert_close(out["mx_part"][:, p], x[:, lo:hi].max(-1).values, rtol=0, atol=0)
        want = torch.exp(x[:, lo:hi] - x[:, lo:hi].max(-1, keepdim=True).values).sum(-1)
        torch.testing.assert_close(out["se_part"][:, p], want, rtol=1e-12, atol=1e-12)
    assert math.isfinite(float(out["se_part"].sum()))
