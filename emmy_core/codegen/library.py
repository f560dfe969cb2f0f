"""The library route's build: a matrix-product kernel run as torch runs it (`emmy_core.knobs.route`).

`library_build(program, knobs)` reads the kernel's matmul shape and gives a `LibraryBuilt` with
the interface of the generated builds (`built(buffers, sizes)` checked; `prepare(sizes,
constants)` once per size, then `launch(buffers)` or `launch.over(fixed, per_call)`), so the
harness times it, the runner launches it and the check compares it exactly as it does Emmy's
own kernels, on any device torch runs on (oneDNN or MKL on a CPU, cuBLAS on a GPU).

The product is `torch.matmul` over the operands' own tensors (a transposed B is a view: the
library reads it in place), in the operands' own type as torch's eager `linear` computes it;
the epilogue (the kernel's `let`s and stores: bias, activation, residual, casts) is evaluated
by torch's elementwise ops over the product, each value broadcast over the nest's (batch.., m,
n) positions. A kernel whose only store is the product itself, of the operands' type, is
written straight into its output by the library (`matmul(out=...)`), with no pass after it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from emmy_core.codegen.backend import BuildError, LaunchError
from emmy_core.dtypes import torch_dtype
from emmy_core.ir.family import MatmulShape, classify
from emmy_core.ir.nodes import Binary, Cast, Const, Expr, Extent, Let, Load, Program, Ref, Unary
from emmy_core.ir.sizes import extents
from emmy_core.knobs.route import is_library, library_problem
from emmy_core.knobs.view import view

if TYPE_CHECKING:
    import torch

Env = dict[str, Any]
Value = Callable[[Env], Any]


def _unary(op: str) -> Callable[[Any], Any]:
    import torch

    table: dict[str, Callable[[Any], Any]] = {
        "neg": torch.neg, "exp": torch.exp, "log": torch.log, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt,
        "abs": torch.abs, "tanh": torch.tanh, "erf": torch.erf, "sigmoid": torch.sigmoid, "relu": torch.relu,
        "recip": torch.reciprocal,
    }
    return table[op]


def _binary(op: str) -> Callable[[Any, Any], Any]:
    import torch

    table: dict[str, Callable[[Any, Any], Any]] = {
        "add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div, "max": torch.maximum,
        "min": torch.minimum, "pow": torch.pow,
    }
    return table[op]


class _Epilogue:
    """The epilogue's expressions as torch closures over an environment of loop-space tensors.

    Loop space has one dimension per variable of the nest, in the order (batch.., m, n); a value that does
    not depend on a variable has size 1 there and broadcasts."""

    def __init__(self, program: Program, shape: MatmulShape) -> None:
        self.program = program
        self.shape = shape
        self.space = (*shape.batch_vars, shape.m_var, shape.n_var)

    def placement(self, index: tuple[str | int, ...], what: str) -> tuple[tuple[Any, ...], tuple[int, ...],
                                                                            tuple[Any, ...]]:
        """How a buffer indexed by `index` maps into loop space: the selection of its constant positions,
        the permutation of its variable dimensions into loop order, and the expansion to loop space's rank."""
        variables = [v for v in index if isinstance(v, str)]
        if len(set(variables)) != len(variables):
            raise BuildError(f"{self.program.name}: {what} repeats a loop variable: the library route reads "
                             "no diagonals")
        unknown = [v for v in variables if v not in self.space]
        if unknown:
            raise BuildError(f"{self.program.name}: {what} is indexed by {unknown[0]!r}, not a variable of the nest")
        select = tuple(slice(None) if isinstance(v, str) else v for v in index)
        perm = tuple(sorted(range(len(variables)), key=lambda i: self.space.index(variables[i])))
        present = {variables[i] for i in perm}
        expand = tuple(slice(None) if v in present else None for v in self.space)
        return select, perm, expand

    def expr(self, e: Expr, types: dict[str, str]) -> tuple[Value, str]:
        """A closure computing `e` over the environment, and its data type."""
        import torch

        if isinstance(e, Load):
            buf = self.program.buffer(e.buffer)
            select, perm, expand = self.placement(e.index, f"the load of {e.buffer!r}")
            name = e.buffer
            return (lambda env: env[name][select].permute(perm)[expand]), buf.dtype
        if isinstance(e, Ref):
            ref = e.name
            return (lambda env: env[ref]), types[ref]
        if isinstance(e, Const):
            c = torch.tensor(e.value, dtype=torch_dtype(e.dtype))
            return (lambda env: c.to(env["__device__"]) if c.device != env["__device__"] else c), e.dtype
        if isinstance(e, Extent):
            axis = e.axis
            return (lambda env: env["__sizes__"][axis]), "i64"
        if isinstance(e, Cast):
            inner, _ = self.expr(e.x, types)
            dt = torch_dtype(e.dtype)
            return (lambda env: inner(env).to(dt)), e.dtype
        if isinstance(e, Unary):
            inner, dtype = self.expr(e.x, types)
            fn = _unary(e.op)
            return (lambda env: fn(inner(env))), dtype
        if isinstance(e, Binary):
            a, dtype = self.expr(e.a, types)
            b, _ = self.expr(e.b, types)
            fn2 = _binary(e.op)
            return (lambda env: fn2(a(env), b(env))), dtype
        raise BuildError(f"{self.program.name}: the library route cannot evaluate {type(e).__name__}")


