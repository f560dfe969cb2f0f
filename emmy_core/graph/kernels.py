"""Loop programs the graph needs beyond `emmy_core.ir.builders`, built the same way.

- `broadcast_elementwise`: the elementwise language of the builders over inputs that are
  `full` [B, C], `col` [C] (a vector over the row) or `row` [B] (one value per row);
- `blocked_elementwise`: the same over `[B, M, C]` where an input may also be `tail` [M, C]
  (rotary's cos and sin: the output's trailing axes), and where the expression may read the
  halves of the last axis (`lo`, `hi`) and join two (`cat`): C is then split into [2, C/2]
  and each half of the output is stored by its own expression, every access a constant
  half and a loop variable, so rotate_half costs no index arithmetic and no pass over memory;
- `row_reduce`: `sum` or `mean` of each row into `y[B]`;
- `cast`: `y[B, C]` = `x[B, C]` converted from one float type to another (through f32, so rounded once);
- `dynamic_row`: a row kernel whose row axis is dynamic (softmax over the sequence),
  from the builder's static program with the row axis made dynamic and renamed;
- `with_row_epilogue`: a row kernel whose stored result goes through elementwise steps
  (activations, scale) before the store: the normalisation epilogue `fuse_norm` folds.
Each returns a validated `Program` named by `builders.kernel_name` from the static
shape only, so identity does not depend on an expected size.
"""

from __future__ import annotations

from dataclasses import replace

from emmy_core.ir.builders import (
    Dim,
    acc_dtype,
    activation,
    c,
    ew_tag,
    kernel_name,
    lower_expr,
    parse_expr,
    to,
)
from emmy_core.ir.check import validate
from emmy_core.ir.errors import IRError
from emmy_core.ir.ew_expr import HALF_FUNCTIONS, EwTree
from emmy_core.ir.nodes import (
    Axis,
    Binary,
    Buffer,
    Cast,
    Const,
    Expr,
    Let,
    Load,
    Loop,
    Program,
    Reduce,
    Ref,
    Stmt,
    Store,
)

_INDEX = {"full": ("i", "j"), "col": ("j",), "row": ("i",)}
_SHAPE = {"full": ("B", "C"), "col": ("C",), "row": ("B",)}


def broadcast_elementwise(expr: str, kinds: dict[str, str], dtype: str, batch_hint: int, cols: int) -> Program:
    """y[B, C] = expr, each input read as its kind says (full, col or row); computed in f32."""
    t = acc_dtype(dtype)
    tree = parse_expr(expr)
    names: list[str] = []

    def load(name: str) -> Expr:
        kind = kinds.get(name)
        if kind not in _INDEX:
            raise IRError(f"elementwise input {name!r} has no broadcast kind (full, col, row)")
        return to(t, Load(name, _INDEX[kind]), dtype)

    value = lower_expr(tree, load, t, names)
    if "y" in names:
        raise IRError("elementwise: 'y' names the result and cannot be an input")
    buffers = [Buffer(n, "in", dtype, _SHAPE[kinds[n]]) for n in names]
    buffers.append(Buffer("y", "out", dtype, ("B", "C")))
    body = (Loop("i", "B", (Loop("j", "C", (Store("y", ("i", "j"), to(dtype, value, t)),)),)),)
    tag = "_".join(f"{n}{kinds[n][0]}" for n in names if kinds[n] != "full")
    name = kernel_name("ewb", dtype, f"C{cols}", tag, ew_tag(tree))
    prog = Program(name, (Axis("B", None, batch_hint), Axis("C", cols)), tuple(buffers), body)
    validate(prog)
    return prog


def uses_halves(tree: EwTree) -> bool:
    """Whether an elementwise expression reads a half of the last axis or joins two."""
    return tree[0] in HALF_FUNCTIONS or (tree[0] not in ("in", "num") and any(uses_halves(t) for t in tree[1:]))


