"""Threads kept busy (`emmy_core.knobs.parallel`): a CPU matmul shares batch x blocks along `par_axis` among
its threads; at a size with fewer blocks than threads the others wait, so the prior ranks such an option out
at the sizes it settles (a dynamic axis makes it a question of the size, not of the pool)."""

from __future__ import annotations

import dataclasses

from emmy_core.evidence.context import open_sources
from emmy_core.evidence.sources import PriorSource
from emmy_core.graph.forks import ForkKey, schedule_fork
from emmy_core.ir.builders import Dim, matmul
from emmy_core.knobs.parallel import (
    fit_rows,
    idle_threads,
    keep_busy,
    micro_rows,
    parallel_blocks,
    stream_rows,
)
from emmy_core.targets import Card

ZEN4 = Card("AMD EPYC (family 25 model 17 stepping 1) AVX-512 x2", "cpu", "x86_64", "", ("avx512_bf16",),
            "test card", cores=2, simd_bits=512, l1d_kib=32.0, l2_kib=1024.0, l3_kib=32768.0, freq_mhz=2596.0)
UP = matmul(Dim("T", 128), 4864, 896, dtype="f32", b_transposed=True)  # a decoder's MLP up-projection
UP_BF16 = matmul(Dim("T", 128), 4864, 896, dtype="bf16", b_transposed=True)
SCORES = matmul(Dim("S", 128), Dim("S2", 128), 64, dtype="f32", batch=(Dim("B", 1), 4))  # q @ k^T, 4 heads
KNOBS = {"tile_m": 128, "tile_n": 256, "tile_k": 128, "vec": 64, "unroll": 6, "threads": 2, "simd": 512,
         "par_axis": "m"}


def test_parallel_blocks_count_batch_times_blocks_along_the_axis() -> None:
    assert parallel_blocks(UP, {"T": 128}, KNOBS) == 1
    assert parallel_blocks(UP, {"T": 129}, KNOBS) == 2
    assert parallel_blocks(UP, {"T": 1}, {**KNOBS, "par_axis": "n"}) == 19  # 4864 / 256
    assert parallel_blocks(SCORES, {"B": 2, "S": 16, "S2": 16}, {**KNOBS, "tile_m": 64}) == 8  # 2 x 4 heads x 1
    assert parallel_blocks(UP, {"T": 8}, {"vec": 32, "threads": 2}) is None  # not a CPU matmul schedule


def test_idle_threads_at_a_size_that_offers_fewer_blocks() -> None:
    assert idle_threads(UP, {"T": 128}, KNOBS) == 1
    assert idle_threads(UP, {"T": 128}, {**KNOBS, "tile_m": 64}) == 0
    assert idle_threads(UP, {"T": 128}, {**KNOBS, "threads": 1}) == 0
    assert idle_threads(UP, {"T": 1}, {**KNOBS, "tile_m": 16, "threads": 4}) == 3


def test_keep_busy_keeps_every_option_where_none_keeps_the_threads_busy() -> None:
    pool = [KNOBS, {**KNOBS, "tile_m": 64}, {**KNOBS, "par_axis": "n"}]
    assert keep_busy(UP, {"T": 128}, pool) == [1, 2]
    assert keep_busy(UP, {"T": 1}, pool[:2]) == [0, 1]  # one row: every row block leaves a thread idle


def test_prior_ranks_out_options_that_leave_threads_idle() -> None:
    """The installed prior at the sizes of a decoder's prompt and decode steps, on a 2-core card it never saw:
    its answer keeps both threads busy wherever the pool offers an option that does (at 128 rows it ranked a
    128-row block first, leaving a thread idle: twice the time of the rule's first option)."""
    sources = open_sources(ZEN4, "deploy", freezes=(), prior=None, local=False, library=False)
    prior = next(s for s in sources.items if isinstance(s, PriorSource))
    assert prior.unavailable() is None, prior.unavailable()
    for kernel in (UP, UP_BF16):  # bf16: the rule's dpbf16 option stands alone only where it keeps them busy
        fork = schedule_fork(kernel, ZEN4, library=False)
        for t in (1, 16, 128, 512):
            key = ForkKey.of(kernel, {"T": t}, ZEN4.name, "deploy")
            answer = prior.schedule(fork, key, {}, sources)
            knobs = answer.option.knobs  # type: ignore[union-attr]
            busy = [o for o in fork.options if idle_threads(kernel, {"T": t}, o.knobs) == 0]  # type: ignore[union-attr]
            assert not busy or idle_threads(kernel, {"T": t}, knobs) == 0, (kernel.name, t, knobs)
            assert kernel is UP or knobs.get("dot") == "dpbf16"


def test_fit_rows_keeps_micro_kernels_no_taller_than_the_rows() -> None:
    pool = [{**KNOBS, "unroll": 14}, {**KNOBS, "unroll": 6}, {**KNOBS, "unroll": 1}, {**KNOBS, "unroll": 6}]
    assert fit_rows(UP, {"T": 1}, pool) == [2]
    assert fit_rows(UP, {"T": 8}, pool) == [1, 2, 3]
    assert fit_rows(UP, {"T": 128}, pool) == [0, 1, 2, 3]
    assert fit_rows(UP, {"T": 1}, pool[:2]) == [1]  # none fits: the shortest offered
    assert micro_rows({**KNOBS, "unroll": 2, "dot": "amx"}) == 32 and micro_rows({"vec": 32, "threads": 2}) is None


