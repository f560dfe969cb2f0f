"""Triton kernel templates, one per family shape; the variable parts come from the loop program.

- `matmul`: a tile of the output per program (group-M swizzled), `tl.dot` over K blocks
  into an accumulator, then the epilogue `let`s and stores on the tile; batch axes (and
  the parts axis of a split-K partial) run on `program_id(1)`.
- `row`: one program per row; each reduction runs over its axis in chunks of `block`
  (one chunk, shared with the stores, when the axis fits), then the inner loop's stores.
- `lanes`: a flattened 1-D grid of `block` lanes. Elementwise chains put every loop of the
  nest on the lanes; a row kernel without an inner loop whose reductions are short (the
  combine of a split) puts its rows on the lanes and runs each reduction as a scalar loop.

Every template returns the body lines and a `LaunchPlan` (grid as a function of extents,
launch options). Templates refuse what they cannot generate with `TemplateError`.
"""

from __future__ import annotations

from dataclasses import dataclass

from emmy_core.codegen.triton_expr import (
    TL_DTYPES,
    Scope,
    VarCode,
    Writer,
    init_literal,
    val_name,
    var_name,
)
from emmy_core.ir import Affine, Binary, Cast, Expr, Let, Load, Loop, Program, Reduce, Store, Unary
from emmy_core.ir.family import MatmulShape

LANES_MAX_TRIP = 64  # a row kernel's reductions this short (and no inner loop) run as scalar loops per lane
GridFactor = tuple[tuple[str, ...], int]  # cdiv(prod(extent of axes), div)


class TemplateError(ValueError):
    """The kernel (or knob setting) cannot be written as this Triton template."""


@dataclass(frozen=True)
class LaunchPlan:
    template: str
    grid: tuple[tuple[GridFactor, ...], ...]  # per grid dimension, a product of factors
    num_warps: int
    num_stages: int
    bf16_math: bool = False  # computes on bf16 values, which Triton's interpreter gets wrong


def uses_var(e: Expr, var: str) -> bool:
    if isinstance(e, Load):
        return var in e.index
    if isinstance(e, Cast | Unary):
        return uses_var(e.x, var)
    if isinstance(e, Binary):
        return uses_var(e.a, var) or uses_var(e.b, var)
    return False


def _decompose(w: Writer, scope: Scope, flat: str, loops: list[tuple[str, str]], mask: str | None) -> None:
    """Loop variables (outermost first) from one flat index, innermost fastest."""
    rem = flat
    for pos in range(len(loops) - 1, -1, -1):
        var, axis = loops[pos]
        name = var_name(var)
        if pos == 0:
            w.line(scope, f"{name} = {rem}")
        else:
            ext = w.extent_code(axis)
            w.line(scope, f"{name} = {rem} % {ext}")
            nxt = w.fresh("q")
            w.line(scope, f"{nxt} = {rem} // {ext}")
            rem = nxt
        scope.vars[var] = VarCode(name, mask)


def _affine(w: Writer, scope: Scope, a: Affine) -> str:
    terms = [f"{scope.var(v).code} * {c}" if c != 1 else scope.var(v).code for v, c in a.terms]
    if a.offset or not terms:
        terms.append(str(a.offset))
    return " + ".join(terms)


def _let(w: Writer, scope: Scope, s: Let) -> None:
    code = w.expr(scope, s.value)
    name = val_name(s.name)
    w.line(scope, f"{name} = {code}")
    scope.values[s.name] = name
    w.check(scope, name, s.dtype)
    w.value_types[s.name] = s.dtype


def _store(w: Writer, scope: Scope, s: Store, required: tuple[str, ...]) -> None:
    missing = [v for v in required if v not in s.index]
    if missing:
        raise TemplateError(f"store into {s.buffer!r} is not indexed by loop variable(s) {', '.join(missing)}: "
                            "programs would race on it")
    value = w.expr(scope, s.value)
    offs, mask = w.address(scope, s.buffer, s.index)
    ptr = f"p_{s.buffer} + ({offs})"
    w.line(scope, f"tl.store({ptr}, {value})" if mask is None else f"tl.store({ptr}, {value}, mask={mask})")


def _combine(op: str, acc: str, x: str) -> str:
    if op == "sum":
        return f"{acc} + {x}"
    return f"tl.maximum({acc}, {x})" if op == "max" else f"tl.minimum({acc}, {x})"


