"""Rule: the blocked elementwise kernel (a `tail` input over the output's trailing axes, halves of the last axis
read and joined: rotary's chain) equals torch in the generated C and in Triton (under its CPU interpreter).

Sizes are small and odd where they may be (rows 5, sequence 7, half 3); outputs start poisoned with NaN so an
element never written fails; references are torch in float64 on the same (rounded) inputs."""

from __future__ import annotations

import re

import pytest
import torch

from emmy_core.codegen.c import CBackend
from emmy_core.codegen.triton_gen import TritonBackend
from emmy_core.dtypes import torch_dtype
from emmy_core.graph.kernels import blocked_elementwise
from emmy_core.ir import Program
from emmy_core.ir.builders import Dim
from emmy_core.ir.errors import IRError

ROTARY = "((x0 * x1) + (cat(neg(hi(x0)), lo(x0)) * x2))"
TOL = {"f32": 1e-5, "f16": 1e-2}


@pytest.fixture(scope="module")
def c_backend(tmp_path_factory: pytest.TempPathFactory) -> CBackend:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("EMMY_BUILD_CACHE", str(tmp_path_factory.mktemp("halves_cache")))
        yield CBackend()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


CASES = {  # name: (expr, kinds, mid, reference over float64 inputs shaped as the graph has them)
    "rotary": (ROTARY, {"x0": "full", "x1": "tail", "x2": "tail"}, 7,
               lambda x: x["x0"] * x["x1"] + rotate_half(x["x0"]) * x["x2"]),
    "rotary, dynamic sequence": (ROTARY, {"x0": "full", "x1": "tail", "x2": "tail"}, Dim("M", hint=4),
                                 lambda x: x["x0"] * x["x1"] + rotate_half(x["x0"]) * x["x2"]),
    "halves, col and row": ("cat(hi(x0) * x2, lo(x0)) + x1", {"x0": "full", "x1": "col", "x2": "row"}, None,
                            lambda x: torch.cat((x["x0"][..., 3:] * x["x2"], x["x0"][..., :3]), -1) + x["x1"]),
    "tail without halves": ("x0 * x1", {"x0": "full", "x1": "tail"}, 7, lambda x: x["x0"] * x["x1"]),
}


def graph_inputs(kinds: dict[str, str], mid: object, dtype: str) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(0)
    shape = {"full": (5, 7, 6) if mid else (5, 6), "tail": (7, 6), "col": (6,), "row": (5, 7, 1) if mid else (5, 1)}
    return {n: torch.randn(shape[k], generator=gen).to(torch_dtype(dtype)) for n, k in kinds.items()}


def launch(build, program: Program, x: dict[str, torch.Tensor], mid: object) -> torch.Tensor:  # type: ignore[no-untyped-def]
    sizes = {"B": 5, **({"M": 7} if isinstance(mid, Dim) else {})}
    bufs = {n: t.reshape([5 if a == "B" else 7 if a == "M" else program.axis(a).extent for a in program.buffer(n).shape])
            for n, t in x.items()}
    y = torch.full([5, *([7] if mid else []), 6], float("nan"), dtype=next(iter(x.values())).dtype)
    bufs["y"] = y.view([5 if a == "B" else 7 if a == "M" else program.axis(a).extent for a in program.buffer("y").shape])
    build(program)(bufs, sizes)
    return y


@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("case", list(CASES))
def test_blocked_elementwise_equals_torch_in_c_and_triton(c_backend: CBackend, case: str, dtype: str) -> None:
    expr, kinds, mid, ref = CASES[case]
    program = blocked_elementwise(expr, kinds, dtype, 8, mid, 6)
    assert [a.name for a in program.axes][-2:] == (["P", "H"] if "cat" in expr else ["M", "C"])
    x = graph_inputs(kinds, mid, dtype)
    want = ref({n: t.double() for n, t in x.items()})
    for knobs in ({}, {"vec": 4, "threads": 2}):
        got = launch(lambda p, k=knobs: c_backend.build(p, k, "rank"), program, x, mid)
        torch.testing.assert_close(got.double(), want, rtol=TOL[dtype], atol=TOL[dtype])
    got = launch(lambda p: TritonBackend().build(p, {"block": 16}, "deploy"), program, x, mid)
    torch.testing.assert_close(got.double(), want, rtol=TOL[dtype], atol=TOL[dtype])


