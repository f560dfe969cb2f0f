"""Static validity of a knob assignment for a kernel on a card: what can be known without building.

GPU (Triton): the knobs are the family's, in the cuda vocabulary; tiles within the
kernel's extents; threads per block (warps x warp size) within the card's limit; shared
memory per block (pipeline buffers x (A tile + B tile) x operand width, see
`pipeline_buffers`) within the card's opt-in limit; a register estimate (accumulator,
plus operand tiles where the instruction reads them from registers, or the row chunk,
per thread and per SM) within the register file; the tensor-core instruction offered by
the architecture and fitting the tile; the accumulator type fitting the operands.
CPU (C + OpenMP): nothing unbuildable: threads within the usable cores, tiles within
extents, a vector width that divides the tile it runs over; for a matmul, registers no
wider than the card's SIMD width (`simd`: a build for an instruction set the card lacks)
and a micro-kernel whose accumulators, B row and broadcast fit the card's vector
registers (more would spill every step); an operand read in place (`pack_a` / `pack_b`
false) only where the generator can (`in_place_problem`); multiply instructions (`dot`) other
than fma only on a card whose probe lists them (`tensor_cores`: `avx512_bf16` for dpbf16,
`amx_bf16` for amx) and only where the generator can use them (`dot_problem`).
A limit that only a build can reveal is found by the build: the option is blocked and
the fork resolved again (DESIGN 4).
"""

from __future__ import annotations

from emmy_core.ir.family import MatmulShape
from emmy_core.ir.nodes import Kernel, Load, Range
from emmy_core.knobs.instructions import instruction_problem, tile_instruction
from emmy_core.knobs.route import is_library, library_problem
from emmy_core.knobs.view import FAMILY_KNOBS, OPTIONAL_KNOBS, KernelView, view
from emmy_core.knobs.vocab import SCHEDULE_KNOBS, knobs_problem
from emmy_core.targets.card import Card
from emmy_core.targets.cpu import register_count

REG_RESERVE = 64  # registers per thread kept for addresses, operands and the epilogue
REG_OVERHEAD = 48  # per-thread registers beyond the estimate, for the per-SM check (an H200 spilled at 32)


def pipeline_buffers(card: Card, path: str, stages: int) -> int:
    """Shared-memory copies of the operand tiles Triton keeps for `stages` pipeline stages.

    Measured on an H200 (Triton 3.6, compiled shared-memory figures): a wgmma tile keeps one
    buffer per stage, the cp.async path of mma and FMA tiles one fewer. Other vendors are
    held to one per stage (an upper bound; not measured).
    """
    if card.vendor == "nvidia" and not path.startswith("wgmma_"):
        return max(1, stages - 1)
    return stages


def _within(what: str, value: int, cap: int | None, axis: str) -> str | None:
    if cap is not None and value > cap:
        return f"{what}={value} exceeds the {axis} extent (rounded up: {cap})"
    return None


def _registers(card: Card, values_per_thread: float, threads: int, what: str) -> str | None:
    per_thread = card.regs_per_thread
    if per_thread is not None and values_per_thread > per_thread - REG_RESERVE:
        return f"{what}: {values_per_thread:g} registers per thread would spill (limit {per_thread - REG_RESERVE})"
    if card.regs_per_sm is not None and (values_per_thread + REG_OVERHEAD) * threads > card.regs_per_sm:
        return (f"{what}: about {int((values_per_thread + REG_OVERHEAD) * threads)} registers per block "
                f"exceed {card.regs_per_sm} per SM")
    return None


