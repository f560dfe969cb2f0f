"""The measured f32 FMA peak (`emmy_core.bench.peak`): a rate in GFLOP/s a CPU core can reach, or None where no
C compiler runs (never a made-up number). How it compares with the threads is a benchmark's question, not a
test's (the suite runs a worker per core)."""

from __future__ import annotations

import pytest

from emmy_core.bench.peak import measured_fma_peak, memory_bandwidth


def test_measured_fma_peak_is_a_rate_of_this_machine() -> None:
    one = measured_fma_peak(1, 256)
    if one is None:
        pytest.skip("no C compiler with OpenMP ran here")
    assert 1.0 < one < 1_000.0  # GFLOP/s of one core at 256 bits: any CPU this project runs on is inside this


def test_measured_fma_peak_is_none_without_a_compiler(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    assert measured_fma_peak(1, 256) is None


def test_measured_dpbf16_peak_runs_only_where_the_cpu_has_the_instruction() -> None:
    """vdpbf16ps chains: a rate where the probe lists AVX512-BF16 (and a compiler takes the intrinsic), None on a
    CPU without it (the run stops on the instruction: no made-up number)."""
    from emmy_core.bench.peak import measured_dpbf16_peak
    from emmy_core.targets import probe_cpu

    rate = measured_dpbf16_peak(1)
    if "avx512_bf16" in probe_cpu().tensor_cores:
        if rate is None:
            pytest.skip("no C compiler with OpenMP and AVX512-BF16 intrinsics ran here")
        assert 1.0 < rate < 2_000.0
    else:
        assert rate is None


def test_memory_bandwidth_is_a_read_rate() -> None:
    assert 0.1 < memory_bandwidth(8) < 10_000.0  # GB/s of a read of 8 MiB: inside this on any machine
