"""The epilogue of a packed matmul's finished tile, and the prefetch of the rows it will touch.

After the last k pass a tile's accumulators run through the program's own epilogue (lets and
stores: bias, activation, residual, gate, scale) a row at a time in a simd loop; 16-bit epilogue
operands and outputs go through f32 runs of a tile row (`EpilogueRuns`), converted once per row (or
once per tile for an operand indexed by n alone). `prefetch_tile` asks for the rows the epilogue
reads and writes before the tile's k loop, so that they arrive while the micro-kernel computes.
"""

from __future__ import annotations

from dataclasses import dataclass

from emmy_core.codegen.c_emit import Emitter
from emmy_core.codegen.c_expr import C_TYPES, HALF_RUNS, Staged, axis_c, buffer_c, offset_c, var_c
from emmy_core.codegen.c_micro import MicroGeometry
from emmy_core.ir.family import MatmulShape
from emmy_core.ir.nodes import Expr, Load, Program, Reduce
from emmy_core.knobs.validity import epilogue_rows


@dataclass(frozen=True)
class EpilogueRuns:
    """16-bit epilogue buffers read or written through f32 runs of one tile row (or the tile's columns)."""

    staged_in: dict[str, Staged]
    staged_out: dict[str, Staged]
    per_tile: tuple[str, ...]  # inputs indexed by n alone (a bias): converted once per tile
    index: dict[str, tuple[str, ...]]  # the one index each staged buffer is read or written at

    @property
    def runs(self) -> int:
        return len(self.staged_in) + len(self.staged_out)


def _loads(e: Expr, into: dict[str, set[tuple[str, ...]]]) -> None:
    if isinstance(e, Load):
        into.setdefault(e.buffer, set()).add(e.index)
    for f in ("x", "a", "b"):
        sub = getattr(e, f, None)
        if isinstance(sub, Expr):
            _loads(sub, into)


def epilogue_runs(program: Program, shape: MatmulShape) -> EpilogueRuns:
    """Which epilogue buffers go through f32 runs: 16-bit, read (written) at one index ending in n."""
    row_vars = {*shape.batch_vars, shape.m_var, *((shape.parts_var,) if shape.parts_var else ())}
    loads: dict[str, set[tuple[str, ...]]] = {}
    for st in (*shape.epilogue, *shape.stores):
        _loads(st.value, loads)

    def runnable(buffer: str, index: tuple[str, ...]) -> bool:
        return (program.buffer(buffer).dtype in HALF_RUNS and index[-1] == shape.n_var
                and set(index[:-1]) <= row_vars)

    staged_in: dict[str, Staged] = {}
    staged_out: dict[str, Staged] = {}
    index: dict[str, tuple[str, ...]] = {}
    for name in sorted(loads):
        if len(loads[name]) == 1 and runnable(name, next(iter(loads[name]))):
            (index[name],) = loads[name]
            staged_in[name] = Staged(index[name][:-1], f"em_s{len(index) - 1}", "em_c")
    for st in shape.stores:
        if runnable(st.buffer, st.index) and st.buffer not in loads and st.buffer not in index:
            index[st.buffer] = st.index
            staged_out[st.buffer] = Staged(st.index[:-1], f"em_s{len(index) - 1}", "em_c")
    per_tile = tuple(n for n in staged_in if not index[n][:-1])
    return EpilogueRuns(staged_in, staged_out, per_tile, index)


def _run_at(em: Emitter, shape: MatmulShape, buffer: str, index: tuple[str, ...], fn: str, to_run: bool,
            run: str) -> None:
    """Converts one run of `buffer` (its index with n at the tile's first column) to or from f32 `run`."""
    with em.block(""):
        em.line(f"const int64_t {var_c(shape.n_var)} = em_jr;")
        at = f"{buffer_c(buffer)} + {offset_c(em.program, buffer, index)}"
        em.line(f"{fn}({at}, {run}, em_cols);" if to_run else f"{fn}({run}, {at}, em_cols);")


def emit_epilogue(em: Emitter, shape: MatmulShape, red: Reduce, g: MicroGeometry, runs: EpilogueRuns, tile: str,
                   ld: str) -> None:
    p = em.program

    def convert(name: str, to_run: bool) -> None:
        st = runs.staged_in.get(name) or runs.staged_out[name]
        fn = HALF_RUNS[p.buffer(name).dtype][0 if to_run else 1]
        _run_at(em, shape, name, runs.index[name], fn, to_run, st.scratch)

    with em.block(""):
        em.line(f"const int64_t em_rows = em_min64({g.mr}, {axis_c(shape.m)} - em_ir);")
        em.line(f"const int64_t em_cols = em_min64({g.nr}, {axis_c(shape.n)} - em_jr);")
        for name in runs.per_tile:
            convert(name, True)
        with em.block("for (int64_t em_r = 0; em_r < em_rows; ++em_r)"):
            em.line(f"const int64_t {var_c(shape.m_var)} = em_ir + em_r;")
            for name in runs.staged_in:
                if name not in runs.per_tile:
                    convert(name, True)
            em.line("#pragma omp simd")
            with em.block("for (int64_t em_c = 0; em_c < em_cols; ++em_c)"):
                em.line(f"const int64_t {var_c(shape.n_var)} = em_jr + em_c;")
                em.line(f"const {C_TYPES[red.dtype]} v_{red.name} = {tile}[em_r * {ld} + em_c];")
                em.x.values[red.name] = red.dtype
                em.x.staged, em.staged_out = runs.staged_in, runs.staged_out
                try:
                    em.stmts((*shape.epilogue, *shape.stores), True)
                finally:
                    em.x.staged, em.staged_out = {}, {}
            for name in runs.staged_out:
                convert(name, False)


def prefetch_tile(em: Emitter, shape: MatmulShape, g: MicroGeometry) -> None:
    """Prefetches the rows of the tile's epilogue operands and outputs before its k loop, so that
    the epilogue finds them in cache: they arrive while the micro-kernel computes."""
    p = em.program
    rows = epilogue_rows(shape)
    if not rows:
        return
    with em.block(""):
        em.line(f"const int64_t {var_c(shape.n_var)} = em_jr;")
        with em.block("for (int64_t em_r = 0; em_r < em_ra; ++em_r)"):
            em.line(f"const int64_t {var_c(shape.m_var)} = em_ir + em_r;")
            for name, index, written in rows:
                ptr = f"{buffer_c(name)} + {offset_c(p, name, index)}"
                em.line(f"__builtin_prefetch({ptr}, {int(written)}, 3); "
                        f"__builtin_prefetch({ptr} + em_min64({g.nr - 1}, {axis_c(shape.n)} - em_jr - 1), "
                        f"{int(written)}, 3);")
