"""Candidate features: knob values encoded by type, and the geometry derived from them.

Knobs (`k.<name>` for Emmy's schedule knobs, `x.<name>` for an extern kernel's): integers as
they are, `acc` f32/f16 as 0/1, the tensor-core instruction `mma` expanded into its
properties (`k.mma_none`, `k.mma_m`, ...), an extern knob's text value as a stable code.
A knob the candidate does not set is NaN.

Geometry (`g.*`), computed per candidate from its knobs, the kernel's extents and the card
(NaN wherever an input is unknown), so that what it says transfers across kernels and cards:

- the tile: area, aspect (log2 of rows over columns), reuse (area over perimeter), each tile
  side relative to the extent it covers, the padding a tile wastes past the extents, trips
  along the reduction;
- the work: programs (tiles, rows or blocks) launched, threads per program, elements per
  thread;
- the card: shared memory per program (pipeline buffers x operand tiles, as the validity
  check counts it) and its fraction of an SM; on a CPU the tile's working set over L1 and
  L2; groups resident per SM (threads, shared memory and registers each bound it) or per
  core; waves of programs over the card and the fill of the last one (the tail);
- an extern kernel through Kernel Tuner's conventions: `block_size_x/y/z` are a thread
  block's sides and `tile_size_x/y` (or `tile_size`) the outputs per thread along them.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import chain
from operator import itemgetter
from typing import TYPE_CHECKING

import numpy as np

from emmy_core.knobs.instructions import INSTRUCTIONS, tile_instruction
from emmy_core.knobs.vocab import EXTERN_PREFIX, SCHEDULE_KNOBS

if TYPE_CHECKING:
    from emmy_core.ir import Extern, Program
    from emmy_core.targets.card import Card

NAN = math.nan
EXTERN_FEATURE_PREFIX = "x."  # an extern knob `extern.<name>` is the feature `x.<name>`
MMA_PROPS = ("none", "m", "n", "k", "group_threads", "async")
# Knobs no feature of this version reads: the CPU matmul's `dot` and `prefetch_l2` (appended after the shipped fit,
# and measured on no peer card) are left to the rule's first option under a prior
# (`emmy_core.evidence.sources.within_sight`) and to measurements, so the shipped prior still reproduces from the freeze it was fitted on. The library
# route's `library` is a feature (`k.library`: torch's kernel, NaN for Emmy's own), so the prior learns where
# the library wins from the card's description and the kernel's facts; its release is not (a row of another
# release is never scored: `knobs.route.library_problem`).
UNFEATURED_KNOBS = ("dot", "library_version", "prefetch_l2")
KNOB_NAMES: tuple[str, ...] = (
    *(f"k.{n}" for n in SCHEDULE_KNOBS if n != "mma" and n not in UNFEATURED_KNOBS),
    *(f"k.mma_{p}" for p in MMA_PROPS))
GEOMETRY_NAMES: tuple[str, ...] = (
    "g.tile_area", "g.tile_aspect", "g.tile_reuse", "g.rel_m", "g.rel_n", "g.rel_k", "g.pad", "g.k_trips",
    "g.log2_programs", "g.threads", "g.per_thread", "g.warp_fill", "g.smem_kib", "g.smem_frac", "g.fp_l1",
    "g.fp_l2", "g.thread_frac", "g.vec_lanes", "g.resident", "g.log2_waves", "g.tail")
REG_OVERHEAD = 48  # per-thread registers beyond the accumulator, as emmy_core.knobs.validity counts them
MAX_RESIDENT = 32.0
ACC_CODES = {"f32": 0.0, "f16": 1.0}  # programs resident per SM at most (no card in the table allows more)


@dataclass(frozen=True)
class Context:
    """What every candidate of one fork shares: the kernel at its sizes, the card, the setting."""

    kernel: Program | Extern
    family: str
    dims: dict[str, float]  # m, n, k, batch (matmul); rows, row (row); flat, inner (elementwise); p0.. (extern)
    operand_bytes: float  # width of the operands (matmul a) or the widest buffer, bytes
    compute_bits: int
    card: Card | None
    hw: dict[str, float]
    shared: dict[str, float]  # hardware, regime and structure features (built by emmy_core.prior.features)


def text_code(text: str) -> float:
    """A stable number in [0, 1) for a piece of text (a kernel name, an extern knob's text value)."""
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:6], "big") / 2.0**48


