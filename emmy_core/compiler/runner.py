"""A compiled model at one size: its launches in graph order and its buffers, allocated once.

`Runner` allocates the layout (`compiler.layout`: where every tensor a call touches lives) and binds every launch: a kernel's buffers are views of the
graph values reshaped to the kernel's buffers (row-major, so views of contiguous data); a
decision runs its pieces in order over the parent's buffers and its scratch; a reshape is a
view; a transpose or permute is a torch copy into its buffer, except an output nothing else reads, which
the Dynamo backend may ask to be handed back as a strided view of what it permutes (`output_views`: torch's
own transpose is a view, and the op reading it may take any strides). Only the inputs and the fresh values
change between calls: a prepared CPU launch has its pool buffers' pointers written once (`Launch.over`) and
writes only theirs per call, with no view taken (a decode step's kernels cost 4-5 us each from Python,
against 8-9 us through a dictionary of views).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from math import prod
from typing import Any

import torch

from emmy_core.compiler.launch import Launcher
from emmy_core.compiler.layout import CopySpec, LaunchSpec, Layout, Ref, ViewSpec, shape_at
from emmy_core.dtypes import torch_dtype
from emmy_core.evidence.model import KernelPlan


class Runner:
    """The allocated layout with every op bound; `run(inputs)` computes the model's outputs.

    With `capacity` (graph sizes at least the layout's, each: its size bucket's largest), the pool is allocated for
    those sizes and `sized(sizes)` gives the runner of any sizes up to them over the same memory and launches:
    the same kernels at other sizes of their dynamic axes (a prepared CPU launch takes its sizes at each call,
    a matmul's packed weight does not depend on them), each intermediate the front of its buffer seen at its
    shape there. A server's new prompt length in a bucket then costs neither a layout nor a binding."""

    def __init__(self, layout: Layout, weights: Mapping[str, torch.Tensor], device: torch.device,
                 launcher_for: Callable[[KernelPlan], Launcher], packs: dict[Any, Any] | None = None,
                 capacity: Mapping[str, int] | None = None) -> None:
        self.layout = layout
        self.device = device
        self.sizes = dict(layout.sizes)  # the sizes this runner computes at
        self._packs = packs  # packed weights shared with the runners of other sizes (Launcher.bind)
        self.capacity = dict(capacity) if capacity is not None and layout.resizable else None
        self._storage: dict[str, torch.Tensor] = {}  # each pool buffer's memory, for the capacity's sizes
        pool: dict[str, torch.Tensor] = {}
        for name, spec in layout.pool.items():
            n = prod(spec.shape)
            room = max(n, prod(shape_at(spec.recipe, self.capacity))) \
                if self.capacity is not None and spec.recipe is not None else n
            flat = torch.empty(room, dtype=torch_dtype(spec.dtype), device=device)
            self._storage[name] = flat
            pool[name] = flat[:n].view(spec.shape)
        for name, (src, shape) in layout.aliases.items():
            pool[name] = self._fixed(src, pool, weights).view(shape)
        self._fresh = [(v, s.shape, torch_dtype(s.dtype)) for v, s in layout.fresh.items()]
        self._ops: list[Callable[[dict[str, torch.Tensor]], None]] = []
        self.labels: list[tuple[str, str]] = []  # (kernel | copy | view, what) of each op, for profiles
        launchers: dict[int, Launcher] = {}
        self._launchers = launchers.values()
        self._bound: list[tuple[int, LaunchSpec, Launcher, frozenset[str]]] = []  # ops that read weights
        for op in layout.ops:
            if isinstance(op, LaunchSpec):
                key = id(op.plan)
                if key not in launchers:
                    launchers[key] = launcher_for(op.plan)
                reads = frozenset(ref[1] for _, ref, _ in op.buffers if ref[0] == "weight")
                if reads:
                    self._bound.append((len(self._ops), op, launchers[key], reads))
                self._ops.append(self._launch(op, launchers[key], pool, weights))
                self.labels.append(("kernel", op.plan.program.name))
            elif isinstance(op, CopySpec):
                self._ops.append(self._copy(op, pool, weights))
                self.labels.append(("copy", f"permute{op.perm} -> {op.out[1]}"))
            else:
                self._ops.append(self._view(op, pool, weights))
                self.labels.append(("view", op.out))
        self._pool = pool
        self._weights = weights
        self._launcher_list = [launchers[id(op.plan)] if isinstance(op, LaunchSpec) else None for op in layout.ops]
        # what it keeps between calls (shared with the runners `sized` makes of it: `storage` names the memory)
        self.held_bytes = sum(t.numel() * t.element_size() for t in self._storage.values())
        self.storage = id(self)
        self._lock = threading.Lock()  # one call at a time: the pool and the launches' pointer arrays are shared

    def serves(self, sizes: Mapping[str, int]) -> bool:
        """Whether `sized(sizes)` can compute at `sizes`: this runner has a capacity, every launch takes its sizes
        at the call, and no size is beyond the capacity."""
        return self.capacity is not None and self.prepared and sizes.keys() == self.capacity.keys() and \
            all(1 <= v <= self.capacity[k] for k, v in sizes.items())

    def sized(self, sizes: Mapping[str, int]) -> Runner:
        """The runner at `sizes` (`serves(sizes)`): this one's memory, launches and lock, its own shapes and
        launch sizes. ValueError where it cannot serve them."""
        if not self.serves(sizes):
            raise ValueError(f"a runner of capacity {self.capacity} cannot compute at {dict(sizes)}")
        out = object.__new__(Runner)
        out.layout, out.device, out.sizes, out._packs, out.capacity = self.layout, self.device, dict(sizes), \
            self._packs, self.capacity
        out._storage, out._weights, out._lock, out.storage = self._storage, self._weights, self._lock, self.storage
        out.held_bytes = self.held_bytes
        pool: dict[str, torch.Tensor] = {}
        for name, spec in self.layout.pool.items():
            shape = shape_at(spec.recipe, sizes)  # type: ignore[arg-type]
            pool[name] = self._storage[name][:prod(shape)].view(shape)
        for name, (src, _) in self.layout.aliases.items():
            pool[name] = out._fixed(src, pool, self._weights).view(shape_at(self.layout.alias_recipes[name], sizes))
        out._pool = pool
        out._fresh = [(v, shape_at(s.recipe, sizes), torch_dtype(s.dtype))  # type: ignore[arg-type]
                      for v, s in self.layout.fresh.items()]
        out.labels, out._launcher_list, out._launchers, out._bound = \
            self.labels, self._launcher_list, self._launchers, self._bound  # `rebind` makes launchers at its sizes
        ops: list[Callable[[dict[str, torch.Tensor]], None]] = []
        for op, bound in zip(self.layout.ops, self._ops, strict=True):
            if isinstance(op, LaunchSpec):
                at = getattr(bound, "at", None)  # a prepared CPU launch: the same pointers at its new sizes
                ops.append(at(shape_at(op.dyn, sizes)) if at is not None else out._launch(
                    op, out._launcher_at(op, self._launcher_list[len(ops)]), pool, self._weights,
                    tuple(shape_at(r, sizes) for r in op.recipes)))
            elif isinstance(op, CopySpec):
                ops.append(out._copy(op, pool, self._weights))
            else:
                ops.append(out._view(op, pool, self._weights, shape_at(op.recipe, sizes)))  # type: ignore[arg-type]
        out._ops = ops
        return out

    def _launcher_at(self, op: LaunchSpec, launcher: Launcher | None) -> Launcher:
        """`launcher` (the layout's, of `op`) at this runner's sizes."""
        assert launcher is not None
        if self.sizes == self.layout.sizes:
            return launcher
        own = dict(zip((a.name for a in op.plan.program.dynamic_axes), shape_at(op.dyn, self.sizes), strict=True))
        return Launcher(launcher.built, own, launcher.name, launcher.target)

    def rebind(self, paths: set[str] | frozenset[str]) -> int:
        """Binds again every launch that reads one of the weight `paths` (edited in place since it was bound:
        a CPU matmul packs its weight again); the number of launches bound again."""
        n = 0
        sized = self.sizes != self.layout.sizes
        for i, op, launcher, reads in self._bound:
            if reads & paths:
                shapes = tuple(shape_at(r, self.sizes) for r in op.recipes) if sized else None
                self._ops[i] = self._launch(op, self._launcher_at(op, launcher), self._pool, self._weights, shapes)
                n += 1
        return n

    @staticmethod
    def _fixed(ref: Ref, pool: Mapping[str, torch.Tensor], weights: Mapping[str, torch.Tensor]) -> torch.Tensor:
        kind, name = ref
        if kind == "pool":
            return pool[name]
        if kind == "weight":
            return weights[name]
        raise AssertionError(f"{ref} changes per call")

    def _launch(self, op: LaunchSpec, launcher: Launcher, pool: Mapping[str, torch.Tensor],
                weights: Mapping[str, torch.Tensor], shapes: Sequence[tuple[int, ...]] | None = None
                ) -> Callable[[dict[str, torch.Tensor]], None]:
        """The bound launch of `op`, its buffers seen at `shapes` (the layout's where None)."""
        bufs = [(b, ref, shape) for (b, ref, _), shape in zip(op.buffers, shapes, strict=True)] \
            if shapes is not None else op.buffers
        constants = {b: self._fixed(ref, pool, weights).view(shape) for b, ref, shape in bufs if ref[0] == "weight"}
        fixed = {b: self._fixed(ref, pool, weights).view(shape) for b, ref, shape in bufs if ref[0] == "pool"}
        per_call = [(b, ref[1], shape) for b, ref, shape in bufs if ref[0] == "env"]
        return launcher.bind(constants, fixed, per_call, self._packs)

    def _copy(self, op: CopySpec, pool: Mapping[str, torch.Tensor],
              weights: Mapping[str, torch.Tensor]) -> Callable[[dict[str, torch.Tensor]], None]:
        perm = op.perm
        out = None if op.out[0] == "env" else self._fixed(op.out, pool, weights)
        src = None if op.src[0] == "env" else self._fixed(op.src, pool, weights)
        out_name, src_name = op.out[1], op.src[1]

        def run(env: dict[str, torch.Tensor]) -> None:
            o = out if out is not None else env[out_name]
            s = src if src is not None else env[src_name]
            o.copy_(s.permute(perm))

        return run

    def _view(self, op: ViewSpec, pool: Mapping[str, torch.Tensor], weights: Mapping[str, torch.Tensor],
              shape: tuple[int, ...] | None = None) -> Callable[[dict[str, torch.Tensor]], None]:
        src = None if op.src[0] == "env" else self._fixed(op.src, pool, weights)
        src_name, out_name, perm = op.src[1], op.out, op.perm
        shape = op.shape if shape is None else shape
        if perm is not None:
            def permuted(env: dict[str, torch.Tensor]) -> None:
                env[out_name] = (src if src is not None else env[src_name]).permute(perm)

            return permuted

        def run(env: dict[str, torch.Tensor]) -> None:
            env[out_name] = (src if src is not None else env[src_name]).view(shape)

        return run

    def _env(self, inputs: Sequence[torch.Tensor]) -> dict[str, torch.Tensor]:
        env: dict[str, torch.Tensor] = {}
        for name, t in zip(self.layout.inputs, inputs, strict=True):
            env[name] = t if t.is_contiguous() else t.contiguous()
        for value, shape, dtype in self._fresh:
            env[value] = torch.empty(shape, dtype=dtype, device=self.device)
        return env

    @property
    def prepared(self) -> bool:
        """Whether the kernels launch prepared (checked once) rather than checked on every call."""
        return all(launcher.prepared for launcher in self._launchers)

    def profile(self, inputs: Sequence[torch.Tensor], repeats: int = 10) -> list[tuple[str, str, float]]:
        """Median microseconds of every op over `repeats` calls: (kind, what, us) in order; then ('call', 'setup')
        for making the inputs' and outputs' tensors and ('call', 'whole') for a whole call timed in the same round."""
        import statistics
        import time

        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        times: list[list[float]] = [[] for _ in self._ops]
        setup: list[float] = []
        whole: list[float] = []
        for _ in range(repeats):
            sync()
            t0 = time.perf_counter()
            self.run(inputs)
            sync()
            whole.append(time.perf_counter() - t0)
            with self._lock:
                t0 = time.perf_counter()
                env = self._env(inputs)
                setup.append(time.perf_counter() - t0)
                for i, op in enumerate(self._ops):
                    sync()
                    t0 = time.perf_counter()
                    op(env)
                    sync()
                    times[i].append(time.perf_counter() - t0)
        out = [(kind, what, 1e6 * statistics.median(ts)) for (kind, what), ts in zip(self.labels, times, strict=True)]
        out.append(("call", "setup", 1e6 * statistics.median(setup)))
        out.append(("call", "whole", 1e6 * statistics.median(whole)))
        return out

    def run(self, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        """The outputs at `inputs`. Calls from several threads take turns: they share this size's buffers, and
        the kernels run with the GIL released."""
        with self._lock:
            return self._run(inputs)

    def _run(self, inputs: Sequence[torch.Tensor]) -> tuple[torch.Tensor, ...]:
        env = self._env(inputs)
        for op in self._ops:
            op(env)
        out = []
        for name in self.layout.outputs:
            ref = self.layout.refs[name]
            out.append(env[ref[1]] if ref[0] == "env" else self._fixed(ref, self._pool, self._weights))
        return tuple(out)
