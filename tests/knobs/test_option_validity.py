"""Static validity of an option against a card: shared memory, threads, registers, instructions, accumulator."""

from __future__ import annotations

import pytest

from emmy_core.ir import Extern
from emmy_core.ir.builders import Dim, elementwise, matmul, rmsnorm
from emmy_core.knobs import instruction_features, option_problem
from emmy_core.targets import Card, resolve_card

MM16 = matmul(Dim("T", 512), 1024, 1024)
MM32 = matmul(Dim("T", 512), 1024, 1024, dtype="f32")
MM64 = matmul(64, 64, 64, dtype="f64")
ROW = rmsnorm(hidden=8192, dtype="f32")
CPU = Card("Test CPU x4", "cpu", "x86_64", "", (), "test card", cores=4, simd_bits=256, l2_kib=1024.0)


def mm(**over: object) -> dict[str, object]:
    return {"block_m": 64, "block_n": 64, "block_k": 32, "num_warps": 4, "num_stages": 2, "group_m": 8,
            "acc": "f32", **over}


def test_shared_memory_per_block_is_pipeline_buffers_times_tiles() -> None:
    # wgmma tiles keep one buffer per stage, mma and FMA tiles one fewer (measured on an H200).
    knobs = mm(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=4)  # 32 KiB of f16 per buffer
    assert option_problem(MM16, resolve_card("NVIDIA H100 PCIe"), knobs) is None  # wgmma: 4 x 32 KiB
    assert option_problem(MM16, resolve_card("NVIDIA RTX A4000"), knobs) is None  # mma: 3 x 32 = 96 of 99 KiB
    problem = option_problem(MM16, resolve_card("NVIDIA GeForce RTX 2080 Ti"), knobs)
    assert problem is not None and "shared memory 96 KiB (3 buffers" in problem and "64 KiB per block" in problem
    assert option_problem(MM16, resolve_card("NVIDIA GeForce RTX 2080 Ti"), {**knobs, "num_stages": 3}) is None
    big = mm(block_m=256, block_n=128, block_k=128, num_warps=8, num_stages=4)
    h200 = resolve_card("NVIDIA H200")
    assert "shared memory 384 KiB (4 buffers" in option_problem(MM16, h200, big)
    assert option_problem(MM16, h200, {**big, "num_stages": 2}) is None  # 192 KiB: compiles on an H200
    fma = mm(block_m=32, block_n=128, block_k=128, num_warps=8, num_stages=3)  # f32 operands: 80 KiB a buffer
    assert option_problem(MM32, h200, fma) is None  # 2 x 80 KiB: compiles on an H200
    assert "shared memory 240 KiB (3 buffers" in option_problem(MM32, h200, {**fma, "num_stages": 4})
    # AMD is held to one buffer per stage: 64 x 64 x 32 f32 at 5 stages needs 80 KiB of a 64 KiB LDS
    assert "(5 buffers" in option_problem(MM32, resolve_card("AMD Instinct MI250X"), mm(num_stages=5))


def test_threads_per_block_are_warps_times_the_cards_warp_size() -> None:
    knobs = {"block": 8192, "num_warps": 32}
    assert option_problem(ROW, resolve_card("NVIDIA H200"), knobs) is None  # 32 x 32 = 1024 threads
    problem = option_problem(ROW, resolve_card("AMD Instinct MI250X"), knobs)
    assert problem is not None and "2048 threads exceed 1024" in problem  # 32 x 64-wide wavefronts


def test_register_estimate_refuses_accumulators_that_would_spill() -> None:
    card = resolve_card("NVIDIA L40S")
    assert "would spill" in option_problem(MM16, card, mm(block_m=256, block_n=128, num_warps=4, block_k=16))
    assert option_problem(MM16, card, mm(block_m=256, block_n=128, num_warps=8, block_k=16)) is None
    assert "would spill" in option_problem(ROW, card, {"block": 8192, "num_warps": 1})
    # FMA tiles hold their operands in registers: 128x32x128 f32 on 2 warps spilled 278 registers on an H200
    h200 = resolve_card("NVIDIA H200")
    assert "would spill" in option_problem(MM32, h200, mm(block_m=128, block_n=32, block_k=128, num_warps=2))
    # 512 threads leave 128 registers each: 256x128x32 f32 on 16 warps spilled 18 on an H200
    assert "exceed 65536 per SM" in option_problem(
        MM32, h200, mm(block_m=256, block_n=128, block_k=32, num_warps=16, num_stages=3))
    # a wgmma tile reads its operands in place: only the accumulator counts
    assert option_problem(MM16, h200, mm(block_m=128, block_n=256, block_k=64, num_warps=8)) is None


