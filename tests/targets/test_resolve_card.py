"""Resolving a card by name: local by default, the table by name, unknown names refused with the list."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from emmy_core.targets import (
    UnknownCard,
    card_from_properties,
    card_slug,
    known_cards,
    load_table,
    min_time_us,
    probe_cpu,
    resolve_card,
)


def _has_gpu() -> bool:
    import torch

    return torch.cuda.is_available()


def test_local_is_this_machines_card() -> None:
    card = resolve_card()
    if _has_gpu():
        assert card.target == "cuda"
    else:
        assert card == probe_cpu()
    assert resolve_card(card.name) == card


def test_card_by_name_is_the_table_card_never_the_host() -> None:
    # Seed 09: contexts are rebuilt for the card a golden was recorded on, never the machine running.
    assert resolve_card("NVIDIA GeForce RTX 2080 Ti") == load_table()["NVIDIA GeForce RTX 2080 Ti"]


def test_unknown_card_error_lists_known_names() -> None:
    with pytest.raises(UnknownCard) as err:
        resolve_card("NVIDIA H300 Imaginary")
    assert isinstance(err.value, ValueError)
    for name in known_cards():
        assert name in str(err.value)
    with pytest.raises(UnknownCard):
        resolve_card("nvidia h200")  # names are exact


def test_card_slug_is_a_safe_file_name() -> None:
    assert card_slug("NVIDIA H200") == "nvidia-h200"
    assert card_slug("NVIDIA A100-SXM4-40GB") == "nvidia-a100-sxm4-40gb"
    assert card_slug("Intel(R) Xeon(R) Processor AVX-512 x2") == "intel-r-xeon-r-processor-avx-512-x2"
    slugs = [card_slug(n) for n in known_cards()]
    assert len(set(slugs)) == len(slugs)
    with pytest.raises(ValueError, match="no letters"):
        card_slug("()")


def test_gpu_missing_from_table_is_described_from_device_properties() -> None:
    # The shape of torch.cuda.get_device_properties() on an H200, as torch reports it.
    props = SimpleNamespace(name="NVIDIA B200X", major=9, minor=0, total_memory=150_000_000_000,
                            multi_processor_count=132, L2_cache_size=52_428_800, warp_size=32,
                            max_threads_per_multi_processor=2048, regs_per_multiprocessor=65536,
                            shared_memory_per_block_optin=232_448, shared_memory_per_multiprocessor=233_472)
    card = card_from_properties(props)
    assert (card.name, card.arch, card.sms, card.smem_per_block_kib, card.l2_mib) == (
        "NVIDIA B200X", "hopper", 132, 227.0, 50.0)
    assert card.mem_bw_gbs is None and "mem_bw_gbs" not in card.numeric()
    assert "wgmma_m64n128k16" in card.tensor_cores
    assert min_time_us(card, 1e9, 1e9) == 0.0  # no peaks known: nothing to check against


def test_physical_floor_is_the_larger_of_bandwidth_and_compute() -> None:
    h200 = resolve_card("NVIDIA H200")
    assert min_time_us(h200, 4.8e9, 0) == pytest.approx(1000)  # 4.8 GB at 4.8 TB/s: one millisecond
    assert min_time_us(h200, 0, 989.4e9) == pytest.approx(1000)  # 989.4 GFLOP at 989.4 TFLOP/s
    assert min_time_us(h200, 4.8e9, 989.4e9 * 2) == pytest.approx(2000)  # compute-bound: the larger
    assert min_time_us(resolve_card("NVIDIA GeForce RTX 4090"), 0, 330.3e9) == pytest.approx(1000)
    cpu = probe_cpu()
    assert 0 < min_time_us(cpu, 1e9, 1e9) < 1e6  # a floor, not an estimate: an honest run is slower
    with pytest.raises(ValueError):
        min_time_us(h200, -1, 0)


@pytest.mark.gpu
def test_local_gpu_is_in_the_table() -> None:
    import torch

    card = resolve_card()
    assert card.name == torch.cuda.get_device_name()
    assert card.name in known_cards()
    props = torch.cuda.get_device_properties()
    assert card.sms == props.multi_processor_count
