"""Hypothesis strategies that generate well-formed loop programs (shared by IR property tests)."""

from __future__ import annotations

from hypothesis import strategies as st

from emmy_core.ir import (
    Affine,
    Axis,
    Binary,
    Buffer,
    Cast,
    Const,
    Extent,
    Let,
    Load,
    Loop,
    Program,
    Range,
    Reduce,
    Ref,
    Store,
    Unary,
)
from emmy_core.ir.vocab import BINARY_OPS, DTYPES, FLOAT_DTYPES, REDUCE_OPS, UNARY_OPS, float_misfit

AXIS_NAMES = ["B", "S", "H", "K", "N", "M"]
BUF_NAMES = ["x", "w", "bias", "res", "gate"]
FLOATS = sorted(FLOAT_DTYPES)
UNARY = sorted(UNARY_OPS)
BINARY = sorted(BINARY_OPS)
REDUCE = sorted(REDUCE_OPS)
ALL_DTYPES = sorted(DTYPES)


def _const(draw: st.DrawFn, dtype: str) -> Const:
    if dtype in FLOAT_DTYPES:
        v = draw(st.one_of(st.floats(allow_nan=False, allow_infinity=True, width=64), st.integers(-9, 9)).filter(
            lambda v: float_misfit(dtype, float(v)) is None))  # a constant its type holds (Const refuses others)
        return Const(dtype, v)
    return Const(dtype, draw(st.integers(-(2**31), 2**31 - 1)))


def _expr(draw: st.DrawFn, dtype: str, env: dict, depth: int):  # type: ignore[no-untyped-def]
    """An expression of `dtype` using loads, values and axes in `env`."""
    loads = [b for b in env["buffers"] if all(a in env["vars"] for a in b.shape)]
    values = [n for n, t in env["values"].items() if t == dtype]
    choices = ["const", "extent"]
    if loads:
        choices.append("load")
    if values:
        choices.append("ref")
    if depth < 4:
        choices += ["cast", "binary"] + (["unary"] if dtype in FLOAT_DTYPES else [])
    kind = draw(st.sampled_from(choices))
    if kind == "const":
        return _const(draw, dtype)
    if kind == "extent":
        e = Extent(draw(st.sampled_from([a.name for a in env["axes"]])))
        return e if dtype == "i64" else Cast(dtype, e)
    if kind == "load":
        b = draw(st.sampled_from(loads))
        extent = {a.name: a.extent for a in env["axes"]}
        load = Load(b.name, tuple(  # now and then a constant position of a static axis (the halves of rotary), in
            # the first four (the oracle cuts static extents to 4)
            draw(st.integers(0, min(extent[a], 4) - 1)) if extent[a] is not None and draw(st.integers(0, 3)) == 0
            else env["vars"][a] for a in b.shape))
        return load if b.dtype == dtype else Cast(dtype, load)
    if kind == "ref":
        return Ref(draw(st.sampled_from(values)))
    if kind == "cast":
        src = draw(st.sampled_from(ALL_DTYPES))
        return Cast(dtype, _expr(draw, src, env, depth + 1))
    if kind == "unary":
        return Unary(draw(st.sampled_from(UNARY)), _expr(draw, dtype, env, depth + 1))
    ops = BINARY if dtype in FLOAT_DTYPES else [o for o in BINARY if o not in ("div", "pow")]
    op = draw(st.sampled_from(ops))
    return Binary(op, _expr(draw, dtype, env, depth + 1), _expr(draw, dtype, env, depth + 1))


@st.composite
def programs(draw: st.DrawFn) -> Program:
    n_axes = draw(st.integers(1, 4))
    axes = []
    for name in AXIS_NAMES[:n_axes]:
        if draw(st.booleans()):
            axes.append(Axis(name, draw(st.integers(1, 4096))))
        else:
            axes.append(Axis(name, None, draw(st.integers(1, 100_000))))
    names = [a.name for a in axes]
    buffers = []
    for bname in BUF_NAMES[: draw(st.integers(1, 3))]:
        shape = tuple(draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True)))
        buffers.append(Buffer(bname, "in", draw(st.sampled_from(ALL_DTYPES)), shape))
    out_shape = tuple(draw(st.lists(st.sampled_from(names), min_size=1, max_size=3, unique=True)))
    out = Buffer("y", "out", draw(st.sampled_from(ALL_DTYPES)), out_shape)
    env = {"axes": axes, "buffers": buffers, "vars": {}, "values": {}}
    loop_vars = {a: f"i_{a.lower()}" for a in out_shape}
    env["vars"] = dict(loop_vars)
    inner = []
    counter = 0
    for _ in range(draw(st.integers(0, 3))):
        counter += 1
        dt = draw(st.sampled_from(FLOATS))
        if draw(st.booleans()):
            free = [a for a in names if a not in env["vars"]]
            if free:
                ax = draw(st.sampled_from(free))
                rv = f"r_{ax.lower()}"
                env["vars"][ax] = rv
                body = _expr(draw, dt, env, 1)
                del env["vars"][ax]
                window = None
                if draw(st.booleans()) and loop_vars:
                    v = draw(st.sampled_from(sorted(loop_vars.values())))
                    window = Range(Affine(((v, draw(st.integers(1, 64))),), draw(st.integers(0, 8))),
                                   draw(st.integers(1, 512)))
                inner.append(Reduce(f"acc{counter}", dt, draw(st.sampled_from(REDUCE)), rv, ax, body, window))
                env["values"][f"acc{counter}"] = dt
                continue
        inner.append(Let(f"t{counter}", dt, _expr(draw, dt, env, 1)))
        env["values"][f"t{counter}"] = dt
    inner.append(Store("y", tuple(loop_vars[a] for a in out_shape), _expr(draw, out.dtype, env, 1)))
    body: tuple = tuple(inner)
    for a in reversed(out_shape):
        body = (Loop(loop_vars[a], a, body),)
    return Program(draw(st.sampled_from(["k", "kernel_a", "rmsnorm_f16", "mm"])), tuple(axes),
                   (*buffers, out), body)
