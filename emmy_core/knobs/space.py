"""Candidate enumeration: the ordered options of a kernel's schedule fork on a card.

A fork is (kernel, rule, ordered options). `candidates(kernel, card)` is the one pure
function both the fit and the compile rank over: the same kernel and card give the same
list in any process (tuples and fixed loop orders only; no set or hash order). Its FIRST
option is the safe default: for a GPU kernel the same assignment on every card of the
table (a 64x64x32 tile, 4 warps, 2 stages, fp32 accumulation, the instruction left to
the compiler), for a CPU kernel one sized from the card (its SIMD width, vector registers
and L2: see `knobs.cpu_matmul`) on all usable cores; the rest follow in a fixed order. Options are knob dicts in the card's target vocabulary. Options a card
cannot build are dropped (`include_invalid=True` keeps them; `candidate_options` returns
each marked with its problem). The pool depends on the kernel's static extents and the
card only, never on a dynamic axis's expected size: kernels that share an identity share
a pool. Extern kernels (Kernel Tuner's) have no Emmy rule: their pool is whatever was
measured, so they get an empty tuple.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from emmy_core.ir.nodes import Kernel
from emmy_core.knobs.cpu_matmul import cpu_first_matmul, cpu_matmul_options, fits, pow2s, thread_counts
from emmy_core.knobs.instructions import tile_instruction
from emmy_core.knobs.validity import fit_problem, view_problem
from emmy_core.knobs.view import KernelView, view
from emmy_core.knobs.vocab import canonical_knobs
from emmy_core.targets.card import Card

Knobs = dict[str, object]
CPU_UNROLL_ROW = (1, 2, 4, 8)  # a CPU row kernel's unroll options

# GPU matmul space (Triton-style): tiles, depth, warps, stages, grouping, accumulator.
MM_BLOCKS = (16, 32, 64, 128, 256)
MM_DEPTHS = (16, 32, 64, 128)
MM_WARPS = (2, 4, 8, 16)
MM_STAGES = (2, 3, 4)
MM_GROUPS = (8,)  # grouping along M for L2 reuse; 1 where one tile covers M
MM_MAX_ASPECT = 4
MM_MAX_PANEL = 24576  # block_k x (block_m + block_n) elements staged per pipeline stage
ACC_PER_THREAD = (16, 128)  # accumulator values per thread a sensible tile keeps
# GPU row / elementwise: elements per program and warps.
ROW_WARPS = (1, 2, 4, 8, 16, 32)
EW_BLOCKS = (256, 512, 1024, 2048, 4096, 8192)
EW_WARPS = (1, 2, 4, 8, 16)
MAX_PER_THREAD = 64


@dataclass(frozen=True)
class Candidate:
    """One enumerated option, why the card cannot build it (None: it can), and its canonical knob
    JSON (`canonical_knobs`, which the enumerator computes anyway: a schedule id is its digest)."""

    knobs: Knobs
    problem: str | None
    canonical: str


def _lanes(v: KernelView, card: Card) -> int:
    return max(1, (card.simd_bits or 128) // v.compute_bits)


def first_option(kernel_view: KernelView, card: Card) -> Knobs:
    """The rule's safe default for a kernel on a card (the first option of its pool)."""
    v = kernel_view
    if card.target == "cuda":
        if v.family == "matmul":
            f64 = v.operand_dtype == "f64"
            k: Knobs = {"block_m": min(64, v.cap("m", 16) or 64), "block_n": min(64, v.cap("n", 16) or 64),
                        "block_k": min(16 if f64 else 32, v.cap("k", 16) or 32), "num_warps": 4,
                        "num_stages": 2, "group_m": 8}
            if not f64:
                k["acc"] = "f32"
            return k
        block = min(1024, v.cap("row" if v.family == "row" else "flat", 16) or 1024)
        return {"block": block, "num_warps": max(1, min(4, block // 256))}
    cores = card.cores or 1
    if v.family == "matmul":
        return cpu_first_matmul(v, card)
    vec = min(_lanes(v, card), v.cap("row" if v.family == "row" else "inner") or 64, 64)
    if v.family == "row":
        return {"vec": vec, "unroll": 1, "threads": cores}
    return {"vec": vec, "threads": cores}


def _gpu_matmul(v: KernelView, card: Card) -> list[Knobs]:
    cm, cn, ck = v.cap("m", 16), v.cap("n", 16), v.cap("k", 16)
    accs: tuple[str | None, ...] = ("f32", "f16") if v.operand_dtype == "f16" else \
        (None,) if v.operand_dtype == "f64" else ("f32",)
    min_area = min(512, (cm or 256) * (cn or 256))
    out: list[Knobs] = []
    for bm in MM_BLOCKS:
        for bn in MM_BLOCKS:
            if not (fits(bm, cm) and fits(bn, cn)) or max(bm, bn) > MM_MAX_ASPECT * min(bm, bn):
                continue
            if not min_area <= bm * bn <= 256 * 128:
                continue
            for bk in MM_DEPTHS:
                if not fits(bk, ck) or (bk == 16 and (ck is None or ck > 16)) or bk * (bm + bn) > MM_MAX_PANEL:
                    continue
                trips = None if ck is None else max(1, ck // bk)
                for warps in MM_WARPS:
                    per_thread = bm * bn / (warps * 32)
                    if not ACC_PER_THREAD[0] <= per_thread <= ACC_PER_THREAD[1] and not (
                            bm * bn <= 1024 and warps == 2):
                        continue
                    for stages in MM_STAGES:
                        if trips is not None and stages > max(2, trips):
                            continue
                        groups = (1,) if cm is not None and bm >= cm else MM_GROUPS
                        for group in groups:
                            for acc in accs:
                                k: Knobs = {"block_m": bm, "block_n": bn, "block_k": bk, "num_warps": warps,
                                            "num_stages": stages, "group_m": group}
                                if acc is not None:
                                    k["acc"] = acc
                                k["mma"] = tile_instruction(card, bm, bn, bk, warps, v.operand_dtype)
                                out.append(k)
    return out


def _gpu_blocked(v: KernelView, card: Card) -> list[Knobs]:
    warp = 32  # blocks are sized for 32-wide warps on every card so that pools compare across vendors
    out: list[Knobs] = []
    if v.family == "row":
        cap = v.cap("row", 16)
        high = min(65536, cap) if cap is not None else 8192
        blocks = pow2s(max(16, high // 16), high)
        warps_set = ROW_WARPS
    else:
        cap = v.cap("flat", 16)
        blocks = tuple(b for b in EW_BLOCKS if fits(b, cap)) or ((cap,) if cap is not None else ())
        warps_set = EW_WARPS
    for block in blocks:
        for warps in warps_set:
            if block < warps * warp and warps > 1:
                continue
            if block / (warps * warp) > MAX_PER_THREAD:
                continue
            out.append({"block": block, "num_warps": warps})
    return out


def _cpu_options(v: KernelView, card: Card) -> list[Knobs]:
    lanes = _lanes(v, card)
    threads = thread_counts(card)
    out: list[Knobs] = []
    if v.family == "matmul":
        return cpu_matmul_options(v, card)
    cap = v.cap("row" if v.family == "row" else "inner")
    vecs = tuple(x for x in sorted({max(1, lanes // 2), lanes, lanes * 2}) if fits(x, cap) and x <= 64)
    for vec in vecs or (1,):
        for unroll in (CPU_UNROLL_ROW if v.family == "row" else (None,)):
            for t in threads:
                k: Knobs = {"vec": vec, "unroll": unroll, "threads": t} if unroll else {"vec": vec, "threads": t}
                out.append(k)
    return out


def candidate_options(kernel: Kernel, card: Card) -> tuple[Candidate, ...]:
    """Every option the rule enumerates for `kernel` on `card`, in order, each marked with its problem."""
    v = view(kernel)
    if v.family == "extern":
        return ()
    first = first_option(v, card)
    problem = view_problem(v, card, first)
    if problem is not None:  # a rule whose default cannot build is a bug, never a fork to resolve
        raise RuntimeError(f"the first option {canonical_knobs(first)} of {v.family} kernel is invalid on "
                           f"{card.name}: {problem}")
    if card.target == "cuda":
        rest = _gpu_matmul(v, card) if v.family == "matmul" else _gpu_blocked(v, card)
    else:
        rest = _cpu_options(v, card)
    first_key = canonical_knobs(first)
    seen: dict[str, Candidate] = {first_key: Candidate(first, None, first_key)}
    for k in rest:
        key = canonical_knobs(k)
        if key in seen:
            continue
        if "mma" in k and canonical_knobs({n: x for n, x in k.items() if n != "mma"}) == first_key:
            continue  # the default's tile with its instruction named is the default
        seen[key] = Candidate(k, fit_problem(v, card, k), key)
    return tuple(seen.values())


def candidates(kernel: Kernel, card: Card, include_invalid: bool = False) -> tuple[Knobs, ...]:
    """The ordered options of `kernel`'s schedule fork on `card`; the first is the safe default.

    Options the card cannot build are left out unless `include_invalid`. Extern kernels: ().
    """
    return tuple(dict(o.knobs) for o in candidate_options(kernel, card) if include_invalid or o.problem is None)


def sample_candidates(kernel: Kernel, card: Card, n: int, seed: int) -> tuple[Knobs, ...]:
    """A seeded sample of `n` valid candidates that always includes the first, in pool order."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"sample size must be a positive integer, not {n!r}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise ValueError(f"seed must be an integer, not {seed!r}")
    pool = candidates(kernel, card)
    if n >= len(pool):
        return pool
    picked = sorted(random.Random(seed).sample(range(1, len(pool)), n - 1))
    return (pool[0], *(pool[i] for i in picked))
