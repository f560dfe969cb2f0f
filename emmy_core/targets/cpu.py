"""The CPU probe: what this machine's CPU is, read from /proc/cpuinfo, sysfs and lscpu.

The parse functions are pure (text in, values out) and tested on sample text; `probe_cpu`
reads the machine and `probe_isa` its instruction-set features (FMA, F16C, vector registers,
the matrix and dot-product instructions), which the card's numeric description leaves out.

The matrix and dot-product instructions a matmul's micro-kernel may use (`CPU_MATRIX_INSTRUCTIONS`:
AVX512-BF16's `vdpbf16ps`, AVX512-FP16, AVX-VNNI, AMX's tiles, BF16 and INT8) are
the card's `tensor_cores`, as a GPU's tensor-core instructions are: facts of the description that the
knob `dot` is checked against (`emmy_core.knobs.validity`), not of the name. AMX counts only where
the OS lets this process use tile data (`amx_permission`: Linux's `arch_prctl(ARCH_REQ_XCOMP_PERM,
XFEATURE_XTILEDATA)`), since a kernel without that permission dies on its first tile instruction.
They stay out of the name on purpose: the name keys every measurement, freeze and tune file, so
adding them would rename every card of a machine that has them (this Xeon's shipped freeze among
them) and orphan what was measured under the old name; the instructions themselves change no
existing option's result, only which options exist.

A CPU card's name is part of every measurement key, so it separates everything that changes
which configuration wins, and stays recognisable (`card_name`):

    <model string> [(family F model M stepping S)] <widest vector ISA> x<usable cores>

- the vendor's model string, as the CPU reports it (`AMD EPYC 7B13`);
- where that string is generic (no word of it carries a digit once the `@ 2.20GHz` clock is
  dropped, as `AMD EPYC` or `Intel(R) Xeon(R) Processor` in a VM), the microarchitecture the
  CPU identifies itself by: x86 family, model and stepping (Arm: implementer, part, variant,
  revision), from /proc/cpuinfo, else lscpu; left out only when the CPU reports none;
- the widest vector ISA the compiler may use: `AVX-512`, `AVX2`, `AVX` or `SSE2` on x86, `SVE`
  or `NEON` on Arm (a hypervisor that masks AVX-512 makes another card);
- the number of CPUs this process may run on: two slices of one host are two cards.

So a 2-vCPU Zen 3 guest is `AMD EPYC (family 25 model 1 stepping 1) AVX2 x2` and a Zen 4 guest
of the same string `AMD EPYC (family 25 model 17 stepping 1) AVX-512 x2`. Caches and clock are
the card's description, not its name; one name must never carry two descriptions, which the
readers of freeze and tune files check (`emmy_core.targets.sameness`).
"""

from __future__ import annotations

import ctypes
import functools
import os
import platform
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from emmy_core.targets.card import Card

