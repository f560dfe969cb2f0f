"""The CPU matmul's options: the rule's first option and the pool after it.

The first option (`cpu_first_matmul`) is the fma rule's, sized from the card (SIMD width, vector registers, L2)
on all usable cores, or for a bf16 product the card's dot-product instruction (AMX tiles, else `vdpbf16ps`); a
static M of a few rows streams its weights (`_streaming_first`). The pool (`cpu_matmul_options`) follows it:
micro-kernels of 1, 2 or 4 registers a row, panel depths, row and column blocks, both thread splits and the
operand movements, then each dot family the card offers, then the options that stream B. `knobs.space`
enumerates them beside every other family's.
"""

from __future__ import annotations

from collections.abc import Iterator

from emmy_core.ir.family import MatmulShape
from emmy_core.knobs.validity import dot_problem, epilogue_rows, fit_problem, in_place_problem
from emmy_core.knobs.view import KernelView
from emmy_core.knobs.vocab import SCHEDULE_KNOBS
from emmy_core.targets.card import Card
from emmy_core.targets.cpu import register_count

Knobs = dict[str, object]

# CPU matmul space: micro-kernels of 1, 2 or 4 registers a row (as many rows as the registers
# allow), panel depths, row blocks, column blocks (all of N, or 256), both thread splits.
CPU_MICRO_VECTORS = (1, 2, 4)
CPU_MIN_CHAINS = 8  # independent FMA chains a micro-kernel needs to keep two pipes busy (Zen: 2 x 4 cycles)
CPU_TILE_M = (32, 64, 128)
CPU_TILE_N_PART = 256
CPU_TILE_K = (128, 256, 512)
CPU_MAX_TILE_K = 1024
CPU_FIRST_TILE_M = 64
CPU_PAR_AXES = ("m", "n")
CPU_PACK_A_MIN_PANELS = 4  # column panels a packed A block must serve for the rule to pack it
CPU_PREFETCH = 16  # k steps ahead the prefetching variant fetches the A and B streams
# The bf16 matmul's dot-product instructions (knob `dot`), offered after every fma option where the card lists
# them: AMX tiles (`unroll` counts 16-row tiles) and AVX512-BF16 pairs, over these depths and row blocks.
CPU_AMX_TILES = ((2, 32), (1, 32), (2, 16), (1, 16))  # (unroll: 16-row tiles, vec: columns)
CPU_DOT_TILE_K = (256, 512, 1024)
CPU_DOT_TILE_M = (32, 64, 128)
# AVX512-FP16's micro-kernels (knob `dot=fp16`, offered after the fma options where the card lists the instruction,
# never first: no machine of these sessions had it, so only a measurement on one chooses it): (rows, columns), each
# row holding f32 accumulators and f16 chunk sums (`knobs.validity`: 32 registers).
CPU_FP16_MICRO = ((8, 32), (4, 64))
# A product with few rows streams its packed weights from memory once (a decode step's projections): its options
# take the deepest pass (`CPU_STREAM_TILE_K` at most), N shared among the threads, and B prefetched into L2
# `CPU_STREAM_AHEAD` bytes ahead (`prefetch_l2`, in k steps of the panel's width). Measured on a Zen 4 EPYC (2
# cores, weights over 512 MiB of copies): 16 x 5632 x 2048 f32 16.7 -> 23.7-24.1 GB/s (one 16-row pass, 2048
# deep, against three 6-row passes 1024 deep unprefetched), bf16 18.4 -> 23.3-24.8; 8 rows f32 22.1 -> 29.9; one
# row 27.8 -> 29.8-30.1; distances of 4-16 KiB alike. One pass over all of K where the packed rows of A fit half
# the L2 (`_stream_depth`): 16 x 2048 x 5632 bf16 74% -> 87% of a read's rate, f32 65% -> 69%, against passes of
# 4096 and 1536 (the same machine).
CPU_STREAM_ROWS = 16  # the most rows a streaming option is for (a row block of at most this many)
CPU_STREAM_TILE_K = 8192
CPU_STREAM_AHEAD = 8192
# (rows, registers a row) of the streaming micro-kernels: every row of a decode step's 16, 8, 4, 2 or 1 in one pass
# over B (16 accumulators at 16, 8 and 4 rows), as `_streaming_first` picks for a static M
CPU_STREAM_MICRO = ((16, 1), (8, 2), (4, 4), (2, 4), (1, 4))


