"""The library route's build (`emmy_core.codegen.library`): a matrix-product kernel run as torch runs it.

Rules: it computes what the kernel says (the reference interpreter's answer) for every matrix product of
every reference model, epilogue included; it is launched through the same interface as Emmy's builds
(checked call, prepared launch, `over`), sees a caller's tensor with the kernel's own shape, and writes a
plain product straight into its output; knobs that are not the route, or a kernel without one, are refused.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from emmy_core.codegen.backend import BuildError, LaunchError
from emmy_core.codegen.c import CBackend
from emmy_core.codegen.library import LibraryBuilt, library_build
from emmy_core.codegen.triton_gen import TritonBackend
from emmy_core.dtypes import torch_dtype
from emmy_core.graph.decisions import split_k
from emmy_core.graph.models import MODEL_NAMES
from emmy_core.graph.pipeline import compile_model
from emmy_core.ir import interpret
from emmy_core.ir.builders import Dim, matmul
from emmy_core.ir.sizes import extents
from emmy_core.knobs import view
from emmy_core.knobs.route import library_knobs, routes

SIZES = {"B": 2, "S": 5}


def _products() -> list[tuple[str, object]]:
    out: dict[str, tuple[str, object]] = {}
    for name in MODEL_NAMES:
        for dtype in (torch.float32, torch.float16):
            for k in compile_model(name, SIZES, dtype).kernels:
                if routes(view(k.program)) and k.kernel_id not in out:
                    out[k.kernel_id] = (f"{name}:{k.program.name}", k.program)
    return sorted(out.values(), key=lambda p: p[0])


PRODUCTS = _products()


def _tol(dtype: str) -> dict[str, float]:
    return {"rtol": 2e-2, "atol": 2e-2} if dtype in ("f16", "bf16") else {"rtol": 1e-4, "atol": 1e-4}


def test_every_reference_model_has_products_with_a_library_route() -> None:
    assert len(PRODUCTS) >= 10, [p[0] for p in PRODUCTS]


@pytest.mark.parametrize("label,program", PRODUCTS, ids=[p[0] for p in PRODUCTS])
def test_the_library_route_computes_what_the_kernel_says(label: str, program) -> None:  # type: ignore[no-untyped-def]
    """Every product of the reference models, epilogue and all, against the reference interpreter."""
    sizes = {a.name: 3 + i for i, a in enumerate(program.dynamic_axes)}
    inputs = interpret.random_inputs(program, sizes, seed=1, scale=0.5)
    want = interpret.run(program, inputs, sizes)
    built = library_build(program, library_knobs())
    ext = extents(program, sizes)
    buffers = {n: torch.from_numpy(np.ascontiguousarray(v)) for n, v in inputs.items()}
    for b in program.outputs:
        buffers[b.name] = torch.full(tuple(ext[a] for a in b.shape), float("nan"), dtype=torch_dtype(b.dtype))
    built(buffers, sizes)
    for b in program.outputs:
        got = buffers[b.name].float().numpy()
        np.testing.assert_allclose(got, want[b.name].astype(np.float32), err_msg=label, **_tol(b.dtype))


def test_a_prepared_launch_sees_a_callers_tensor_with_the_kernels_own_shape() -> None:
    """A model's (B, S, K) activation is the (T, K) operand of a flattened product: the same memory."""
    prog = matmul(Dim("T", 8), 24, 16, dtype="f32", b_transposed=True, epilogue=("bias", "gelu"))
    built = library_build(prog, library_knobs())
    g = torch.Generator().manual_seed(0)
    x, w, bias = torch.randn(2, 3, 16, generator=g), torch.randn(24, 16, generator=g), torch.randn(24, generator=g)
    y = torch.full((2, 3, 24), float("nan"))
    launch = built.prepare({"T": 6}, {"b": w, "bias": bias})
    assert set(launch.buffers) == {"a", "y"}
    launch({"a": x, "y": y})
    torch.testing.assert_close(y, torch.nn.functional.gelu(x @ w.T + bias))
    over = launch.over({"y": y}, {"a": "input"})
    x2 = torch.randn(2, 3, 16, generator=g)
    over({"input": x2})
    torch.testing.assert_close(y, torch.nn.functional.gelu(x2 @ w.T + bias))


def test_a_plain_product_is_written_by_the_library_into_its_output() -> None:
    prog = matmul(Dim("S", 8), 32, 16, dtype="f32", batch=(Dim("B", 1),))
    built = library_build(prog, library_knobs())
    assert built._direct == "y"  # no pass after the product
    a, b = torch.randn(2, 5, 16), torch.randn(2, 16, 32)
    y = torch.full((2, 5, 32), float("nan"))
    built({"a": a, "b": b, "y": y}, {"B": 2, "S": 5})
    torch.testing.assert_close(y, a @ b)


def test_a_checked_call_refuses_a_buffer_of_the_wrong_shape_naming_it() -> None:
    prog = matmul(Dim("T", 8), 24, 16, dtype="f32")
    built = library_build(prog, library_knobs())
    with pytest.raises(LaunchError, match="buffer 'a'"):
        built({"a": torch.randn(4, 15), "b": torch.randn(16, 24), "y": torch.empty(4, 24)}, {"T": 4})


def test_knobs_that_are_not_the_route_or_a_kernel_without_one_are_refused() -> None:
    prog = matmul(Dim("T", 8), 24, 16, dtype="f32")
    with pytest.raises(BuildError, match="not the library route"):
        library_build(prog, {"tile_m": 16})
    with pytest.raises(BuildError, match="exactly library, library_version"):
        library_build(prog, {**library_knobs(), "tile_m": 16})
    with pytest.raises(BuildError, match="the library's kernel changes with its release"):
        library_build(prog, {"library": "torch", "library_version": "1.0.0"})
    partial = split_k(matmul(Dim("T", 8), 24, 64, dtype="f32"), 2).pieces[0]  # exists because Emmy split it
    with pytest.raises(BuildError, match="no library route"):
        library_build(partial, library_knobs())


def test_both_backends_build_the_route_and_neither_writes_source_for_it() -> None:
    prog = matmul(Dim("T", 8), 24, 16, dtype="f32")
    for backend in (CBackend(), TritonBackend()):
        assert isinstance(backend.build(prog, library_knobs(), "deploy"), LibraryBuilt)
        with pytest.raises(BuildError, match=r"has no (C|Triton) source"):
            backend.source(prog, library_knobs(), "deploy")