_SIZE = re.compile(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([KMG]?)(?:i?B)?\s*\Z", re.IGNORECASE)
_LSCPU_CACHE = re.compile(r"(L1d|L2|L3) cache:\s*([0-9.]+\s*[KMG]i?B?)(?:\s*\((\d+) instances?\))?", re.IGNORECASE)
_GHZ_IN_MODEL = re.compile(r"@\s*([0-9]+(?:\.[0-9]+)?)\s*GHz", re.IGNORECASE)
_UNIT_KIB = {"": 1 / 1024, "K": 1, "M": 1024, "G": 1024 * 1024}
_CLOCK_IN_MODEL = re.compile(r"@\s*[0-9.]+\s*[GM]Hz", re.IGNORECASE)
_VIRTUAL = re.compile(r"\b(QEMU|KVM|Virtual)\b", re.IGNORECASE)
# The identification fields of /proc/cpuinfo: x86 (with lscpu's spelling), then Arm.
_X86_ID = (("cpu family", "CPU family", "family"), ("model", "Model", "model"), ("stepping", "Stepping", "stepping"))
_ARM_ID = (("CPU implementer", "implementer"), ("CPU part", "part"), ("CPU variant", "variant"),
           ("CPU revision", "revision"))


class ProbeError(RuntimeError):
    """The machine's CPU could not be described (no model name readable)."""


def parse_size_kib(text: str) -> float:
    """`48K`, `2048K`, `4 MiB`, `32 KB` -> KiB (binary units, as sysfs and lscpu mean them)."""
    m = _SIZE.match(text)
    if m is None:
        raise ValueError(f"cache size {text[:40]!r} is not NUMBER[K|M|G]")
    return float(m.group(1)) * _UNIT_KIB[m.group(2).upper()]


def parse_cpuinfo(text: str) -> dict[str, str]:
    """The first processor's fields of /proc/cpuinfo: `model name`, `flags` (x86) or `Features` (Arm), `cpu MHz`."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            if out:
                break  # end of the first processor's block
            continue
        key, sep, value = line.partition(":")
        if sep:
            out.setdefault(key.strip(), value.strip())
    return out


def model_name(info: dict[str, str], lscpu_text: str = "") -> str | None:
    """The CPU's model name, whitespace collapsed: cpuinfo's `model name`, else lscpu's `Model name`."""
    name = info.get("model name") or info.get("Model Name")
    if not name:
        for line in lscpu_text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "Model name" and value.strip() and value.strip() != "-":
                name = value
                break
    return " ".join(name.split()) if name else None


def simd_bits(flags: str, machine: str = "x86_64") -> int:
    """Widest SIMD width the flags promise: avx512f -> 512, avx2 -> 256, else 128 (SSE2 or NEON/asimd)."""
    words = set(flags.split())
    if "avx512f" in words:
        return 512
    if "avx2" in words:
        return 256
    if {"sse2", "asimd", "neon"} & words or machine in ("x86_64", "aarch64", "arm64"):
        return 128
    return 64


def vector_isa(flags: str, machine: str = "x86_64") -> str:
    """The widest vector ISA the flags promise: `AVX-512`, `AVX2`, `AVX`, `SSE2` (x86); `SVE`, `NEON` (Arm).

    Empty when the flags name none (another architecture): the name then says nothing of it.
    """
    words = set(flags.split())
    if machine in ("aarch64", "arm64") or "asimd" in words:
        return "SVE" if "sve" in words else "NEON"
    if "avx512f" in words:
        return "AVX-512"
    if "avx2" in words:
        return "AVX2"
    if "avx" in words:
        return "AVX"
    if "sse2" in words or machine == "x86_64":
        return "SSE2"
    return ""


def generic_model(model: str) -> bool:
    """Whether a model string leaves the microarchitecture open: no word carries a digit once the
    clock (`@ 2.20GHz`) is dropped (`AMD EPYC`, `Intel(R) Xeon(R) CPU @ 2.20GHz`), or it names a
    virtual CPU (`QEMU Virtual CPU version 2.5+`)."""
    text = _CLOCK_IN_MODEL.sub(" ", model)
    return _VIRTUAL.search(text) is not None or not any(ch.isdigit() for ch in text)


def _lscpu_fields(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and value.strip() and value.strip() != "-":
            out.setdefault(key.strip(), value.strip())
    return out


def microarchitecture(info: dict[str, str], lscpu_text: str = "") -> str | None:
    """How the CPU identifies its microarchitecture: `family 25 model 1 stepping 1` on x86 (cpuinfo,
    else lscpu's `CPU family`, `Model`, `Stepping`), `implementer 0x41 part 0xd0c variant 0x3 revision 1`
    on Arm (cpuinfo's identification registers); None when the CPU says nothing of it."""
    if info.get("CPU part"):
        return " ".join(f"{label} {' '.join(info[key].split())}" for key, label in _ARM_ID if info.get(key))
    lscpu = _lscpu_fields(lscpu_text)
    values = [info.get(key) or lscpu.get(lscpu_key) or "" for key, lscpu_key, _ in _X86_ID]
    if all(v.strip().isdigit() for v in values):
        return " ".join(f"{label} {int(v)}" for (_, _, label), v in zip(_X86_ID, values, strict=True))
    return None


def cpu_vendor(name: str) -> str | None:
    """`amd` or `intel` from a CPU card's name (its model string comes first: `card_name`); None
    for another maker's or a name that does not say."""
    low = name.lower()
    if low.startswith("amd "):
        return "amd"
    if low.startswith("intel"):
        return "intel"
    return None


def card_name(model: str, microarch: str | None, isa: str, cores: int) -> str:
    """A CPU card's name (the rule is in the module's docstring): the model string, the microarchitecture
    when the string is generic, the widest vector ISA, `x<cores>`."""
    parts = [" ".join(model.split())]
    if microarch and generic_model(model):
        parts.append(f"({microarch})")
    if isa:
        parts.append(isa)
    parts.append(f"x{cores}")
    return " ".join(parts)


# The CPU's matrix and dot-product instructions a card may list (its `tensor_cores`), by their
# /proc/cpuinfo flag names, in this order; the AMX ones only with the OS's permission for tile data.
CPU_MATRIX_INSTRUCTIONS = ("avx512_bf16", "avx512_fp16", "avx_vnni", "amx_tile", "amx_bf16", "amx_int8")
AMX_INSTRUCTIONS = ("amx_tile", "amx_bf16", "amx_int8")
# Linux's arch_prctl (x86_64 syscall 158): ask for, then read, the permission to use AMX tile data.
_SYS_ARCH_PRCTL = 158
_ARCH_GET_XCOMP_PERM = 0x1022
_ARCH_REQ_XCOMP_PERM = 0x1023
_XFEATURE_XTILEDATA = 18


def matrix_instructions(flags: str, amx_permitted: bool) -> tuple[str, ...]:
    """The matrix and dot-product instructions a flags line names (`CPU_MATRIX_INSTRUCTIONS` order); the AMX
    ones only when `amx_permitted` (the OS lets the process use tile data) and the CPU has tiles."""
    words = set(flags.split())
    words |= {"avx512_bf16"} if "avx512bf16" in words else set()
    out = []
    for name in CPU_MATRIX_INSTRUCTIONS:
        if name in words and (name not in AMX_INSTRUCTIONS or (amx_permitted and "amx_tile" in words)):
            out.append(name)
    return tuple(out)


@functools.lru_cache(maxsize=1)
def amx_permission() -> bool:
    """Whether this process may use AMX tile data: asks Linux once (`arch_prctl(ARCH_REQ_XCOMP_PERM,
    XFEATURE_XTILEDATA)`) and reads the permission back (`ARCH_GET_XCOMP_PERM`). The grant is the process's
    for good (it lets the kernel save tile state on signals); False off Linux x86_64, on a kernel before 5.16,
    or where the call is refused."""
    if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        syscall = libc.syscall
        syscall.restype = ctypes.c_long
        syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_REQ_XCOMP_PERM), ctypes.c_long(_XFEATURE_XTILEDATA))
        granted = ctypes.c_uint64(0)
        if syscall(ctypes.c_long(_SYS_ARCH_PRCTL), ctypes.c_long(_ARCH_GET_XCOMP_PERM), ctypes.byref(granted)) != 0:
            return False
    except (OSError, AttributeError):
        return False
    return bool(granted.value >> _XFEATURE_XTILEDATA & 1)