def _header_lines(w: Writer, scope: Scope) -> None:
    w.line(scope, "pid = tl.program_id(0)")


# ---- lanes: elementwise chains and short-reduction row kernels ---------------------------------------


def lanes(program: Program, loops: list[tuple[str, str]], body: tuple, block: int, num_warps: int,
          num_stages: int, w: Writer, template: str = "lanes") -> LaunchPlan:
    """Every index of `loops` on its own lane; `body` holds lets, stores and (short) reductions."""
    scope = Scope(indent=1)
    _header_lines(w, scope)
    total = " * ".join(w.extent_code(a) for _, a in loops)
    w.line(scope, f"offs = pid * {block} + tl.arange(0, {block})")
    w.line(scope, f"msk = offs < {total}")
    _decompose(w, scope, "offs", loops, "msk")
    lane_vars = tuple(v for v, _ in loops)
    w.flat = (lane_vars, tuple(a for _, a in loops), "offs")
    for s in body:
        if isinstance(s, Let):
            _let(w, scope, s)
        elif isinstance(s, Store):
            _store(w, scope, s, lane_vars)
        elif isinstance(s, Reduce):
            _lane_reduce(w, scope, s, block)
        else:
            raise TemplateError(f"the lanes template takes lets, stores and reductions, not {type(s).__name__}")
    return LaunchPlan(template, (((tuple(a for _, a in loops), block),),), num_warps, num_stages, w.bf16_math)


def _trip(program: Program, r: Reduce) -> int | None:
    """Static trip count of a reduction, or None when it depends on a dynamic extent."""
    ext = program.axis(r.axis).extent
    if r.window is not None:
        return r.window.length if ext is None else min(ext, r.window.length)
    return ext


def lanes_fit(program: Program, reductions: tuple[Reduce, ...]) -> bool:
    trips = [_trip(program, r) for r in reductions]
    return all(t is not None and t <= LANES_MAX_TRIP for t in trips)


def _lane_reduce(w: Writer, scope: Scope, r: Reduce, block: int) -> None:
    w.bf16_math |= r.dtype == "bf16"
    acc = w.fresh("acc")
    w.line(scope, f"{acc} = tl.full([{block}], {init_literal(r.op, r.dtype)}, {TL_DTYPES[r.dtype]})")
    step = w.fresh("s")
    ext = w.extent_code(r.axis)
    inner = scope.child(scope.indent + 1)
    if r.window is None:
        w.line(scope, f"for {step} in range(0, {ext}):")
        inner.vars[r.var] = VarCode(step, None)
        cond = None
    else:
        lo = w.fresh("lo")
        w.line(scope, f"{lo} = {_affine(w, scope, r.window.start)}")
        w.line(scope, f"for {step} in range(0, {r.window.length}):")
        idx, cond = w.fresh("r"), w.fresh("m")
        w.line(inner, f"{idx} = {lo} + {step}")
        w.line(inner, f"{cond} = {idx} < {ext}")
        inner.vars[r.var] = VarCode(idx, cond)
    body = w.expr(inner, r.body)
    if cond is not None:
        body = f"tl.where({cond}, {body}, {init_literal(r.op, r.dtype)})"
    w.line(inner, f"{acc} = {_combine(r.op, acc, body)}")
    name = val_name(r.name)
    w.line(scope, f"{name} = {acc}")
    scope.values[r.name] = name
    w.check(scope, name, r.dtype)
    w.value_types[r.name] = r.dtype


# ---- row: one program per row --------------------------------------------------------------------


class _RowAxes:
    """Per-axis lane codes of one-chunk axes, created once per row so loads are shared across statements."""

    def __init__(self, w: Writer, scope: Scope, block: int) -> None:
        self.w, self.scope, self.block = w, scope, block
        self.codes: dict[str, VarCode] = {}

    def single(self, axis: str) -> VarCode | None:
        ext = self.w.program.axis(axis).extent
        if ext is None or ext > self.block:
            return None
        if axis not in self.codes:
            r = self.w.fresh("r")
            self.w.line(self.scope, f"{r} = tl.arange(0, {self.block})")
            mask = None
            if ext != self.block:
                mask = self.w.fresh("m")
                self.w.line(self.scope, f"{mask} = {r} < {ext}")
            self.codes[axis] = VarCode(r, mask)
        return self.codes[axis]