def _width(tree: EwTree, kinds: dict[str, str]) -> str:
    """`full` (the output's last axis), `half`, or `any` (a number, a row input) for a subexpression."""
    op = tree[0]
    if op == "num":
        return "any"
    if op == "in":
        return "any" if kinds.get(tree[1]) == "row" else "full"
    widths = [_width(t, kinds) for t in tree[1:]]
    if op in ("lo", "hi"):
        if widths[0] == "half":
            raise IRError(f"elementwise: {op}() of a half")
        return "half"
    if op == "cat":
        if "full" in widths:
            raise IRError("elementwise: cat() of a value that is not a half")
        return "full"
    known = {w for w in widths if w != "any"}
    if len(known) > 1:
        raise IRError(f"elementwise: {op}() mixes a half with a whole last axis")
    return known.pop() if known else "any"


def blocked_elementwise(expr: str, kinds: dict[str, str], dtype: str, batch_hint: int, mid: int | Dim | None,
                        cols: int) -> Program:
    """y[B, (M,) C] = expr, each input read as its kind says (full [B, M, C], tail [M, C], col [C], row [B, M]);
    computed in f32. With `lo`/`hi`/`cat` in the expression, C is split into [P=2, H=C/2] and the loop over H
    stores both halves of the output, each its own expression (so both halves are contiguous simd loops)."""
    if mid is None and "tail" in kinds.values():
        raise IRError("elementwise: a tail input needs the middle axis M")
    outer = [Axis("B", None, batch_hint)]
    if isinstance(mid, Dim):
        outer.append(Axis("M", mid.extent, mid.hint))
    elif mid is not None:
        outer.append(Axis("M", mid))
    k = len(outer)
    reads = {"full": tuple(range(k)), "tail": (1,) if k == 2 else (), "col": (), "row": tuple(range(k))}
    for name, kind in kinds.items():
        if kind not in reads:
            raise IRError(f"elementwise input {name!r} has no broadcast kind (full, tail, col, row)")
    mid_tag = "" if mid is None else f"M{mid}" if isinstance(mid, int) else "Mdyn"
    return _blocked(expr, kinds, {n: reads[kd] for n, kd in kinds.items()}, dtype, outer, ["i", "m"][:k], cols,
                    "ew", mid_tag)


def permuted_elementwise(expr: str, kinds: dict[str, str], perms: dict[str, tuple[int, ...]], dtype: str,
                         outer: tuple[int | Dim, ...], cols: int, span: int) -> Program:
    """y[D0, .., Dk-1, C] = expr with one axis per outer dimension of the output, where an input named in `perms`
    is the output's shape permuted (`y = x.permute(perm)`, the last axis staying last) and is read in place
    through the permutation: a transpose feeding the chain (rotary's q and k, [B, S, heads, D] seen as
    [B, heads, S, D]) costs no copy. Other kinds as `blocked_elementwise`, `tail` inputs over the last
    `span` output axes; halves of the last axis likewise."""
    k = len(outer)
    axes = [Axis(f"D{i}", d.extent, d.hint) if isinstance(d, Dim) else Axis(f"D{i}", d) for i, d in enumerate(outer)]
    reads: dict[str, tuple[int, ...]] = {}
    for name, kind in kinds.items():
        perm = perms.get(name)
        if perm is not None:
            if kind != "full" or sorted(perm) != list(range(k + 1)) or perm[-1] != k:
                raise IRError(f"elementwise input {name!r}: permutation {perm} must keep the last axis last")
            reads[name] = tuple(perm.index(j) for j in range(k))  # its dimension j runs over output axis perm^-1(j)
        elif kind == "tail":
            if not 2 <= span <= k:
                raise IRError(f"elementwise input {name!r}: a tail over {span} axes of an output of {k + 1}")
            reads[name] = tuple(range(k - span + 1, k))
        elif kind in ("full", "row", "col"):
            reads[name] = () if kind == "col" else tuple(range(k))
        else:
            raise IRError(f"elementwise input {name!r} has no broadcast kind (full, tail, col, row)")
    tag = "".join(str(d) if isinstance(d, int) else "d" for d in outer)
    perm_tag = "_".join(f"{n}p{''.join(map(str, p))}" for n, p in sorted(perms.items()))
    return _blocked(expr, kinds, reads, dtype, axes, [f"i{i}" for i in range(k)], cols, "ewp", f"D{tag}_{perm_tag}")


