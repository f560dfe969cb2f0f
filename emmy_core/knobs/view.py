"""What the knob rules need to know about a kernel: its family, tile caps, operand and compute widths.

A cap is the power of two at or above an axis's extent (at least `floor`): a tile larger
than that only computes masked-off padding, so a rule offers none and validity refuses
one. A dynamic axis has no cap unless sizes are given: the candidate pool is a function
of the kernel's identity (which ignores expected sizes) and the card, never of a hint.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import prod

from emmy_core.ir.family import ElementwiseShape, ExternShape, MatmulShape, RowShape, Shape, classify
from emmy_core.ir.nodes import Kernel, Program
from emmy_core.ir.sizes import extents
from emmy_core.ir.vocab import DTYPES, dtype_bytes

# Which knobs each (target, family) decides. `mma` is optional: the first option leaves it
# to the compiler; `acc` is absent for f64 operands (the vocabulary has no f64 accumulator);
# `simd` and `par_axis`, then `pack_a`, `pack_b`, `prefetch` and `prefetch_c`, came later than the rest of the
# CPU matmul's knobs: rows measured before them leave them out and build with the generator's
# defaults (the behaviour they measured); every option enumerated now decides them. `dot` came last: an
# option leaves it out where it is fma (the default), so no earlier option's knobs or schedule id change; and
# `prefetch_l2` after it, set only by the options that stream their weights (absent: none).
FAMILY_KNOBS: dict[tuple[str, str], tuple[str, ...]] = {
    ("cuda", "matmul"): ("block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m", "acc", "mma"),
    ("cuda", "row"): ("block", "num_warps"),
    ("cuda", "elementwise"): ("block", "num_warps"),
    ("cpu", "matmul"): ("tile_m", "tile_n", "tile_k", "vec", "unroll", "threads", "simd", "par_axis", "pack_a",
                        "pack_b", "prefetch", "prefetch_c", "dot", "prefetch_l2"),
    ("cpu", "row"): ("vec", "unroll", "threads"),
    ("cpu", "elementwise"): ("vec", "threads"),
}
OPTIONAL_KNOBS = frozenset({"mma", "acc", "simd", "par_axis", "pack_a", "pack_b", "prefetch", "prefetch_c", "dot",
                            "prefetch_l2"})


def pow2ceil(x: int) -> int:
    return 1 << max(0, (x - 1).bit_length())


@dataclass(frozen=True)
class KernelView:
    family: str
    shape: Shape
    caps: dict[str, int | None]  # m, n, k (matmul) / row / flat, inner (elementwise): rounded up
    a_bytes: int  # operand widths (matmul); the widest buffer elsewhere
    b_bytes: int
    operand_dtype: str  # the matmul's a operand; the widest float buffer elsewhere
    compute_bits: int  # width of the arithmetic: 64 when any buffer is f64, else 32
    n_extent: int | None = None  # a matmul's static N (exact, not rounded), None when dynamic

    def cap(self, key: str, floor: int = 1) -> int | None:
        c = self.caps.get(key)
        return None if c is None else max(floor, c)


def _extent(program: Program, axis: str, ext: dict[str, int] | None) -> int | None:
    if ext is not None:
        return ext[axis]
    return program.axis(axis).extent


def view(kernel: Kernel, sizes: dict[str, int] | None = None) -> KernelView:
    """The knob-relevant reading of `kernel`; with `sizes`, dynamic axes are capped at them too."""
    shape = classify(kernel)
    if isinstance(shape, ExternShape):
        return KernelView("extern", shape, {}, 0, 0, "", 0)
    assert isinstance(kernel, Program)
    ext = extents(kernel, sizes) if sizes is not None else None
    widest = max(kernel.buffers, key=lambda b: DTYPES[b.dtype])
    compute_bits = 64 if any(b.dtype == "f64" for b in kernel.buffers) else 32

    def capped(x: int | None) -> int | None:
        return None if x is None else pow2ceil(x)

    if isinstance(shape, MatmulShape):
        k = _extent(kernel, shape.k, ext)
        if shape.window is not None:
            k = shape.window.length if k is None else min(k, shape.window.length)
        caps = {"m": capped(_extent(kernel, shape.m, ext)), "n": capped(_extent(kernel, shape.n, ext)),
                "k": capped(k)}
        a, b = kernel.buffer(shape.a), kernel.buffer(shape.b)
        return KernelView("matmul", shape, caps, dtype_bytes(a.dtype), dtype_bytes(b.dtype), a.dtype, compute_bits,
                          _extent(kernel, shape.n, ext))
    if isinstance(shape, RowShape):
        caps = {"row": capped(_extent(kernel, shape.row, ext))}
    else:
        assert isinstance(shape, ElementwiseShape)
        sizes_ = [_extent(kernel, a, ext) for a in shape.axes]
        caps = {"flat": None if None in sizes_ else pow2ceil(prod(s for s in sizes_ if s is not None)),
                "inner": capped(sizes_[-1])}
    w = dtype_bytes(widest.dtype)
    return KernelView(shape.family, shape, caps, w, w, widest.dtype, compute_bits)
