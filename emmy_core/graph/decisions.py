"""Structural decisions: rewrites that replace one kernel by pieces (DESIGN section 4).

A `Decision` is (parent, decision text, pieces). The pieces run in order and share the
parent's buffer namespace: a buffer a piece writes that is not a parent buffer is an
intermediate, read by a later piece; every parent output is written by some piece.
`Decision` checks this wiring when built, so a cut minted by the fusion passes
(`cut:<seam>`, built elsewhere with this same class) obeys the same rules as a split.

Splits minted here (`split:<axis>=<parts>`, chunk = ceil(extent / parts), every part
non-empty):

- `split_k` (matmul family, static K): piece 0 computes partial products into an
  accumulator-typed buffer with a leading parts axis `P`, each part reducing the window
  `[p * chunk : chunk]` of K; piece 1 sums over P and applies the parent's epilogue and
  stores verbatim.
- `split_rows` (row family, static reduced axis): piece 0 computes per-window partial
  reductions into `[rows.., P]` buffers; piece 1 finishes them over P and runs the
  parent's lets and stores verbatim. Combines: a sum, max or min of a body that reads
  only inputs combines by the same op; a softmax sum `sum exp(x - m)` (m an earlier max)
  keeps each window's own max and combines online, `s = sum_p s_p * exp(m_p - m)`; a
  sum of squared deviations `sum (x - c)^2` (c a row-level let, layernorm's mean) is
  rebuilt from the partial sums of x and x^2 as `q + c * (n * c - 2 * sx)` in the
  accumulator type (exact algebra; it gives up the two-pass form's cancellation guard).

Minted pieces are named by a digest of their own structure, so identical pieces of
different parents share one identity.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass

import numpy as np

from emmy_core.ir import (
    Affine,
    Axis,
    Binary,
    Buffer,
    Const,
    Expr,
    IRError,
    Let,
    Load,
    Loop,
    Program,
    Range,
    Reduce,
    Ref,
    Stmt,
    Store,
    Unary,
    kernel_id,
    render,
    validate,
)
from emmy_core.ir.family import MatmulShape, RowShape, classify
from emmy_core.knobs.vocab import format_split, parse_decision

SPLIT_K_PARTS = (2, 4, 8, 16)
SPLIT_K_MIN_CHUNK = 256  # K elements per part below which a split-K is not offered
SPLIT_ROW_PARTS = (2, 4, 8)
SPLIT_ROW_MIN_CHUNK = 1024  # row elements per part below which a split-row is not offered


@dataclass(frozen=True)
class Decision:
    """A structural decision on `parent`: its text and the pieces that together compute the parent."""

    parent: Program
    decision: str
    pieces: tuple[Program, ...]

    def __post_init__(self) -> None:
        check_wiring(self.parent, self.decision, self.pieces)

    def routing_rows(self) -> list[tuple[str, str, int, str]]:
        """(parent_id, decision, piece_index, piece_id) for the store's `routing` table."""
        pid = kernel_id(self.parent)
        return [(pid, self.decision, i, kernel_id(p)) for i, p in enumerate(self.pieces)]

    def intermediates(self) -> tuple[Buffer, ...]:
        """Buffers a piece writes that the parent does not have (read by later pieces)."""
        names = {b.name for b in self.parent.buffers}
        return tuple(b for p in self.pieces for b in p.outputs if b.name not in names)


def check_wiring(parent: Program, decision: str, pieces: tuple[Program, ...]) -> None:
    """IRError unless the pieces, run in order, read only what exists and write every parent output."""
    try:
        parse_decision(decision)
    except ValueError as exc:
        raise IRError(str(exc)) from None
    if not isinstance(pieces, tuple) or not pieces:
        raise IRError(f"decision {decision} on {parent.name}: pieces must be a non-empty tuple")
    parent_axes = {a.name: a for a in parent.axes}
    have = {b.name: b for b in parent.inputs}
    outs = {b.name: b for b in parent.outputs}
    written: set[str] = set()
    for i, piece in enumerate(pieces):
        where = f"decision {decision} on {parent.name}: piece {i} ({getattr(piece, 'name', '?')})"
        if not isinstance(piece, Program):
            raise IRError(f"{where}: not a loop program")
        validate(piece)
        for ax in piece.axes:
            if ax.name in parent_axes and parent_axes[ax.name] != ax:
                raise IRError(f"{where}: axis {ax.name!r} differs from the parent's")
            if ax.name not in parent_axes and ax.dynamic:
                raise IRError(f"{where}: dynamic axis {ax.name!r} is not one of the parent's")
        for b in piece.inputs:
            src = have.get(b.name)
            if src is None:
                raise IRError(f"{where}: reads {b.name!r}, which neither the parent nor an earlier piece provides")
            if (src.dtype, src.shape) != (b.dtype, b.shape):
                raise IRError(f"{where}: reads {b.name!r} as {b.dtype}{list(b.shape)}, "
                              f"provided as {src.dtype}{list(src.shape)}")
        for b in piece.outputs:
            if b.name in written or (b.name in have and b.name not in outs):
                raise IRError(f"{where}: writes {b.name!r}, which is already provided")
            if b.name in outs and (outs[b.name].dtype, outs[b.name].shape) != (b.dtype, b.shape):
                raise IRError(f"{where}: writes parent output {b.name!r} with another type or shape")
            written.add(b.name)
            have[b.name] = b
    missing = sorted(set(outs) - written)
    if missing:
        raise IRError(f"decision {decision} on {parent.name}: no piece writes parent output(s) {', '.join(missing)}")