def _gpu_problem(v: KernelView, card: Card, k: dict[str, object]) -> str | None:
    warps = k["num_warps"]
    assert isinstance(warps, int)
    threads = warps * (card.warp_size or 32)
    if card.max_threads_per_block is not None and threads > card.max_threads_per_block:
        return f"{warps} warps x {card.warp_size} = {threads} threads exceed {card.max_threads_per_block} per block"
    if v.family == "matmul":
        bm, bn, bk, stages = (k[x] for x in ("block_m", "block_n", "block_k", "num_stages"))
        assert isinstance(bm, int) and isinstance(bn, int) and isinstance(bk, int) and isinstance(stages, int)
        for what, value, key in (("block_m", bm, "m"), ("block_n", bn, "n"), ("block_k", bk, "k")):
            p = _within(what, value, v.cap(key, 16), key)
            if p:
                return p
        acc = k.get("acc")
        if v.operand_dtype == "f64" and acc is not None:
            return f"acc={acc} is narrower than the f64 operands; leave it undecided"
        if v.operand_dtype != "f64" and acc is None:
            return "acc is not decided"
        if acc == "f16" and v.operand_dtype != "f16":
            return f"acc=f16 needs f16 operands, not {v.operand_dtype}"
        path = tile_instruction(card, bm, bn, bk, warps, v.operand_dtype)  # what the compiler builds
        buffers = pipeline_buffers(card, path, stages)
        smem = buffers * (bm * bk * v.a_bytes + bk * bn * v.b_bytes)
        if card.smem_per_block_kib is not None and smem > card.smem_per_block_kib * 1024:
            return (f"shared memory {smem // 1024} KiB ({buffers} buffers of {bm}x{bk} and {bk}x{bn} tiles for "
                    f"{stages} stages) exceeds {card.smem_per_block_kib:g} KiB per block on {card.name}")
        acc_bytes = 2 if acc == "f16" else 8 if v.operand_dtype == "f64" else 4
        values = bm * bn * acc_bytes / 4 / threads
        if not path.startswith("wgmma_"):  # operand tiles are held in registers too (wgmma reads them in place)
            width = v.compute_bits // 8 if path == "none" else v.a_bytes
            values += (bm * bk + bk * bn) * width / 4 / threads
        p = _registers(card, values, threads, f"tile {bm}x{bn}x{bk}")
        if p:
            return p
        mma = k.get("mma")
        if mma is not None:
            assert isinstance(mma, str)
            return instruction_problem(mma, card, bm, bn, bk, warps, v.operand_dtype, acc if isinstance(acc, str)
                                       else None)
        return None
    block = k["block"]
    assert isinstance(block, int)
    p = _within("block", block, v.cap("row" if v.family == "row" else "flat", 16), v.family)
    if p:
        return p
    values = block * (v.compute_bits // 32) / threads
    return _registers(card, values, threads, f"block of {block}")


def _cpu_problem(v: KernelView, card: Card, k: dict[str, object]) -> str | None:
    threads = k["threads"]
    assert isinstance(threads, int)
    if card.cores is not None and threads > card.cores:
        return f"threads={threads} exceed the {card.cores} usable cores of {card.name}"
    vec = k["vec"]
    assert isinstance(vec, int)
    if v.family == "matmul":
        tm, tn, tk = (k[x] for x in ("tile_m", "tile_n", "tile_k"))
        assert isinstance(tm, int) and isinstance(tn, int) and isinstance(tk, int)
        for what, value, key in (("tile_m", tm, "m"), ("tile_n", tn, "n"), ("tile_k", tk, "k")):
            p = _within(what, value, v.cap(key), key)
            if p:
                return p
        if tn % vec:
            return f"vec={vec} does not divide tile_n={tn}"
        return dot_problem(v, card, k) or _micro_problem(v, card, k) or in_place_problem(v, k)
    return _within("vec", vec, v.cap("row" if v.family == "row" else "inner"), "innermost")


# `dot` -> the card instruction it needs, and the depth a pass (tile_k) must be a multiple of
DOT_NEEDS = {"dpbf16": ("avx512_bf16", 2), "amx": ("amx_bf16", 32), "fp16": ("avx512_fp16", 1)}
DOT_OPERANDS = {"dpbf16": "bf16", "amx": "bf16", "fp16": "f16"}  # the operands' type each `dot` multiplies


def dot_problem(v: KernelView, card: Card, k: dict[str, object]) -> str | None:
    """A matmul's `dot` the card or the generator cannot use: an instruction the card's probe did not find,
    operands other than bf16 into f32, an operand read in place, a reduction window whose starts leave the
    packed depth's boundaries (`window_problem`), or a micro-kernel or
    pass depth the instruction's layout does not take (as `c_micro.dot_problem` refuses them)."""
    dot = k.get("dot", "fma")
    if dot == "fma":
        return None
    assert isinstance(dot, str) and isinstance(v.shape, MatmulShape)
    need, depth = DOT_NEEDS[dot]
    if need not in card.tensor_cores:
        return f"dot={dot} needs {need}, which {card.name} does not list (its probe found none or no OS permission)"
    want = DOT_OPERANDS[dot]
    if (v.operand_dtype, v.b_bytes, v.shape.acc_dtype) != (want, 2, "f32"):
        return f"dot={dot} needs {want} A and B accumulating in f32, not {v.operand_dtype} into {v.shape.acc_dtype}"
    if k.get("pack_a") is False or k.get("pack_b") is False:
        return f"dot={dot} needs both operands packed"
    problem = window_problem(v.shape.window, dot)
    if problem is not None:
        return problem
    vec, unroll, tk = k["vec"], k["unroll"], k["tile_k"]
    assert isinstance(vec, int) and isinstance(unroll, int) and isinstance(tk, int)
    if dot == "dpbf16" and (k.get("simd") != 512 or vec % 16):
        return f"dot=dpbf16 needs simd=512 and vec a multiple of 16, not simd={k.get('simd')} vec={vec}"
    if dot == "fp16" and (k.get("simd") != 512 or vec % 32):
        return f"dot=fp16 needs simd=512 and vec a multiple of 32, not simd={k.get('simd')} vec={vec}"
    if dot == "amx" and k.get("prefetch_l2"):
        return "prefetch_l2 takes the fma and dpbf16 micro-kernels: dot=amx loads whole tiles of B"
    if dot == "amx" and (unroll not in (1, 2) or vec not in (16, 32)):
        return f"dot=amx needs unroll 1 or 2 (16-row tiles) and vec 16 or 32, not unroll={unroll} vec={vec}"
    cap_k = v.cap("k")
    if tk % depth and (cap_k is None or tk < cap_k):
        return f"dot={dot} needs tile_k a multiple of {depth} where the depth takes several passes, not {tk}"
    return None


def window_problem(window: Range | None, dot: str) -> str | None:
    """Why a reduction window (a split-K part's) cannot take `dot`, or None: its every start must fall on a
    boundary of the packed depth (a pair for dpbf16, a tile's 32 for amx), as B is packed from k = 0.
    (Refusing every window left a split-K part of a bf16 product on f32 FMAs: 14.7 ms against 7.5 for the
    unsplit product on dpbf16, a TinyLlama MLP's down projection at 128 rows on a Zen 4 EPYC.)"""
    if window is None or dot == "fma":
        return None
    step = DOT_NEEDS[dot][1]
    if window.start.offset % step or any(c % step for _, c in window.start.terms):
        return (f"dot={dot} takes a reduction window only where every start is a multiple of {step}, not "
                f"{' + '.join([*(f'{c}*{v}' for v, c in window.start.terms), str(window.start.offset)])}")
    return None


def registers_needed(mr: int, vec: int, lanes: int) -> int:
    """Vector registers an `mr` x `vec` micro-kernel holds at once: accumulators, one B row, one broadcast."""
    vpr = max(1, vec // max(1, lanes))
    return mr * vpr + vpr + 1


def _micro_problem(v: KernelView, card: Card, k: dict[str, object]) -> str | None:
    """A matmul micro-kernel the card cannot hold: registers too wide, or too many of them."""
    card_bits = card.simd_bits or 128
    simd = k.get("simd")
    if simd is not None:
        assert isinstance(simd, int)
        if simd > card_bits:
            return f"simd={simd} needs {simd}-bit vector registers; {card.name} has {card_bits}-bit ones"
    vec, unroll = k["vec"], k["unroll"]
    assert isinstance(vec, int) and isinstance(unroll, int)
    if k.get("dot") == "amx":  # the accumulators are AMX tiles (at most 2 x 2 of them, 8 tiles in all)
        return None
    if k.get("dot") == "fp16":  # per row: f32 accumulators (vec / 16) and f16 chunk sums (vec / 32); B; broadcast
        need = unroll * (vec // 16 + vec // 32) + vec // 32 + 1
        if need > register_count(card.arch, card_bits):
            return (f"micro-kernel {unroll}x{vec} on dot=fp16 needs {need} vector registers of 512 bits (f32 "
                    f"accumulators, f16 chunk sums, a B row and a broadcast); {card.name} has "
                    f"{register_count(card.arch, card_bits)}: it would spill")
        return None
    width = min(simd if isinstance(simd, int) else card_bits, vec * v.compute_bits)
    lanes = max(1, width // v.compute_bits)
    need, have = registers_needed(unroll, vec, lanes), register_count(card.arch, card_bits)
    if need > have:
        return (f"micro-kernel {unroll}x{vec} needs {need} vector registers of {width} bits (accumulators, a B row "
                f"and a broadcast); {card.name} has {have}: it would spill")
    return None


ACC_BITS = {"f32": 32, "f64": 64}  # accumulator types the packed matmul reads operands in place for


def in_place_problem(v: KernelView, k: dict[str, object]) -> str | None:
    """An operand a matmul cannot read in place (`pack_a` / `pack_b` false), as the generator refuses it.

    Packing is what converts: an operand stays in place only when already of the accumulator type;
    B only when row-major, with a static N that `vec` divides (no partial panel to pad with zeros).
    """
    assert isinstance(v.shape, MatmulShape)
    acc_bits = ACC_BITS.get(v.shape.acc_dtype)
    if k.get("pack_a") is False and (acc_bits is None or v.a_bytes * 8 != acc_bits
                                     or v.operand_dtype != v.shape.acc_dtype):
        return f"pack_a=false needs A of the accumulator type {v.shape.acc_dtype}, not {v.operand_dtype}"
    if k.get("pack_b") is False:
        vec = k["vec"]
        assert isinstance(vec, int)
        if acc_bits is None or v.b_bytes * 8 != acc_bits:
            return f"pack_b=false needs B of the accumulator type {v.shape.acc_dtype}"
        if v.shape.b_transposed:
            return "pack_b=false needs a row-major B (b[.., k, n]), not a transposed one"
        if v.n_extent is None or v.n_extent % vec:
            n = "dynamic" if v.n_extent is None else v.n_extent
            return f"pack_b=false needs a static N that vec={vec} divides (N is {n})"
    return None


def epilogue_rows(shape: MatmulShape) -> tuple[tuple[str, tuple[str, ...], bool], ...]:
    """(buffer, index, written) of each operand a matmul's epilogue reads, and each output it writes,
    by rows of the tile: indexed by the row (m) and ending in the column (n). What `prefetch_c`
    prefetches; the rule prefetches where one is read (a residual, a gate)."""
    found: dict[tuple[str, tuple[str, ...]], bool] = {}

    def loads(e: object) -> None:
        if isinstance(e, Load):
            if e.index and e.index[-1] == shape.n_var and shape.m_var in e.index:
                found.setdefault((e.buffer, e.index), False)
        for f in ("x", "a", "b"):
            sub = getattr(e, f, None)
            if sub is not None:
                loads(sub)

    for st in (*shape.epilogue, *shape.stores):
        loads(st.value)
    for st in shape.stores:
        if st.index and st.index[-1] == shape.n_var and shape.m_var in st.index:
            found[(st.buffer, st.index)] = True
    return tuple((b, i, w) for (b, i), w in sorted(found.items()))


def option_problem(kernel: Kernel, card: Card, knobs: dict[str, object],
                   sizes: dict[str, int] | None = None) -> str | None:
    """Why `knobs` cannot build `kernel` on `card` (at `sizes`, when given), or None when it can, statically."""
    return view_problem(view(kernel, sizes), card, knobs)


def view_problem(v: KernelView, card: Card, knobs: dict[str, object]) -> str | None:
    """`option_problem` on a kernel already read by `view`: the vocabulary, then `fit_problem`."""
    p = knobs_problem(knobs)
    if p is not None:
        return p
    return fit_problem(v, card, knobs)


def fit_problem(v: KernelView, card: Card, knobs: dict[str, object]) -> str | None:
    """Why knobs already in the vocabulary cannot build this kernel on `card`, or None.

    The enumerator checks its own options (hundreds per kernel) here: they are in the vocabulary
    by construction, which a test holds for every option on every kind of card."""
    if v.family == "extern":
        bad = sorted(n for n in knobs if not n.startswith("extern."))
        return f"an extern kernel takes extern.* knobs only, not {bad[0]!r}" if bad else None
    if is_library(knobs):
        return library_problem(v, knobs)
    allowed = FAMILY_KNOBS[(card.target, v.family)]
    for name in sorted(knobs):
        if name not in allowed:
            spec = SCHEDULE_KNOBS.get(name)
            other = f" (a {spec.target} knob)" if spec is not None and spec.target != card.target else ""
            return (f"knob {name!r}{other} is not one a {v.family} kernel on {card.target} decides "
                    f"({', '.join(allowed)})")
    missing = [n for n in allowed if n not in knobs and n not in OPTIONAL_KNOBS]
    if missing:
        return f"knob {missing[0]!r} is not decided"
    return _gpu_problem(v, card, knobs) if card.target == "cuda" else _cpu_problem(v, card, knobs)
