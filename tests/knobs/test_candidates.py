"""Candidate enumeration: one pure, deterministic, ordered pool per (kernel, card); the first is the default."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from emmy_core.ir import Extern
from emmy_core.ir.builders import Dim, day_one_kernels, elementwise, matmul, rmsnorm, softmax
from emmy_core.knobs import candidate_options, candidates, option_problem, sample_candidates, view
from emmy_core.knobs.instructions import tile_instruction
from emmy_core.knobs.space import first_option
from emmy_core.knobs.validity import pipeline_buffers
from emmy_core.knobs.vocab import SCHEDULE_KNOBS, canonical_knobs, knobs_problem
from emmy_core.targets import Card, load_table, probe_cpu, resolve_card

ROOT = Path(__file__).resolve().parents[2]
GPUS = tuple(load_table().values())
CPUS = (
    probe_cpu(),
    Card("Tiny Arm Core x1", "cpu", "aarch64", "", (), "test card", cores=1, simd_bits=128, l2_kib=256.0),
    Card("Big x86 Part x64", "cpu", "x86_64", "", (), "test card", cores=64, simd_bits=512, l1d_kib=48.0,
         l2_kib=2048.0, l3_kib=262144.0, freq_mhz=3000.0),
    Card("AVX2 Only Part x2", "cpu", "x86_64", "", (), "test card (Zen 3: AVX2 + FMA, no AVX-512)", cores=2,
         simd_bits=256, l1d_kib=32.0, l2_kib=512.0, freq_mhz=2445.0),
    Card("SSE Only Part x4", "cpu", "x86_64", "", (), "test card (128-bit, 16 registers)", cores=4, simd_bits=128),
    Card("Undescribed CPU", "cpu", "x86_64", "", (), "test card: nothing known but the target"),
)
KERNELS = (
    *(k for _, k in day_one_kernels()),
    matmul(Dim("T", 64), 256, 128, dtype="f32"),
    matmul(32, 48, 40, dtype="f64", epilogue=("relu",)),
    matmul(Dim("T", 8), 512, 256, dtype="bf16"),
    matmul(8, 16, 16),
    rmsnorm(hidden=65536, dtype="f32", batch_hint=2),
    softmax(16, batch_hint=4),
    elementwise("a*b", cols=16, batch_hint=1),
)
SCRIPT = """
import json
from emmy_core.ir.builders import Dim, matmul, rmsnorm
from emmy_core.knobs import candidates
from emmy_core.targets import resolve_card
out = []
for card in ("NVIDIA H200", "AMD Instinct MI250X", "NVIDIA GeForce RTX 2080 Ti"):
    for k in (matmul(Dim("T", 512), 1024, 1024, epilogue=("bias", "gelu")), rmsnorm(hidden=4096)):
        out.append([json.dumps(c, sort_keys=False) for c in candidates(k, resolve_card(card))])
