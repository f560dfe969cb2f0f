"""Physical floors: no honest run of a kernel can be faster than its card allows.

The bench's integrity check flags a measured time below `min_time_us`: the larger of
bytes / peak bandwidth and flops / peak rate. Peaks are upper bounds so that the floor
never flags an honest run: on a GPU the datasheet bandwidth and the card's highest peak
(dense fp16 tensor rate, fp16 accumulation where that is faster); on a CPU, which has no
datasheet here, the L1 load bandwidth (two vector loads per cycle per core) and two FMA
pipes per core at the vector width, at the probed clock (6 GHz when unknown).
"""

from __future__ import annotations

from emmy_core.targets.card import Card

CPU_CLOCK_BOUND_MHZ = 6000.0  # no shipping CPU sustains more; used when the clock is unknown


def peak_bandwidth_gbs(card: Card) -> float | None:
    """Upper bound on bytes per second the card can move, GB/s; None when unknown."""
    if card.target == "cpu":
        clock = card.freq_mhz or CPU_CLOCK_BOUND_MHZ
        return (card.cores or 1) * clock * 1e-3 * 2 * (card.simd_bits or 128) / 8
    return card.mem_bw_gbs


def peak_tflops(card: Card) -> float | None:
    """Upper bound on the card's arithmetic rate, TFLOP/s; None when unknown."""
    if card.target == "cpu":
        clock = card.freq_mhz or CPU_CLOCK_BOUND_MHZ
        fp32_lanes = (card.simd_bits or 128) / 32
        return (card.cores or 1) * clock * 1e-6 * 2 * 2 * fp32_lanes * 2  # cores x GHz x 2 pipes x FMA x lanes x 2 (fp16)
    rates = [r for r in (card.fp32_tflops, card.fp16_tflops, card.fp16_acc16_tflops) if r is not None]
    return max(rates) if rates else None


def min_time_us(card: Card, bytes_moved: float, flops: float) -> float:
    """The fastest time, in microseconds, any run moving `bytes_moved` and doing `flops` can take on `card`.

    0.0 when neither peak of the card is known (nothing to check against).
    """
    if bytes_moved < 0 or flops < 0:
        raise ValueError(f"bytes_moved and flops must be non-negative, got {bytes_moved} and {flops}")
    floor = 0.0
    bw = peak_bandwidth_gbs(card)
    if bw:
        floor = max(floor, bytes_moved / (bw * 1e9) * 1e6)
    peak = peak_tflops(card)
    if peak:
        floor = max(floor, flops / (peak * 1e12) * 1e6)
    return floor