def _blocked(expr: str, kinds: dict[str, str], reads: dict[str, tuple[int, ...]], dtype: str, outer: list[Axis],
             ovars: list[str], cols: int, family: str, shape_tag: str) -> Program:
    """The elementwise program over `outer` axes (loop variables `ovars`) then the last (C, or its halves P x H):
    input `n` indexed by the outer variables at positions `reads[n]` (a row input by no last axis), the output by
    all of them; named `family` + h (halves) or t, then `shape_tag`."""
    t = acc_dtype(dtype)
    tree = parse_expr(expr)
    halves = uses_halves(tree)
    if halves and cols % 2:
        raise IRError(f"elementwise: halves of a last axis of odd length {cols}")
    if _width(tree, kinds) == "half":
        raise IRError("elementwise: the result is a half of the last axis; join it with cat()")
    last_axes = ("P", "H") if halves else ("C",)
    names: list[str] = []

    def load(name: str, part: int | None) -> Expr:
        if name not in reads:
            raise IRError(f"elementwise input {name!r} has no broadcast kind (full, tail, col, row)")
        if name not in names:
            names.append(name)
        last: tuple[str | int, ...] = () if kinds[name] == "row" else (part, "h") if halves else ("j",)  # type: ignore[assignment]
        return to(t, Load(name, (*(ovars[i] for i in reads[name]), *last)), dtype)

    def ev(tree: EwTree, part: int | None) -> Expr:
        """The value at half `part` of the last axis (a half-width subexpression: at its own position)."""
        op = tree[0]
        if op == "in":
            return load(tree[1], part)
        if op == "num":
            return c(t, tree[1])
        if op in ("lo", "hi"):
            return ev(tree[1], 0 if op == "lo" else 1)
        if op == "cat":
            return ev(tree[1 + int(part or 0)], None)
        args = [ev(sub, part) for sub in tree[1:]]
        return Binary(op, args[0], args[1]) if len(args) == 2 else activation(op, args[0], t)

    if halves:
        stores: tuple[Stmt, ...] = tuple(Store("y", (*ovars, p, "h"), to(dtype, ev(tree, p), t)) for p in (0, 1))
        body: Stmt = Loop("h", "H", stores)
    else:
        body = Loop("j", "C", (Store("y", (*ovars, "j"), to(dtype, ev(tree, None), t)),))
    if "y" in names:
        raise IRError("elementwise: 'y' names the result and cannot be an input")
    for v, ax in reversed(list(zip(ovars, outer, strict=True))):
        body = Loop(v, ax.name, (body,))
    axis_names = [ax.name for ax in outer]
    buffers = [Buffer(n, "in", dtype, (*(axis_names[i] for i in reads[n]), *(() if kinds[n] == "row" else last_axes)))
               for n in names]
    buffers.append(Buffer("y", "out", dtype, (*axis_names, *last_axes)))
    axes = [*outer, *([Axis("P", 2), Axis("H", cols // 2)] if halves else [Axis("C", cols)])]
    tag = "_".join(f"{n}{kinds[n][0]}" for n in names if kinds[n] != "full")
    name = kernel_name(family + ("h" if halves else "t"), dtype, shape_tag, f"C{cols}", tag, ew_tag(tree))
    prog = Program(name, tuple(axes), tuple(buffers), (body,))
    validate(prog)
    return prog


def row_reduce(op: str, cols: int, dtype: str, batch_hint: int) -> Program:
    """y[B] = sum (or mean) over C of x[B, C], accumulated in f32."""
    if op not in ("sum", "mean"):
        raise IRError(f"row_reduce takes sum or mean, not {op!r}")
    t = acc_dtype(dtype)
    value: Expr = Ref("s")
    if op == "mean":
        value = Binary("div", value, Const(t, cols))
    body = (Loop("i", "B", (
        Reduce("s", t, "sum", "j", "C", to(t, Load("x", ("i", "j")), dtype)),
        Store("y", ("i",), to(dtype, value, t)),
    )),)
    buffers = (Buffer("x", "in", dtype, ("B", "C")), Buffer("y", "out", dtype, ("B",)))
    prog = Program(kernel_name("rowreduce", op, dtype, f"C{cols}"), (Axis("B", None, batch_hint), Axis("C", cols)),
                   buffers, body)
    validate(prog)
    return prog


def cast(from_dtype: str, dtype: str, batch_hint: int, cols: int) -> Program:
    """y[B, C] (`dtype`) = x[B, C] (`from_dtype`) converted; between two 16-bit types through f32 (exact), so the
    value is rounded once, as torch's `Tensor.to` rounds it."""
    if from_dtype == dtype:
        raise IRError(f"cast: from {dtype} to itself is no conversion")
    t = acc_dtype(dtype)
    value = to(dtype, to(t, Load("x", ("i", "j")), from_dtype), t)
    buffers = (Buffer("x", "in", from_dtype, ("B", "C")), Buffer("y", "out", dtype, ("B", "C")))
    prog = Program(kernel_name("cast", from_dtype, "to", dtype, f"C{cols}"),
                   (Axis("B", None, batch_hint), Axis("C", cols)), buffers,
                   (Loop("i", "B", (Loop("j", "C", (Store("y", ("i", "j"), value),)),)),))
    validate(prog)
    return prog


def dynamic_row(program: Program, row_axis: str, hint: int, family: str, *tags: object) -> Program:
    """`program` with its static row axis made dynamic (expected size `hint`), renamed from its family and tags.

    Only for kernels whose body never uses the row length as a constant (softmax does not).
    """
    axes = tuple(Axis(a.name, None, hint) if a.name == row_axis else a for a in program.axes)
    name = kernel_name(family, *tags, f"{row_axis}dyn")
    out = replace(program, name=name, axes=axes)
    validate(out)
    return out


ROW_EPILOGUE_STEPS = ("relu", "gelu", "gelu_tanh", "silu")  # and scale:<float>


def _step_expr(step: str, x: Expr, t: str) -> Expr:
    if step.startswith("scale:"):
        return Binary("mul", x, Const(t, float(step[6:])))
    if step not in ROW_EPILOGUE_STEPS:
        raise IRError(f"unknown row epilogue step {step[:40]!r}; known: {', '.join(ROW_EPILOGUE_STEPS)}, scale:<f>")
    return activation(step, x, t)


def apply_steps(x: Expr, steps: tuple[str, ...], t: str) -> Expr:
    """`x` (of type `t`) through the epilogue steps, in order."""
    for step in steps:
        x = _step_expr(step, x, t)
    return x


def _with_epilogue(s: Stmt, out: str, steps: tuple[str, ...], dtype: str, t: str) -> tuple[Stmt, ...]:
    if isinstance(s, Loop):
        body: list[Stmt] = []
        for x in s.body:
            body.extend(_with_epilogue(x, out, steps, dtype, t))
        return (Loop(s.var, s.axis, tuple(body)),)
    if isinstance(s, Store) and s.buffer == out:
        inner = s.value.x if isinstance(s.value, Cast) and dtype != t else s.value
        return (Let("epi", t, inner), Store(s.buffer, s.index, to(dtype, apply_steps(Ref("epi"), steps, t), t)))
    return (s,)


def with_row_epilogue(program: Program, steps: tuple[str, ...]) -> Program:
    """A row kernel whose stored result `y` goes through elementwise `steps` first (computed in f32)."""
    if not steps:
        return program
    dtype = program.buffer("y").dtype
    t = acc_dtype(dtype)
    body: list[Stmt] = []
    for s in program.body:
        body.extend(_with_epilogue(s, "y", steps, dtype, t))
    tags = [f"scale{float(s[6:])!r}" if s.startswith("scale:") else s for s in steps]
    out = Program(kernel_name(program.name, "ep", *tags), program.axes, program.buffers, tuple(body))
    validate(out)
    return out
