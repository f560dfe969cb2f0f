"""CPU schedule knobs as the C generator reads them, with their documented defaults.

A knob the kernel's family does not use is ignored; a missing one takes its default:

- matmul (the packed, register-blocked form of `c_matmul.py`):
  - `unroll` 1 x `vec` 1: the micro-kernel, `unroll` rows (M_r) by `vec` columns (N_r) of
    accumulators held in vector registers across the k loop;
  - `simd` None: the width in bits of one accumulator register; None keeps a register at
    most 512 bits (what rows measured before the knob existed ran). A row of the
    micro-kernel is `vec` elements in registers of min(simd, vec x element bits) bits;
  - `tile_m` 32 (M_c), `tile_n` 64 (N_c), `tile_k` 256 (K_c): the rows of A packed as one
    block (rounded up to a multiple of `unroll`), the columns one block of work sweeps (a
    multiple of `vec`), and the depth of the packed panels one pass of the micro-kernel
    streams; tiles past an axis's extent are clipped to it;
  - `par_axis` "m": the threads share out row blocks (each sweeps every column); "n":
    column blocks (each sweeps every row), for matmuls with few rows;
  - `pack_a` true, `pack_b` true: A's rows of a block are packed into M_r-row panels per
    pass, B into N_r-column panels; false reads the operand where it lies (A: M_r row
    streams broadcast in place; B: N_r columns of a row-major B with N a multiple of N_r),
    for small operands that packing would only copy (the batched attention matmuls). Only
    an operand already of the accumulator type can stay in place;
  - `prefetch` 0: how many k steps ahead the micro-kernel prefetches its B and A streams
    (0: none, the hardware prefetcher alone);
  - `prefetch_l2` 0: how many k steps ahead the micro-kernel prefetches its B stream into the L2
    cache (0: none): far enough ahead to hide the memory's latency where a product streams its
    packed weights from memory (a decode step's few rows), which `prefetch`'s L1 distance does not;
  - `prefetch_c` false: true prefetches the rows of a tile's output and epilogue operands
    (a residual, a gate) before the k loop of its last pass, so the epilogue finds them in cache;
  - `dot` "fma": the micro-kernel's multiply instructions. "fma" widens the operands to the
    accumulator type and issues one fused multiply-add per k; "dpbf16" (AVX512-BF16) multiplies
    bf16 pairs along k into f32 (`vdpbf16ps`, A and B packed pair-interleaved, `simd` 512);
    "amx" (AMX-BF16) multiplies 16 x 32 bf16 tiles into 16 x 16 f32 ones (`tdpbf16ps`; `unroll`
    then counts 16-row tiles, 1 or 2, `vec` is 16 or 32, K_c a multiple of 32, B packed once in
    the tile layout). Both need bf16 A and B
    accumulating in f32, packed, with no reduction window; they add a pair's products before
    the running sum and flush subnormals, so unlike the other knobs they change result bits
    (within the bf16 tolerance). "fp16" (AVX512-FP16) multiplies f16 A and B with `vfmadd231ph`
    into f16 sums over 16 steps of k, each then widened and added into f32 accumulators (`simd`
    512, `vec` a multiple of 32; within the f16 tolerance).
- row reductions and elementwise chains: `vec` 1 is the `simdlen` of `#pragma omp simd` on
  innermost independent loops and row reductions (1: no simd pragma, so a reduction adds
  in sequential order; above 1 a float row reduction is a simd reduction, reassociated);
  `unroll` 1 is `#pragma GCC unroll` on innermost loops and reductions that are not simd
  loops (gcc accepts no unroll pragma beside `omp simd`, so `vec` > 1 takes precedence).
- `threads` None: the `num_threads` of the parallel region; None leaves the OpenMP
  runtime's default (OMP_NUM_THREADS or all cores); 1 emits no parallel region.

Only knobs of the cpu vocabulary with valid values are accepted; anything else (a cuda
knob, an extern knob, a structural decision) is refused with `BuildError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from emmy_core.codegen.backend import BuildError
from emmy_core.knobs.vocab import SCHEDULE_KNOBS, knobs_problem

DEFAULTS: dict[str, int | str | None] = {"tile_m": 32, "tile_n": 64, "tile_k": 256, "vec": 1, "unroll": 1,
                                         "threads": None, "simd": None, "par_axis": "m",
                                         "pack_a": True, "pack_b": True, "prefetch": 0,
                                         "prefetch_c": False, "dot": "fma", "prefetch_l2": 0}
LEGACY_SIMD_BITS = 512  # the widest single vector variable when `simd` is not decided


@dataclass(frozen=True)
class CSchedule:
    tile_m: int
    tile_n: int
    tile_k: int
    vec: int
    unroll: int
    threads: int | None
    simd: int | None
    par_axis: str
    pack_a: bool
    pack_b: bool
    prefetch: int
    prefetch_c: bool
    dot: str
    prefetch_l2: int


def schedule_of(knobs: dict[str, object]) -> CSchedule:
    """The schedule a knob assignment spells (defaults filled in); BuildError for a knob outside the cpu set."""
    problem = knobs_problem(knobs)
    if problem is not None:
        raise BuildError(f"cpu knobs refused: {problem}")
    for name in knobs:
        spec = SCHEDULE_KNOBS.get(name)
        if spec is None or spec.target != "cpu":
            raise BuildError(f"cpu knobs refused: {name!r} is not a cpu schedule knob "
                             f"(cpu knobs: {', '.join(DEFAULTS)})")
    values = {**DEFAULTS, **knobs}
    return CSchedule(**values)  # type: ignore[arg-type]