def row(program: Program, loops: list[tuple[str, str]], body: tuple, block: int, num_warps: int,
        num_stages: int, w: Writer) -> LaunchPlan:
    scope = Scope(indent=1)
    _header_lines(w, scope)
    _decompose(w, scope, "pid", loops, None)
    row_vars = tuple(v for v, _ in loops)
    axes = _RowAxes(w, scope, block)
    for s in body:
        if isinstance(s, Let):
            _let(w, scope, s)
        elif isinstance(s, Store):
            _store(w, scope, s, row_vars)
        elif isinstance(s, Reduce):
            _row_reduce(w, scope, s, block, axes)
        elif isinstance(s, Loop):
            _row_loop(w, scope, s, block, axes, row_vars)
        else:
            raise TemplateError(f"unexpected statement {type(s).__name__} in a row kernel")
    rows = tuple(a for _, a in loops)
    return LaunchPlan("row", (tuple(((a,), 1) for a in rows),), num_warps, num_stages, w.bf16_math)


def _chunk(w: Writer, scope: Scope, axis: str, block: int, lo: str | None,
           length: int | None) -> tuple[Scope, VarCode]:
    """Opens `for s in range(0, n, block)` and returns the loop scope and the lane index code."""
    ext = w.extent_code(axis)
    end = ext if length is None else str(length)
    step = w.fresh("s")
    w.line(scope, f"for {step} in range(0, {end}, {block}):")
    inner = scope.child(scope.indent + 1)
    lane = w.fresh("r")
    w.line(inner, f"{lane} = {step} + tl.arange(0, {block})")
    idx = lane if lo is None else w.fresh("r")
    if lo is not None:
        w.line(inner, f"{idx} = {lo} + {lane}")
    conds = []
    static = w.program.axis(axis).extent
    if lo is not None or static is None or static % block != 0:
        conds.append(f"{idx} < {ext}")
    if length is not None and length % block != 0:
        conds.append(f"{lane} < {length}")
    mask = None
    if conds:
        mask = w.fresh("m")
        w.line(inner, f"{mask} = " + " & ".join(f"({c})" for c in conds))
    return inner, VarCode(idx, mask)


def _row_reduce(w: Writer, scope: Scope, r: Reduce, block: int, axes: _RowAxes) -> None:
    w.bf16_math |= r.dtype == "bf16"
    init = init_literal(r.op, r.dtype)
    fold = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min"}[r.op]
    back = f".to({TL_DTYPES[r.dtype]})" if r.dtype in ("f16", "bf16") else ""  # tl.max widens half precision
    name = val_name(r.name)
    code = axes.single(r.axis) if r.window is None else None
    if code is not None:  # the whole axis in one chunk, in the row's own scope
        scope.vars[r.var] = code
        body = w.expr(scope, r.body)
        if code.mask is not None:
            body = f"tl.where({code.mask}, {body}, {init})"
        elif not uses_var(r.body, r.var):
            body = f"tl.full([{block}], {init}, {TL_DTYPES[r.dtype]}) + {body}" if r.op == "sum" else \
                f"tl.broadcast_to({body}, [{block}])"
        w.line(scope, f"{name} = {fold}({body}, axis=0){back}")
        del scope.vars[r.var]
    else:
        acc = w.fresh("acc")
        w.line(scope, f"{acc} = tl.full([{block}], {init}, {TL_DTYPES[r.dtype]})")
        lo = None
        if r.window is not None:
            lo = w.fresh("lo")
            w.line(scope, f"{lo} = {_affine(w, scope, r.window.start)}")
        inner, lane = _chunk(w, scope, r.axis, block, lo, None if r.window is None else r.window.length)
        inner.vars[r.var] = lane
        body = w.expr(inner, r.body)
        if lane.mask is not None:
            body = f"tl.where({lane.mask}, {body}, {init})"
        elif not uses_var(r.body, r.var):
            body = f"tl.broadcast_to({body}, [{block}])"
        w.line(inner, f"{acc} = {_combine(r.op, acc, body)}")
        w.line(scope, f"{name} = {fold}({acc}, axis=0){back}")
    scope.values[r.name] = name
    w.check(scope, name, r.dtype)
    w.value_types[r.name] = r.dtype


