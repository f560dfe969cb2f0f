"""Rule: the kernels the interpreter checks are the same source that compiles for a real GPU.

Triton compiles ahead of time for a named CUDA architecture without a GPU (its LLVM and
ptxas ship in the wheel), so every family, and the pieces of a split, are compiled here
for sm_90 (H100/H200) from the very source the interpreter tests run. The `mma` knob is
checked in the PTX: tensor-core instructions by default (wgmma on sm_90, mma.sync on
sm_80), none at all under mma=none; and kernels over contiguous rows load with 16-byte
vector instructions only (pointers specialised as aligned, as Triton's launcher does).
"""

from __future__ import annotations

import pytest

from emmy_core.codegen.backend import BuildError
from emmy_core.codegen.triton_gen import compile_for
from emmy_core.graph.decisions import split_k, split_rows
from emmy_core.ir.builders import Dim, elementwise, layernorm, matmul, rmsnorm, softmax
from tests.codegen.test_triton_families import dynrow_program, ints_program

MM = matmul(Dim("T", 512), 1024, 1024, epilogue=("bias", "gelu"))
MM_KNOBS = {"block_m": 64, "block_n": 64, "block_k": 32, "num_warps": 4, "num_stages": 3}


def test_matmul_uses_tensor_cores_by_default_and_none_under_mma_none() -> None:
    hopper = compile_for(MM, MM_KNOBS, arch=90)
    assert hopper["bytes_cubin"] > 0 and hopper["wgmma"] > 0
    ampere = compile_for(MM, MM_KNOBS, arch=80)
    assert ampere["wgmma"] == 0 and ampere["mma_sync"] > 0
    plain = compile_for(MM, {**MM_KNOBS, "mma": "none"}, arch=90)
    assert plain["wgmma"] == 0 and plain["mma_sync"] == 0


@pytest.mark.parametrize("program,knobs", [
    (rmsnorm(4096, dtype="f16", prologue=("residual",)), {"block": 1024, "num_warps": 8}),
    (softmax(4096, dtype="f32"), {"block": 4096, "num_warps": 16}),
    (layernorm(1000, dtype="bf16"), {"block": 256}),
    (elementwise("gelu_tanh(a) * b + pow(a, 3)", dtype="f16", cols=4096), {"block": 2048}),
    (matmul(Dim("S", 128), Dim("S", 128), Dim("D", extent=64), batch=(Dim("B", 4), Dim("NH", extent=16)),
            b_transposed=True, epilogue=("scale:0.125",)), {"block_m": 64, "block_n": 64, "block_k": 64}),
    (dynrow_program(), {"block": 256}),
    (ints_program(), {"block": 1024}),
    (matmul(Dim("T", 64), 256, 256, dtype="f64", epilogue=("bias", "gelu")),
     {"block_m": 32, "block_n": 32, "block_k": 16}),
], ids=["rmsnorm", "softmax", "layernorm_bf16", "elementwise", "attention_scores", "dynamic_row", "integers", "f64"])
def test_every_family_compiles_for_sm90(program, knobs) -> None:
    facts = compile_for(program, knobs, arch=90)
    assert facts["bytes_cubin"] > 0
    if program.name.startswith(("rmsnorm", "softmax", "ew_")):  # contiguous rows: 16-byte vector loads only
        assert facts["vector_loads"] > 0 and facts["scalar_loads"] == 0, facts


def test_a_dynamic_size_of_one_compiles_as_triton_specialises_it() -> None:
    for program, knobs in ((MM, MM_KNOBS), (rmsnorm(4096, dtype="f16"), {"block": 4096})):
        assert compile_for(program, knobs, arch=90, unit_sizes=True)["bytes_cubin"] > 0


def test_split_pieces_compile_for_sm90() -> None:
    for piece, knobs in zip(split_k(MM, 4).pieces, (MM_KNOBS, {"block": 1024}), strict=True):
        facts = compile_for(piece, knobs, arch=90)
        assert facts["bytes_cubin"] > 0
    assert facts["vector_loads"] > 0 and facts["scalar_loads"] == 0, facts  # the combine reads the parts flat
    for piece in split_rows(softmax(4096, dtype="f32"), 2).pieces:
        assert compile_for(piece, {"block": 1024}, arch=90)["bytes_cubin"] > 0


def test_shared_memory_over_the_cards_limit_is_a_build_error() -> None:
    facts = compile_for(MM, MM_KNOBS, arch=90)
    assert facts["shared_bytes"] > 0
    with pytest.raises(BuildError, match="shared memory"):
        compile_for(MM, MM_KNOBS, arch=90, max_shared_bytes=facts["shared_bytes"] - 1)