def _mma_props(name: object) -> tuple[float, ...]:
    info = INSTRUCTIONS.get(name) if isinstance(name, str) else None
    if info is None:
        return (1.0, NAN, NAN, NAN, NAN, NAN) if name == "none" else (NAN,) * 6
    return (0.0, float(info.m), float(info.n), float(info.k), float(info.group_threads), float(info.asynchronous))


def _encode(value: object) -> float:
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        return text_code(value)
    return NAN


def knob_features(names: Sequence[str]) -> list[int]:
    """The positions of the knob columns (`k.*`, and `x.*` for an extern's knobs) among feature `names`."""
    return [j for j, n in enumerate(names) if n.startswith(("k.", EXTERN_FEATURE_PREFIX))]


def _column(values: Sequence[object]) -> np.ndarray:
    """Encoded values of one knob over the candidates (None: not set, NaN)."""
    try:
        return np.array(values, dtype=np.float64)  # numbers and bools; None is NaN
    except (TypeError, ValueError):
        codes = {v: _encode(v) for v in set(values) if v is not None}  # each distinct value encoded once
        return np.array([NAN if v is None else codes[v] for v in values], dtype=np.float64)


def _transposed(candidates: Sequence[Mapping[str, object]], keys: tuple[str, ...]) -> list[tuple[object, ...]]:
    """Per key, its value in every candidate (None where one does not set it), read row by row in C where
    every candidate sets every key (a rule's pool), else key by key."""
    if not keys or not candidates:
        return [(None,) * len(candidates) for _ in keys]
    try:
        if len(keys) == 1:
            return [tuple(c[keys[0]] for c in candidates)]
        return list(zip(*map(itemgetter(*keys), candidates), strict=True))
    except KeyError:
        return [tuple(c.get(k) for c in candidates) for k in keys]


def knob_columns(candidates: Sequence[Mapping[str, object]]) -> dict[str, np.ndarray]:
    """`k.*` (fixed names) and `x.*` (the extern knobs these candidates set) columns."""
    n = len(candidates)
    cols: dict[str, np.ndarray] = {name: np.full(n, NAN) for name in KNOB_NAMES}
    extern: dict[str, np.ndarray] = {}
    keys = dict.fromkeys(chain.from_iterable(candidates))  # every knob any candidate sets, in first-seen order
    for key, values in zip(keys, _transposed(candidates, tuple(keys)), strict=True):
        if key == "mma":
            props = {v: _mma_props(v) for v in set(values)}
            mma = np.array([props[v] for v in values], dtype=np.float64).reshape(n, len(MMA_PROPS))
            for j, prop in enumerate(MMA_PROPS):
                cols[f"k.mma_{prop}"] = mma[:, j]
        elif key == "acc":
            cols["k.acc"] = np.array([ACC_CODES.get(v, NAN) for v in values], dtype=np.float64)  # type: ignore[arg-type]
        elif key.startswith(EXTERN_PREFIX):
            extern[EXTERN_FEATURE_PREFIX + key[len(EXTERN_PREFIX):]] = _column(values)
        elif f"k.{key}" in cols:
            cols[f"k.{key}"] = _column(values)
    cols.update(sorted(extern.items()))
    return cols


def _ceil_div(a: np.ndarray | float, b: np.ndarray) -> np.ndarray:
    return np.ceil(np.asarray(a, dtype=float) / b)


def _card(ctx: Context, field: str) -> float:
    v = getattr(ctx.card, field, None) if ctx.card is not None else None
    return float(v) if v is not None else NAN


def _waves(g: dict[str, np.ndarray], programs: np.ndarray, slots: np.ndarray | float) -> None:
    """Waves of `programs` over `slots` concurrent programs, and the fill of the last wave (1: full)."""
    waves = programs / slots
    g["g.log2_programs"] = np.log2(programs)
    g["g.log2_waves"] = np.log2(waves)
    g["g.tail"] = programs / (np.ceil(waves) * slots)


def _tile(g: dict[str, np.ndarray], rows: np.ndarray, cols: np.ndarray, depth: np.ndarray | None,
          dims: Mapping[str, float]) -> np.ndarray:
    """Tile shape features of a matrix product's rows x cols (x depth) tile; returns the programs."""
    m, n, k, batch = (dims.get(x, NAN) for x in ("m", "n", "k", "batch"))
    g["g.tile_area"] = rows * cols
    g["g.tile_aspect"] = np.log2(rows / cols)
    g["g.tile_reuse"] = rows * cols / (rows + cols)
    g["g.rel_m"], g["g.rel_n"] = rows / m, cols / n
    mt, nt = _ceil_div(m, rows), _ceil_div(n, cols)
    g["g.pad"] = mt * rows * nt * cols / (m * n) - 1.0
    if depth is not None:
        g["g.rel_k"] = depth / k
        g["g.k_trips"] = _ceil_div(k, depth)
    return mt * nt * batch