def test_prior_ranks_out_micro_kernels_taller_than_a_decode_steps_rows() -> None:
    """At one row the prior's answer has the shortest micro-kernel the pool offers for a dynamic-row product (a
    bf16 one ran 230-260 us with 6-row micro-kernels, 640-930 with 14- and 16-row ones, torch 315-340)."""
    sources = open_sources(ZEN4, "deploy", freezes=(), prior=None, local=False, library=False)
    prior = next(s for s in sources.items if isinstance(s, PriorSource))
    for kernel in (UP, UP_BF16):
        fork = schedule_fork(kernel, ZEN4, library=False)
        least = min(r for o in fork.options if (r := micro_rows(o.knobs)) is not None)  # type: ignore[union-attr]
        for t in (1, 2):
            answer = prior.schedule(fork, ForkKey.of(kernel, {"T": t}, ZEN4.name, "deploy"), {}, sources)
            assert micro_rows(answer.option.knobs) <= max(t, least), (kernel.name, t)  # type: ignore[union-attr]


def test_stream_rows_keeps_the_options_that_stream_b_at_few_rows_and_the_rest_elsewhere() -> None:
    pool = [KNOBS, {**KNOBS, "prefetch_l2": 32}, {**KNOBS, "unroll": 16, "prefetch_l2": 128},
            {**KNOBS, "unroll": 16, "prefetch_l2": 128, "tile_n": 1024}]
    # the tallest streaming micro-kernel (fewest passes over B; `fit_rows` has left none taller than the rows)
    assert stream_rows(UP, {"T": 1}, pool) == [2, 3] and stream_rows(UP, {"T": 16}, pool) == [2, 3]
    assert stream_rows(UP, {"T": 4}, pool[:2]) == [1]
    assert stream_rows(UP, {"T": 17}, pool) == [0] and stream_rows(UP, {"T": 512}, pool) == [0]
    assert stream_rows(UP, {"T": 1}, pool[:1]) == [0]  # the pool offers none: all of it
    assert stream_rows(UP, {"T": 128}, pool[1:]) == [0, 1, 2]
    assert stream_rows(SCORES, {"B": 1, "S": 1, "S2": 16}, pool) == [0]  # four heads: a batch, not a weight stream
    amx = [{**KNOBS, "dot": "amx", "unroll": 1}, {**KNOBS, "dot": "dpbf16", "vec": 32},
           {**KNOBS, "dot": "dpbf16", "vec": 32, "prefetch_l2": 128}, {**KNOBS, "dot": "amx", "unroll": 2}]
    assert stream_rows(UP_BF16, {"T": 16}, amx) == [0, 2, 3]  # within each instruction: AMX streams nothing
    assert stream_rows(UP_BF16, {"T": 64}, amx) == [0, 1, 3]
    widened = [{**KNOBS, "unroll": 1, "prefetch_l2": 32}, {**KNOBS, "dot": "dpbf16", "unroll": 1, "prefetch_l2": 128}]
    assert stream_rows(UP_BF16, {"T": 1}, widened) == [1]  # the card's instruction streams: no widening beside it
    assert stream_rows(UP_BF16, {"T": 1}, widened[:1]) == [0] and stream_rows(UP, {"T": 1}, widened[:1]) == [0]


def test_the_prior_streams_a_few_row_products_weights_and_no_others() -> None:
    """With a dynamic M the pool ends with the options that stream B; at 16 rows or fewer the prior's answer is
    one of them (on vdpbf16ps for bf16, the rule's instruction), at more rows never."""
    sources = open_sources(ZEN4, "deploy", freezes=(), prior=None, local=False, library=False)
    prior = next(s for s in sources.items if isinstance(s, PriorSource))
    for kernel in (UP, UP_BF16):
        fork = schedule_fork(kernel, ZEN4, library=False)
        for t in (1, 4, 16, 17, 128):
            knobs = prior.schedule(fork, ForkKey.of(kernel, {"T": t}, ZEN4.name, "deploy"), {}, sources).option.knobs  # type: ignore[union-attr]
            assert ("prefetch_l2" in knobs) == (t <= 16), (kernel.name, t, knobs)
            assert knobs.get("dot", "fma") == ("fma" if kernel is UP else "dpbf16"), (kernel.name, t, knobs)


def test_on_an_amx_card_a_one_row_bf16_product_streams_on_the_cards_instruction_not_on_widened_fmas() -> None:
    """At one row the AMX tiles (16 rows at least) give way to the one-row streaming options; of those, the
    prior's answer is on `vdpbf16ps`, never a widening to f32 FMAs (which it cannot tell apart: it sees no `dot`)."""
    amx = dataclasses.replace(ZEN4, name="Test Xeon AMX AVX-512 x2",
                              tensor_cores=("avx512_bf16", "amx_tile", "amx_bf16", "amx_int8"))
    sources = open_sources(amx, "deploy", freezes=(), prior=None, local=False, library=False)
    prior = next(s for s in sources.items if isinstance(s, PriorSource))
    fork = schedule_fork(UP_BF16, amx, library=False)
    for t in (1, 4):
        knobs = prior.schedule(fork, ForkKey.of(UP_BF16, {"T": t}, amx.name, "deploy"), {}, sources).option.knobs  # type: ignore[union-attr]
        assert knobs.get("dot") == "dpbf16" and "prefetch_l2" in knobs, (t, knobs)