@dataclass(frozen=True)
class IsaFeatures:
    """What the instruction set offers generated code, read from the CPU's flags.

    The card's `simd_bits` is the width; the rest says which conversions and fused
    operations the compiler may use (with `-march=native` it uses them where present) and
    feeds the nominal peak: `f32_flops_per_cycle` counts two FMA pipes of the full width.
    """

    simd_bits: int
    fma: bool
    f16c: bool  # f16 <-> f32 conversions in hardware (x86 F16C; Arm's are part of its SIMD)
    avx512bf16: bool  # vdpbf16ps (bf16 pairs into f32: `dot=dpbf16`); its f32 -> bf16 conversion flushes subnormals
    vector_registers: int
    avx512fp16: bool = False  # f16 arithmetic in 512-bit registers (vfmadd*ph)
    avx_vnni: bool = False  # int8 / int16 dot products in 256-bit registers (VEX)
    amx_tile: bool = False  # AMX tile registers (the CPU's flag; usable only with the OS's permission)
    amx_bf16: bool = False  # tdpbf16ps: bf16 16 x 32 tiles into f32 16 x 16 ones (`dot=amx`)
    amx_int8: bool = False  # tdpb*d: int8 tiles into int32
    amx_permitted: bool = False  # the OS lets this process use tile data (`amx_permission`)

    @property
    def matrix(self) -> tuple[str, ...]:
        """The matrix and dot-product instructions usable here (`matrix_instructions`): the card's `tensor_cores`."""
        flags = {"avx512_bf16": self.avx512bf16, "avx512_fp16": self.avx512fp16, "avx_vnni": self.avx_vnni,
                 "amx_tile": self.amx_tile, "amx_bf16": self.amx_bf16, "amx_int8": self.amx_int8}
        return matrix_instructions(" ".join(k for k, v in flags.items() if v), self.amx_permitted)

    def f32_flops_per_cycle(self) -> int:
        """Nominal f32 flops one core issues per cycle: two vector pipes, an FMA counting two."""
        return 2 * (2 if self.fma else 1) * self.simd_bits // 32