def _gpu(ctx: Context, k: dict[str, np.ndarray], candidates: Sequence[Mapping[str, object]],
         g: dict[str, np.ndarray]) -> None:
    warps = k["k.num_warps"]
    warp = _card(ctx, "warp_size")
    threads = warps * warp
    g["g.threads"] = threads
    sms, smem_sm = _card(ctx, "sms"), _card(ctx, "smem_per_sm_kib") * 1024
    regs_sm, threads_sm = _card(ctx, "regs_per_sm"), _card(ctx, "max_threads_per_sm")
    if ctx.family == "matmul":
        bm, bn, bk, stages = k["k.block_m"], k["k.block_n"], k["k.block_k"], k["k.num_stages"]
        programs = _tile(g, bm, bn, bk, ctx.dims)
        g["g.per_thread"] = bm * bn / threads
        buffers = _pipeline_buffers(ctx, candidates, stages)
        smem = buffers * (bm * bk + bk * bn) * ctx.operand_bytes
        g["g.smem_kib"] = smem / 1024
        g["g.smem_frac"] = smem / smem_sm
        acc_bytes = np.where(k["k.acc"] == 1.0, 2.0, 4.0)
        regs = bm * bn * acc_bytes / 4 / threads + REG_OVERHEAD
        by_smem = np.floor(smem_sm / np.maximum(smem, 1.0))
    else:
        block = k["k.block"]
        extent = ctx.dims.get("row", ctx.dims.get("flat", NAN))
        g["g.tile_area"] = block
        g["g.rel_n"] = block / extent
        g["g.pad"] = _ceil_div(extent, block) * block / extent - 1.0
        g["g.per_thread"] = block / threads
        if ctx.family == "row":
            g["g.k_trips"] = _ceil_div(extent, block)
            programs = np.full(len(block), ctx.dims.get("rows", NAN))
        else:
            programs = _ceil_div(extent, block)
        regs = block * (ctx.compute_bits / 32) / threads + REG_OVERHEAD
        by_smem = np.full(len(block), np.inf)
    resident = np.minimum.reduce([np.floor(threads_sm / threads), by_smem, np.floor(regs_sm / (regs * threads)),
                                  np.full(len(warps), MAX_RESIDENT)])
    resident = np.where(np.isnan(resident), NAN, np.maximum(resident, 1.0))
    g["g.resident"] = resident
    _waves(g, programs, sms * resident)


def _pipeline_buffers(ctx: Context, candidates: Sequence[Mapping[str, object]], stages: np.ndarray) -> np.ndarray:
    """Operand-tile copies kept in shared memory (emmy_core.knobs.validity.pipeline_buffers, vectorised)."""
    card = ctx.card
    if card is None:
        return np.full(len(stages), NAN)
    if card.vendor != "nvidia":
        return stages
    wgmma = np.zeros(len(stages), dtype=bool)
    for i, c in enumerate(candidates):
        mma = c.get("mma")
        if not isinstance(mma, str):
            bm, bn, bk, w = (c.get(x) for x in ("block_m", "block_n", "block_k", "num_warps"))
            if not all(isinstance(v, int) for v in (bm, bn, bk, w)):
                continue
            mma = tile_instruction(card, bm, bn, bk, w, "f16" if ctx.operand_bytes == 2 else "f32")  # type: ignore[arg-type]
        wgmma[i] = mma.startswith("wgmma_")
    return np.where(wgmma, stages, np.maximum(stages - 1, 1))


