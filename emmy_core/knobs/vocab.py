"""The two knob vocabularies: schedule knobs (closed, typed, per target) and structural decisions.

Schedule knobs decide how one kernel runs and never change which kernels exist. Each has
a type: `int` (a range), `pow2` (a power of two in a range), `enum` (a closed set of
strings) or `bool`. Knobs of kernels defined outside Emmy (Kernel Tuner) live in the
`extern.` namespace: `extern.<NAME>` with an int, float or short string value.

Structural decisions change which kernels exist: `cut:<seam>` (a fusion seam cut) and
`split:<axis>=<parts>` (a reduction split across blocks). They are never schedule knobs;
`decision_in_knobs` finds a knob assignment that spells one, which the store refuses.
Raising `KNOB_VOCAB_VERSION` is required for any incompatible change of names or types; knobs
are only ever appended (a knob keeps its name, type and meaning), which needs no new version.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass

KNOB_VOCAB_VERSION = 1
_VERSION = re.compile(r"[0-9][0-9A-Za-z.+_-]{0,39}")  # a library's release name (torch.__version__)


@dataclass(frozen=True)
class KnobSpec:
    name: str
    target: str  # cuda | cpu | any (the library route: a knob of every target)
    kind: str  # int | pow2 | enum | bool | version
    low: int = 0
    high: int = 0
    choices: tuple[str, ...] = ()
    doc: str = ""

    def problem(self, value: object) -> str | None:
        """Why `value` is not a value of this knob, or None."""
        if self.kind == "bool":
            return None if isinstance(value, bool) else f"{self.name} takes true or false"
        if self.kind == "version":
            if isinstance(value, str) and _VERSION.fullmatch(value):
                return None
            return f"{self.name} takes a release name such as 2.13.0 or 2.13.0+cpu"
        if self.kind == "enum":
            if isinstance(value, str) and value in self.choices:
                return None
            return f"{self.name} takes one of {', '.join(self.choices)}"
        if not isinstance(value, int) or isinstance(value, bool):
            return f"{self.name} takes an integer"
        if not self.low <= value <= self.high:
            return f"{self.name} must be in {self.low}..{self.high}"
        if self.kind == "pow2" and value & (value - 1):
            return f"{self.name} must be a power of two"
        return None


def _k(name: str, target: str, kind: str, low: int = 0, high: int = 0, choices: tuple[str, ...] = (),
       doc: str = "") -> KnobSpec:
    return KnobSpec(name, target, kind, low, high, choices, doc)


# Appended only (existing values keep their meaning): mma_m16n8k8 is Turing's fp16 tensor-core
# instruction, mfma_16x16x16 CDNA's smaller matrix instruction, wmma_16x16x16 RDNA3's, and the
# other wgmma widths Hopper issues for narrower or wider tiles. Which card offers which:
# emmy_core.targets (gpus.json); their shapes: emmy_core.knobs.instructions.
TENSOR_CORE_INSTRUCTIONS = ("none", "mma_m16n8k16", "wgmma_m64n64k16", "wgmma_m64n128k16", "mfma_32x32x8",
                            "mma_m16n8k8", "mfma_16x16x16", "wmma_16x16x16", "wgmma_m64n8k16",
                            "wgmma_m64n16k16", "wgmma_m64n32k16", "wgmma_m64n256k16")

# The CPU matmul's multiply instructions (knob `dot`; appended only). Which a CPU card offers is in its
# `tensor_cores` (emmy_core.targets.cpu: `avx512_bf16`, `amx_bf16`, `avx512_fp16`); "fma" needs none.
CPU_DOT_INSTRUCTIONS = ("fma", "dpbf16", "amx", "fp16")

SCHEDULE_KNOBS: dict[str, KnobSpec] = {
    k.name: k
    for k in (
        # cuda (Triton)
        _k("block_m", "cuda", "pow2", 16, 256, doc="rows of the output tile"),
        _k("block_n", "cuda", "pow2", 16, 256, doc="columns of the output tile"),
        _k("block_k", "cuda", "pow2", 16, 256, doc="depth of one step along the reduction"),
        _k("block", "cuda", "pow2", 16, 65536, doc="elements a program handles along the row / flat axis"),
        _k("num_warps", "cuda", "pow2", 1, 32, doc="warps per program"),
        _k("num_stages", "cuda", "int", 1, 8, doc="software-pipelining stages"),
        _k("group_m", "cuda", "int", 1, 64, doc="programs grouped along M for L2 reuse"),
        _k("acc", "cuda", "enum", choices=("f32", "f16"), doc="accumulator data type"),
        _k("mma", "cuda", "enum", choices=TENSOR_CORE_INSTRUCTIONS, doc="tensor-core instruction"),
        # cpu (C with OpenMP)
        _k("tile_m", "cpu", "pow2", 1, 1024, doc="rows per tile"),
        _k("tile_n", "cpu", "pow2", 1, 1024, doc="columns per tile"),
        _k("tile_k", "cpu", "pow2", 1, 8192, doc="reduction depth per tile (the range widened from 4096: a decode step streams all of K in one pass)"),
        _k("vec", "cpu", "pow2", 1, 64, doc="vector width of the innermost loop"),
        _k("unroll", "cpu", "int", 1, 16, doc="unroll factor of the innermost loop"),
        _k("threads", "cpu", "int", 1, 512, doc="OpenMP threads"),
        # appended: a matmul's micro-kernel register width and how its blocks are shared among threads
        _k("simd", "cpu", "pow2", 128, 512,
           doc="width in bits of the vector registers a matmul micro-kernel keeps its accumulators in "
               "(128 SSE/NEON, 256 AVX2, 512 AVX-512); more than the card's SIMD width is refused"),
        _k("par_axis", "cpu", "enum", choices=("m", "n"),
           doc="which blocks of a matmul the threads share out: m (row blocks) or n (column blocks)"),
        # appended: whether a matmul packs its operands or reads them in place, and its prefetch distance
        _k("pack_a", "cpu", "bool",
           doc="whether a matmul packs A's rows into micro-panels (true) or broadcasts them in place (false; "
               "A of the accumulator type only)"),
        _k("pack_b", "cpu", "bool",
           doc="whether a matmul packs B into column panels (true) or reads it in place (false; a row-major B of "
               "the accumulator type whose N is a static multiple of vec)"),
        _k("prefetch", "cpu", "int", 0, 64,
           doc="k steps ahead a matmul micro-kernel prefetches its A and B streams (0: none)"),
        _k("prefetch_c", "cpu", "bool",
           doc="whether a matmul prefetches each tile's output and epilogue operand rows before its k loop"),
        # appended: which instructions a matmul's micro-kernel multiplies with (bf16 operands only beside fma)
        _k("dot", "cpu", "enum", choices=CPU_DOT_INSTRUCTIONS,
           doc="the instructions a matmul micro-kernel multiplies with: fma (operands widened to the "
               "accumulator, one fused multiply-add per k), dpbf16 (AVX512-BF16 vdpbf16ps on pairs along k, bf16 "
               "A and B packed pair-interleaved), amx (AMX-BF16 tdpbf16ps on 16 x 32 tiles, B packed in the tile "
               "layout), fp16 (AVX512-FP16 vfmadd231ph on f16 A and B, summed in f16 over 16 steps of k, then in "
               "f32); valid only on a card whose probe found the instruction (`Card.tensor_cores`)"),
        # appended: the library route. A kernel run as torch runs it (oneDNN/MKL on a CPU, cuBLAS on a GPU)
        # rather than by Emmy's generated code; the release is part of the schedule identity, since the library's
        # kernel changes when torch changes (emmy_core.knobs.route)
        _k("library", "any", "enum", choices=("torch",),
           doc="run the kernel as this library runs it (torch's own ops), not as Emmy's generated code"),
        _k("library_version", "any", "version",
           doc="the library's release the measurement was taken with (torch.__version__)"),
        # appended: a far prefetch of the weights a matmul streams from memory (a decode step's few rows)
        _k("prefetch_l2", "cpu", "int", 0, 1024,
           doc="k steps ahead a matmul micro-kernel prefetches its B stream into the L2 cache (0: none): for "
               "products whose packed weights stream from memory, where `prefetch`'s distance hides too little "
               "of its latency (fma and dpbf16 micro-kernels)"),
    )
}

EXTERN_PREFIX = "extern."
_EXTERN_NAME = re.compile(r"extern\.[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
MAX_EXTERN_STR = 64

_DECISION_NAME = re.compile(r"(cut|split)([:_.=].*)?\Z", re.IGNORECASE)
_DECISION_VALUE = re.compile(r"\s*(cut|split)\s*:", re.IGNORECASE)
CUT_PATTERN = re.compile(r"cut:([A-Za-z_][A-Za-z0-9_]{0,63})\Z")
SPLIT_PATTERN = re.compile(r"split:([A-Za-z_][A-Za-z0-9_]{0,63})=([0-9]{1,6})\Z")


def knob_problem(name: object, value: object) -> str | None:
    """Why (name, value) is not in the schedule vocabulary, or None when it is."""
    if not isinstance(name, str):
        return f"knob name must be text, not {type(name).__name__}"
    if name.startswith(EXTERN_PREFIX):
        if not _EXTERN_NAME.match(name):
            return f"extern knob {name[:80]!r} does not match {_EXTERN_NAME.pattern!r}"
        if isinstance(value, bool) or value is None:
            return f"{name} takes a number or short text"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{name} must be finite"
        if isinstance(value, str) and len(value) > MAX_EXTERN_STR:
            return f"{name} text longer than {MAX_EXTERN_STR} characters"
        if not isinstance(value, int | float | str):
            return f"{name} takes a number or short text, not {type(value).__name__}"
        return None
    spec = SCHEDULE_KNOBS.get(name)
    if spec is None:
        return f"unknown knob {name[:80]!r}"
    return spec.problem(value)


def decision_in_knobs(knobs: dict[str, object]) -> str | None:
    """The knob that spells a structural decision (a cut or a split), described; None when none does."""
    for name, value in knobs.items():
        bare = name[len(EXTERN_PREFIX):] if isinstance(name, str) and name.startswith(EXTERN_PREFIX) else name
        if isinstance(bare, str) and _DECISION_NAME.match(bare):
            return f"knob {name!r} spells a structural decision"
        if isinstance(value, str) and _DECISION_VALUE.match(value):
            return f"knob {name!r} = {value[:40]!r} spells a structural decision"
    return None


def knobs_problem(knobs: object) -> str | None:
    """Why a whole knob assignment is not valid (decision, unknown name, bad value), or None."""
    if not isinstance(knobs, dict):
        return f"knobs must be an object, not {type(knobs).__name__}"
    decision = decision_in_knobs(knobs)
    if decision is not None:
        return f"{decision}: a decision is not a measurement of one kernel"
    for name in sorted(knobs, key=str):
        problem = knob_problem(name, knobs[name])
        if problem is not None:
            return problem
    return None


def canonical_knobs(knobs: dict[str, object]) -> str:
    """Canonical JSON of a knob assignment: sorted keys, no spaces. The schedule digest is taken of this."""
    return json.dumps(knobs, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False)


def schedule_id(knobs: dict[str, object]) -> str:
    """Digest of the canonical knob JSON: one schedule row per distinct assignment."""
    return schedule_id_of_text(canonical_knobs(knobs))


def schedule_id_of_text(canonical: str) -> str:
    """Digest of knob JSON already in canonical form (saves serialising the knobs twice)."""
    return hashlib.sha256(canonical.encode("ascii")).hexdigest()


def parse_decision(text: str) -> tuple[str, str, int | None]:
    """Reads `cut:<seam>` -> ('cut', seam, None) or `split:<axis>=<parts>` -> ('split', axis, parts)."""
    m = CUT_PATTERN.match(text)
    if m:
        return "cut", m.group(1), None
    m = SPLIT_PATTERN.match(text)
    if m and int(m.group(2)) >= 2:
        return "split", m.group(1), int(m.group(2))
    raise ValueError(f"{text[:80]!r} is not a structural decision (cut:<seam> or split:<axis>=<parts>, parts >= 2)")


def format_split(axis: str, parts: int) -> str:
    return f"split:{axis}={parts}"


def format_cut(seam: str) -> str:
    return f"cut:{seam}"
