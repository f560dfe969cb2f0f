"""The knob `dot`: the bf16 matmul's dot-product options exist only on a card whose probe lists the
instruction, follow every fma option (which keep their places and ids), and the first option multiplies
on the card's instruction only for a bf16 product: AMX tiles with AMX-BF16, else `vdpbf16ps` with AVX512-BF16."""

from __future__ import annotations

import dataclasses

import pytest

from emmy_core.ir.builders import Dim, matmul
from emmy_core.knobs import candidates
from emmy_core.knobs.validity import option_problem
from emmy_core.knobs.vocab import canonical_knobs
from emmy_core.targets import Card

PLAIN = Card("Test Xeon AVX-512 x2", "cpu", "x86_64", "", (), "test card", cores=2, simd_bits=512, l1d_kib=48.0,
             l2_kib=2048.0)
AMX = dataclasses.replace(PLAIN, name="Test Xeon AMX AVX-512 x2", tensor_cores=("avx512_bf16", "avx512_fp16", "amx_tile", "amx_bf16", "amx_int8"))
BF16_ONLY = dataclasses.replace(PLAIN, name="Test Zen 4 AVX-512 x2", tensor_cores=("avx512_bf16",))
KERNELS = [matmul(Dim("T", 128), 896, 4864, dtype="bf16", b_transposed=True),
           matmul(Dim("T", 128), 4864, 896, dtype="bf16", epilogue=("silu", "mul")),
           matmul(16, 4864, 896, dtype="bf16", b_transposed=True),
           matmul(1, 896, 896, dtype="bf16", b_transposed=True)]


def dots(pool: tuple[dict[str, object], ...]) -> set[str]:
    return {str(o.get("dot", "fma")) for o in pool}


@pytest.mark.parametrize("kernel", KERNELS, ids=lambda k: k.name)
def test_dot_options_follow_the_fma_ones_only_where_the_card_lists_the_instruction(kernel) -> None:  # type: ignore[no-untyped-def]
    plain, amx, bf16 = (candidates(kernel, c) for c in (PLAIN, AMX, BF16_ONLY))
    assert dots(plain) == {"fma"}
    assert dots(amx) == {"fma", "amx", "dpbf16"} and dots(bf16) == {"fma", "dpbf16"}
    fma_keys = [canonical_knobs(o) for o in plain]
    for pool in (amx, bf16):
        rest = [canonical_knobs(o) for o in pool if "dot" not in o]
        assert set(rest) == set(fma_keys)  # the fma options are the plain card's, unchanged
        # one run, from the first place or the second, before the dot ones; then the options that stream B
        # (`prefetch_l2`, appended last)
        tail = next(i for i in range(len(pool), 0, -1) if "prefetch_l2" not in pool[i - 1])
        assert tail < len(pool) and all("prefetch_l2" not in o for o in pool[2:tail])
        at = [i for i, o in enumerate(pool[:tail]) if "dot" not in o]
        assert at == list(range(at[0], at[0] + len(at))) and at[0] == (1 if pool[0].get("dot") else 0)
    for o in amx:
        if o.get("dot") == "amx":
            assert option_problem(kernel, PLAIN, o) is not None  # never valid on a card without it
            assert option_problem(kernel, AMX, o) is None


def test_the_first_option_is_the_cards_dot_instruction_only_for_bf16() -> None:
    for kernel in KERNELS:
        first = candidates(kernel, AMX)[0]
        assert first["dot"] == "amx" and first["unroll"] in (1, 2) and first["vec"] in (16, 32)
        dp = candidates(kernel, BF16_ONLY)[0]
        # two registers a row (one where they hold too few rows for a static M that streams B)
        assert dp["dot"] == "dpbf16" and dp["vec"] == (16 if kernel is KERNELS[2] else 32)
        assert dp["pack_a"] is True and dp["pack_b"] is True
        assert option_problem(kernel, BF16_ONLY, dp) is None and option_problem(kernel, PLAIN, dp) is not None
        fma = candidates(kernel, PLAIN)[0]
        assert candidates(kernel, BF16_ONLY)[1] == fma  # the fma rule's option leads the rest
        assert {k: dp[k] for k in ("tile_m", "tile_n", "threads", "par_axis")} == \
            {k: fma[k] for k in ("tile_m", "tile_n", "threads", "par_axis")}  # its blocks and split
        assert ("prefetch_l2" in dp) == ("prefetch_l2" in fma) and "prefetch_l2" not in candidates(kernel, AMX)[0]
    assert candidates(KERNELS[2], AMX)[0]["unroll"] == 1  # 16 rows: one tile of them
    assert candidates(KERNELS[3], BF16_ONLY)[0]["unroll"] == 1  # one row: one row of registers
    for dtype in ("f32", "f16"):
        k = matmul(Dim("T", 128), 896, 4864, dtype=dtype, b_transposed=True)
        # other types: nothing changes, but an f16 product's AVX512-FP16 options where the card lists it (the
        # AMX card here), never first (tests/codegen/test_c_fp16_path.py)
        amx = [o for o in candidates(k, AMX) if o.get("dot") != "fp16"]
        assert amx == list(candidates(k, PLAIN)) == list(candidates(k, BF16_ONLY))


