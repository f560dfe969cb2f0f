"""A loop program as one C function with OpenMP: the generic translator and its schedule.

Statements translate one for one: `Loop` -> a `for` over the axis, `Reduce` -> an
accumulator and a loop over its (clipped) window, `Let` -> a const local, `Store` -> an
indexed write. The schedule is applied where it is safe by construction:

- a loop is *independent* when every store in its body is indexed by its variable, at
  the same positions for every store into one buffer, so two iterations never write
  the same element (loads read only `in` buffers, so there is nothing else to order);
- the outermost chain of perfectly nested independent loops becomes one
  `#pragma omp parallel for collapse(n)`; an innermost independent loop of lets and
  stores gets `#pragma omp simd` (when `vec` > 1) and `#pragma GCC unroll`;
- a matmul-family kernel is tiled instead (`c_matmul.py`), a row kernel fused (`c_rows.py`);
  `c_source.py` picks one and writes the whole source.

The function is `int emmy_kernel(void *const *bufs, const int64_t *dyn)`: buffer data
pointers in the program's buffer order, dynamic extents in its dynamic-axis order; it
returns 0, or 1 when a thread could not allocate its tile.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from emmy_core.codegen.backend import BuildError
from emmy_core.codegen.c_expr import (
    C_TYPES,
    ExprC,
    Staged,
    axis_c,
    buffer_c,
    offset_c,
    reduce_init,
    value_c,
    var_c,
)
from emmy_core.codegen.c_schedule import CSchedule
from emmy_core.ir.nodes import Affine, Expr, Let, Loop, Program, Range, Reduce, Stmt, Store

ENTRY = "emmy_kernel"
SIMD_REDUCTION = {"sum": "+", "max": "max", "min": "min"}
CPU_GRAIN = 1 << 16
"""Innermost iterations a thread must have before it joins a parallel region: the team is at most
work / CPU_GRAIN threads (at least 1), at most `threads`. A fork and join costs microseconds, and on
a loaded machine a team waits for its slowest member's time slice: an RMSNorm of 8 rows of 256 ran
7.9 ms on a team of 2 at load 2, 73 us on one thread. On a quiet machine (bench/grain.py, AVX2 EPYC,
2 threads) teams for kernels under a grain measured level with one thread (0.92-1.06 for the
decode-sized kernels), while a team of 2 took an RMSNorm of 1,024 rows (2^19 iterations) from 78 to
56 us: a grain of 2^16 (tens of microseconds) leaves every such kernel its team. Sizes are dynamic,
so the team is sized at run time, where the work is known."""
GRAIN_BITS = CPU_GRAIN.bit_length() - 1
assert CPU_GRAIN == 1 << GRAIN_BITS, "CPU_GRAIN is a power of two: the team is the work shifted right"


def stores_in(stmts: tuple[Stmt, ...]) -> list[Store]:
    found: list[Store] = []
    for s in stmts:
        if isinstance(s, Store):
            found.append(s)
        elif isinstance(s, Loop):
            found.extend(stores_in(s.body))
    return found


def independent(var: str, body: tuple[Stmt, ...]) -> bool:
    """Whether iterations of a loop over `var` with this body write disjoint elements."""
    positions: dict[str, tuple[int, ...]] = {}
    for st in stores_in(body):
        pos = tuple(i for i, v in enumerate(st.index) if v == var)
        if not pos or positions.setdefault(st.buffer, pos) != pos:
            return False
    return True


def simple(loop: Loop) -> bool:
    """A loop of lets and stores only (no nested loop or reduction): a simd candidate."""
    return all(isinstance(s, Let | Store) for s in loop.body)


def work_c(program: Program) -> str:
    """A C expression of the program's innermost iterations: each statement counts 1, times the trips of
    the loops around it, a reduction its (windowed) trips (an upper bound on the arithmetic to share)."""

    def trips(axis: str, window: Range | None) -> str:
        return f"INT64_C({window.length})" if window is not None else axis_c(axis)

    def body(stmts: tuple[Stmt, ...]) -> str:
        terms = []
        for st in stmts:
            if isinstance(st, Loop):
                terms.append(f"{axis_c(st.axis)} * ({body(st.body)})")
            elif isinstance(st, Reduce):
                terms.append(trips(st.axis, st.window))
            else:
                terms.append("INT64_C(1)")
        return " + ".join(terms) or "INT64_C(1)"

    return body(program.body)


def affine_c(a: Affine) -> str:
    terms = [f"{coef} * {var_c(v)}" for v, coef in a.terms]
    return "(" + " + ".join([*terms, f"INT64_C({a.offset})"]) + ")"


class Emitter:
    """Accumulates the lines of one kernel function."""

    def __init__(self, program: Program, schedule: CSchedule) -> None:
        self.program = program
        self.sched = schedule
        self.x = ExprC(program)
        self.lines: list[str] = []
        self.preamble: list[str] = []  # file-level declarations (types, helper functions), in order
        self.depth = 0
        self.staged_out: dict[str, Staged] = {}  # 16-bit outputs written through f32 runs
        self.keep: dict[Expr, str] = {}  # reduction bodies to keep per element: expression -> scratch run

    def declare(self, text: str) -> None:
        """Adds a file-level declaration once, after those already added."""
        if text not in self.preamble:
            self.preamble.append(text)

    def line(self, text: str) -> None:
        self.lines.append("  " * self.depth + text)

    @contextmanager
    def block(self, head: str) -> Iterator[None]:
        self.line(f"{head} {{" if head else "{")
        self.depth += 1
        saved = dict(self.x.values)
        try:
            yield
        finally:
            self.x.values = saved
            self.depth -= 1
            self.line("}")

    # -- pragmas
    def threads_clause(self, units: str | None = None) -> str:
        """`num_threads` of a parallel region: `threads`, fewer where the run's work is under CPU_GRAIN a
        thread (the regions share work with `omp for`, so any team size computes the same), and no more
        than `units` (a C expression: the pieces of work the region shares, when the caller knows them)."""
        if self.sched.threads is None:
            return ""
        t = int(self.sched.threads)
        teams = f"(({work_c(self.program)}) >> {GRAIN_BITS})"  # a shift: CPU_GRAIN is a power of two
        team = f"({teams} < 1 ? 1 : ({teams} < {t} ? {teams} : {t}))"
        if units is not None:
            team = f"em_min64({team}, ({units}) < 1 ? 1 : ({units}))"
        return f" num_threads((int){team})"

    @property
    def parallel(self) -> bool:
        return self.sched.threads != 1

    def inner_pragmas(self, reduction: str | None = None) -> None:
        if self.sched.vec > 1:  # gcc takes no unroll pragma beside an omp simd one: simd wins
            clause = f" reduction({reduction})" if reduction else ""
            self.line(f"#pragma omp simd simdlen({self.sched.vec}){clause}")
        elif self.sched.unroll > 1:
            self.line(f"#pragma GCC unroll {self.sched.unroll}")

    # -- statements
    def stmts(self, body: tuple[Stmt, ...], in_parallel: bool) -> None:
        for s in body:
            if isinstance(s, Loop):
                self.loop(s, in_parallel)
            elif isinstance(s, Let):
                self.let(s)
            elif isinstance(s, Reduce):
                self.reduce(s)
            elif isinstance(s, Store):
                self.store(s)
            else:
                raise BuildError(f"not a statement: {type(s).__name__}")

    def for_head(self, var: str, axis: str, lo: str = "0", hi: str | None = None) -> str:
        v = var_c(var)
        return f"for (int64_t {v} = {lo}; {v} < {hi or axis_c(axis)}; ++{v})"

    def loop(self, s: Loop, in_parallel: bool) -> None:
        if not in_parallel and self.parallel and independent(s.var, s.body):
            chain = [s]
            while (len(chain[-1].body) == 1 and isinstance(chain[-1].body[0], Loop)
                   and independent(chain[-1].body[0].var, chain[-1].body[0].body)):
                chain.append(chain[-1].body[0])
            if simple(chain[-1]) and self.sched.vec > 1 and len(chain) > 1:
                chain.pop()  # the innermost loop stays a simd loop inside the parallel one
            collapse = f" collapse({len(chain)})" if len(chain) > 1 else ""
            simd = ""
            if len(chain) == 1 and simple(s) and self.sched.vec > 1:
                simd = f" simd simdlen({self.sched.vec})"
            self.line(f"#pragma omp parallel for{simd}{collapse} schedule(static){self.threads_clause()}")
            self.nest(chain, 0)
            return
        if simple(s) and independent(s.var, s.body):
            self.inner_pragmas()
        with self.block(self.for_head(s.var, s.axis)):
            self.stmts(s.body, in_parallel)

    def nest(self, chain: list[Loop], at: int) -> None:
        loop = chain[at]
        with self.block(self.for_head(loop.var, loop.axis)):
            if at + 1 < len(chain):
                self.nest(chain, at + 1)
            else:
                self.stmts(loop.body, True)

    def let(self, s: Let) -> None:
        self.line(f"const {C_TYPES[s.dtype]} {value_c(s.name)} = {self.x.code(s.value)};")
        self.x.values[s.name] = s.dtype

    def store(self, s: Store) -> None:
        run = self.staged_out[s.buffer].at(s.index) if s.buffer in self.staged_out else None
        if run is not None:
            self.line(f"{run} = {self.x.unrounded(s.value, self.program.buffer(s.buffer).dtype)};")
            return
        self.line(f"{buffer_c(s.buffer)}[{offset_c(self.program, s.buffer, s.index)}] = {self.x.code(s.value)};")

    def reduce(self, s: Reduce) -> None:
        acc = value_c(s.name)
        self.line(f"{C_TYPES[s.dtype]} {acc} = {reduce_init(s.op, s.dtype)};")
        if s.window is None:
            lo, hi = "0", axis_c(s.axis)
        else:
            lo = affine_c(s.window.start)
            hi = f"em_min64({lo} + {s.window.length}, {axis_c(s.axis)})"
        simd = f"{SIMD_REDUCTION[s.op]}:{acc}" if s.dtype in ("f32", "f64") else None
        with self.block(""):
            self.line(f"const int64_t em_lo = {lo};")
            self.line(f"const int64_t em_hi = {hi};")
            if simd is not None or self.sched.vec == 1:
                self.inner_pragmas(simd)
            elif self.sched.unroll > 1:
                self.line(f"#pragma GCC unroll {self.sched.unroll}")
            kept = self.keep.get(s.body) if s.window is None else None
            with self.block(self.for_head(s.var, s.axis, "em_lo", "em_hi")):
                if kept is None:
                    self.line(f"{acc} = {self.x.combine(s.op, acc, self.x.code(s.body), s.dtype)};")
                else:  # the value is read again by the loop after the reduction: computed once, kept
                    self.line(f"const {C_TYPES[s.dtype]} em_e = {self.x.code(s.body)};")
                    self.line(f"{kept}[{var_c(s.var)}] = em_e;")
                    self.line(f"{acc} = {self.x.combine(s.op, acc, 'em_e', s.dtype)};")
        if kept is not None:
            self.x.reuse[s.body] = f"{kept}[{var_c(s.var)}]"
        self.x.values[s.name] = s.dtype

    # -- the function
    def axes_header(self) -> None:
        """The extent of every axis: dynamic ones from `em_dyn`, in the program's dynamic-axis order."""
        for i, ax in enumerate(self.program.dynamic_axes):
            self.line(f"const int64_t {axis_c(ax.name)} = em_dyn[{i}];")
        for ax in self.program.axes:
            if ax.extent is not None:
                self.line(f"const int64_t {axis_c(ax.name)} = INT64_C({ax.extent});")

    def header(self) -> None:
        self.axes_header()
        for i, b in enumerate(self.program.buffers):
            t = C_TYPES[b.dtype]
            const = "const " if b.role == "in" else ""
            self.line(f"{const}{t} *restrict {buffer_c(b.name)} = ({const}{t} *)em_bufs[{i}];")
        self.line("int em_err = 0;")
