"""The FMA pipes of a core: from the vendor's family and model where a table settles them, else assumed
(and said to be). Kept apart from the card's name and numeric description, which it does not change."""

from __future__ import annotations

from emmy_core.targets.cpu import fma_pipes, isa_features, probe_fma_pipes

AVX2 = isa_features("fpu sse2 avx fma f16c avx2")
AVX512 = isa_features("fpu sse2 avx fma f16c avx2 avx512f avx512vl avx512_bf16")


def test_zen_generations_come_from_the_table() -> None:
    zen3 = fma_pipes({"vendor_id": "AuthenticAMD", "cpu family": "25", "model": "1"}, AVX2)
    assert (zen3.pipes, zen3.bits) == (2, 256) and "Zen 3" in zen3.known
    assert zen3.f32_flops_per_cycle() == 32  # the 156 GFLOP/s: 2 cores x 2.445 GHz x 32
    zen4 = fma_pipes({"vendor_id": "AuthenticAMD", "cpu family": "25", "model": "17"}, AVX512)
    assert (zen4.pipes, zen4.bits) == (2, 256) and "Zen 4" in zen4.known  # 512-bit operations in two passes
    assert zen4.f32_flops_per_cycle() == 32
    zen2 = fma_pipes({"vendor_id": "AuthenticAMD", "cpu family": "23", "model": "49"}, AVX2)
    assert zen2.bits == 256 and "Zen 2" in zen2.known


def test_a_core_the_table_does_not_know_is_assumed_and_says_so() -> None:
    intel = fma_pipes({"vendor_id": "GenuineIntel", "cpu family": "6", "model": "85"}, AVX512)
    assert (intel.pipes, intel.bits) == (2, 512) and intel.known.startswith("assumed")
    assert intel.f32_flops_per_cycle(fma=False) == 32
    garbled = fma_pipes({"vendor_id": "AuthenticAMD", "cpu family": "x", "model": ""}, AVX2)
    assert garbled.known.startswith("assumed")


def test_this_machine_is_described() -> None:
    p = probe_fma_pipes()
    assert p.pipes >= 1 and p.bits in (128, 256, 512) and p.known
