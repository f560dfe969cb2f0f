"""The CPU probe: pure parsers on sample text, and the probe on this machine."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from emmy_core.targets import probe_cpu
from emmy_core.targets.cpu import (
    card_name,
    cpu_card,
    cpu_name,
    frequency_mhz,
    generic_model,
    isa_features,
    microarchitecture,
    model_name,
    parse_cpuinfo,
    parse_lscpu_caches,
    parse_size_kib,
    parse_sysfs_caches,
    probe_isa,
    register_count,
    simd_bits,
    vector_isa,
)

CPUS = Path(__file__).with_name("cpus")  # /proc/cpuinfo (first processor) and lscpu text of three CPUs


def fixture(name: str) -> tuple[dict[str, str], str]:
    """(cpuinfo's first processor, lscpu's text) of a fixture CPU."""
    return parse_cpuinfo((CPUS / f"{name}.cpuinfo").read_text()), (CPUS / f"{name}.lscpu").read_text()

X86 = """processor\t: 0
vendor_id\t: AuthenticAMD
model name\t: AMD EPYC 7B13
cpu MHz\t\t: 2449.998
flags\t\t: fpu vme sse sse2 avx avx2 fma bmi2

processor\t: 1
vendor_id\t: AuthenticAMD
model name\t: something else entirely
flags\t\t: fpu avx512f
"""
XEON = "processor : 0\nmodel name : Intel(R) Xeon(R) CPU @ 2.20GHz\nflags : sse2 avx2 avx512f avx512bw\n"
ARM = "processor\t: 0\nBogoMIPS\t: 50.00\nFeatures\t: fp asimd evtstrm aes crc32\nCPU part\t: 0xd0c\n"
LSCPU_ARM = "Architecture:  aarch64\nModel name:    Neoverse-N1\nL1d cache:     256 KiB (4 instances)\n" \
            "L2 cache:      4 MiB (4 instances)\nL3 cache:      32 MiB (1 instance)\n"


def test_cpuinfo_is_read_from_the_first_processor_only() -> None:
    info = parse_cpuinfo(X86)
    assert model_name(info) == "AMD EPYC 7B13"
    assert simd_bits(info["flags"]) == 256  # processor 1's avx512f is not read


def test_simd_width_from_flags() -> None:
    assert simd_bits("sse sse2 avx avx2 avx512f") == 512
    assert simd_bits("sse sse2 avx avx2") == 256
    assert simd_bits("sse sse2") == 128
    assert simd_bits("fp asimd evtstrm", "aarch64") == 128
    assert simd_bits("", "riscv32") == 64


def test_arm_model_name_falls_back_to_lscpu() -> None:
    info = parse_cpuinfo(ARM)
    assert model_name(info) is None
    assert model_name(info, LSCPU_ARM) == "Neoverse-N1"
    assert simd_bits(info["Features"], "aarch64") == 128


def test_cache_sizes_from_sysfs_and_lscpu_are_per_instance() -> None:
    sysfs = [("1", "Data\n", "48K\n"), ("1", "Instruction", "32K"), ("2", "Unified", "2048K"),
             ("3", "Unified", "491520K")]
    assert parse_sysfs_caches(sysfs) == {"l1d_kib": 48.0, "l2_kib": 2048.0, "l3_kib": 491520.0}
    assert parse_lscpu_caches(LSCPU_ARM) == {"l1d_kib": 64.0, "l2_kib": 1024.0, "l3_kib": 32768.0}
    assert parse_size_kib("4 MiB") == 4096 and parse_size_kib("32 KB") == 32
    with pytest.raises(ValueError, match="not NUMBER"):
        parse_size_kib("lots")


def test_frequency_prefers_the_stable_maximum() -> None:
    info = parse_cpuinfo(XEON)
    assert frequency_mhz("3500000\n", model_name(info), info) == 3500.0
    assert frequency_mhz(None, model_name(info), info) == 2200.0
    x86 = parse_cpuinfo(X86)
    assert frequency_mhz(None, model_name(x86), x86) == 2450.0
    assert frequency_mhz(None, None, {}) is None


def test_cpu_card_carries_its_name_and_numbers() -> None:
    card = cpu_card("AMD EPYC 7B13 AVX2 x2", 2, {"l1d_kib": 32.0}, 256, 2450.0, "x86_64")
    assert card.name == "AMD EPYC 7B13 AVX2 x2" and card.target == "cpu"
    assert card.numeric() == {"cores": 2.0, "l1d_kib": 32.0, "simd_bits": 256.0, "freq_mhz": 2450.0}


def test_two_probes_of_one_model_string_with_different_simd_widths_give_different_names() -> None:
    """The issue's case: `AMD EPYC` in a VM, a Zen 3 guest (AVX2, 256-bit) and a Zen 4 guest (AVX-512)."""
    for source in ("cpuinfo", "lscpu"):  # each alone names the CPU (lscpu where cpuinfo says nothing)
        names = {}
        for cpu in ("epyc-zen3-avx2", "epyc-zen4-avx512", "xeon-generic-avx512"):
            info, lscpu = fixture(cpu)
            names[cpu] = cpu_name(info, "", 2, "x86_64") if source == "cpuinfo" else cpu_name({}, lscpu, 2, "x86_64")
        assert names == {"epyc-zen3-avx2": "AMD EPYC (family 25 model 1 stepping 1) AVX2 x2",
                         "epyc-zen4-avx512": "AMD EPYC (family 25 model 17 stepping 1) AVX-512 x2",
                         "xeon-generic-avx512": "Intel(R) Xeon(R) Processor (family 6 model 143 stepping 8) AVX-512 x2"}
    info, lscpu = fixture("epyc-zen3-avx2")
    assert cpu_name(info, lscpu, 2, "x86_64") == names["epyc-zen3-avx2"]
    assert cpu_name(info, lscpu, 4, "x86_64") == "AMD EPYC (family 25 model 1 stepping 1) AVX2 x4"


