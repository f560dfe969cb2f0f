"""Tensor-core instructions: their properties, which tile uses which, and when one cannot be used.

The `mma` knob names the tensor-core instruction a matmul tile is built on ("none": plain
FMA, which for f32 operands means IEEE products rather than TF32). Triton chooses the
instruction from the card, the tile and the warps, so a candidate names the one its tile
gets (`tile_instruction`); the name expands into these properties for the prior's
features (seed 08: "a named tensor core instruction expands into the properties of that
instruction"). `instruction_problem` says why a named instruction cannot serve a tile on
a card: not on this architecture (wgmma only on Hopper, mfma only on CDNA, ...), a tile
that is not a multiple of the instruction's shape, or operands it does not take.
"""

from __future__ import annotations

from dataclasses import dataclass

from emmy_core.targets.card import Card


@dataclass(frozen=True)
class Instruction:
    name: str
    m: int
    n: int
    k: int
    group_threads: int  # threads that issue one instruction together: warp 32, warpgroup 128, wavefront 64
    asynchronous: bool  # reads operands from shared memory asynchronously (wgmma)
    operand_dtypes: tuple[str, ...]
    acc_dtypes: tuple[str, ...]
    min_warps: int = 1  # warps a program needs to issue it (a warpgroup: 4)


WGMMA_WIDTHS = (8, 16, 32, 64, 128, 256)

INSTRUCTIONS: dict[str, Instruction] = {
    i.name: i
    for i in (
        Instruction("mma_m16n8k8", 16, 8, 8, 32, False, ("f16",), ("f32", "f16")),
        Instruction("mma_m16n8k16", 16, 8, 16, 32, False, ("f16", "bf16"), ("f32", "f16")),
        *(Instruction(f"wgmma_m64n{n}k16", 64, n, 16, 128, True, ("f16", "bf16"), ("f32", "f16"), min_warps=4)
          for n in WGMMA_WIDTHS),
        Instruction("mfma_32x32x8", 32, 32, 8, 64, False, ("f16", "bf16"), ("f32",)),
        Instruction("mfma_16x16x16", 16, 16, 16, 64, False, ("f16", "bf16"), ("f32",)),
        Instruction("wmma_16x16x16", 16, 16, 16, 32, False, ("f16", "bf16"), ("f32", "f16")),
    )
}


def instruction_features(mma: str | None) -> dict[str, float]:
    """Numeric properties of a named instruction: {} when undecided (missing, not zero), else its shape."""
    if mma is None:
        return {}
    info = INSTRUCTIONS.get(mma)
    if info is None:
        return {"mma_none": 1.0}
    return {"mma_none": 0.0, "mma_m": float(info.m), "mma_n": float(info.n), "mma_k": float(info.k),
            "mma_group_threads": float(info.group_threads), "mma_async": float(info.asynchronous)}


def instruction_problem(mma: str, card: Card, block_m: int, block_n: int, block_k: int, num_warps: int,
                        operand_dtype: str, acc: str | None) -> str | None:
    """Why `mma` cannot build this tile on `card`, or None."""
    if mma == "none":
        return None
    info = INSTRUCTIONS.get(mma)
    if info is None:
        return f"unknown tensor-core instruction {mma!r}"
    if mma not in card.tensor_cores:
        offered = ", ".join(card.tensor_cores) or "none"
        return f"{card.name} ({card.arch}) has no {mma} (it offers: {offered})"
    if operand_dtype not in info.operand_dtypes:
        return f"{mma} takes {'/'.join(info.operand_dtypes)} operands, not {operand_dtype}"
    if acc is not None and acc not in info.acc_dtypes:
        return f"{mma} accumulates in {'/'.join(info.acc_dtypes)}, not {acc}"
    if num_warps < info.min_warps or num_warps % info.min_warps:
        return f"{mma} needs a multiple of {info.min_warps} warps, not {num_warps}"
    if block_m % info.m or block_n % info.n or block_k % info.k:
        return f"tile {block_m}x{block_n}x{block_k} is not a multiple of {mma}'s {info.m}x{info.n}x{info.k}"
    return None


def _wgmma_width(block_m: int, block_n: int, num_warps: int) -> int:
    """The N of the wgmma Triton issues for a tile (its mmaVersionToInstrShape rule for version 3)."""
    m_warps = max(block_m // 16, 1)
    n_warps = max(num_warps // m_warps, 1)
    widest = max(block_n // n_warps, 8)
    return max(n for n in WGMMA_WIDTHS if block_n % n == 0 and n <= widest)


def tile_instruction(card: Card, block_m: int, block_n: int, block_k: int, num_warps: int,
                     operand_dtype: str) -> str:
    """The instruction Triton builds this tile on for `card`: what the compiler picks, else "none".

    Hopper issues wgmma (N chosen from the tile and warps as Triton does) when the program
    has whole warpgroups and 64-row tiles, else mma; other cards their one matrix
    instruction that fits; f32 and f64 operands use FMA ("none": IEEE products, never TF32).
    """
    if any(i.startswith("wgmma_") for i in card.tensor_cores) and operand_dtype in ("f16", "bf16") \
            and num_warps % 4 == 0 and block_m % 64 == 0 and block_k % 16 == 0:
        name = f"wgmma_m64n{_wgmma_width(block_m, block_n, num_warps)}k16"
        if name in card.tensor_cores:
            return name
    for name in ("mma_m16n8k16", "mma_m16n8k8", "mfma_32x32x8", "mfma_16x16x16", "wmma_16x16x16"):
        if name in card.tensor_cores and instruction_problem(
                name, card, block_m, block_n, block_k, num_warps, operand_dtype, None) is None:
            return name
    return "none"
