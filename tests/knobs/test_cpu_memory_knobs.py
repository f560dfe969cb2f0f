"""The CPU matmul's operand-movement knobs (`pack_a`, `pack_b`, `prefetch`, `prefetch_c`): optional (rows
measured before them keep their meaning), refused by validity exactly where the generator cannot build
them, and set by the rule from the kernel so that an untuned machine starts near the best."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from emmy_core.codegen.backend import BuildError
from emmy_core.codegen.c import CBackend
from emmy_core.ir import parse
from emmy_core.ir.builders import Dim, matmul
from emmy_core.knobs import candidates, option_problem
from emmy_core.knobs.space import first_option
from emmy_core.knobs.view import view
from emmy_core.knobs.vocab import knob_problem
from emmy_core.targets import Card

ROOT = Path(__file__).resolve().parents[2]
AVX2 = Card("AVX2 Only Part x2", "cpu", "x86_64", "", (), "test card (Zen 3)", cores=2, simd_bits=256,
            l1d_kib=32.0, l2_kib=512.0)
AVX512 = Card("AVX-512 Part x2", "cpu", "x86_64", "", (), "test card (Zen 4)", cores=2, simd_bits=512,
              l1d_kib=32.0, l2_kib=1024.0)
BASE = {"tile_m": 64, "tile_n": 64, "tile_k": 64, "vec": 16, "unroll": 6, "threads": 2, "simd": 256,
        "par_axis": "m"}
ATT_V = matmul(Dim("S", 128), 64, Dim("K", 128), dtype="f32", batch=(Dim("B", 1), 4))  # attention x V
LINEAR = matmul(Dim("T", 64), 256, 256, dtype="f32", b_transposed=True)


def test_memory_knobs_are_in_the_cpu_vocabulary_with_their_types() -> None:
    assert knob_problem("pack_a", False) is None and knob_problem("pack_b", True) is None
    assert knob_problem("prefetch", 16) is None and knob_problem("prefetch_c", True) is None
    for bad in (("pack_a", 0), ("pack_b", "no"), ("prefetch", -1), ("prefetch", 65), ("prefetch_c", 1)):
        assert knob_problem(*bad) is not None, bad


def test_a_row_that_does_not_set_them_builds_what_it_measured() -> None:
    """The defaults are the old behaviour: the same source with and without them spelled out."""
    be = CBackend()
    spelled = {**BASE, "pack_a": True, "pack_b": True, "prefetch": 0, "prefetch_c": False}
    assert be.source(LINEAR, BASE, "deploy") == be.source(LINEAR, spelled, "deploy")
    assert option_problem(LINEAR, AVX2, BASE) is None


@pytest.mark.parametrize("freeze", ["amd-epyc-avx-512-x2.json", "intel-r-xeon-r-processor-avx-512-x2.json"])
def test_the_committed_freezes_rows_stay_valid(freeze: str) -> None:
    data = json.loads((ROOT / "freezes" / freeze).read_text(encoding="utf-8"))
    nums = data["card"]["numbers"]
    card = Card(data["card"]["name"], "cpu", data["card"]["arch"], "", (), "the freeze's card", cores=nums["cores"],
                simd_bits=nums["simd_bits"], l1d_kib=nums["l1d_kb"], l2_kib=nums["l2_kb"])
    rows = 0
    for entry in data["kernels"]:
        program = parse(entry["program"])
        for row in entry["rows"]:
            assert option_problem(program, card, row["knobs"]) is None, (program.name, row["knobs"])
            rows += 1
    assert rows > 1000


def test_in_place_operands_are_refused_where_the_generator_cannot_read_them() -> None:
    be = CBackend()
    cases = [
        (matmul(Dim("T", 8), 64, 64, dtype="f16"), {"pack_a": False}, "pack_a=false needs A of the accumulator"),
        (matmul(Dim("T", 8), 64, 64, dtype="f16"), {"pack_b": False}, "pack_b=false needs B of the accumulator"),
        (LINEAR, {"pack_b": False}, "row-major B"),
        (matmul(Dim("T", 8), Dim("N", 64), 64, dtype="f32"), {"pack_b": False}, "static N"),
        (matmul(Dim("T", 8), 40, 64, dtype="f32"), {"pack_b": False}, "vec=16 divides (N is 40)"),
    ]
    for program, over, message in cases:
        knobs = {**BASE, **over}
        problem = option_problem(program, AVX2, knobs)
        assert problem is not None and message in problem, (program.name, problem)
        with pytest.raises(BuildError, match=message.split(" (")[0].replace("(", r"\(")):
            be.source(program, knobs, "deploy")
    for program, over in ((ATT_V, {"pack_a": False, "pack_b": False}), (LINEAR, {"pack_a": False}),
                          (matmul(Dim("T", 8), 48, 64, dtype="f32"), {"pack_b": False})):
        knobs = {**BASE, **over}
        assert option_problem(program, AVX2, knobs) is None
        be.source(program, knobs, "deploy")


def test_the_rule_reads_a_narrow_a_in_place_and_prefetches_tiles_whose_epilogue_reads_an_operand() -> None:
    att = first_option(view(ATT_V), AVX2)
    assert att["pack_a"] is False and att["pack_b"] is True and att["prefetch_c"] is False
    lin = first_option(view(LINEAR), AVX2)
    assert lin["pack_a"] is True and lin["prefetch_c"] is False and lin["prefetch"] == 0
    gated = matmul(Dim("T", 64), 688, 256, dtype="f32", b_transposed=True, epilogue=("silu", "mul"))
    assert first_option(view(gated), AVX2)["prefetch_c"] is True
    residual = matmul(Dim("T", 64), 256, 688, dtype="f32", b_transposed=True, epilogue=("residual",))
    assert first_option(view(residual), AVX2)["prefetch_c"] is True
    f16 = first_option(view(matmul(Dim("S", 128), 64, Dim("K", 128), dtype="f16", batch=(Dim("B", 1), 4))), AVX2)
    assert f16["pack_a"] is True  # a 16-bit A is converted by its packing


def test_the_pool_offers_each_memory_choice_flipped() -> None:
    pool = candidates(ATT_V, AVX2)
    assert pool[0]["pack_a"] is False
    for knob, value in (("pack_a", True), ("pack_b", False), ("prefetch_c", True), ("prefetch", 16)):
        assert any(o[knob] == value for o in pool), knob
    assert all(o["pack_b"] is True for o in candidates(LINEAR, AVX2))  # a transposed B is always packed
    assert all(option_problem(ATT_V, AVX2, o) is None for o in pool)


def test_the_first_option_follows_the_probed_card_not_the_tuning_machine() -> None:
    """AVX2 (16 ymm): 6 x 16 in 256-bit registers; AVX-512 (32 zmm): 4 registers a row of 512 bits."""
    a2, a5 = first_option(view(LINEAR), AVX2), first_option(view(LINEAR), AVX512)
    assert (a2["unroll"], a2["vec"], a2["simd"]) == (6, 16, 256)
    assert (a5["unroll"], a5["vec"], a5["simd"]) == (6, 64, 512)


def test_the_first_options_blocks_are_sized_from_the_cards_l2() -> None:
    """The B micro-panel (depth x vec) and the packed A block (rows x depth) each within half the L2."""
    deep = matmul(Dim("T", 64), 256, 1024, dtype="f32", b_transposed=True)
    sizes = {}
    for l2 in (64.0, 256.0, 512.0, 2048.0):
        card = Card("AVX2 x2", "cpu", "x86_64", "", (), "test card", cores=2, simd_bits=256, l2_kib=l2)
        k = first_option(view(deep), card)
        assert k["tile_k"] * k["vec"] * 4 <= l2 * 1024 / 2 and k["tile_m"] * k["tile_k"] * 4 <= l2 * 1024 / 2
        sizes[l2] = (k["tile_m"], k["tile_k"])
    assert sizes == {64.0: (16, 512), 256.0: (32, 1024), 512.0: (64, 1024), 2048.0: (64, 1024)}


@pytest.mark.parametrize("rows", [1, 4, 64])
def test_the_first_option_of_a_matmul_with_one_row_block_shares_its_columns_among_the_threads(rows: int) -> None:
    """A decode step's projection (a static row count within one row block): with the threads sharing row blocks,
    one thread did all of it while the other waited; the rule shares column blocks instead, one per thread."""
    step = matmul(rows, 1024, 1024, dtype="f16", b_transposed=True)
    k = first_option(view(step), AVX2)
    assert (k["par_axis"], k["tile_n"], k["threads"]) == ("n", 512, 2)
    assert option_problem(step, AVX2, k) is None and candidates(step, AVX2)[0] == k
    assert first_option(view(LINEAR), AVX2)["par_axis"] == "m"  # rows known only at run time: row blocks
    assert first_option(view(matmul(rows, 16, 1024, dtype="f32", b_transposed=True)), AVX2)["par_axis"] == "m"


@pytest.mark.parametrize("width", [1000, 2816, 4096, 5632, 11008])
def test_the_first_option_of_a_decode_projection_of_any_width_is_valid_and_shares_its_columns_evenly(width: int) -> None:
    """A column block of half of N was past the vocabulary's 1024 (or not a power of two) at N=2816, so the
    first option of a hidden-1024 Llama's MLP in a decode step was invalid and its group ran as torch."""
    step = matmul(1, width, 1024, dtype="f32", b_transposed=True)
    k = first_option(view(step), AVX2)
    assert option_problem(step, AVX2, k) is None and candidates(step, AVX2)[0] == k
    assert k["par_axis"] == "n" and k["threads"] == 2
    blocks = -(-width // k["tile_n"])
    assert -(-blocks // 2) * k["tile_n"] <= 1.1 * width / 2  # the busier thread does at most a tenth more than half