def _cpu(ctx: Context, k: dict[str, np.ndarray], g: dict[str, np.ndarray]) -> None:
    threads, vec = k["k.threads"], k["k.vec"]
    cores = _card(ctx, "cores")
    lanes = _card(ctx, "simd_bits") / ctx.compute_bits
    g["g.threads"] = threads
    g["g.thread_frac"] = threads / cores
    g["g.vec_lanes"] = vec / lanes
    l1, l2 = _card(ctx, "l1d_kib") * 1024, _card(ctx, "l2_kib") * 1024
    if ctx.family == "matmul":
        tm, tn, tk = k["k.tile_m"], k["k.tile_n"], k["k.tile_k"]
        programs = _tile(g, tm, tn, tk, ctx.dims)
        footprint = (tm * tk + tk * tn) * ctx.operand_bytes + tm * tn * ctx.compute_bits / 8
        g["g.per_thread"] = tm * tn / vec
    elif ctx.family == "row":
        row = ctx.dims.get("row", NAN)
        step = vec * np.where(np.isnan(k["k.unroll"]), 1.0, k["k.unroll"])
        g["g.tile_area"] = step
        g["g.rel_n"] = step / row
        g["g.k_trips"] = _ceil_div(row, step)
        programs = np.full(len(threads), ctx.dims.get("rows", NAN))
        footprint = np.full(len(threads), row * ctx.operand_bytes)
        g["g.per_thread"] = programs / threads
    else:
        inner = ctx.dims.get("inner", NAN)
        g["g.tile_area"] = vec
        g["g.rel_n"] = vec / inner
        g["g.pad"] = _ceil_div(inner, vec) * vec / inner - 1.0
        programs = np.full(len(threads), ctx.dims.get("flat", NAN) / inner)
        footprint = np.full(len(threads), inner * ctx.operand_bytes)
        g["g.per_thread"] = ctx.dims.get("flat", NAN) / threads
    g["g.fp_l1"], g["g.fp_l2"] = footprint / l1, footprint / l2
    g["g.resident"] = np.full(len(threads), 1.0)
    _waves(g, programs, threads)


def _extern(ctx: Context, x: dict[str, np.ndarray], g: dict[str, np.ndarray], n: int) -> None:
    """Kernel Tuner's conventions: block_size_x/y/z the block's sides, tile_size_x/y (tile_size) per thread."""
    blocks = [x.get(f"x.block_size_{a}") for a in "xyz"]
    if all(b is None for b in blocks):
        return
    ones = np.ones(n)
    bx, by, bz = (np.where(np.isnan(b), 1.0, b) if b is not None else ones for b in blocks)
    tiles = [x.get("x.tile_size_x", x.get("x.tile_size")), x.get("x.tile_size_y")]
    tx, ty = (np.where(np.isnan(t), 1.0, t) if t is not None else ones for t in tiles)
    threads = bx * by * bz
    warp = _card(ctx, "warp_size")
    g["g.threads"] = threads
    g["g.tile_area"] = tx * ty
    g["g.per_thread"] = tx * ty
    g["g.warp_fill"] = threads / (np.ceil(threads / warp) * warp)
    g["g.tile_aspect"] = np.log2((bx * tx) / (by * ty))
    p = [ctx.dims.get(f"p{i}", 1.0) for i in range(3)]
    g["g.rel_m"], g["g.rel_n"] = bx * tx / p[0], by * ty / p[1]
    programs = _ceil_div(p[0], bx * tx) * _ceil_div(p[1], by * ty) * _ceil_div(p[2], bz)
    used = bx * tx * _ceil_div(p[0], bx * tx) * by * ty * _ceil_div(p[1], by * ty)
    g["g.pad"] = used / (p[0] * p[1]) - 1.0
    threads_sm = _card(ctx, "max_threads_per_sm")
    resident = np.maximum(np.minimum(np.floor(threads_sm / threads), MAX_RESIDENT), 1.0)
    g["g.resident"] = resident
    _waves(g, programs, _card(ctx, "sms") * resident)


def candidate_columns(ctx: Context, candidates: Sequence[Mapping[str, object]],
                      knobs: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Every candidate feature column (`k.*`, `g.*`, then the `x.*` the candidates set) for one fork.
    `knobs`: `knob_columns(candidates)` computed already (they depend on the candidates alone, so a pool
    scored at many sizes encodes its knobs once); read, never written."""
    n = len(candidates)
    k = dict(knobs) if knobs is not None else knob_columns(candidates)
    g: dict[str, np.ndarray] = {name: np.full(n, NAN) for name in GEOMETRY_NAMES}
    with np.errstate(divide="ignore", invalid="ignore"):
        if ctx.family == "extern":
            _extern(ctx, k, g, n)
        elif not np.isnan(k["k.num_warps"]).all():
            _gpu(ctx, k, candidates, g)
        elif not np.isnan(k["k.threads"]).all():
            _cpu(ctx, k, g)
        for col in g.values():
            col[~np.isfinite(col)] = NAN
    fixed = {name: k.pop(name) for name in KNOB_NAMES}
    return {**fixed, **g, **k}