@pytest.mark.parametrize(("expr", "fault"), [
    ("lo(x0)", "the result is a half"),
    ("cat(x0, lo(x0))", "cat() of a value that is not a half"),
    ("lo(x0) + x0", "mixes a half with a whole"),
    ("lo(lo(x0))", "of a half"),
])
def test_halves_that_do_not_meet_again_are_refused(expr: str, fault: str) -> None:
    with pytest.raises(IRError, match=re.escape(fault)):
        blocked_elementwise(expr, {"x0": "full"}, "f32", 8, None, 6)


PERMUTED = {  # name: (expr, kinds, perms, outer, output shape, inputs as the graph has them -> reference)
    "rotary of a transposed q": (
        ROTARY, {"x0": "full", "x1": "tail", "x2": "tail"}, {"x0": (0, 2, 1, 3)}, (Dim("D0", hint=2), 3, Dim("D2", 4)),
        (2, 3, 5, 6), {"x0": (2, 5, 3, 6), "x1": (5, 6), "x2": (5, 6)},
        lambda x: x["x0"].transpose(1, 2) * x["x1"] + rotate_half(x["x0"].transpose(1, 2)) * x["x2"]),
    "a permuted input beside a row and a col": (
        "x0 * x1 + x2", {"x0": "full", "x1": "row", "x2": "col"}, {"x0": (1, 0, 2)}, (4, Dim("D1", hint=2)),
        (4, 3, 6), {"x0": (3, 4, 6), "x1": (4, 3, 1), "x2": (6,)},
        lambda x: x["x0"].transpose(0, 1) * x["x1"] + x["x2"]),
}


@pytest.mark.parametrize("case", list(PERMUTED))
def test_permuted_elementwise_reads_its_input_through_the_permutation_in_c_and_triton(c_backend: CBackend,
                                                                                     case: str) -> None:
    from emmy_core.graph.kernels import permuted_elementwise

    expr, kinds, perms, outer, out, shapes, ref = PERMUTED[case]
    program = permuted_elementwise(expr, kinds, perms, "f32", outer, 6, 2)
    gen = torch.Generator().manual_seed(1)
    x = {n: torch.randn(shape, generator=gen) for n, shape in shapes.items()}
    want = ref({n: t.double() for n, t in x.items()})
    sizes = {f"D{i}": out[i] for i, d in enumerate(outer) if isinstance(d, Dim)}
    ext = {**{f"D{i}": out[i] for i in range(len(outer))}, **{a.name: a.extent for a in program.axes if a.extent}}
    for build in (lambda p: c_backend.build(p, {"vec": 4, "threads": 2}, "rank"),
                  lambda p: TritonBackend().build(p, {"block": 16}, "deploy")):
        y = torch.full(out, float("nan"))
        bufs = {n: t.reshape([ext[a] for a in program.buffer(n).shape]) for n, t in x.items()}
        bufs["y"] = y.view([ext[a] for a in program.buffer("y").shape])
        build(program)(bufs, sizes)
        torch.testing.assert_close(y.double(), want, rtol=1e-5, atol=1e-5)


def test_a_permutation_that_moves_the_last_axis_is_refused() -> None:
    from emmy_core.graph.kernels import permuted_elementwise

    with pytest.raises(IRError, match="keep the last axis last"):
        permuted_elementwise("x0 * 2.0", {"x0": "full"}, {"x0": (0, 2, 1)}, "f32", (3, 4), 6, 0)