def isa_features(flags: str, machine: str = "x86_64", amx_permitted: bool = False) -> IsaFeatures:
    """The features in a flags line of /proc/cpuinfo (`flags` on x86, `Features` on Arm); `amx_permitted`
    is the OS's side of AMX (`amx_permission`), which no flags line says."""
    words = set(flags.split())
    bits = simd_bits(flags, machine)
    arm = machine in ("aarch64", "arm64") or "asimd" in words
    return IsaFeatures(
        simd_bits=bits,
        fma="fma" in words or arm,
        f16c="f16c" in words or arm,
        avx512bf16="avx512_bf16" in words or "avx512bf16" in words,
        vector_registers=register_count(machine if not arm else "aarch64", bits),
        avx512fp16="avx512_fp16" in words, avx_vnni="avx_vnni" in words, amx_tile="amx_tile" in words,
        amx_bf16="amx_bf16" in words, amx_int8="amx_int8" in words,
        amx_permitted=amx_permitted and "amx_tile" in words,
    )


@dataclass(frozen=True)
class FmaPipes:
    """A core's fused multiply-add units, as far as the machine lets them be known.

    /proc/cpuinfo names no execution ports: the count and width come from a small table of
    x86 families where the vendor's family and model numbers settle them (AMD's Zen
    generations), else they are assumed (two pipes of the SIMD width) and `known` says so.
    """

    pipes: int
    bits: int  # width of one pipe: a wider operation takes several passes (Zen 4's 512-bit ones, two)
    known: str  # where the figures come from

    def f32_flops_per_cycle(self, fma: bool = True) -> int:
        """f32 flops one core issues per cycle through these pipes (an FMA counting two)."""
        return self.pipes * (2 if fma else 1) * self.bits // 32


# AMD family -> ((first model, last model, pipes, bits, generation), ...): the FP units of each Zen core.
_AMD_FMA = {
    0x17: ((0x00, 0x2F, 2, 128, "Zen/Zen+"), (0x30, 0xFF, 2, 256, "Zen 2")),
    0x19: ((0x00, 0x0F, 2, 256, "Zen 3"), (0x10, 0x1F, 2, 256, "Zen 4"), (0x20, 0x5F, 2, 256, "Zen 3"),
           (0x60, 0xAF, 2, 256, "Zen 4")),
    0x1A: ((0x00, 0xFF, 2, 512, "Zen 5"),),
}


def fma_pipes(info: dict[str, str], isa: IsaFeatures) -> FmaPipes:
    """The FMA pipes of the core `info` (cpuinfo's first processor) describes; see `FmaPipes`."""
    try:
        family, model = int(info.get("cpu family", "")), int(info.get("model", ""))
    except ValueError:
        family = model = -1
    if info.get("vendor_id") == "AuthenticAMD":
        for low, high, pipes, bits, name in _AMD_FMA.get(family, ()):
            if low <= model <= high:
                return FmaPipes(pipes, min(bits, isa.simd_bits),
                                f"AMD family {family:#x} model {model:#x} ({name}): {pipes} x {bits}-bit FMA")
    return FmaPipes(2, isa.simd_bits, f"assumed: 2 x {isa.simd_bits}-bit FMA (not readable on this CPU)")


def probe_fma_pipes() -> FmaPipes:
    """This machine's FMA pipes (`fma_pipes` of its first processor)."""
    info = parse_cpuinfo(_read(Path("/proc/cpuinfo")) or "")
    return fma_pipes(info, probe_isa())


def register_count(machine: str, simd: int) -> int:
    """Vector registers the compiler can use: 32 on AVX-512 (any width, with AVX-512VL) and on Arm, else 16."""
    if machine in ("aarch64", "arm64"):
        return 32
    return 32 if simd >= 512 else 16


def parse_sysfs_caches(entries: list[tuple[str, str, str]]) -> dict[str, float]:
    """(level, type, size) rows of /sys/devices/system/cpu/cpu0/cache/index* -> l1d_kib, l2_kib, l3_kib."""
    out: dict[str, float] = {}
    for level, kind, size in entries:
        level, kind = level.strip(), kind.strip()
        if level == "1" and kind == "Data":
            out["l1d_kib"] = parse_size_kib(size)
        elif level in ("2", "3") and kind in ("Unified", "Data"):
            out[f"l{level}_kib"] = parse_size_kib(size)
    return out


def parse_lscpu_caches(text: str) -> dict[str, float]:
    """lscpu's `L1d cache: 96 KiB (2 instances)` lines -> per-instance sizes in KiB."""
    out: dict[str, float] = {}
    for m in _LSCPU_CACHE.finditer(text):
        total = parse_size_kib(m.group(2))
        instances = int(m.group(3)) if m.group(3) else 1
        out[f"{m.group(1).lower()}_kib"] = total / max(instances, 1)
    return out


