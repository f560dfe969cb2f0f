"""CPU schedule knobs as the C generator reads them, with their documented defaults.

A knob the kernel's family does not use is ignored; a missing one takes its default:

- `tile_m` 32, `tile_n` 64, `tile_k` 256: the matmul output tile and reduction depth
  (clipped to a static extent or a window length; other families ignore them).
- `vec` 1: matmul: the columns of a register block (a gcc vector of `vec` accumulators);
  elsewhere the `simdlen` of `#pragma omp simd` on innermost independent loops and row
  reductions. 1 means no simd pragma, so a reduction adds in sequential order; above 1 a
  float row reduction is a simd reduction (reassociated).
- `unroll` 1: matmul: the rows of a register block (with `vec` > 1; else `#pragma GCC
  unroll` on the k loop); elsewhere `#pragma GCC unroll` on innermost loops and
  reductions that are not simd loops (gcc accepts no unroll pragma beside `omp simd`, so
  there `vec` > 1 takes precedence and `unroll` has no effect).
- `threads` None: the `num_threads` of the outermost parallel loops; None leaves the
  OpenMP runtime's default (OMP_NUM_THREADS or all cores); 1 emits no parallel region.

Only knobs of the cpu vocabulary with valid values are accepted; anything else (a cuda
knob, an extern knob, a structural decision) is refused with `BuildError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from emmy_core.codegen.backend import BuildError
from emmy_core.knobs.vocab import SCHEDULE_KNOBS, knobs_problem

DEFAULTS: dict[str, int | None] = {"tile_m": 32, "tile_n": 64, "tile_k": 256, "vec": 1, "unroll": 1, "threads": None}


@dataclass(frozen=True)
class CSchedule:
    tile_m: int
    tile_n: int
    tile_k: int
    vec: int
    unroll: int
    threads: int | None


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
