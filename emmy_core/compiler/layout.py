"""Where every tensor of a compiled model lives at one size: `plan_layout` and the `Layout` it returns.

`Layout` reads the lowered graph and the settled kernel plans at the model's sizes and works
out every tensor a call touches, without allocating: the intermediates (one buffer per graph
value, kept and reused by every call at this size), the scratch of structural decisions (the
pieces' intermediates), and the values made fresh on every call (the model's outputs, and the
values an output is a reshape of, so a result handed back is never overwritten by the next
call). `Layout.nbytes` is what `memory.check_fits` weighs before anything exists; each shape also
carries its `Recipe` (a function of the graph's sizes), so one layout serves every size of a bucket
(`compiler.runner.Runner.sized`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from math import prod
from typing import Any

from emmy_core.evidence.model import KernelPlan
from emmy_core.graph.errors import GraphError
from emmy_core.graph.lower import KernelStep, LayoutStep, Lowered
from emmy_core.graph.ops import Dim
from emmy_core.ir.check import MAX_EXTENT
from emmy_core.ir.nodes import Program
from emmy_core.ir.sizes import extents

WIDTH = {"f32": 4, "f16": 2, "bf16": 2}

Ref = tuple[str, str]  # ("env", value) changes per call; ("pool", name) is allocated once; ("weight", path)
# a shape as a function of the graph's sizes: each dimension the product of graph dimensions (names) and numbers
Recipe = tuple[tuple[Dim, ...], ...]


def shape_at(recipe: Recipe, sizes: Mapping[str, int]) -> tuple[int, ...]:
    """The shape `recipe` makes at the graph's `sizes`."""
    return tuple(prod(d if isinstance(d, int) else sizes[d] for d in dims) for dims in recipe)


@dataclass(frozen=True)
class Spec:
    shape: tuple[int, ...]
    dtype: str
    recipe: Recipe | None = None  # the shape at any sizes (None: this one only)

    @property
    def nbytes(self) -> int:
        return prod(self.shape) * WIDTH[self.dtype]


@dataclass(frozen=True)
class LaunchSpec:
    plan: KernelPlan  # a kernel that runs whole (a leaf of the plan tree)
    buffers: tuple[tuple[str, Ref, tuple[int, ...]], ...]  # (kernel buffer, tensor, shape as the kernel sees it)
    recipes: tuple[Recipe, ...] = ()  # each buffer's shape at any sizes
    dyn: Recipe = ()  # the kernel's dynamic axis sizes (in the program's order) at any sizes


@dataclass(frozen=True)
class CopySpec:
    out: Ref
    src: Ref
    perm: tuple[int, ...]


@dataclass(frozen=True)
class ViewSpec:
    out: str  # an env value
    src: Ref
    shape: tuple[int, ...]
    perm: tuple[int, ...] | None = None  # an output handed back as this permutation of src (strided), not a reshape
    recipe: Recipe | None = None  # the shape at any sizes


@dataclass
class Layout:
    """Every tensor a call at `sizes` touches, and the ops in order: nothing allocated."""

    sizes: dict[str, int]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    pool: dict[str, Spec] = field(default_factory=dict)  # allocated once
    fresh: dict[str, Spec] = field(default_factory=dict)  # allocated per call (env)
    aliases: dict[str, tuple[Ref, tuple[int, ...]]] = field(default_factory=dict)  # pool views of pool values
    alias_recipes: dict[str, Recipe] = field(default_factory=dict)  # their shapes at any sizes
    refs: dict[str, Ref] = field(default_factory=dict)  # graph value -> where it lives
    ops: list[LaunchSpec | CopySpec | ViewSpec] = field(default_factory=list)
    input_nbytes: int = 0  # the inputs' own bytes (the caller's tensors; not allocated here)

    @property
    def nbytes(self) -> int:
        """Bytes this layout allocates: the pool once, the fresh values per call."""
        return sum(s.nbytes for s in self.pool.values()) + sum(s.nbytes for s in self.fresh.values())

    def nbytes_at(self, sizes: Mapping[str, int]) -> int:
        """What the same ops allocate at other `sizes` (a runner serving a bucket holds its largest sizes' pool)."""
        return sum(prod(shape_at(s.recipe, sizes)) * WIDTH[s.dtype] if s.recipe is not None else s.nbytes
                   for group in (self.pool, self.fresh) for s in group.values())

    @property
    def resizable(self) -> bool:
        """Whether every shape is known at any sizes (`Runner.sized`)."""
        return all(s.recipe is not None for group in (self.pool, self.fresh) for s in group.values()) and \
            all(v in self.alias_recipes for v in self.aliases) and \
            all(op.recipe is not None if isinstance(op, ViewSpec) else len(op.recipes) == len(op.buffers)
                for op in self.ops if not isinstance(op, CopySpec))