print(json.dumps(out))
"""


def _pools_here() -> list[list[str]]:
    out = []
    for card in ("NVIDIA H200", "AMD Instinct MI250X", "NVIDIA GeForce RTX 2080 Ti"):
        for k in (matmul(Dim("T", 512), 1024, 1024, epilogue=("bias", "gelu")), rmsnorm(hidden=4096)):
            out.append([json.dumps(c, sort_keys=False) for c in candidates(k, resolve_card(card))])
    return out


def test_candidates_are_the_same_list_in_two_processes() -> None:
    here = _pools_here()
    for seed in ("0", "12345"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, env=env, capture_output=True, text=True,
                              check=True, timeout=120)
        assert json.loads(done.stdout) == here  # same options, same order, same key order
    assert all(len(pool) > 1 for pool in here)


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_first_option_is_valid_on_every_card(kernel) -> None:
    firsts = set()
    for card in GPUS + CPUS:
        pool = candidates(kernel, card)
        assert pool, (kernel.name, card.name)
        assert option_problem(kernel, card, pool[0]) is None
        assert pool[0] == first_option(view(kernel), card)
        if card.target == "cuda":
            firsts.add(canonical_knobs(pool[0]))
    assert len(firsts) == 1  # the GPU default is one assignment, whatever the card


ATTENTION = (matmul(Dim("S", 128), Dim("S", 128), 64, batch=(Dim("B", 8), 4), b_transposed=True,
                    epilogue=("scale:0.125",)),
             matmul(Dim("S", 128), 64, Dim("S", 128), batch=(Dim("B", 8), 4)))


@pytest.mark.parametrize("kernel", [*KERNELS, *ATTENTION], ids=lambda k: k.name)
def test_the_first_cpu_option_is_valid_on_every_cpu_card_and_keeps_the_fma_pipes_busy(kernel) -> None:
    """The default an untuned machine runs: valid on AVX-512, AVX2-only, 128-bit and undescribed CPUs, sized
    from the card (its registers as wide as the card's SIMD, at least 8 accumulator registers where N allows)."""
    v = view(kernel)
    for card in CPUS:
        first = candidates(kernel, card)[0]
        assert option_problem(kernel, card, first) is None, (card.name, first)
        if v.family != "matmul":
            continue
        simd = card.simd_bits or 128
        assert first["simd"] == simd
        if first.get("dot") == "amx":  # AMX tiles hold the accumulators: only a bf16 product on a card with them
            assert "amx_bf16" in card.tensor_cores and v.operand_dtype == "bf16", (card.name, first)
            continue
        lanes = min(simd, first["vec"] * v.compute_bits) // v.compute_bits
        wide_n = (v.cap("n") or 1024) >= 2 * simd // v.compute_bits
        if wide_n and (v.cap("m") or 16) >= 8:
            assert first["unroll"] * first["vec"] // lanes >= 8, (card.name, first)


def test_every_option_is_in_the_cards_target_vocabulary() -> None:
    cards = [load_table()[n] for n in ("NVIDIA H200", "NVIDIA GeForce RTX 2080 Ti", "AMD Instinct MI250X",
                                       "AMD Radeon PRO W7800")]
    for kernel in KERNELS:
        for card in (*cards, CPUS[0]):
            for option in candidate_options(kernel, card):
                assert knobs_problem(option.knobs) is None
                assert all(SCHEDULE_KNOBS[n].target == card.target for n in option.knobs)
                assert option.problem == option_problem(kernel, card, option.knobs)
                assert option.canonical == canonical_knobs(option.knobs)  # a schedule id is its digest


def test_gpu_matmul_space_is_a_few_hundred_triton_style_options() -> None:
    k = matmul(Dim("T", 4096), 4096, 4096)
    pool = candidates(k, resolve_card("NVIDIA H100 80GB HBM3"))
    assert 200 <= len(pool) <= 1000
    for name in ("block_m", "block_n", "block_k", "num_warps", "num_stages", "acc", "mma"):
        assert len({o.get(name) for o in pool}) >= 2, name
    assert {"wgmma_m64n256k16", "wgmma_m64n128k16", "wgmma_m64n32k16", "mma_m16n8k16"} <= {o.get("mma") for o in pool}


def test_options_exceeding_shared_memory_are_absent_on_a_small_card_present_on_a_large_one() -> None:
    k = matmul(Dim("T", 4096), 4096, 4096)
    small, large = resolve_card("NVIDIA GeForce RTX 2080 Ti"), resolve_card("NVIDIA H100 80GB HBM3")

    def smem_kib(o: dict, card: Card) -> float:
        path = tile_instruction(card, o["block_m"], o["block_n"], o["block_k"], o["num_warps"], "f16")
        return pipeline_buffers(card, path, o["num_stages"]) * (o["block_m"] + o["block_n"]) * o["block_k"] * 2 / 1024

    big = [o for o in candidates(k, large) if smem_kib(o, small) > small.smem_per_block_kib]
    assert big, "the large card offers tiles that need more than the small card's shared memory"
    small_pool = {canonical_knobs({n: x for n, x in o.items() if n != "mma"}) for o in candidates(k, small)}
    for o in big:
        assert canonical_knobs({n: x for n, x in o.items() if n != "mma"}) not in small_pool
    marked = [o for o in candidate_options(k, small) if o.problem and "shared memory" in o.problem]
    assert marked and all(smem_kib(o.knobs, small) > small.smem_per_block_kib for o in marked)
    assert all(small.name in o.problem for o in marked)


def test_include_invalid_keeps_the_options_a_card_cannot_build() -> None:
    k = matmul(Dim("T", 4096), 4096, 4096, dtype="f32")
    card = resolve_card("AMD Radeon PRO W6600")
    valid, everything = candidates(k, card), candidates(k, card, include_invalid=True)
    marked = candidate_options(k, card)
    assert len(valid) < len(everything) == len(marked)
    assert [o.knobs for o in marked if o.problem is None] == list(valid)
    assert [o.knobs for o in marked] == list(everything)
    assert all(option_problem(k, card, o) is not None for o in everything if o not in valid)


def test_tensor_core_instruction_follows_the_architecture() -> None:
    k = matmul(Dim("T", 512), 1024, 1024)
    for card in GPUS:
        named = {o["mma"] for o in candidates(k, card) if "mma" in o}
        assert any(n.startswith("wgmma") for n in named) == (card.arch == "hopper"), card.name
        assert any(n.startswith("mfma") for n in named) == card.arch.startswith("cdna"), card.name
        assert named <= {*card.tensor_cores, "none"}
    f32 = matmul(Dim("T", 512), 1024, 1024, dtype="f32")
    assert {o.get("mma") for o in candidates(f32, resolve_card("NVIDIA H200"))} == {None, "none"}  # IEEE, not TF32


def test_kernels_that_share_an_identity_share_a_pool() -> None:
    from emmy_core.ir import kernel_id

    a, b = matmul(Dim("T", 8), 1024, 1024), matmul(Dim("T", 8192), 1024, 1024)
    assert kernel_id(a) == kernel_id(b)
    for card in (resolve_card("NVIDIA L4"), CPUS[0]):
        assert candidates(a, card) == candidates(b, card)


def test_static_extents_bound_the_tiles() -> None:
    k = matmul(8, 16, 16)
    pool = candidates(k, resolve_card("NVIDIA H200"))
    assert all(o["block_m"] == 16 and o["block_n"] == 16 and o["block_k"] == 16 for o in pool)
    small_row = softmax(16, batch_hint=4)
    assert {o["block"] for o in candidates(small_row, resolve_card("NVIDIA H200"))} == {16}


def test_extern_kernels_have_no_emmy_candidates() -> None:
    ext = Extern("Xgemm", (4096, 4096), "0" * 64)
    assert candidates(ext, resolve_card("NVIDIA GeForce RTX 3090")) == ()
    assert sample_candidates(ext, resolve_card("NVIDIA GeForce RTX 3090"), 5, 0) == ()


def test_cpu_candidates_use_the_cpu_vocabulary_within_the_cores() -> None:
    k = matmul(Dim("T", 128), 256, 256, dtype="f32")
    for card in CPUS:
        pool = candidates(k, card)
        assert pool[0]["threads"] == (card.cores or 1)
        assert {o["threads"] for o in pool} <= set(range(1, (card.cores or 1) + 1))
        assert 1 in {o["threads"] for o in pool}
        assert all(o["tile_n"] % o["vec"] == 0 for o in pool)
    big = candidates(k, CPUS[2])
    assert {o["simd"] for o in big} == {512, 256}  # AVX-512 registers, or 256-bit ones
    assert max(o["vec"] for o in big) == 64  # four 512-bit registers of 16 f32 a row
    assert {o["simd"] for o in candidates(k, CPUS[1])} == {128}
    assert max(o["vec"] for o in candidates(k, CPUS[1])) == 16


def test_sample_candidates_is_seeded_ordered_and_keeps_the_first() -> None:
    k = matmul(Dim("T", 512), 1024, 1024)
    card = resolve_card("NVIDIA A100-SXM4-80GB")
    pool = candidates(k, card)
    s1, s2, s3 = (sample_candidates(k, card, 20, seed) for seed in (7, 7, 8))
    assert s1 == s2 and s1 != s3
    assert len(s1) == 20 and s1[0] == pool[0]
    positions = [pool.index(o) for o in s1]
    assert positions == sorted(positions)
    assert sample_candidates(k, card, 1, 3) == (pool[0],)
    assert sample_candidates(k, card, 10**6, 3) == pool
    with pytest.raises(ValueError, match="positive"):
        sample_candidates(k, card, 0, 1)
    with pytest.raises(ValueError, match="seed"):
        sample_candidates(k, card, 3, "x")  # type: ignore[arg-type]
