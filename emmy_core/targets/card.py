"""A card: the full name of a device (an identity) and its numeric description.

A card is named exactly as the runtime reports it (`torch.cuda.get_device_name()` for a
GPU); a CPU's name carries its model string, its microarchitecture where the string is
generic, its widest vector ISA and its usable cores (`AMD EPYC 7B13 AVX2 x2`, the rule in
`emmy_core.targets.cpu`). The name is part of every measurement key, so two cards of one
architecture never merge, and one name never carries two descriptions.
`Card.numeric()` is the card's numeric description: the prior's hardware features and
the store's `cards` table. A field a card does not have (a CPU has no SMs, a GPU built
from torch's device properties has no known bandwidth) is left out, never written as 0.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

TARGETS = ("cuda", "cpu")

# Numeric fields of a GPU card: name -> (python type, unit/what).
GPU_FIELDS: dict[str, tuple[type, str]] = {
    "sms": (int, "streaming multiprocessors (NVIDIA) or compute units (AMD) the runtime sees"),
    "warp_size": (int, "threads per warp / wavefront"),
    "mem_gb": (float, "device memory, GB as the vendor states it"),
    "mem_bw_gbs": (float, "peak memory bandwidth, GB/s"),
    "smem_per_sm_kib": (float, "shared memory (LDS) per SM / CU, KiB"),
    "smem_per_block_kib": (float, "largest shared memory one block may use (opt-in), KiB"),
    "regs_per_sm": (int, "32-bit registers per SM / CU"),
    "regs_per_thread": (int, "most 32-bit registers one thread may use"),
    "max_threads_per_block": (int, "most threads in one block"),
    "max_threads_per_sm": (int, "most resident threads per SM / CU"),
    "l2_mib": (float, "L2 cache, MiB"),
    "fp32_tflops": (float, "peak fp32 (non-tensor) TFLOP/s"),
    "fp16_tflops": (float, "peak dense fp16 TFLOP/s with fp32 accumulation (matrix units where present)"),
    "fp16_acc16_tflops": (float, "peak dense fp16 TFLOP/s with fp16 accumulation"),
}

# Numeric fields of a CPU card (probed from the machine).
CPU_FIELDS: dict[str, tuple[type, str]] = {
    "cores": (int, "logical CPUs this process may run on"),
    "l1d_kib": (float, "L1 data cache per core, KiB"),
    "l2_kib": (float, "L2 cache per instance, KiB"),
    "l3_kib": (float, "L3 cache per instance, KiB"),
    "simd_bits": (int, "widest SIMD register the compiler may use, bits"),
    "freq_mhz": (float, "nominal or maximum clock, MHz"),
}

NUMERIC_FIELDS: tuple[str, ...] = (*GPU_FIELDS, *CPU_FIELDS)

# Tensor-core instruction families a card may offer (see emmy_core.knobs.vocab TENSOR_CORE_INSTRUCTIONS).
INSTRUCTION_FLAGS = {"has_mma": "mma_", "has_wgmma": "wgmma_", "has_mfma": "mfma_", "has_wmma": "wmma_"}


@dataclass(frozen=True)
class Card:
    """A device Emmy compiles for. Numeric fields are None where the card does not have them."""

    name: str
    target: str  # cuda | cpu
    arch: str  # hopper, ampere, ada, turing, cdna2, rdna2, rdna3; x86_64 / aarch64 for CPUs
    compute_capability: str  # "9.0" (NVIDIA), "gfx90a" (AMD), "" for CPUs
    tensor_cores: tuple[str, ...]  # tensor-core instructions the architecture offers (a CPU: its matrix instructions)
    source: str  # where the numbers come from
    sms: int | None = None
    warp_size: int | None = None
    mem_gb: float | None = None
    mem_bw_gbs: float | None = None
    smem_per_sm_kib: float | None = None
    smem_per_block_kib: float | None = None
    regs_per_sm: int | None = None
    regs_per_thread: int | None = None
    max_threads_per_block: int | None = None
    max_threads_per_sm: int | None = None
    l2_mib: float | None = None
    fp32_tflops: float | None = None
    fp16_tflops: float | None = None
    fp16_acc16_tflops: float | None = None
    cores: int | None = None
    l1d_kib: float | None = None
    l2_kib: float | None = None
    l3_kib: float | None = None
    simd_bits: int | None = None
    freq_mhz: float | None = None

    def __post_init__(self) -> None:
        if self.target not in TARGETS:
            raise ValueError(f"card {self.name!r}: target must be one of {', '.join(TARGETS)}")
        for f in fields(self):
            if f.name not in NUMERIC_FIELDS:
                continue
            v = getattr(self, f.name)
            if v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v <= 0:
                raise ValueError(f"card {self.name!r}: field {f.name!r} must be a positive finite number")

    @property
    def vendor(self) -> str:
        """`nvidia`, `amd` or `cpu`."""
        if self.target == "cpu":
            return "cpu"
        return "amd" if self.compute_capability.startswith("gfx") else "nvidia"

    @property
    def cc(self) -> tuple[int, int] | None:
        """NVIDIA compute capability as (major, minor); None for AMD, CPUs and a GPU whose capability is unknown."""
        if self.vendor != "nvidia" or not self.compute_capability:
            return None
        major, _, minor = self.compute_capability.partition(".")
        return int(major), int(minor)

    def numeric(self) -> dict[str, float]:
        """The numeric description: every numeric field the card has, plus derived flags, as floats.

        Keys come in a fixed order (NUMERIC_FIELDS, then `compute_capability`, then the
        instruction flags). Fields the card lacks are absent (a feature builder reads them as NaN).
        """
        out = {name: float(getattr(self, name)) for name in NUMERIC_FIELDS if getattr(self, name) is not None}
        cc = self.cc
        if cc is not None:
            out["compute_capability"] = cc[0] + cc[1] / 10
        if self.target == "cuda":
            out["is_amd"] = 1.0 if self.vendor == "amd" else 0.0
            for flag, prefix in INSTRUCTION_FLAGS.items():
                out[flag] = 1.0 if any(i.startswith(prefix) for i in self.tensor_cores) else 0.0
        return out