def _kernel_ext(program: Program, sizes: Mapping[str, int]) -> dict[str, int]:
    ext = extents(program, {a.name: sizes[a.name] for a in program.dynamic_axes})
    for axis, n in ext.items():
        if n > MAX_EXTENT:
            raise GraphError(f"{program.name}: axis {axis} = {n} exceeds the largest extent a kernel indexes "
                             f"({MAX_EXTENT})")
    return ext


def output_views(lowered: Lowered) -> frozenset[str]:
    """The outputs that are a transpose or permute of a value a kernel of `lowered` makes, read by nothing else
    of it: they can be handed back as a strided view of that value (as torch's own transpose is), not a copy.
    Kept on the (immutable) lowered model: every new size asks again."""
    kept = lowered.__dict__.get("_output_views")
    if kept is None:
        kept = _output_views(lowered)
        object.__setattr__(lowered, "_output_views", kept)
    return kept  # type: ignore[no-any-return]


def _output_views(lowered: Lowered) -> frozenset[str]:
    read: set[str] = set()
    for s in lowered.steps:
        read.update([s.input] if isinstance(s, LayoutStep) else (v for _, v in s.inputs))
    made_by = {s.node: s for s in lowered.steps}

    def made_by_a_kernel(value: str) -> bool:  # through reshapes (views of it)
        step = made_by.get(value)
        while isinstance(step, LayoutStep) and step.op == "reshape":
            step = made_by.get(step.input)
        return isinstance(step, KernelStep)

    return frozenset(out for out in lowered.graph.outputs
                     if isinstance(st := made_by.get(out), LayoutStep) and st.op != "reshape" and out not in read
                     and made_by_a_kernel(st.input))


def plan_layout(lowered: Lowered, sizes: Mapping[str, int], plans: Sequence[KernelPlan],
                views: frozenset[str] = frozenset()) -> Layout:
    """The layout of `lowered` at the model's `sizes`, with `plans[i]` settling its i-th kernel step; the
    outputs in `views` (of `output_views`) are strided views of the value they permute, made fresh."""
    graph = lowered.graph
    index = graph.index()
    inputs = tuple(n.name for n in graph.nodes if n.op == "input")
    params = {n.name: str(n.attr("path")) for n in graph.nodes if n.op == "param"}
    layout = Layout(dict(sizes), inputs, graph.outputs)
    layout.input_nbytes = sum(index[n].type.numel(dict(sizes)) * WIDTH[index[n].type.dtype] for n in inputs)
    made_by = {s.node: s for s in lowered.steps}
    views = views & output_views(lowered)
    fresh: set[str] = set()
    for out in graph.outputs:  # an output, and what it is a view of, is made anew on every call
        v = out
        if v in views and v not in fresh:
            fresh.add(v)
            v = made_by[v].input  # type: ignore[union-attr]
        while v not in params and v not in inputs and v not in fresh:
            fresh.add(v)
            step = made_by.get(v)
            if not (isinstance(step, LayoutStep) and step.op == "reshape"):
                break
            v = step.input
    for name in inputs:
        layout.refs[name] = ("env", name)
    for name, path in params.items():
        layout.refs[name] = ("weight", path)

    def place(value: str, spec: Spec) -> Ref:
        ref: Ref = ("env", value) if value in fresh else ("pool", value)
        (layout.fresh if value in fresh else layout.pool)[value] = spec
        layout.refs[value] = ref
        return ref

    def spec_of(value: str) -> Spec:
        t = index[value].type
        return Spec(t.concrete(dict(sizes)), t.dtype, tuple((d,) for d in t.shape))

    kernels = iter(plans)
    for step in lowered.steps:
        if isinstance(step, LayoutStep):
            src = layout.refs[step.input]
            spec = spec_of(step.node)
            if step.op == "reshape":
                if step.node in fresh or src[0] == "env":
                    layout.refs[step.node] = ("env", step.node)
                    layout.ops.append(ViewSpec(step.node, src, spec.shape, recipe=spec.recipe))
                else:
                    layout.refs[step.node] = ("pool", step.node)
                    layout.aliases[step.node] = (src, spec.shape)
                    assert spec.recipe is not None
                    layout.alias_recipes[step.node] = spec.recipe
            elif step.node in views:
                layout.refs[step.node] = ("env", step.node)
                layout.ops.append(ViewSpec(step.node, src, spec.shape, tuple(dict(step.attrs)["perm"]),  # type: ignore[arg-type]
                                           spec.recipe))
            else:
                out = place(step.node, spec)
                layout.ops.append(CopySpec(out, src, tuple(dict(step.attrs)["perm"])))  # type: ignore[arg-type]
            continue
        plan = next(kernels)
        _kernel_step(layout, step, plan, index, place, spec_of)
    return layout