def _row_loop(w: Writer, scope: Scope, loop: Loop, block: int, axes: _RowAxes, row_vars: tuple[str, ...]) -> None:
    code = axes.single(loop.axis)
    if code is not None:  # one chunk: no Python loop, and the body reuses what the row computed (loads)
        inner = scope.child()
        inner.vars[loop.var] = code
    else:
        inner, lane = _chunk(w, scope, loop.axis, block, None, None)
        inner.vars[loop.var] = lane
    for s in loop.body:  # the body's own values (and their memo) end with `inner`
        if isinstance(s, Let):
            _let(w, inner, s)
        elif isinstance(s, Store):
            _store(w, inner, s, (*row_vars, loop.var))
        else:
            raise TemplateError(f"the inner loop of a row kernel holds lets and stores, not {type(s).__name__}")


# ---- matmul --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MatmulKnobs:
    block_m: int
    block_n: int
    block_k: int
    group_m: int
    acc: str  # accumulator dtype of the dot: f32 | f16 (| f64 when the program accumulates in f64)
    tensor_cores: bool
    num_warps: int
    num_stages: int


def _operand_dtype(program: Program, buffer: str) -> str:
    return program.buffer(buffer).dtype


def matmul(program: Program, shape: MatmulShape, k: MatmulKnobs, w: Writer) -> LaunchPlan:
    bm, bn, bk = k.block_m, k.block_n, k.block_k
    scope = Scope(indent=1)
    _header_lines(w, scope)
    z_loops = [(v, a) for v, a in shape.loops if v not in (shape.m_var, shape.n_var)]
    if z_loops:
        w.line(scope, "pid_z = tl.program_id(1)")
        _decompose(w, scope, "pid_z", z_loops, None)
    M, N, K = w.extent_code(shape.m), w.extent_code(shape.n), w.extent_code(shape.k)
    w.line(scope, f"num_pid_m = tl.cdiv({M}, {bm})")
    w.line(scope, f"num_pid_n = tl.cdiv({N}, {bn})")
    w.line(scope, f"num_pid_in_group = {k.group_m} * num_pid_n")
    w.line(scope, "group_id = pid // num_pid_in_group")
    w.line(scope, f"first_pid_m = group_id * {k.group_m}")
    w.line(scope, f"group_size_m = tl.minimum(num_pid_m - first_pid_m, {k.group_m})")
    w.line(scope, "pid_m = first_pid_m + ((pid % num_pid_in_group) % group_size_m)")
    w.line(scope, "pid_n = (pid % num_pid_in_group) // group_size_m")
    w.line(scope, f"rm = pid_m * {bm} + tl.arange(0, {bm})")
    w.line(scope, f"rn = pid_n * {bn} + tl.arange(0, {bn})")
    w.line(scope, f"ram = rm % {M}")  # wrapped rows and columns: operand loads stay in bounds unmasked
    w.line(scope, f"rbn = rn % {N}")
    w.line(scope, f"rk = tl.arange(0, {bk})")

    a_idx, b_idx = _operand_loads(program, shape)
    # base offsets from the batch (and nothing else: a window's parts variable only moves K)
    a_base = _base(w, scope, shape.a, a_idx.index, {shape.m_var, shape.k_var})
    b_base = _base(w, scope, shape.b, b_idx.index, {shape.n_var, shape.k_var})
    s_am = w.stride(shape.a, a_idx.index.index(shape.m_var)) or "1"
    s_ak = w.stride(shape.a, a_idx.index.index(shape.k_var)) or "1"
    s_bn = w.stride(shape.b, b_idx.index.index(shape.n_var)) or "1"
    s_bk = w.stride(shape.b, b_idx.index.index(shape.k_var)) or "1"

    if shape.window is not None:
        terms = [v for v, _ in shape.window.start.terms]
        if shape.m_var in terms or shape.n_var in terms:
            raise TemplateError("a split-K window start may use only batch and parts variables")
        w.line(scope, f"klo = {_affine(w, scope, shape.window.start)}")
        w.line(scope, f"khi = tl.minimum(klo + {shape.window.length}, {K})")
        trip = f"tl.cdiv({shape.window.length}, {bk})"
        k_mask = True
    else:
        w.line(scope, "klo = 0")
        w.line(scope, f"khi = {K}")
        trip = f"tl.cdiv({K}, {bk})"
        static_k = program.axis(shape.k).extent
        k_mask = static_k is None or static_k % bk != 0
    w.line(scope, f"a_ptrs = p_{shape.a} + {a_base}ram[:, None] * {s_am} + (klo + rk)[None, :] * {s_ak}")
    w.line(scope, f"b_ptrs = p_{shape.b} + {b_base}(klo + rk)[:, None] * {s_bk} + rbn[None, :] * {s_bn}")
    acc_tl = TL_DTYPES[k.acc]
    w.line(scope, f"acc = tl.zeros([{bm}, {bn}], dtype={acc_tl})")
    w.line(scope, f"for kk in range(0, {trip}):")
    loop = scope.child(scope.indent + 1)
    if k_mask:
        w.line(loop, f"kmask = (klo + kk * {bk} + rk) < khi")
        w.line(loop, "a = tl.load(a_ptrs, mask=kmask[None, :], other=0.0)")
        w.line(loop, "b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)")
    else:
        w.line(loop, "a = tl.load(a_ptrs)")
        w.line(loop, "b = tl.load(b_ptrs)")
    a_dt, b_dt = _operand_dtype(program, shape.a), _operand_dtype(program, shape.b)
    raw = a_dt == b_dt and a_dt in ("f16", "bf16") and k.acc in ("f32", "f16") and k.tensor_cores
    w.bf16_math |= "bf16" in (a_dt, b_dt, k.acc) and (raw or k.acc == "bf16")
    if raw:
        dot = "tl.dot(a, b, acc" + (", out_dtype=tl.float16)" if k.acc == "f16" else ")")
    else:  # operands in the accumulator type; f32 products exact (IEEE, no TF32)
        wide = TL_DTYPES[k.acc]
        a_c = "a" if a_dt == k.acc else f"a.to({wide})"
        b_c = "b" if b_dt == k.acc else f"b.to({wide})"
        prec = ', input_precision="ieee"' if k.acc == "f32" else ""
        dot = f"tl.dot({a_c}, {b_c}, acc{prec})"
    w.line(loop, f"acc = {dot}")
    w.line(loop, f"a_ptrs += {bk} * {s_ak}")
    w.line(loop, f"b_ptrs += {bk} * {s_bk}")

    name = val_name(shape.reduce)
    conv = "" if k.acc == shape.acc_dtype else f".to({TL_DTYPES[shape.acc_dtype]})"
    w.line(scope, f"{name} = acc{conv}")
    scope.values[shape.reduce] = name
    w.check(scope, name, shape.acc_dtype)
    w.value_types[shape.reduce] = shape.acc_dtype
    w.line(scope, f"mm = rm[:, None] < {M}")
    w.line(scope, f"mn = rn[None, :] < {N}")
    scope.vars[shape.m_var] = VarCode("rm[:, None]", "mm")
    scope.vars[shape.n_var] = VarCode("rn[None, :]", "mn")
    all_vars = tuple(v for v, _ in shape.loops)
    for s in shape.epilogue:
        _let(w, scope, s)
    for s in shape.stores:
        _store(w, scope, s, all_vars)
    grid0 = ((shape.m,), bm), ((shape.n,), bn)
    grid = (grid0,) if not z_loops else (grid0, tuple(((a,), 1) for _, a in z_loops))
    return LaunchPlan("matmul", grid, k.num_warps, k.num_stages, w.bf16_math)