def test_dpbf16_first_option_rows_divide_its_row_block() -> None:
    """A row block is rounded up to whole micro-kernels: the rows must divide it, or the padding is computed."""
    for kernel in KERNELS:
        dp = candidates(kernel, BF16_ONLY)[0]
        assert int(dp["tile_m"]) % int(dp["unroll"]) == 0, (kernel.name, dp)
    assert candidates(KERNELS[0], BF16_ONLY)[0]["unroll"] == 8  # 14 would fit the registers; 64 % 14 != 0
    assert candidates(KERNELS[2], BF16_ONLY)[0]["unroll"] == 16  # M = 16 streams B: one pass of 16 rows, not 14 + 2


def test_dpbf16_first_option_takes_128_row_blocks_from_256_rows() -> None:
    """Each row block streams all of B: from 256 rows, blocks of 128 (two threads still busy) halve that."""
    tall = matmul(512, 5632, 2048, dtype="bf16", b_transposed=True)
    assert candidates(tall, BF16_ONLY)[0]["tile_m"] == 128
    assert candidates(KERNELS[0], BF16_ONLY)[0]["tile_m"] == 64  # 128 rows: 64-row blocks keep both threads busy


def test_the_validity_of_dot_names_what_is_missing() -> None:
    kernel = KERNELS[0]
    base = dict(candidates(kernel, PLAIN)[0])
    amx = {**base, "vec": 32, "unroll": 2, "dot": "amx"}
    assert "amx_bf16" in (option_problem(kernel, PLAIN, amx) or "")
    assert "unroll 1 or 2" in (option_problem(kernel, AMX, {**amx, "unroll": 4}) or "")
    assert "tile_k a multiple of 32" in (option_problem(kernel, AMX, {**amx, "tile_k": 16}) or "")
    f32 = matmul(Dim("T", 128), 896, 4864, dtype="f32", b_transposed=True)
    assert "bf16 A and B" in (option_problem(f32, AMX, {**dict(candidates(f32, PLAIN)[0]), "vec": 32, "unroll": 2,
                                                         "dot": "amx"}) or "")
    dp = {**base, "dot": "dpbf16", "simd": 256}
    assert "simd=512" in (option_problem(kernel, BF16_ONLY, dp) or "")


def test_under_the_shipped_prior_the_rule_decides_dot() -> None:
    """The prior has no feature for `dot` nor `prefetch_l2` (appended after its fit): where the rule's first
    option names an instruction (AMX tiles, vdpbf16ps) it stands alone, every other knob's effect on that
    instruction unseen by the prior too; where it names none (fma), the prior ranks the options that agree with
    it (an f32 product never leaves fma). `prefetch_l2` is left to the sizes (`knobs.parallel.stream_rows`)."""
    from emmy_core.evidence.sources import within_sight
    from emmy_core.graph.forks import ScheduleOption, schedule_fork
    from emmy_core.prior.artifact import load_installed_prior

    prior = load_installed_prior()
    assert prior.unseen_knobs() == frozenset({"dot", "prefetch_l2"})
    fork = schedule_fork(KERNELS[0], AMX)
    options = [o for o in fork.options if isinstance(o, ScheduleOption) and "library" not in o.knobs]
    for card in (AMX, BF16_ONLY):
        fork = schedule_fork(KERNELS[0], card)
        options = [o for o in fork.options if isinstance(o, ScheduleOption) and "library" not in o.knobs]
        assert within_sight(prior, options, fork) == [options[0]] and options[0].knobs["dot"] in ("amx", "dpbf16")
        kept = within_sight(prior, options[1:], fork)  # the first blocked: the options on its instruction, ranked
        assert kept and all(o.knobs.get("dot") == options[0].knobs["dot"] for o in kept)
    plain = schedule_fork(KERNELS[0], PLAIN)
    rest = [o for o in plain.options if isinstance(o, ScheduleOption)]
    assert within_sight(prior, rest, plain) == rest  # whether B streams the sizes decide (`busy_at`)
    f32 = schedule_fork(matmul(Dim("T", 128), 896, 4864, dtype="f32", b_transposed=True), BF16_ONLY)
    pool = [o for o in f32.options if isinstance(o, ScheduleOption) and "library" not in o.knobs]
    assert within_sight(prior, pool, f32) == pool  # no dot option for f32: the prior ranks them all