class LibraryBuilt:
    """A matrix-product kernel as torch runs it: checked calls by buffer name, or launches prepared per size."""

    target = "library"

    def __init__(self, program: Program) -> None:
        shape = classify(program)
        if not isinstance(shape, MatmulShape):
            raise BuildError(f"{program.name}: only a matrix product has a library route")
        self.program = program
        self.shape = shape
        ep = _Epilogue(program, shape)
        a_buf, b_buf = program.buffer(shape.a), program.buffer(shape.b)
        self._operand_dtype = a_buf.dtype if a_buf.dtype == b_buf.dtype else None
        if self._operand_dtype is None:
            raise BuildError(f"{program.name}: operands of two types ({a_buf.dtype}, {b_buf.dtype}) have no "
                             "library product")
        types = {shape.reduce: shape.acc_dtype}
        lets: list[tuple[str, Value]] = []
        for let in shape.epilogue:
            assert isinstance(let, Let)
            fn, _ = ep.expr(let.value, types)
            types[let.name] = let.dtype
            lets.append((let.name, fn))
        self._lets = tuple(lets)
        stores = []
        for st in shape.stores:
            fn, _ = ep.expr(st.value, types)
            select, _, _ = ep.placement(st.index, f"the store into {st.buffer!r}")
            variables = [v for v in st.index if isinstance(v, str)]
            if set(variables) != set(ep.space):
                raise BuildError(f"{program.name}: the store into {st.buffer!r} is not indexed by every variable "
                                 "of the nest")
            # loop space -> the store's own order of variables
            to_store = tuple(ep.space.index(v) for v in variables)
            stores.append((st.buffer, select, to_store, fn))
        self._stores = tuple(stores)
        # the product alone, stored whole in the operands' type: the library writes it in place
        only = shape.stores[0] if len(shape.stores) == 1 and not shape.epilogue else None
        direct = only is not None and tuple(only.index) == ep.space and \
            program.buffer(only.buffer).dtype == self._operand_dtype and \
            (only.value == Ref(shape.reduce) or only.value == Cast(self._operand_dtype, Ref(shape.reduce)))
        self._direct = only.buffer if direct and only is not None else None
        self._acc = torch_dtype(shape.acc_dtype)

    def _product(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a @ (b.transpose(-1, -2) if self.shape.b_transposed else b)

    def shapes(self, ext: Mapping[str, int]) -> dict[str, tuple[int, ...]]:
        """Each buffer's declared shape at the extents `ext` (a caller's tensor may be the same memory seen with
        other dimensions: a model's (B, S, H) activation is a (T, H) buffer of a flattened kernel)."""
        return {b.name: tuple(ext[a] for a in b.shape) for b in self.program.buffers}

    def run(self, given: Mapping[str, torch.Tensor], ext: Mapping[str, int],
            shapes: Mapping[str, tuple[int, ...]]) -> None:
        """The kernel over `given` buffers (by name) at the extents `ext`; only their element counts checked."""
        import torch

        try:
            buffers = {n: t if tuple(t.shape) == shapes[n] else t.view(shapes[n]) for n, t in given.items()}
        except RuntimeError as exc:
            raise LaunchError(f"{self.program.name}: a buffer cannot be seen with its declared shape ({exc})") from exc
        a, b = buffers[self.shape.a], buffers[self.shape.b]
        if self._direct is not None:
            out = buffers[self._direct]
            torch.matmul(a, b.transpose(-1, -2) if self.shape.b_transposed else b, out=out)
            return
        env: Env = dict(buffers)
        env["__device__"] = a.device
        env["__sizes__"] = ext
        p = self._product(a, b)
        env[self.shape.reduce] = p if p.dtype == self._acc else p.to(self._acc)
        for name, fn in self._lets:
            env[name] = fn(env)
        for buffer, select, to_store, fn in self._stores:
            target = buffers[buffer][select]
            value = fn(env).permute(to_store)
            target.copy_(value.expand(target.shape))

    def _sizes(self, sizes: Mapping[str, int]) -> dict[str, int]:
        if not isinstance(sizes, Mapping):
            raise LaunchError(f"{self.program.name}: sizes must be a mapping of dynamic axis sizes")
        dyn = [a.name for a in self.program.dynamic_axes]
        missing = [ax for ax in dyn if not isinstance(sizes.get(ax), int) or int(sizes[ax]) < 1]
        extra = sorted(set(sizes) - set(dyn), key=str)
        if missing or extra:
            raise LaunchError(f"{self.program.name}: sizes must give each of the dynamic axes "
                              f"{', '.join(dyn) or '(none)'} a positive integer")
        return extents(self.program, dict(sizes))

    def _check(self, buffers: Mapping[str, torch.Tensor], ext: Mapping[str, int]) -> None:
        import torch

        name = self.program.name
        for buf in self.program.buffers:
            t = buffers.get(buf.name)
            if not isinstance(t, torch.Tensor):
                raise LaunchError(f"{name}: missing {buf.role} buffer {buf.name!r}")
            shape = tuple(ext[a] for a in buf.shape)
            if tuple(t.shape) != shape or t.dtype != torch_dtype(buf.dtype):
                raise LaunchError(f"{name}: buffer {buf.name!r} is {tuple(t.shape)} {t.dtype}, the kernel declares "
                                  f"{shape} {buf.dtype}")

    def __call__(self, buffers: Mapping[str, torch.Tensor], sizes: Mapping[str, int]) -> None:
        ext = self._sizes(sizes)
        self._check(buffers, ext)
        self.run(buffers, ext, self.shapes(ext))

    def prepare(self, sizes: Mapping[str, int], constants: Mapping[str, torch.Tensor] | None = None,
                packs: dict[Any, Any] | None = None) -> LibraryLaunch:
        """A launch at `sizes` with `constants` (weights) bound once; torch packs nothing ahead (`packs` unused)."""
        ext = self._sizes(sizes)
        constants = dict(constants or {})
        inputs = {b.name for b in self.program.inputs}
        bad = sorted(str(n) for n in constants if n not in inputs)
        if bad:
            raise LaunchError(f"{self.program.name}: constants must be input buffers; {bad[0][:40]} is not")
        rest = tuple(b.name for b in self.program.buffers if b.name not in constants)
        return LibraryLaunch(self, ext, constants, rest)


class LibraryLaunch:
    """A prepared library launch: `launch(buffers)` with the non-constant buffers, or `over` a caller's env."""

    __slots__ = ("_built", "_constants", "_ext", "_rest", "_shapes")

    def __init__(self, built: LibraryBuilt, ext: dict[str, int], constants: dict[str, torch.Tensor],
                 rest: tuple[str, ...]) -> None:
        self._built, self._ext, self._constants, self._rest = built, ext, constants, rest
        self._shapes = built.shapes(ext)

    @property
    def buffers(self) -> tuple[str, ...]:
        return self._rest

    def __call__(self, buffers: Mapping[str, torch.Tensor]) -> None:
        self._built.run({**self._constants, **buffers}, self._ext, self._shapes)

    def over(self, fixed: Mapping[str, torch.Tensor], per_call: Mapping[str, str]) -> Callable[[Mapping[str, Any]],
                                                                                                  None]:
        """This launch with `fixed` bound for good and the others read from `env` by the keys `per_call` names."""
        names = set(self._rest)
        if set(fixed) | set(per_call) != names or set(fixed) & set(per_call):
            raise ValueError(f"{self._built.program.name}: a launch over fixed and per-call buffers names each of "
                             f"{', '.join(sorted(names))} once")
        bound = {**self._constants, **fixed}
        pairs = tuple(per_call.items())
        built, ext, shapes = self._built, self._ext, self._shapes

        def call(env: Mapping[str, Any]) -> None:
            buffers = dict(bound)
            for buffer, key in pairs:
                buffers[buffer] = env[key]
            built.run(buffers, ext, shapes)

        return call


def library_build(program: Program, knobs: Mapping[str, object]) -> LibraryBuilt:
    """The library route's build of `program`; BuildError when the knobs or the kernel do not allow one."""
    if not is_library(knobs):
        raise BuildError(f"{program.name}: {dict(knobs)} is not the library route")
    problem = library_problem(view(program), knobs)
    if problem is not None:
        raise BuildError(f"{program.name}: {problem}")
    return LibraryBuilt(program)
