"""The prior's features: one function turns a fork's candidates into rows of numbers.

Seed 08, "Features: what the model actually sees". A row has three groups:

- hardware and regime (`hw.*`, `setting.rank`): `Card.numeric()` and a few ratios of it
  (bandwidth per SM, machine balance), the compile setting. The same for every candidate
  of a fork, so on its own it cannot change the fork's order; it changes how the
  candidate features count (a tree splits on the card first). A card described nowhere
  (None) has every hardware feature missing.
- structure (`st.*`): computed from the loop program at the benched sizes (family,
  extents, statement and operation counts, widths, bytes, flops), never stored; an
  `extern` kernel by a stable code of its name and its problem size.
- the candidate (`k.*`, `x.*`, `g.*`): knob values encoded by type (`acc` f32/f16 -> 0/1,
  the tensor-core instruction expanded into its shape), extern knobs under `x.<name>`,
  and derived geometry (`emmy_core.prior.geometry`);
- what other cards measured of the candidate (`tr.*`, `emmy_core.prior.transfer_features`):
  given by the caller from a transfer table that never holds the scored card's own rows;
  missing where no other card measured the candidate.

A knob a candidate has not decided is missing (NaN), never zero. The same function serves
the fit, the evaluation and the compile; it needs numpy only. Feature names are fixed by
`FEATURE_VERSION` except the `x.*` names, which come from the extern knobs a fit saw (an
artifact lists its own names; `matrix` fills any it lacks with NaN).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from emmy_core.ir import Extern, Program, facts, parse_sizes
from emmy_core.ir.family import ElementwiseShape, MatmulShape, RowShape, classify
from emmy_core.ir.sizes import extents
from emmy_core.ir.vocab import dtype_bytes
from emmy_core.prior.geometry import Context, candidate_columns, text_code
from emmy_core.prior.transfer_features import TRANSFER_NAMES
from emmy_core.targets.card import INSTRUCTION_FLAGS, NUMERIC_FIELDS, Card
from emmy_core.targets.cpu import cpu_vendor

FEATURE_VERSION = 5  # 2: the transfer columns (`tr.*`); 3: each other card answers at its nearest sizes;
# 4: `tr.sim` weighs a card of another vendor less (`emmy_core.targets.similarity`); 5: the library route is a
# candidate feature (`k.library`), and a CPU card's vendor and matrix instructions are hardware features

SETTING_FEATURE = {"deploy": 0.0, "rank": 1.0}
FAMILY_CODES = {"matmul": 0.0, "row": 1.0, "elementwise": 2.0, "extern": 3.0}
# A CPU card's matrix instructions (its `tensor_cores`) as features: whether torch's library or Emmy's kernel wins
# a product turns on them (and on the vendor, `hw.is_amd`: the libraries are tuned for their maker's CPUs).
CPU_FLAGS = {"hw.has_dpbf16": ("avx512_bf16",), "hw.has_amx": ("amx_bf16", "amx_int8"),
             "hw.has_fp16": ("avx512_fp16",)}
CPU_FLAG_NAMES: tuple[str, ...] = tuple(CPU_FLAGS)
HW_NAMES: tuple[str, ...] = (
    *(f"hw.{n}" for n in NUMERIC_FIELDS), "hw.compute_capability", "hw.is_amd",
    *(f"hw.{n}" for n in INSTRUCTION_FLAGS), "hw.is_cpu", "hw.bw_per_sm", "hw.balance", *CPU_FLAG_NAMES)
ST_NAMES: tuple[str, ...] = (
    "st.family", "st.log2_bytes", "st.log2_flops", "st.intensity", "st.log2_parallel", "st.loops", "st.lets",
    "st.reduces", "st.stores", "st.ops", "st.loads", "st.depth", "st.max_width", "st.min_width",
    "st.log2_m", "st.log2_n", "st.log2_k", "st.log2_batch", "st.log2_rows", "st.log2_row", "st.log2_flat",
    "st.log2_inner", "st.name_code", "st.problem_dims", "st.log2_p0", "st.log2_p1", "st.log2_p2")
REGIME_NAMES: tuple[str, ...] = ("setting.rank",)


def _log2(x: float | None) -> float:
    return math.log2(x) if x is not None and x > 0 else math.nan


def hardware(card: Card | None) -> dict[str, float]:
    """The `hw.*` features of a card (all missing for None)."""
    if card is None:
        return {}
    n = card.numeric()
    out = {f"hw.{k}": v for k, v in n.items()}
    out["hw.is_cpu"] = 1.0 if card.target == "cpu" else 0.0
    if card.target == "cpu":
        vendor = cpu_vendor(card.name)
        if vendor is not None:
            out["hw.is_amd"] = 1.0 if vendor == "amd" else 0.0
        for name, instructions in CPU_FLAGS.items():
            out[name] = 1.0 if any(i in card.tensor_cores for i in instructions) else 0.0
    if card.sms and card.mem_bw_gbs:
        out["hw.bw_per_sm"] = card.mem_bw_gbs / card.sms
    peak = card.fp32_tflops
    if peak and card.mem_bw_gbs:
        out["hw.balance"] = peak * 1e3 / card.mem_bw_gbs  # flops per byte at the roofline's ridge
    return out


def _sizes(sizes: Mapping[str, int] | str | None) -> dict[str, int]:
    if sizes is None:
        return {}
    if isinstance(sizes, str):
        return parse_sizes(sizes)
    return {str(k): int(v) for k, v in sizes.items()}


def context(kernel: Program | Extern, sizes: Mapping[str, int] | str | None, card: Card | None,
            setting: str) -> Context:
    """The shared part of every row of a fork (kernel at `sizes`, `card`, `setting`)."""
    shared: dict[str, float] = {}
    hw = hardware(card)
    shared.update(hw)
    shared["setting.rank"] = SETTING_FEATURE.get(setting, math.nan)
    if isinstance(kernel, Extern):
        p = [float(d) for d in kernel.problem]
        dims = {f"p{i}": v for i, v in enumerate(p)}
        total = math.prod(p) if p else math.nan
        shared.update({"st.family": FAMILY_CODES["extern"], "st.name_code": text_code(kernel.name),
                       "st.problem_dims": float(len(p)), "st.log2_parallel": _log2(total)})
        for i, v in enumerate(p[:3]):
            shared[f"st.log2_p{i}"] = _log2(v)
        return Context(kernel, "extern", dims, math.nan, 32, card, hw, shared)
    sz = _sizes(sizes)
    f = facts(kernel, sz)
    ext = extents(kernel, sz)
    shape = classify(kernel)
    widest_bytes = max(dtype_bytes(b.dtype) for b in kernel.buffers)
    compute_bits = 64 if any(b.dtype == "f64" for b in kernel.buffers) else 32
    ops = f.operations
    shared.update({
        "st.log2_bytes": _log2(f.bytes_moved), "st.log2_flops": _log2(f.flops), "st.intensity": f.intensity,
        "st.loops": float(f.statements.get("loop", 0)), "st.lets": float(f.statements.get("let", 0)),
        "st.reduces": float(f.statements.get("reduce", 0)), "st.stores": float(f.statements.get("store", 0)),
        "st.ops": float(sum(v for k, v in ops.items() if k not in ("load", "const", "store"))),
        "st.loads": float(ops.get("load", 0)), "st.depth": float(f.max_depth), "st.max_width": float(f.max_width),
        "st.min_width": float(f.min_width)})
    dims: dict[str, float]
    if isinstance(shape, MatmulShape):
        k = ext[shape.k] if shape.window is None else min(ext[shape.k], shape.window.length)
        batch = math.prod(ext[a] for a in shape.batch) * (ext[shape.parts] if shape.parts else 1)
        dims = {"m": float(ext[shape.m]), "n": float(ext[shape.n]), "k": float(k), "batch": float(batch)}
        operand = float(dtype_bytes(kernel.buffer(shape.a).dtype))
        parallel = dims["m"] * dims["n"] * dims["batch"]
    elif isinstance(shape, RowShape):
        dims = {"rows": float(math.prod(ext[a] for a in shape.rows)), "row": float(ext[shape.row])}
        operand = float(widest_bytes)
        parallel = dims["rows"]
    else:
        assert isinstance(shape, ElementwiseShape)
        dims = {"flat": float(math.prod(ext[a] for a in shape.axes)), "inner": float(ext[shape.axes[-1]])}
        operand = float(widest_bytes)
        parallel = dims["flat"]
    family = shape.family
    shared["st.family"] = FAMILY_CODES[family]
    shared["st.log2_parallel"] = _log2(parallel)
    for key, value in dims.items():
        shared[f"st.log2_{key}"] = _log2(value)
    return Context(kernel, family, dims, operand, compute_bits, card, hw, shared)


@dataclass(frozen=True)
class FeatureRows:
    """Feature rows of one fork: `names` (columns) and `values` (one row per candidate, float64)."""

    names: tuple[str, ...]
    values: np.ndarray

    def matrix(self, names: Sequence[str]) -> np.ndarray:
        """The columns `names` in that order; a name these rows lack is all NaN."""
        index = {n: i for i, n in enumerate(self.names)}
        out = np.full((self.values.shape[0], len(names)), np.nan)
        for j, n in enumerate(names):
            i = index.get(n)
            if i is not None:
                out[:, j] = self.values[:, i]
        return out


def fork_features(kernel: Program | Extern, sizes: Mapping[str, int] | str | None, card: Card | None,
                  setting: str, candidates: Sequence[Mapping[str, object]],
                  transfer: np.ndarray | None = None, knobs: Mapping[str, np.ndarray] | None = None) -> FeatureRows:
    """Feature rows for `candidates` (knob dicts) competing at one fork: THE feature function.

    `transfer`: the candidates' `tr.*` columns (`TransferTable.columns`, from the cards other than this
    one); None: nobody else measured them, every transfer feature missing. `knobs`: the candidates'
    `knob_columns`, where the caller keeps them for a pool it scores at many sizes."""
    ctx = context(kernel, sizes, card, setting)
    n = len(candidates)
    columns = candidate_columns(ctx, candidates, knobs)
    names = [*HW_NAMES, *REGIME_NAMES, *ST_NAMES]
    values = np.empty((n, len(names) + len(TRANSFER_NAMES) + len(columns)))
    for j, name in enumerate(names):
        values[:, j] = ctx.shared.get(name, math.nan)
    k = len(names)
    values[:, k:k + len(TRANSFER_NAMES)] = math.nan if transfer is None else transfer
    for j, col in enumerate(columns.values(), start=k + len(TRANSFER_NAMES)):
        values[:, j] = col
    return FeatureRows((*names, *TRANSFER_NAMES, *columns), values)


def with_transfer(rows: FeatureRows, transfer: np.ndarray) -> FeatureRows:
    """`rows` with their `tr.*` columns replaced by `transfer` (a fit recomputes them per fold)."""
    j = rows.names.index(TRANSFER_NAMES[0])
    values = rows.values.copy()
    values[:, j:j + len(TRANSFER_NAMES)] = transfer
    return FeatureRows(rows.names, values)