def _operand_loads(program: Program, shape: MatmulShape) -> tuple[Load, Load]:
    """The loads of the two operands of the product, (a, b): a is indexed [.., m, k]."""
    body = program.body
    while len(body) == 1 and isinstance(body[0], Loop):
        body = body[0].body
    red = body[0]
    if not isinstance(red, Reduce) or red.name != shape.reduce or not isinstance(red.body, Binary):
        raise TemplateError("the matmul reduction is not where its shape says")
    x, y = (e.x if isinstance(e, Cast) else e for e in (red.body.a, red.body.b))
    if not isinstance(x, Load) or not isinstance(y, Load):
        raise TemplateError("the matmul product is not of two loads")
    if x.buffer == shape.a and x.index[-2:] == (shape.m_var, shape.k_var):
        return x, y
    return y, x


def _base(w: Writer, scope: Scope, buffer: str, index: tuple[str, ...], skip: set[str]) -> str:
    """`sum(batch var * stride) + ` for the dimensions of an operand that are not m/n/k ('' when none)."""
    terms = []
    for d, var in enumerate(index):
        if var in skip:
            continue
        st = w.stride(buffer, d)
        code = scope.var(var).code
        terms.append(f"{code} * {st}" if st else code)
    return "".join(f"{t} + " for t in terms)