def frequency_mhz(max_freq_khz: str | None, model: str | None, info: dict[str, str]) -> float | None:
    """Clock in MHz: cpufreq's maximum, else the `@ 2.60GHz` in the model name, else cpuinfo's `cpu MHz`.

    The maximum and the nominal clock are stable; the current `cpu MHz` is used last (it is
    stable on virtual machines, which are the usual case without cpufreq).
    """
    if max_freq_khz and max_freq_khz.strip().isdigit() and int(max_freq_khz) > 0:
        return int(max_freq_khz) / 1000
    if model:
        m = _GHZ_IN_MODEL.search(model)
        if m:
            return float(m.group(1)) * 1000
    try:
        mhz = float(info.get("cpu MHz", ""))
    except ValueError:
        return None
    return float(round(mhz)) if mhz > 0 else None


def cpu_card(name: str, cores: int, caches: dict[str, float], simd: int, freq: float | None,
             machine: str, matrix: tuple[str, ...] = ()) -> Card:
    """A CPU card from probed values, named by `card_name`; `matrix` its matrix instructions (`tensor_cores`)."""
    return Card(name=name, target="cpu", arch=machine, compute_capability="", tensor_cores=tuple(matrix),
                source="probed from /proc/cpuinfo, sysfs caches and lscpu", cores=cores,
                l1d_kib=caches.get("l1d_kib"), l2_kib=caches.get("l2_kib"), l3_kib=caches.get("l3_kib"),
                simd_bits=simd, freq_mhz=freq)


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None


def _lscpu() -> str:
    try:
        done = subprocess.run(["lscpu"], capture_output=True, text=True, timeout=10, check=False,
                              env={**os.environ, "LC_ALL": "C"})
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def usable_cores() -> int:
    """CPUs this process may run on (its affinity), else the machine's count."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def probe_isa() -> IsaFeatures:
    """This machine's instruction-set features (the first processor's flags, and the OS's AMX permission)."""
    info = parse_cpuinfo(_read(Path("/proc/cpuinfo")) or "")
    flags = info.get("flags") or info.get("Features") or ""
    permitted = "amx_tile" in flags.split() and amx_permission()
    return isa_features(flags, platform.machine() or "unknown", permitted)


def cpu_flags(info: dict[str, str], lscpu_text: str = "") -> str:
    """The flags line: cpuinfo's `flags` (x86) or `Features` (Arm), else lscpu's `Flags`."""
    return info.get("flags") or info.get("Features") or _lscpu_fields(lscpu_text).get("Flags", "")


def cpu_name(info: dict[str, str], lscpu_text: str, cores: int, machine: str) -> str | None:
    """This CPU's card name from cpuinfo's first processor and lscpu's text (either may be empty);
    None when neither names the model."""
    model = model_name(info, lscpu_text)
    if model is None:
        return None
    flags = cpu_flags(info, lscpu_text)
    return card_name(model, microarchitecture(info, lscpu_text), vector_isa(flags, machine), cores)


def _needs_lscpu(info: dict[str, str]) -> bool:
    """Whether cpuinfo leaves something of the name to lscpu (model name, flags, or the family of a generic string)."""
    model = model_name(info)
    return model is None or not cpu_flags(info) or (generic_model(model) and microarchitecture(info) is None)


def probe_cpu() -> Card:
    """Describes this machine's CPU. Raises ProbeError when no model name can be read."""
    info = parse_cpuinfo(_read(Path("/proc/cpuinfo")) or "")
    lscpu = _lscpu() if _needs_lscpu(info) else ""
    machine = platform.machine() or "unknown"
    cores = usable_cores()
    name = cpu_name(info, lscpu, cores, machine)
    if name is None:
        raise ProbeError("cannot read the CPU model name from /proc/cpuinfo or lscpu")
    model = model_name(info, lscpu)
    cache_dir = Path("/sys/devices/system/cpu/cpu0/cache")
    entries = []
    for index in sorted(cache_dir.glob("index*")) if cache_dir.is_dir() else []:
        level, kind, size = (_read(index / f) for f in ("level", "type", "size"))
        if level and kind and size:
            entries.append((level, kind, size))
    try:
        caches = parse_sysfs_caches(entries)
    except ValueError:
        caches = {}
    if "l1d_kib" not in caches:
        caches = parse_lscpu_caches(lscpu or _lscpu())
    flags = cpu_flags(info, lscpu)
    max_khz = _read(Path("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"))
    permitted = "amx_tile" in flags.split() and amx_permission()
    return cpu_card(name, cores, caches, simd_bits(flags, machine), frequency_mhz(max_khz, model, info), machine,
                    matrix_instructions(flags, permitted))