def _axis_recipes(program: Program, step: KernelStep) -> dict[str, tuple[Dim, ...]]:
    """Every axis of `program` (a kernel of `step`, or a piece of one: its axes keep their names) as graph dims."""
    dims = dict(step.axes)
    return {a.name: dims[a.name] if a.extent is None else (a.extent,) for a in program.axes}


def _kernel_step(layout: Layout, step: KernelStep, plan: KernelPlan, index: Mapping[str, Any],
                 place: Callable[[str, Spec], Ref], spec_of: Callable[[str], Spec]) -> None:
    program = step.program
    ext = _kernel_ext(program, plan.sizes)
    axes = _axis_recipes(program, step)
    names: dict[str, tuple[Ref, tuple[int, ...], Recipe]] = {}
    for buf_name, value in step.inputs:
        buf = program.buffer(buf_name)
        names[buf_name] = (layout.refs[value], tuple(ext[a] for a in buf.shape), tuple(axes[a] for a in buf.shape))
    for buf_name, value in step.outputs:
        buf = program.buffer(buf_name)
        shape = tuple(ext[a] for a in buf.shape)
        recipe = tuple(axes[a] for a in buf.shape)
        spec = spec_of(value) if value in index else Spec(shape, buf.dtype, recipe)  # a tap nothing reads: scratch
        names[buf_name] = (place(value, spec), shape, recipe)
    _expand(layout, plan, names, step)


def _expand(layout: Layout, plan: KernelPlan, names: dict[str, tuple[Ref, tuple[int, ...], Recipe]],
            step: KernelStep) -> None:
    """Appends the launches of `plan` with its buffers bound by `names` (its pieces', for a decision)."""
    if plan.decision is None:
        bufs = plan.program.buffers
        axes = _axis_recipes(plan.program, step)
        layout.ops.append(LaunchSpec(plan, tuple((b.name, *names[b.name][:2]) for b in bufs),
                                     tuple(names[b.name][2] for b in bufs),
                                     tuple(axes[a.name] for a in plan.program.dynamic_axes)))
        return
    inner = dict(names)
    for piece_plan in plan.pieces:
        ext = _kernel_ext(piece_plan.program, piece_plan.sizes)
        axes = _axis_recipes(piece_plan.program, step)
        for b in piece_plan.program.outputs:
            if b.name not in inner:  # an intermediate of the decision: scratch of this kernel at these sizes
                shape = tuple(ext[a] for a in b.shape)
                recipe = tuple(axes[a] for a in b.shape)
                name = f"{plan.key.kernel_id[:16]}:{plan.key.sizes}:{b.name}"
                layout.pool[name] = Spec(shape, b.dtype, recipe)
                inner[b.name] = (("pool", name), shape, recipe)
    for piece_plan in plan.pieces:
        _expand(layout, piece_plan, {b.name: inner[b.name] for b in piece_plan.program.buffers}, step)