def run_pieces(decision: Decision, inputs: dict[str, np.ndarray],
               sizes: dict[str, int] | None = None) -> dict[str, np.ndarray]:
    """The parent's outputs computed by running the pieces in order under the reference interpreter."""
    from emmy_core.ir.interpret import run

    env = dict(inputs)
    sizes = dict(sizes or {})
    for piece in decision.pieces:
        dyn = {a.name for a in piece.dynamic_axes}
        env.update(run(piece, {b.name: env[b.name] for b in piece.inputs},
                       {k: v for k, v in sizes.items() if k in dyn}))
    return {b.name: env[b.name] for b in decision.parent.outputs}


# ---- minting ------------------------------------------------------------------------------------


def _names(program: Program) -> set[str]:
    found = {a.name for a in program.axes} | {b.name for b in program.buffers}

    def walk(stmts: tuple[Stmt, ...]) -> None:
        for s in stmts:
            if isinstance(s, Loop):
                found.add(s.var)
                walk(s.body)
            elif isinstance(s, Reduce):
                found.update((s.name, s.var))
            elif isinstance(s, Let):
                found.add(s.name)

    walk(program.body)
    return found


def _fresh(base: str, taken: set[str]) -> str:
    name, i = base, 1
    while name in taken:
        name, i = f"{base}{i}", i + 1
    taken.add(name)
    return name


def _loads(e: Expr | Stmt, out: set[str]) -> set[str]:
    if isinstance(e, Load):
        out.add(e.buffer)
    elif isinstance(e, Loop):
        for s in e.body:
            _loads(s, out)
    elif isinstance(e, Let | Store):
        _loads(e.value, out)
    elif isinstance(e, Reduce):
        _loads(e.body, out)
    elif isinstance(e, Unary):
        _loads(e.x, out)
    elif isinstance(e, Binary):
        _loads(e.a, out)
        _loads(e.b, out)
    elif hasattr(e, "x"):  # Cast
        _loads(e.x, out)  # type: ignore[union-attr]
    return out


def _refs(e: Expr) -> set[str]:
    if isinstance(e, Ref):
        return {e.name}
    if isinstance(e, Binary):
        return _refs(e.a) | _refs(e.b)
    if hasattr(e, "x"):  # Unary, Cast
        return _refs(e.x)  # type: ignore[union-attr]
    return set()


def _nest(loops: list[tuple[str, str]], body: tuple[Stmt, ...]) -> tuple[Stmt, ...]:
    for var, axis in reversed(loops):
        body = (Loop(var, axis, body),)
    return body


def _mint(prefix: str, parent: Program, extra_axes: tuple[Axis, ...], buffers: list[Buffer],
          body: tuple[Stmt, ...]) -> Program:
    """A piece named by a digest of its own structure; keeps only the axes it uses."""
    used = {a for b in buffers for a in b.shape}

    def walk(stmts: tuple[Stmt, ...]) -> None:
        for s in stmts:
            if isinstance(s, Loop):
                used.add(s.axis)
                walk(s.body)
            elif isinstance(s, Reduce):
                used.add(s.axis)

    walk(body)
    axes = tuple(a for a in (*parent.axes, *extra_axes) if a.name in used)
    draft = Program("piece", axes, tuple(buffers), body)
    digest = hashlib.sha256(render(draft, hints=False).encode("utf-8")).hexdigest()[:16]
    return validate(Program(f"{prefix}_{digest}", axes, tuple(buffers), body))  # type: ignore[return-value]


