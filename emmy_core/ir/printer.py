"""The one printer of loop programs: canonical text (the grammar is documented in `text.py`, the parser).

One declaration or statement per line, two spaces a level; floats as Python's shortest
round-trip `repr`, infinities as `inf`/`-inf`; `hints=False` writes dynamic axes by name
only, which is the text a kernel's identity is computed from.
"""

from __future__ import annotations

import math

from emmy_core.ir.errors import IRError
from emmy_core.ir.nodes import (
    Affine,
    Binary,
    Cast,
    Const,
    Expr,
    Extent,
    Extern,
    Kernel,
    Let,
    Load,
    Loop,
    Reduce,
    Ref,
    Stmt,
    Store,
    Unary,
)


def _num(c: Const) -> str:
    v = c.value
    if isinstance(v, float):
        if math.isinf(v):
            return "inf" if v > 0 else "-inf"
        return repr(v)
    return str(v)


def render_expr(e: Expr) -> str:
    if isinstance(e, Load):
        return f"{e.buffer}[{', '.join(map(str, e.index))}]"
    if isinstance(e, Ref):
        return e.name
    if isinstance(e, Const):
        return f"const({e.dtype}, {_num(e)})"
    if isinstance(e, Cast):
        return f"cast({e.dtype}, {render_expr(e.x)})"
    if isinstance(e, Extent):
        return f"extent({e.axis})"
    if isinstance(e, Unary):
        return f"{e.op}({render_expr(e.x)})"
    if isinstance(e, Binary):
        return f"{e.op}({render_expr(e.a)}, {render_expr(e.b)})"
    raise IRError(f"not an expression: {type(e).__name__}")


def render_affine(a: Affine) -> str:
    parts = [v if c == 1 else f"{v} * {c}" for v, c in a.terms]
    if a.offset or not parts:
        parts.append(str(a.offset))
    return " + ".join(parts)


def _render_stmts(stmts: tuple[Stmt, ...], depth: int, out: list[str]) -> None:
    pad = "  " * depth
    for s in stmts:
        if isinstance(s, Loop):
            out.append(f"{pad}for {s.var} in {s.axis} {{")
            _render_stmts(s.body, depth + 1, out)
            out.append(f"{pad}}}")
        elif isinstance(s, Let):
            out.append(f"{pad}let {s.name}: {s.dtype} = {render_expr(s.value)}")
        elif isinstance(s, Reduce):
            win = "" if s.window is None else f"[{render_affine(s.window.start)} : {s.window.length}]"
            out.append(
                f"{pad}reduce {s.name}: {s.dtype} = {s.op}({s.var} in {s.axis}{win}) {render_expr(s.body)}"
            )
        elif isinstance(s, Store):
            out.append(f"{pad}{s.buffer}[{', '.join(map(str, s.index))}] = {render_expr(s.value)}")
        else:
            raise IRError(f"not a statement: {type(s).__name__}")


def render(kernel: Kernel, *, hints: bool = True) -> str:
    """The canonical text of a kernel. `hints=False` writes dynamic axes by name only (identity text)."""
    if isinstance(kernel, Extern):
        problem = ", ".join(str(d) for d in kernel.problem)
        return f"extern {kernel.name} {{\n  problem {problem}\n  space {kernel.space}\n}}\n"
    out = [f"kernel {kernel.name} {{"]
    for a in kernel.axes:
        if a.extent is not None:
            out.append(f"  axis {a.name} = {a.extent}")
        else:
            out.append(f"  axis {a.name} = dyn({a.hint})" if hints else f"  axis {a.name} = dyn")
    for b in kernel.buffers:
        out.append(f"  {b.role} {b.name}: {b.dtype}[{', '.join(b.shape)}]")
    _render_stmts(kernel.body, 1, out)
    out.append("}")
    return "\n".join(out) + "\n"