def test_a_hypervisor_that_masks_avx512_makes_another_card() -> None:
    """One CPU model, family, model and stepping: the widest ISA still separates the names."""
    info, _ = fixture("epyc-zen4-avx512")
    masked = {**info, "flags": " ".join(f for f in info["flags"].split() if not f.startswith("avx512"))}
    assert cpu_name(masked, "", 2, "x86_64") == "AMD EPYC (family 25 model 17 stepping 1) AVX2 x2"
    assert cpu_name(masked, "", 2, "x86_64") != cpu_name(info, "", 2, "x86_64")


def test_the_microarchitecture_is_named_only_where_the_model_string_is_generic() -> None:
    for generic in ("AMD EPYC", "Intel(R) Xeon(R) Processor", "Intel(R) Xeon(R) CPU @ 2.20GHz",
                    "QEMU Virtual CPU version 2.5+", "Common KVM processor"):
        assert generic_model(generic), generic
    for specific in ("AMD EPYC 7B13", "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz", "Neoverse-N1",
                     "AMD EPYC 9B14 96-Core Processor"):
        assert not generic_model(specific), specific
    arch = "family 25 model 1 stepping 1"
    assert card_name("AMD EPYC 7B13", arch, "AVX2", 8) == "AMD EPYC 7B13 AVX2 x8"
    assert card_name("AMD EPYC", arch, "AVX2", 8) == f"AMD EPYC ({arch}) AVX2 x8"
    assert card_name("AMD EPYC", None, "AVX-512", 2) == "AMD EPYC AVX-512 x2"  # a CPU that reports no family
    assert microarchitecture({}, "") is None and microarchitecture({"cpu family": "25", "model": "1"}) is None
    arm = parse_cpuinfo("processor\t: 0\nFeatures\t: fp asimd sve\nCPU implementer\t: 0x41\nCPU architecture: 8\n"
                        "CPU variant\t: 0x1\nCPU part\t: 0xd40\nCPU revision\t: 1\n")
    assert microarchitecture(arm) == "implementer 0x41 part 0xd40 variant 0x1 revision 1"
    assert cpu_name(arm, "Model name: Neoverse-V1\n", 64, "aarch64") == "Neoverse-V1 SVE x64"


def test_the_widest_vector_isa_from_flags() -> None:
    assert vector_isa(ZEN4) == "AVX-512" and vector_isa(ZEN3) == "AVX2" and vector_isa(OLD_XEON) == "AVX"
    assert vector_isa("fpu sse sse2") == "SSE2"
    assert vector_isa("fp asimd evtstrm", "aarch64") == "NEON" and vector_isa("fp asimd sve", "aarch64") == "SVE"


def test_probe_describes_this_machine() -> None:
    card = probe_cpu()
    assert card.target == "cpu"
    assert card.name.endswith(f" x{len(os.sched_getaffinity(0))}")
    isa = probe_isa()
    assert {512: " AVX-512 x", 256: " AVX2 x"}.get(isa.simd_bits, " x") in card.name
    assert card.simd_bits in (64, 128, 256, 512)
    assert card == probe_cpu()  # stable between calls: the name and numbers key measurements


ZEN3 = "fpu sse sse2 ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes xsave avx f16c rdrand avx2 bmi2 erms"
ZEN4 = ZEN3 + " avx512f avx512dq avx512cd avx512bw avx512vl avx512_bf16 avx512vbmi avx512_vnni"
OLD_XEON = "fpu sse sse2 ssse3 sse4_1 sse4_2 popcnt avx"  # Sandy Bridge: AVX without FMA or F16C


def test_instruction_set_features_from_flags() -> None:
    zen3 = isa_features(ZEN3)
    assert (zen3.simd_bits, zen3.fma, zen3.f16c, zen3.avx512bf16, zen3.vector_registers) == (256, True, True, False, 16)
    assert zen3.f32_flops_per_cycle() == 32  # two 8-lane FMA pipes: the Zen 3 figure (156 GFLOP/s on 2 cores)
    zen4 = isa_features(ZEN4)
    assert (zen4.simd_bits, zen4.fma, zen4.f16c, zen4.avx512bf16, zen4.vector_registers) == (512, True, True, True, 32)
    old = isa_features(OLD_XEON)
    assert (old.simd_bits, old.fma, old.f16c, old.vector_registers) == (128, False, False, 16)
    assert old.f32_flops_per_cycle() == 8  # a multiply and an add pipe of 4 lanes
    arm = isa_features(parse_cpuinfo(ARM)["Features"], "aarch64")
    assert (arm.simd_bits, arm.fma, arm.f16c, arm.vector_registers) == (128, True, True, 32)
    assert isa_features(parse_cpuinfo(X86)["flags"]).simd_bits == 256  # the first processor's flags only


def test_register_count_follows_the_architecture_and_width() -> None:
    assert register_count("x86_64", 512) == 32 and register_count("x86_64", 256) == 16
    assert register_count("x86_64", 128) == 16 and register_count("aarch64", 128) == 32


def test_probe_isa_agrees_with_the_card() -> None:
    assert probe_isa().simd_bits == probe_cpu().simd_bits