def _parts(extent: int | None, parts: int, what: str) -> int:
    if extent is None:
        raise IRError(f"{what}: the split axis is dynamic; only a static axis can be split")
    if isinstance(parts, bool) or not isinstance(parts, int) or parts < 2:
        raise IRError(f"{what}: parts must be an integer >= 2")
    chunk = math.ceil(extent / parts)
    if (parts - 1) * chunk >= extent:
        raise IRError(f"{what}: {parts} parts of {chunk} leave a part of the {extent} elements empty")
    return chunk


# ---- split-K ------------------------------------------------------------------------------------


def split_k(program: Program, parts: int) -> Decision:
    """Split a matmul's K reduction into `parts` windows: partial products, then a combine with the epilogue."""
    shape = classify(program)
    if not isinstance(shape, MatmulShape):
        raise IRError(f"split-K needs a matmul-family kernel; {program.name} is {shape.family}")
    if shape.window is not None or shape.parts is not None:
        raise IRError(f"split-K of {program.name}: its reduction is already windowed")
    text = format_split(shape.k, parts)
    chunk = _parts(program.axis(shape.k).extent, parts, f"{text} on {program.name}")
    taken = _names(program)
    ax_p = Axis(_fresh("P", taken), parts)
    pv, part = _fresh("p", taken), _fresh("part", taken)
    red = next(s for s in _innermost(program) if isinstance(s, Reduce))
    out_index = (pv, *shape.batch_vars, shape.m_var, shape.n_var)
    part_shape = (ax_p.name, *shape.batch, shape.m, shape.n)
    partial_body = (
        Reduce(red.name, red.dtype, "sum", red.var, red.axis, red.body, Range(Affine(((pv, chunk),)), chunk)),
        Store(part, out_index, Ref(red.name)),
    )
    partial = _mint(
        "splitk_part", program, (ax_p,),
        [*dict.fromkeys((program.buffer(shape.a), program.buffer(shape.b))),
         Buffer(part, "out", shape.acc_dtype, part_shape)],
        _nest([(pv, ax_p.name), *shape.loops], partial_body),
    )
    combine_body = (
        Reduce(red.name, red.dtype, "sum", pv, ax_p.name, Load(part, out_index)), *shape.epilogue, *shape.stores,
    )
    read = set().union(*(_loads(s, set()) for s in combine_body))
    buffers = [Buffer(part, "in", shape.acc_dtype, part_shape)]
    buffers += [b for b in program.inputs if b.name in read] + list(program.outputs)
    combine = _mint("splitk_combine", program, (ax_p,), buffers, _nest(list(shape.loops), combine_body))
    return Decision(program, text, (partial, combine))


def _innermost(program: Program) -> tuple[Stmt, ...]:
    body = program.body
    while len(body) == 1 and isinstance(body[0], Loop):
        body = body[0].body
    return body


# ---- split rows ---------------------------------------------------------------------------------


