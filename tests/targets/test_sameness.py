"""One card name, one description: which differences make two descriptions other hardware."""

from __future__ import annotations

import dataclasses

from emmy_core.targets import Card
from emmy_core.targets.sameness import conflict, describe

ZEN3 = Card(name="AMD EPYC (family 25 model 1 stepping 1) AVX2 x2", target="cpu", arch="x86_64",
            compute_capability="", tensor_cores=(), source="test", cores=2, l1d_kib=32.0, l2_kib=512.0,
            l3_kib=32768.0, simd_bits=256, freq_mhz=2445.0)


def test_one_name_with_another_simd_width_cores_or_caches_is_other_hardware() -> None:
    for change in ({"simd_bits": 512}, {"cores": 4}, {"l2_kib": 1024.0}, {"l1d_kib": 48.0}, {"arch": "aarch64"}):
        problem = conflict(ZEN3, dataclasses.replace(ZEN3, **change))
        assert problem is not None and describe(ZEN3) in problem, change


def test_the_clock_and_an_unknown_number_are_not_another_description() -> None:
    assert conflict(ZEN3, dataclasses.replace(ZEN3, freq_mhz=2596.0)) is None  # a VM reports its current clock
    assert conflict(ZEN3, dataclasses.replace(ZEN3, l3_kib=None)) is None
    assert conflict(ZEN3, dataclasses.replace(ZEN3, name="AMD EPYC AVX-512 x2", simd_bits=512)) is None  # not its name
    assert describe(dataclasses.replace(ZEN3, l3_kib=None)).endswith("L3 unknown")