def test_wgmma_only_on_hopper_mfma_only_on_cdna() -> None:
    wg = mm(block_m=128, block_n=128, num_warps=8, mma="wgmma_m64n128k16")
    assert option_problem(MM16, resolve_card("NVIDIA H200"), wg) is None
    assert "has no wgmma_m64n128k16" in option_problem(MM16, resolve_card("NVIDIA A100-SXM4-80GB"), wg)
    mf = mm(mma="mfma_32x32x8")
    assert option_problem(MM16, resolve_card("AMD Instinct MI250X"), mf) is None
    assert "has no mfma_32x32x8" in option_problem(MM16, resolve_card("NVIDIA H200"), mf)
    assert "has no mfma_32x32x8" in option_problem(MM16, resolve_card("AMD Radeon PRO W6600"), mf)
    assert "multiple of 4 warps" in option_problem(MM16, resolve_card("NVIDIA H200"),
                                                   {**wg, "block_m": 64, "num_warps": 2})
    assert "not a multiple" in option_problem(MM16, resolve_card("NVIDIA H200"),
                                              {**wg, "block_n": 64, "block_m": 64, "num_warps": 4})
    assert "takes f16/bf16 operands" in option_problem(MM32, resolve_card("NVIDIA H200"), mm(mma="mma_m16n8k16"))
    assert option_problem(MM16, resolve_card("NVIDIA L4"), mm(mma="none")) is None


def test_accumulator_type_fits_the_operands() -> None:
    h200 = resolve_card("NVIDIA H200")
    assert option_problem(MM16, h200, mm(acc="f16")) is None
    assert "acc=f16 needs f16 operands" in option_problem(MM32, h200, mm(acc="f16"))
    assert "acc is not decided" in option_problem(MM16, h200, {k: v for k, v in mm().items() if k != "acc"})
    f64 = {k: v for k, v in mm(block_k=16).items() if k != "acc"}
    assert option_problem(MM64, h200, f64) is None
    assert "narrower than the f64" in option_problem(MM64, h200, mm(block_k=16))
    assert "accumulates in f32, not f16" in option_problem(
        MM16, resolve_card("AMD Instinct MI250X"), mm(acc="f16", mma="mfma_32x32x8"))


def test_knobs_must_be_the_familys_in_the_cards_vocabulary() -> None:
    h200 = resolve_card("NVIDIA H200")
    assert "(a cpu knob)" in option_problem(MM16, h200, {**mm(), "threads": 4})
    assert "unknown knob" in option_problem(MM16, h200, {**mm(), "blockm": 4})
    assert "'block_k' is not decided" in option_problem(MM16, h200, {k: v for k, v in mm().items() if k != "block_k"})
    assert "not one a row kernel" in option_problem(ROW, h200, {"block": 1024, "num_warps": 4, "num_stages": 2})
    assert "structural decision" in option_problem(MM16, h200, {**mm(), "split:K": "2"})
    assert "must be a power of two" in option_problem(MM16, h200, mm(block_m=48))
    ext = Extern("Xgemm", (4096, 4096), "0" * 64)
    assert option_problem(ext, h200, {"extern.MWG": 64}) is None
    assert "extern.* knobs only" in option_problem(ext, h200, {"num_warps": 4})


def test_tiles_within_extents_static_always_dynamic_at_given_sizes() -> None:
    h200 = resolve_card("NVIDIA H200")
    small = matmul(Dim("T", 8), 32, 64)
    assert "block_n=64 exceeds the n extent" in option_problem(small, h200, mm(block_n=64))
    assert option_problem(small, h200, mm(block_n=32, block_m=128, num_warps=4)) is None
    at = option_problem(small, h200, mm(block_n=32, block_m=128, num_warps=4), sizes={"T": 8})
    assert at is not None and "block_m=128 exceeds the m extent (rounded up: 16)" in at


def test_cpu_options_must_be_buildable() -> None:
    k = matmul(Dim("T", 128), 256, 256, dtype="f32")
    ok = {"tile_m": 8, "tile_n": 64, "tile_k": 128, "vec": 8, "unroll": 1, "threads": 4}
    assert option_problem(k, CPU, ok) is None
    assert "exceed the 4 usable cores" in option_problem(k, CPU, {**ok, "threads": 8})
    assert "does not divide tile_n" in option_problem(k, CPU, {**ok, "tile_n": 32, "vec": 64})
    assert "exceeds the n extent" in option_problem(k, CPU, {**ok, "tile_n": 512})
    assert "(a cuda knob)" in option_problem(k, CPU, {**ok, "num_warps": 4})
    ew = elementwise("a+b", cols=8)
    assert "vec=16 exceeds the innermost extent" in option_problem(ew, CPU, {"vec": 16, "threads": 1})