def split_rows(program: Program, parts: int) -> Decision:
    """Split a row kernel's reductions into `parts` windows: partial reductions, then a combine and the stores."""
    shape = classify(program)
    if not isinstance(shape, RowShape):
        raise IRError(f"split-rows needs a row-family kernel; {program.name} is {shape.family}")
    if shape.windowed or len(set(shape.reduce_axes)) != 1:
        raise IRError(f"split-rows of {program.name}: its reductions are windowed or run over several axes")
    axis = shape.reduce_axes[0]
    text = format_split(axis, parts)
    n = program.axis(axis).extent
    chunk = _parts(n, parts, f"{text} on {program.name}")
    assert n is not None
    taken = _names(program)
    ax_p = Axis(_fresh("P", taken), parts)
    pv = _fresh("p", taken)
    window = Range(Affine(((pv, chunk),)), chunk)
    idx = (*shape.rows_vars, pv)
    pshape = (*shape.rows, ax_p.name)
    partial_stmts: list[Stmt] = []
    part_bufs: list[Buffer] = []
    combine: list[Stmt] = []
    plain: dict[str, tuple[Reduce, str]] = {}  # reduce name -> (reduce, its partial buffer)
    lets = {s.name for s in shape.body if isinstance(s, Let)}

    def emit(name: str, dtype: str, op: str, var: str, body: Expr) -> str:
        buf = _fresh(f"{name}_part", taken)
        partial_stmts.extend((Reduce(name, dtype, op, var, axis, body, window), Store(buf, idx, Ref(name))))
        part_bufs.append(Buffer(buf, "out", dtype, pshape))
        return buf

    def over_p(name: str, dtype: str, op: str, value: Expr) -> Reduce:
        return Reduce(name, dtype, op, pv, ax_p.name, value)

    for s in shape.body:
        if not isinstance(s, Reduce):
            combine.append(s)
            continue
        refs = _refs(s.body)
        t = s.dtype
        if not refs:
            buf = emit(s.name, t, s.op, s.var, s.body)
            plain[s.name] = (s, buf)
            combine.append(over_p(s.name, t, s.op, Load(buf, idx)))
            continue
        b = s.body
        if (s.op == "sum" and isinstance(b, Unary) and b.op == "exp" and isinstance(b.x, Binary)
                and b.x.op == "sub" and isinstance(b.x.b, Ref) and b.x.b.name in plain
                and plain[b.x.b.name][0].op == "max" and plain[b.x.b.name][0].body == b.x.a):
            mx, mx_buf = b.x.b.name, plain[b.x.b.name][1]
            buf = emit(s.name, t, "sum", s.var, b)  # each window's sum against its own max
            rescale = Unary("exp", Binary("sub", Load(mx_buf, idx), Ref(mx)))
            combine.append(over_p(s.name, t, "sum", Binary("mul", Load(buf, idx), rescale)))
            continue
        if (s.op == "sum" and isinstance(b, Binary) and b.op == "mul" and b.a == b.b and isinstance(b.a, Binary)
                and b.a.op == "sub" and isinstance(b.a.b, Ref) and b.a.b.name in lets and not _refs(b.a.a)):
            x, c = b.a.a, b.a.b
            q = _fresh(f"{s.name}_sq", taken)
            combine.append(over_p(q, t, "sum", Load(emit(q, t, "sum", s.var, Binary("mul", x, x)), idx)))
            sx = next((r.name for r, _ in plain.values() if r.op == "sum" and r.body == x), None)
            if sx is None:
                sx = _fresh(f"{s.name}_sx", taken)
                combine.append(over_p(sx, t, "sum", Load(emit(sx, t, "sum", s.var, x), idx)))
            inner = Binary("sub", Binary("mul", Const(t, n), c), Binary("mul", Const(t, 2), Ref(sx)))
            combine.append(Let(s.name, t, Binary("add", Ref(q), Binary("mul", c, inner))))
            continue
        raise IRError(f"{text} on {program.name}: no combine is known for reduction {s.name!r} "
                      f"(its body reads {', '.join(sorted(refs))})")

    loops = list(zip(shape.rows_vars, shape.rows, strict=True))
    read = set().union(*(_loads(s, set()) for s in partial_stmts))
    partial = _mint("splitrow_part", program, (ax_p,), [b for b in program.inputs if b.name in read] + part_bufs,
                    _nest([*loops, (pv, ax_p.name)], tuple(partial_stmts)))
    read = set().union(*(_loads(s, set()) for s in combine))
    buffers = [Buffer(b.name, "in", b.dtype, b.shape) for b in part_bufs]
    buffers += [b for b in program.inputs if b.name in read] + list(program.outputs)
    finish = _mint("splitrow_combine", program, (ax_p,), buffers, _nest(loops, tuple(combine)))
    return Decision(program, text, (partial, finish))


# ---- what a kernel offers -----------------------------------------------------------------------


def legal_splits(program: Program) -> list[str]:
    """The split decisions `program` offers, in a fixed order (fewest parts first)."""
    try:
        shape = classify(program)
    except IRError:
        return []
    if isinstance(shape, MatmulShape) and shape.window is None and shape.parts is None:
        k = program.axis(shape.k).extent
        if k is None:
            return []
        return [format_split(shape.k, p) for p in SPLIT_K_PARTS
                if k // p >= SPLIT_K_MIN_CHUNK and (p - 1) * math.ceil(k / p) < k]
    if isinstance(shape, RowShape) and not shape.windowed and len(set(shape.reduce_axes)) == 1:
        n = program.axis(shape.reduce_axes[0]).extent
        if n is None:
            return []
        offered = []
        for p in SPLIT_ROW_PARTS:
            if n // p >= SPLIT_ROW_MIN_CHUNK:
                try:
                    offered.append(split_rows(program, p).decision)
                except IRError:
                    break
        return offered
    return []


def apply(program: Program, decision: str) -> Decision:
    """The pieces of `decision` on `program` (a split; cuts are minted by the graph's fusion passes)."""
    try:
        kind, axis, parts = parse_decision(decision)
    except ValueError as exc:
        raise IRError(str(exc)) from None
    if kind == "cut":
        raise IRError(f"{decision}: cuts are minted by the graph's fusion passes, not by apply()")
    assert parts is not None
    shape = classify(program)
    if isinstance(shape, MatmulShape) and axis == shape.k:
        return split_k(program, parts)
    if isinstance(shape, RowShape) and set(shape.reduce_axes) == {axis}:
        return split_rows(program, parts)
    raise IRError(f"{decision}: {program.name} ({shape.family}) has no splittable reduction over {axis!r}")