def fits(value: int, cap: int | None) -> bool:
    return cap is None or value <= cap


def pow2s(low: int, high: int) -> tuple[int, ...]:
    out, x = [], 1
    while x <= high:
        if x >= low:
            out.append(x)
        x *= 2
    return tuple(out)


def thread_counts(card: Card) -> tuple[int, ...]:
    cores = card.cores or 1
    return tuple(sorted({1, cores, *(c for c in pow2s(1, cores))}))


def _micro(v: KernelView, card: Card, simd: int, vectors: int) -> tuple[int, int] | None:
    """The micro-kernel of `vectors` registers a row of `simd` bits: (rows, columns), None if N is narrower.

    Rows are as many as the card's vector registers hold beside one B row and a broadcast
    (at most 16, the `unroll` range, and at most a static M); columns are `vectors` registers' lanes.
    """
    lanes = simd // v.compute_bits
    nr = lanes * vectors
    cap_n = v.cap("n")
    if nr > 64 or (cap_n is not None and nr > cap_n):
        return None
    rows = min(16, v.cap("m") or 16, (register_count(card.arch, card.simd_bits or 128) - vectors - 1) // vectors)
    return (rows, nr) if rows >= 1 else None


def half_l2_fit(card: Card, start: int, floor: int, unit_bytes: int) -> int:
    """`start` halved until `unit_bytes` per unit of it fit half the card's L2 (256 KiB where the probe read
    none), `floor` at the least: how deep a panel or how tall a row block the rule's blocks may be."""
    half = (card.l2_kib or 256) * 1024 // 2
    size = start
    while size > floor and size * unit_bytes > half:
        size //= 2
    return size


def _depth(v: KernelView, card: Card, nr: int) -> int:
    """The first option's panel depth: the B micro-panel (depth x N_r) in half the L2, at most 1024."""
    kc = half_l2_fit(card, CPU_MAX_TILE_K, 16, nr * v.compute_bits // 8)
    return min(kc, v.cap("k") or kc)


def cpu_first_matmul(v: KernelView, card: Card) -> Knobs:
    """The fma rule's option (`_cpu_fma_first`), or for a bf16 product the card's own dot-product instruction:
    AMX tiles where the probe lists AMX-BF16 (`_amx_first`), else `vdpbf16ps` with AVX512-BF16 (`_dpbf16_first`)."""
    fma = _cpu_fma_first(v, card)
    return _amx_first(v, card, fma) or _dpbf16_first(v, card, fma) or fma


def _dpbf16_first(v: KernelView, card: Card, fma: Knobs) -> Knobs | None:
    """On a card whose probe lists AVX512-BF16, a bf16 matmul's first option multiplies pairs with `vdpbf16ps`:
    two 512-bit registers a row (32 columns) and the most rows the registers hold that divide the row block
    (`_dividing_rows`), both operands packed, the whole depth up to 1024 per pass, the fma rule's row block (128
    rows where M has 256 or more, as AMX's), column block, split and threads; None where the card or the kernel
    takes none. Measured on an AMD EPYC with
    AVX512-BF16 (Zen 4, 2 cores, medians of 5): 397 GFLOP/s against torch's 368 at 128 x 4864 x 896, where
    widening to f32 FMAs reached 217; 299 against 206 at 16 x 4864 x 896; 114 against 33 at one row. Where the
    fma rule streams B (`_streaming_first`), so does this option, one pass over B where one register a row holds
    all the rows: 16 x 2048 x 5632 20.5 -> 24.0 GB/s of weights, 16 x 4864 x 896 21.1 -> 22.8 (16 x 16 against
    8 x 32 micro-kernels, both streaming)."""
    if "avx512_bf16" not in card.tensor_cores or (card.simd_bits or 0) < 512:
        return None
    shape = _micro(v, card, 512, 2)
    if shape is None:
        return None
    streams = "prefetch_l2" in fma  # a static M of few rows: one register a row where two hold too few rows
    one = _micro(v, card, 512, 1) if streams and shape[0] < (v.cap("m") or 1) else None
    if one is not None and one[0] >= (v.cap("m") or 1):
        shape = one
    nr = shape[1]
    cap_k, cap_m = v.cap("k"), v.cap("m")
    tk = min(CPU_MAX_TILE_K, cap_k) if cap_k is not None else CPU_MAX_TILE_K
    tm = int(fma["tile_m"])  # type: ignore[call-overload]
    l2 = (card.l2_kib or 256) * 1024
    if cap_m is not None and cap_m >= 256 and 128 * tk * 2 <= l2 // 2:
        tm = 128  # each row block streams all of B: at M = 512, 5632 x 2048, 64-row blocks ran 376 GFLOP/s, 128 406
    mr = _dividing_rows(shape[0], tm)
    tn = int(fma["tile_n"])  # type: ignore[call-overload]
    knobs: Knobs = {**fma, "tile_m": tm, "tile_k": tk, "vec": nr, "unroll": mr, "simd": 512, "pack_a": True, "pack_b": True, "prefetch": 0,
                    "prefetch_c": False, "dot": "dpbf16"}
    if streams:  # the fma rule streams B: so does this one, as deep
        knobs.update(tile_k=fma["tile_k"], prefetch_l2=_stream_ahead(nr, 2))
        if fma["par_axis"] == "n" and tn % nr:
            tn = knobs["tile_n"] = _column_block(v.n_extent or v.cap("n") or nr, card.cores or 1, nr)
    if tn < nr or tn % nr or dot_problem(v, card, knobs) is not None or fit_problem(v, card, knobs) is not None:
        return None
    return knobs


def _dividing_rows(rows: int, block: int) -> int:
    """The most micro-kernel rows, at most `rows`, that divide a row block of `block` rows: a block is rounded up
    to whole micro-kernels, so 14-row ones computed 140 rows of a 128-row product (two blocks of 64 rounded to
    70). With 8 rows the dpbf16 products at M = 128 ran 2-6% faster on a Zen 4 EPYC (347-393 GFLOP/s against
    341-372 at 4864 x 896, 896 x 4864, 5632 x 2048); at 512 x 5632 x 2048 385 against 371."""
    return max(r for r in range(1, max(1, rows) + 1) if block % r == 0)


def _cpu_fma_first(v: KernelView, card: Card) -> Knobs:
    """A micro-kernel as wide as the registers allow (4 registers a row with 32 of them, else 2), the
    card's SIMD width, a deep panel, 64-row blocks (two per thread at 128 rows), all of N per block; where a
    static M fits one row block (a decode step's projection), N shared in one column block per thread
    instead: threads sharing row blocks left all but one waiting (at M=1, 1024 x 1024 on Zen 3, the product
    took 113-121 us against 198-239 us with row blocks, f16 and f32)."""
    simd = card.simd_bits or 128
    vectors = 4 if register_count(card.arch, simd) >= 32 else 2
    shape = _micro(v, card, simd, vectors)
    while shape is None and vectors > 1:
        vectors //= 2
        shape = _micro(v, card, simd, vectors)
    if shape is None:  # N narrower than one register: one register of N's width, as many rows as fit
        nr = v.cap("n") or 1
        shape = (min(16, v.cap("m") or 16, register_count(card.arch, simd) - 2), nr)
    mr, nr = shape
    tn = min(v.cap("n") or 1024, 1024)
    tk = _depth(v, card, nr)
    tm = _rows(v, card, tk)
    cores = card.cores or 1
    par = "m"
    cap_m, cap_n = v.cap("m"), v.cap("n")
    if cores > 1 and cap_m is not None and cap_m <= tm and cap_n is not None and cap_n >= cores * nr:
        par = "n"
        tn = _column_block(v.n_extent or cap_n, cores, nr)
    knobs: Knobs = {"tile_m": tm, "tile_n": tn, "tile_k": tk, "vec": nr, "unroll": mr,
                    "threads": cores, "simd": simd, "par_axis": par, **_memory_rule(v, nr)}
    if cap_m is not None and cap_m <= CPU_STREAM_ROWS:
        return _streaming_first(v, card, knobs, vectors)
    return knobs


def _stream_ahead(nr: int, panel_bytes: int) -> int:
    """`prefetch_l2` for a B panel N_r wide of `panel_bytes` values: `CPU_STREAM_AHEAD` bytes, in k steps."""
    return max(1, min(SCHEDULE_KNOBS["prefetch_l2"].high, CPU_STREAM_AHEAD // (nr * panel_bytes)))


def _stream_depth(v: KernelView, card: Card, rows: int) -> int:
    """The pass depth of a streaming option of `rows` rows: all of K up to `CPU_STREAM_TILE_K` where the packed rows
    of A (f32 at most) fit half the card's L2 (each pass reads them once per column panel of B), else the deepest
    power of two that fits; a second pass also reads and writes every output tile again."""
    kc = half_l2_fit(card, CPU_STREAM_TILE_K, CPU_TILE_K[0], 4 * max(1, rows))
    return min(kc, v.cap("k") or kc)


def _streaming_first(v: KernelView, card: Card, base: Knobs, vectors: int) -> Knobs:
    """The fma rule's option for a static M of at most `CPU_STREAM_ROWS` rows, which streams its packed weights
    from memory: the widest micro-kernel whose rows hold all of M (one pass over B; else `base`'s), the deepest
    pass, B prefetched into L2 (`_stream_ahead`), N's column blocks for that width; `base` where it cannot build."""
    simd = int(base["simd"])  # type: ignore[call-overload]
    cap_m = v.cap("m") or 1
    shape = None
    while vectors >= 1 and shape is None:
        s = _micro(v, card, simd, vectors)
        shape = s if s is not None and s[0] >= cap_m else None
        vectors //= 2
    mr, nr = shape if shape is not None else (int(base["unroll"]), int(base["vec"]))  # type: ignore[call-overload]
    knobs: Knobs = {**base, "vec": nr, "unroll": mr, "tile_k": _stream_depth(v, card, cap_m),
                    **_memory_rule(v, nr), "prefetch_l2": _stream_ahead(nr, v.b_bytes)}
    if base["par_axis"] == "n":
        knobs["tile_n"] = _column_block(v.n_extent or v.cap("n") or nr, card.cores or 1, nr)
    return knobs if fit_problem(v, card, knobs) is None else base


def _amx_first(v: KernelView, card: Card, fma: Knobs) -> Knobs | None:
    """On a card whose probe lists AMX-BF16, a bf16 matmul's first option multiplies on AMX tiles: two 16-row
    tiles by 32 columns (one tile of rows at M <= 16), 64-row blocks (128 where a static M has 256 rows or more:
    1754 against 1470 GFLOP/s at 512 x 4864 x 896, 1661 against 1475 at 256; at M = 128 they left a thread idle),
    the fma rule's threads, split and column block, the whole depth up to 1024 per pass; None where the card or
    the kernel takes none (every other kernel keeps its fma option).
    Measured on a Xeon with AMX (2 cores, shared; bf16 linears, best of 21 interleaved calls): 876 GFLOP/s
    against torch's 552 at 128 x 4864 x 896, 759 against 608 at 512 x 896 x 4864, 290 against 154 at
    16 x 4864 x 896 (one tile of rows there), where widening to f32 FMAs reached 56-112."""
    if "amx_bf16" not in card.tensor_cores:
        return None
    cap_k = v.cap("k")
    tk = min(1024, cap_k) if cap_k is not None else 1024
    tn = int(fma["tile_n"])  # type: ignore[call-overload]
    vec = 32 if tn % 32 == 0 else 16
    cap_m = v.cap("m")
    tiles = 1 if cap_m is not None and cap_m <= 16 else 2
    rows = 128 if cap_m is not None and cap_m >= 256 else min(64, cap_m or 64)
    knobs: Knobs = {**fma, "tile_m": rows, "tile_k": tk, "vec": vec, "unroll": tiles,
                    "pack_a": True, "pack_b": True, "prefetch": 0, "dot": "amx"}
    knobs.pop("prefetch_l2", None)  # AMX loads whole tiles of B: no stream prefetch
    if tn % vec or fit_problem(v, card, knobs) is not None:
        return None
    return knobs


def _dot_options(v: KernelView, card: Card) -> list[Knobs]:
    """The 16-bit matmul's options on the card's dot-product instructions (`dot` amx, then fp16 for f16 operands,
    then dpbf16), each where `dot_problem` allows it: appended after the fma options, so those keep their
    places."""
    out: list[Knobs] = []
    base: Knobs = {"pack_a": True, "pack_b": True, "prefetch": 0, "prefetch_c": False}
    probe: Knobs = {**base, "tile_m": 32, "tile_n": 32, "tile_k": 1024, "vec": 16, "unroll": 1, "threads": 1,
                    "simd": 512, "par_axis": "m"}
    cm, cn, ck = v.cap("m"), v.cap("n"), v.cap("k")
    tks = tuple(t for t in CPU_DOT_TILE_K if fits(t, ck)) or ((max(ck, 32),) if ck is not None else ())
    tms = tuple(t for t in CPU_DOT_TILE_M if fits(t, cm)) or ((cm,) if cm is not None else ())
    whole = min(cn or 1024, 1024)
    rule = _memory_rule(v, 16)["prefetch_c"]
    if dot_problem(v, card, {**probe, "dot": "amx"}) is None:
        for unroll, vec in CPU_AMX_TILES:
            out.extend({**base, "tile_m": tm, "tile_n": tn, "tile_k": tk, "vec": vec, "unroll": unroll, "threads": t,
                        "simd": card.simd_bits or 512, "par_axis": par, "prefetch_c": rule, "dot": "amx"}
                       for tk, tm, tn, par, t in _dot_blocks(card, tks, tms, whole, vec))
    if dot_problem(v, card, {**probe, "vec": 32, "dot": "fp16"}) is None:
        for mr, nr in CPU_FP16_MICRO:
            if not fits(nr, cn) and cn is not None:
                continue
            out.extend({**base, "tile_m": tm, "tile_n": tn, "tile_k": tk, "vec": nr, "unroll": min(mr, cm or mr),
                        "threads": t, "simd": 512, "par_axis": par, "prefetch_c": rule, "dot": "fp16"}
                       for tk, tm, tn, par, t in _dot_blocks(card, tks, tms, whole, nr))
    if dot_problem(v, card, {**probe, "dot": "dpbf16"}) is None:
        for vectors in CPU_MICRO_VECTORS:
            shape = _micro(v, card, 512, vectors)
            if shape is None:
                continue
            mr, nr = shape
            out.extend({**base, "tile_m": tm, "tile_n": tn, "tile_k": tk, "vec": nr, "unroll": mr, "threads": t,
                        "simd": 512, "par_axis": par, "prefetch_c": rule, "dot": "dpbf16"}
                       for tk, tm, tn, par, t in _dot_blocks(card, tks, tms, whole, nr))
    return out


def _dot_blocks(card: Card, tks: tuple[int, ...], tms: tuple[int, ...], whole: int, nr: int
                ) -> Iterator[tuple[int, int, int, str, int]]:
    """(depth, row block, column block, split, threads) of a dot family's options, in the pool's order: the
    column blocks all of N (up to 1024) and `CPU_TILE_N_PART`, where whole panels N_r wide fill them."""
    for tk in tks:
        for tm in tms:
            for tn in dict.fromkeys(t for t in (whole, CPU_TILE_N_PART) if t >= nr and t % nr == 0):
                for par in CPU_PAR_AXES:
                    for t in thread_counts(card):
                        yield tk, tm, tn, par, t


def _column_block(n: int, cores: int, nr: int) -> int:
    """The column block (a power of two, the vocabulary's, from N_r to 1024) that gives the busiest of `cores`
    threads the fewest columns of N, the widest among equals: at N=1024 on 2 cores one block of 512 each; at
    N=2816 blocks of 128, 11 each (blocks of 1024 would leave one thread 2 of 3, its peer idle a third)."""
    width, best = 1, None
    while width < nr:
        width *= 2
    while width <= 1024:
        blocks = -(-n // width)
        busiest = -(-blocks // cores) * width
        if best is None or busiest <= best[0]:
            best = (busiest, width)
        width *= 2
    return best[1] if best is not None else 1024


def _rows(v: KernelView, card: Card, tk: int) -> int:
    """The first option's row block: 64 rows (two per thread at 128), fewer where the packed A block
    (rows x depth) would take more than half the L2, and at most a static M."""
    tm = half_l2_fit(card, CPU_FIRST_TILE_M, 8, tk * v.compute_bits // 8)
    return min(tm, v.cap("m") or tm)


def _memory_rule(v: KernelView, nr: int) -> Knobs:
    """How the rule moves operands for a micro-kernel N_r wide: A read in place where a packed copy would
    serve at most `CPU_PACK_A_MIN_PANELS` column panels (a static N that narrow: attention x V at N=64)
    and A needs no conversion; B packed; no stream prefetch; the tile's rows prefetched where the
    epilogue reads an operand by them (a residual, a gate), which else arrives from memory after the
    k loop. Measured on Zen 3 (AVX2): in place A +12% at N=64, -2..4% at N >= 256; tile prefetch +12%
    with a gate, +-1% without."""
    assert isinstance(v.shape, MatmulShape)
    narrow = v.n_extent is not None and v.n_extent <= CPU_PACK_A_MIN_PANELS * nr
    k: Knobs = {"pack_a": True, "pack_b": True, "prefetch": 0, "prefetch_c": False}
    if narrow and in_place_problem(v, {**k, "vec": nr, "pack_a": False}) is None:
        k["pack_a"] = False
    k["prefetch_c"] = any(not written for _, _, written in epilogue_rows(v.shape))
    return k


def _memory_variants(v: KernelView, base: Knobs) -> list[Knobs]:
    """The rule's operand movement for `base`, then each of its choices flipped alone (where buildable)
    and the A and B streams prefetched `CPU_PREFETCH` steps ahead."""
    rule = {**base, **_memory_rule(v, int(base["vec"]))}  # type: ignore[arg-type]
    out = [rule]
    for flip in ({"pack_a": not rule["pack_a"]}, {"pack_b": not rule["pack_b"]},
                 {"prefetch_c": not rule["prefetch_c"]}, {"prefetch": CPU_PREFETCH}):
        k = {**rule, **flip}
        if in_place_problem(v, k) is None:
            out.append(k)
    return out


def cpu_matmul_options(v: KernelView, card: Card) -> list[Knobs]:
    top = card.simd_bits or 128
    widths = (top, top // 2) if top >= 512 else (top,)  # AVX-512 cards may run 256-bit registers too
    cm, cn, ck = v.cap("m"), v.cap("n"), v.cap("k")
    l2 = (card.l2_kib or 256) * 1024
    tks = tuple(t for t in CPU_TILE_K if fits(t, ck)) or ((ck,) if ck is not None else ())
    tms = tuple(t for t in CPU_TILE_M if fits(t, cm)) or ((cm,) if cm is not None else ())
    whole = min(cn or 1024, 1024)
    # where a dot-product instruction took the first place, the fma rule's option leads the rest (elsewhere it is
    # the first: deduplicated)
    out: list[Knobs] = [_cpu_fma_first(v, card)] \
        if {"amx_bf16", "avx512_bf16"} & set(card.tensor_cores) else []
    for simd in widths:
        for vectors in CPU_MICRO_VECTORS:
            shape = _micro(v, card, simd, vectors)
            if shape is None or shape[0] * vectors < CPU_MIN_CHAINS:
                continue
            mr, nr = shape
            tns = tuple(t for t in (whole, CPU_TILE_N_PART) if t >= nr and t <= whole)
            for tk in tks:
                for tm in tms:
                    if tm * tk * v.compute_bits // 8 > l2 // 2:
                        continue
                    for tn in dict.fromkeys(tns):
                        for par in CPU_PAR_AXES:
                            for t in thread_counts(card):
                                out.extend(_memory_variants(v, {
                                    "tile_m": tm, "tile_n": tn, "tile_k": tk, "vec": nr, "unroll": mr,
                                    "threads": t, "simd": simd, "par_axis": par}))
    return out + _dot_options(v, card) + _stream_options(v, card)


def _stream_options(v: KernelView, card: Card) -> list[Knobs]:
    """Options for a product whose few rows (a dynamic M, or a static one of at most `CPU_STREAM_ROWS`) stream
    its packed weights (a static N and K) from memory: the micro-kernels of `CPU_STREAM_MICRO` at the card's
    width that its registers hold (one pass over B at 16, 8, 4, 2 or 1 rows), and on `vdpbf16ps` where the card
    and the kernel take it; one row block, the deepest pass, N shared among the threads (all of it or
    256-column blocks), B prefetched into L2 (`_stream_ahead`) with and without `prefetch`'s L1 distance.
    Appended last, so every other option keeps its place."""
    cm, ck = v.cap("m"), v.cap("k")
    if (cm is not None and cm > CPU_STREAM_ROWS) or ck is None or v.n_extent is None:
        return []  # many rows, or a B that is no weight (a dynamic N or K: attention's keys and values)
    rows = min(CPU_STREAM_ROWS, cm or CPU_STREAM_ROWS)
    base: Knobs = {"tile_m": rows, "tile_k": _stream_depth(v, card, rows), "threads": card.cores or 1,
                   "par_axis": "n"}
    width = card.simd_bits or 128
    families: list[tuple[Knobs, int, int]] = [({"simd": width}, width, v.b_bytes)]
    dpbf16: Knobs = {"simd": 512, "pack_a": True, "pack_b": True, "prefetch_c": False, "dot": "dpbf16"}
    if dot_problem(v, card, {**base, **dpbf16, "vec": 16, "unroll": 1, "tile_n": 16}) is None:
        families.append((dpbf16, 512, 2))
    whole = min(v.cap("n") or 1024, 1024)
    registers = register_count(card.arch, width)
    out: list[Knobs] = []
    for family, simd, panel in families:
        lanes = simd // v.compute_bits
        for mr, vectors in dict.fromkeys((min(r, cm or r), q) for r, q in CPU_STREAM_MICRO):
            nr = lanes * vectors
            if mr * vectors + vectors + 1 > registers or nr > 64 or (v.cap("n") or nr) < nr:
                continue
            for tn in dict.fromkeys(t for t in (whole, CPU_TILE_N_PART) if t >= nr and t % nr == 0):
                for prefetch in (0, CPU_PREFETCH):
                    out.append({**base, **_memory_rule(v, nr), "tile_n": tn, "vec": nr, "unroll": mr, **family,
                                "prefetch": prefetch, "prefetch_l2": _stream_ahead(nr, panel)})
    return out