def test_instruction_features_expand_a_named_instruction() -> None:
    assert instruction_features(None) == {}
    assert instruction_features("none") == {"mma_none": 1.0}
    f = instruction_features("wgmma_m64n128k16")
    assert (f["mma_m"], f["mma_n"], f["mma_k"], f["mma_group_threads"], f["mma_async"]) == (64, 128, 16, 128, 1)


@pytest.mark.parametrize("card", ["NVIDIA GeForce RTX 2080 Ti", "AMD Radeon PRO W7800"])
def test_each_architectures_own_instruction_builds_a_16_multiple_tile(card: str) -> None:
    c = resolve_card(card)
    (mma,) = c.tensor_cores
    assert option_problem(MM16, c, mm(mma=mma)) is None


AVX512 = Card("Test AVX-512 x2", "cpu", "x86_64", "", (), "test card", cores=2, simd_bits=512, l2_kib=2048.0)
NEON = Card("Test Arm x4", "cpu", "aarch64", "", (), "test card", cores=4, simd_bits=128, l2_kib=1024.0)


def test_every_new_cpu_knob_is_in_the_vocabulary_and_checked_by_validity() -> None:
    from emmy_core.knobs.vocab import SCHEDULE_KNOBS, knob_problem

    for name in ("simd", "par_axis"):
        assert SCHEDULE_KNOBS[name].target == "cpu"
    assert knob_problem("simd", 256) is None and knob_problem("par_axis", "n") is None
    for bad in (("simd", 1024), ("simd", 192), ("simd", 64), ("par_axis", "k"), ("par_axis", 1)):
        assert knob_problem(*bad) is not None, bad
    k = matmul(Dim("T", 128), 256, 256, dtype="f32")
    ok = {"tile_m": 64, "tile_n": 256, "tile_k": 256, "vec": 16, "unroll": 6, "threads": 2, "simd": 256,
          "par_axis": "n"}
    assert option_problem(k, CPU, ok) is None
    # a build for an instruction set the card lacks is refused: AVX-512 registers on an AVX2 card
    wide = {**ok, "simd": 512, "vec": 64, "unroll": 6}
    assert option_problem(k, AVX512, wide) is None
    assert "simd=512 needs 512-bit vector registers; Test CPU x4 has 256-bit ones" in option_problem(k, CPU, wide)
    # a micro-kernel that would spill: 8 rows x 2 ymm = 16 accumulators + 2 + 1 > 16 registers on AVX2
    spill = option_problem(k, CPU, {**ok, "unroll": 8})
    assert spill is not None and "micro-kernel 8x16 needs 19 vector registers" in spill and "has 16" in spill
    assert option_problem(k, AVX512, {**ok, "unroll": 14}) is None  # 32 registers on AVX-512: 28 + 2 + 1
    assert "needs 33 vector registers" in option_problem(k, AVX512, {**ok, "unroll": 15})
    assert option_problem(k, NEON, {**ok, "simd": 128, "unroll": 6}) is None  # 6 x 4 q registers of 32
    assert "simd=256 needs" in option_problem(k, NEON, ok)
    # both knobs are optional: an assignment from before they existed still checks (legacy rows)
    legacy = {"tile_m": 8, "tile_n": 64, "tile_k": 128, "vec": 8, "unroll": 4, "threads": 2}
    assert option_problem(k, CPU, legacy) is None
    assert "not one a row kernel" in option_problem(rmsnorm(hidden=256, dtype="f32"), CPU,
                                                    {"vec": 8, "unroll": 1, "threads": 1, "simd": 256})


def test_the_committed_cpu_freeze_still_checks() -> None:
    """Rows measured before the new knobs: in the vocabulary, and valid on the card that measured them."""
    import json
    from pathlib import Path

    from emmy_core.ir import parse
    from emmy_core.knobs.vocab import knobs_problem

    path = Path(__file__).resolve().parents[2] / "freezes" / "intel-r-xeon-r-processor-avx-512-x2.json"
    freeze = json.loads(path.read_text(encoding="utf-8"))
    nums = freeze["card"]["numbers"]
    card = Card(freeze["card"]["name"], "cpu", freeze["card"]["arch"], "", (), "the freeze's card",
                cores=nums["cores"], simd_bits=nums["simd_bits"], l1d_kib=nums["l1d_kb"], l2_kib=nums["l2_kb"])
    rows = 0
    for entry in freeze["kernels"]:
        program = parse(entry["program"])
        for row in entry["rows"]:
            assert knobs_problem(row["knobs"]) is None
            assert option_problem(program, card, row["knobs"]) is None, (program.name, row["knobs"])
            rows += 1
    assert rows > 1000
