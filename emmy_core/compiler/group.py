"""One partition of the `emmy` backend's graph: Emmy's compiled group beside the torch ops it replaces.

An `EmmyGroup` is called where the group's ops were: at each new size it settles its forks, builds its
kernels and checks them against the torch ops on fresh inputs (a mismatch or failed build hands it back to
torch for good), then, with the library route on, races its contenders (`compiler.race`): itself, the same
group on Emmy's kernels only where it had a product on torch's kernel, and the torch ops; the fastest runs
that size. Autograd, a size of 0 or a changed lifted attribute run torch's ops for that call.
`GroupStatus` is what the graph's report keeps of it.
"""

from __future__ import annotations

import functools
import operator
import threading
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import sympy
import torch
import torch.fx as fx
from torch import nn

from emmy_core.bench.reference import RTOL
from emmy_core.compiler.compare import as_exact_as_torch, check_outputs
from emmy_core.compiler.compiled import Compiled, NoGradientsWarning
from emmy_core.compiler.coverage import GroupRace
from emmy_core.compiler.launch import Launcher
from emmy_core.compiler.layout import output_views
from emmy_core.compiler.memory import check_fits
from emmy_core.compiler.race import TORCH, race
from emmy_core.compiler.runner import Runner
from emmy_core.compiler.runner_cache import RunnerCache
from emmy_core.compiler.steps import steps_taken
from emmy_core.compiler.weights import version_of
from emmy_core.evidence.model import KernelPlan
from emmy_core.graph.dynamo_graph import Translated
from emmy_core.ir.sizes import format_sizes, size_bucket
from emmy_core.knobs.route import is_library

SIZES_KEPT = 4096  # sizes a group's status says how it ran, beyond the raced ones (a server meets ever new ones)


@dataclass
class GroupStatus:
    """What a graph's report keeps of one group: its ops and, once handed back to torch, why (the group itself,
    with its buffers and packed weights, lives only as long as the compiled model)."""

    nodes: tuple[str, ...]
    off: str | None = None
    # calls of a live group that torch ran (autograd on, a size of 0, a changed attribute, a new bucket's first call)
    torch_calls: int = 0
    raced: dict[str, str] = field(default_factory=dict)  # size text -> why torch's ops run it (`compiler.race`)
    own: dict[str, str] = field(default_factory=dict)  # size text -> why Emmy's kernels only run it (`compiler.race`)
    tuned: dict[str, str] = field(default_factory=dict)  # size text -> what the backend's `tune` recorded there
    races: dict[str, tuple[str, dict[str, float]]] = field(default_factory=dict)  # raced size -> winner, medians us
    decided_at: dict[str, str] = field(default_factory=dict)  # size text -> the raced size of its bucket
    name: str = ""
    last: str = ""  # the size text of the last call Emmy's checks let through (the report's sizes)
    deferred: str = ""  # the size text of a new bucket's first call, run by torch's ops (`EmmyGroup` with `defer`)

    def race_at_last(self) -> GroupRace | None:
        """The race that decided the last size (its bucket's), or None where none was run."""
        at = self.decided_at.get(self.last)
        if at is None or at not in self.races:
            return None
        winner, medians = self.races[at]
        return GroupRace(self.name, at, medians, winner)

    def torch_at_last(self) -> str | None:
        """Why torch runs the group at its last size: handed back for good, outraced there, or a new bucket's first
        call (None: Emmy)."""
        if self.off or self.last in self.raced:
            return self.off or self.raced[self.last]
        if self.last and self.last == self.deferred:
            return (f"{self.last} is the first call of a size bucket this group had not run: torch's ops ran it, and "
                    "the bucket is settled at its second call (defer)")
        return None

    def trim(self) -> None:
        """Keeps what the per-size maps say of the last `SIZES_KEPT` sizes that took their bucket's verdict, and of
        every raced size (one a bucket): a size dropped and met again is told again from its bucket's verdict."""
        for sizes in (self.decided_at, self.raced, self.own):
            while len(sizes) > SIZES_KEPT:
                oldest = next((k for k in sizes if k not in self.races), None)
                if oldest is None:
                    break
                del sizes[oldest]


class EmmyGroup(nn.Module):
    """One partition: Emmy's compiled graph, with the torch submodule it replaces as the reference and fallback.

    `own` is the same graph compiled with Emmy's kernels as the only candidates (`library=False`): a contender
    of the race at a size where `compiled` runs a product on torch's kernel for want of a measurement."""

    def __init__(self, torch_sub: fx.GraphModule, translated: Translated, compiled: Compiled,
                 nodes: tuple[str, ...], note: Callable[[str], None], check: bool = True,
                 resolve_only: bool = False, route: bool = False, own: Compiled | None = None,
                 tune: Callable[[Compiled, dict[str, int]], str] | None = None,
                 kept: frozenset[int] = frozenset(), defer: bool = False) -> None:
        super().__init__()
        self.torch_sub = torch_sub
        # arguments made from the sizes alone (a causal mask): the check's and the race's fresh inputs keep them as
        # given, so both sides compute the model's own function (torch's fused attention reads no mask at all)
        self._kept = kept
        self.translated = translated
        self.compiled = compiled
        self.own = own if route else None
        self._tune = tune  # the backend's `tune` option: the group's kernels tuned at the first size of a bucket
        self._tuned: set[tuple[tuple[str, int], ...]] = set()
        # `defer`: a size bucket after the group's first runs torch's ops at its first call, and is settled, built,
        # checked and raced at its second (`_settle_size`); the buckets met once so far
        self._defer = defer
        self._met: set[tuple[tuple[str, int], ...]] = set()
        self._settled: set[tuple[tuple[str, int], ...]] = set()  # buckets Emmy's side was settled at
        self._own_off: str | None = None  # why the own contender left the races (it failed to build or check)
        # per size bucket (`ir.sizes.size_bucket`): the race's winner at its first size, and that size; every other
        # size of the bucket runs the same contender, checked, without a race of its own
        self._verdicts: dict[tuple[tuple[str, int], ...], tuple[str, str]] = {}
        self.nodes = nodes
        self.resolve_only = resolve_only
        self.status = GroupStatus(nodes, None if compiled.builder is not None or resolve_only else
                                  (compiled.cannot_run or "nothing builds here"), name=compiled.lowered.graph.name)
        self.check = check
        self.route = route  # race torch's ops at each new size (`compiler.race`)
        self._note = note
        self._sizes: dict[tuple, dict[str, int] | None] = {}
        self._texts: dict[tuple, str] = {}  # the same keys' sizes as text (a runner's key)
        self._runners = RunnerCache()
        # per (own contender?, size bucket, output views): the runner made with room for the bucket's largest sizes,
        # whose memory and launches the bucket's other sizes use (`Runner.sized`)
        self._bases: dict[tuple[bool, tuple[tuple[str, int], ...], frozenset[str]], Runner] = {}
        self._building = threading.Lock()
        self._packs: dict[tuple[object, ...], tuple[object, torch.Tensor]] = {}  # weights packed once for all sizes
        # the own contender's packed weights apart: dropped when it has lost every race it ran, so a group whose
        # products torch runs keeps no packed copy of its weights for a contender that never runs
        self._own_packs: dict[tuple[object, ...], tuple[object, torch.Tensor]] = {}
        self._weights_key: tuple = ()
        self._warned_grad = False

    def _sizes_of(self, args: Sequence[Any]) -> tuple[dict[str, int] | None, str]:
        """The group's named sizes at `args` (None where one is below 1: torch runs it) and their text (the key
        of its runner), both worked out once per distinct values of the sizes they are bound from (the
        binders' dimensions: reading those alone, not every argument's shape, keeps a call's cost flat in
        the number of weights a group reads)."""
        binders = self.translated.binders
        key = tuple(int(args[pos]) if d < 0 else args[pos].shape[d] for _, pos, d, _ in binders)
        if key in self._sizes:
            return self._sizes[key], self._texts[key]
        bound: dict[sympy.Expr, int] = {}
        for (bound_key, _, _, offset), dim in zip(binders, key, strict=True):
            bound[bound_key] = int(dim) - offset
        sizes = self.translated.names.evaluate(bound)
        out = sizes if all(v >= 1 for v in sizes.values()) else None
        self._sizes[key] = out
        self._texts[key] = text = format_sizes(sizes) if out is not None else ""
        while len(self._sizes) > SIZES_KEPT:  # a server meets ever new lengths: the oldest are worked out again
            oldest = next(iter(self._sizes))
            del self._sizes[oldest], self._texts[oldest]
        return out, text

    def sizes_seen(self) -> list[dict[str, int]]:
        """Every size (of the group's named axes) this group was called at, first seen first (the last SIZES_KEPT
        distinct ones)."""
        out: list[dict[str, int]] = []
        for sizes in self._sizes.values():
            if sizes is not None and sizes not in out:
                out.append(dict(sizes))
        return out

    @property
    def active(self) -> Compiled:
        """The compiled graph whose kernels ran the last size: `own` where it won that size's race."""
        return self.own if self.own is not None and self.status.last in self.status.own else self.compiled

    @staticmethod
    def _launcher_of(compiled: Compiled) -> Callable[[KernelPlan], Launcher]:
        def launcher(plan: KernelPlan) -> Launcher:
            assert compiled.builder is not None and plan.schedule is not None
            return Launcher(compiled.builder.build(plan.program, plan.schedule), plan.sizes, plan.program.name,
                            compiled.card.target)
        return launcher

    def _weights(self, args: Sequence[Any]) -> dict[str, torch.Tensor]:
        return {path: args[pos].detach().contiguous() for path, pos in self.translated.params}

    def _build(self, sizes: dict[str, int], args: Sequence[Any], own: bool = False,
               answer: list[tuple[torch.Tensor, ...]] | None = None) -> Runner | None:
        """The checked runner at `sizes` (None: torch runs it). A failure hands the group back to torch for good,
        except on its `own` contender, which is only left out of the race. With `answer` (a new size in a bucket
        already raced), a group that writes into none of its inputs is checked on the caller's own inputs, and
        the outputs it was checked with are put in `answer`: the call's result, not computed a second time."""
        compiled = self.own if own else self.compiled
        assert compiled is not None
        text = format_sizes(sizes) or "its static sizes"
        fail = self._drop_own if own else self._hand_back
        views = output_views(compiled.lowered) if self.check else frozenset()
        bucket = size_bucket(sizes)
        base = self._base(own, bucket, views)
        while True:
            try:
                if base is not None and base.serves(sizes) and compiled.takes_bucket(sizes, base.sizes):
                    runner = base.sized(sizes)  # the bucket's runner at these sizes: no layout, no binding
                else:
                    base = None
                    layout = compiled.layout(sizes, views, build=True)
                    # on a CPU, the pool is made for the bucket's largest sizes, so its other sizes reuse it
                    capacity = dict(bucket) if compiled.card.target == "cpu" else None
                    check_fits(layout.nbytes_at(capacity) if capacity and layout.resizable else layout.nbytes,
                               compiled.device, f"{compiled.lowered.graph.name} at {text}")
                    runner = Runner(layout, self._weights(args), compiled.device, self._launcher_of(compiled),
                                    self._own_packs if own else self._packs, capacity)
            except Exception as exc:  # a group that does not build here runs as torch; the note says why
                fail(f"does not build at {text}: {str(exc).strip().splitlines()[0][:200]}")
                return None
            if not self.check:
                return self._keep_base(own, bucket, views, runner, base)
            on_args = answer is not None and not self.writes_inputs
            why, strides = self._differs(runner, args, views, answer if on_args else None)
            if why is not None:
                fail(f"differs from torch at {text} on fresh inputs: {why}")
                return None
            if not views or strides:
                return self._keep_base(own, bucket, views, runner, base)
            if answer:
                answer.clear()
            views = frozenset()  # an output view strided unlike torch's own: hand back contiguous copies
            base = self._base(own, bucket, views)

    def _base(self, own: bool, bucket: tuple[tuple[str, int], ...], views: frozenset[str]) -> Runner | None:
        """The runner made for the first size of `bucket` (by the own contender where `own`) with these output
        `views`, while the runner cache keeps a runner over its memory (`Runner.sized` makes the bucket's others)."""
        base = self._bases.get((own, bucket, views))
        if base is not None and not any(r.storage == base.storage for r in self._runners.values()):
            del self._bases[(own, bucket, views)]  # dropped by the cache: its memory goes with it
            return None
        return base

    def _keep_base(self, own: bool, bucket: tuple[tuple[str, int], ...], views: frozenset[str], runner: Runner,
                   base: Runner | None) -> Runner:
        """`runner`, noted as its bucket's base where it was made with room for the bucket (not sized from one)."""
        if base is None and runner.capacity is not None:
            self._bases[(own, bucket, views)] = runner
        return runner

    def _drop_bases(self) -> None:
        """Forgets the bases the runner cache holds no runner of (dropped, or outraced): their memory goes."""
        held = {r.storage for r in self._runners.values()}
        for key in [k for k, b in self._bases.items() if b.storage not in held]:
            del self._bases[key]

    def _differs(self, runner: Runner, args: Sequence[Any], views: frozenset[str] = frozenset(),
                 answer: list[tuple[torch.Tensor, ...]] | None = None) -> tuple[str | None, bool]:
        """Why the runner's outputs are not torch's on fresh inputs (None: they agree), and whether the outputs
        handed back as `views` have torch's own strides; with `answer`, on `args` themselves, the runner's
        outputs put in `answer`."""
        fresh = list(args) if answer is not None else self._fresh(args)
        with torch.no_grad():
            want = self.torch_sub(*fresh)
            got = runner.run([fresh[i] for i in self.translated.inputs])
        want = list(want) if isinstance(want, tuple | list) else [want]
        # judged at the loosest tolerance of any type the group holds: an f32 output of bf16 work (a residual
        # widened after a bf16 MLP) carries bf16's rounding, not f32's
        dtypes = {n.type.dtype for n in self.translated.graph.nodes}
        strides = all(g.stride() == w.stride() for name, g, w in zip(runner.layout.outputs, got, want, strict=False)
                      if name in views)
        dtype = max(("f32", *(d for d in dtypes if d in ("f16", "bf16"))), key=RTOL.__getitem__)
        why = check_outputs(got, want, dtype)
        if why is not None and dtype != "f32" and self._near_wider_reference(got, want, fresh, dtype):
            why = None
        if answer is not None and why is None:
            answer.append(got)
        return why, strides

    @functools.cached_property
    def writes_inputs(self) -> bool:
        """Whether torch's ops of the group may write into a tensor it was given (an in-place op): then the check
        of a new size runs on fresh inputs, never on the caller's."""
        for n in self.torch_sub.graph.nodes:
            if n.op not in ("call_function", "call_method"):
                continue
            name = n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "")
            if n.target is operator.setitem or (name.endswith("_") and not name.endswith("__")):
                return True
            schema = getattr(n.target, "_schema", None)
            if schema is not None and any(a.alias_info is not None and a.alias_info.is_write
                                          for a in schema.arguments):
                return True
        return False

    def _fresh(self, args: Sequence[Any]) -> list[Any]:
        """`args` with every activation replaced by random values of its shape and type (weights and what the sizes
        alone make kept): the check and the race run on these, so a group that writes into its inputs changes
        nothing of the caller's."""
        gen = torch.Generator(device="cpu").manual_seed(len(self._runners))
        params = {pos for _, pos in self.translated.params} | self._kept
        return [a if not isinstance(a, torch.Tensor) or i in params else
                torch.randn(a.shape, generator=gen).to(dtype=a.dtype, device=a.device)
                for i, a in enumerate(args)]

    def _on_library(self, sizes: dict[str, int]) -> bool:
        """Whether the group as settled runs a matrix product on torch's kernel at `sizes`."""
        return any(r.applied and r.rule == "schedule" and is_library(getattr(r.choice, "knobs", None) or {})
                   for r in self.compiled.prepare(sizes))

    def _race(self, runner: Runner, sizes: dict[str, int], args: Sequence[Any], text: str) -> Runner | None:
        """The runner that wins this size's race on fresh inputs (None: torch's ops), the verdict kept for the size
        and its bucket."""
        own = self._build(sizes, args, own=True) \
            if self.own is not None and self._own_off is None and self._on_library(sizes) else None
        fresh = self._fresh(args)
        inputs = [fresh[i] for i in self.translated.inputs]
        sides: dict[str, Callable[[], object]] = {"emmy": lambda: runner.run(inputs)}
        if own is not None:
            sides["own"] = lambda: own.run(inputs)
        sides[TORCH] = lambda: self.torch_sub(*fresh)
        with torch.no_grad():  # every side has just run at these sizes: the checks of Emmy's, torch's beside them
            result = race(sides, warm=not self.check)
        win, why = result.winner, result.verdict(text or "its static sizes")
        self._verdicts[size_bucket(sizes)] = (win, text)
        self.status.races[text] = (win, {k: round(result.median(k) * 1e6, 1) for k in result.times})
        self.status.decided_at[text] = text
        if win == "emmy":
            return runner
        if win == "own":  # kept in the status, not a note: the graph's notes say what was handed back to torch
            self.status.own[text] = why
            return own
        if not self.status.own:
            self._own_packs.clear()
        self.status.raced[text] = why
        if len(self.status.raced) == 1:  # once per group: a server's every length would grow it
            self._note(f"{self.compiled.lowered.graph.name} runs as torch: {why}")
        return None

    def _settle_size(self, sizes: dict[str, int], args: Sequence[Any], text: str,
                     answer: list[tuple[torch.Tensor, ...]] | None = None) -> Runner | None:
        """The checked runner of a new size (None: torch's ops run it): at a size whose bucket was raced, the
        bucket's winner, with no race of its own, checked on the call's own inputs where it can be (its outputs
        then in `answer`); else the group's, raced where the route is on."""
        seen = self._verdicts.get(size_bucket(sizes)) if self.route else None
        if seen is not None:
            self.status.trim()
            win, first = seen
            self.status.decided_at[text] = first
            why = f"as at {first or 'its static sizes'}, the first size of its bucket raced"
            if win == TORCH:
                self.status.raced[text] = f"torch's ops measured fastest {why}"
                return None
            if win == "own" and self._own_off is None:
                runner = self._build(sizes, args, own=True, answer=answer)
                if runner is not None:
                    self.status.own[text] = f"Emmy's group (own) measured fastest {why}"
                    return runner
            return self._build(sizes, args, answer=answer)
        bucket = size_bucket(sizes)
        if self._defer and self._settled and bucket not in self._settled and bucket not in self._met:
            self._met.add(bucket)  # a one-off size pays nothing; a bucket met again is settled at its second call
            self.status.torch_calls += 1
            self.status.deferred = text
            return None
        self.status.deferred = ""
        self._settled.add(bucket)
        self._met.discard(bucket)
        self._tune_at(sizes)
        runner = self._build(sizes, args)
        if runner is None or not self.route:
            return runner
        return self._race(runner, sizes, args, text)

    def _tune_at(self, sizes: dict[str, int]) -> None:
        """With the backend's `tune` on, the group's kernels tuned once per size bucket before they are settled; a
        tune that fails leaves a note and the settle goes on with the evidence there is."""
        bucket = size_bucket(sizes)
        if self._tune is None or bucket in self._tuned:
            return
        self._tuned.add(bucket)
        try:
            self.status.tuned[format_sizes(sizes)] = self._tune(self.compiled, sizes)
        except Exception as exc:  # the rows of what was measured are recorded; the compile goes on without more
            self._note(f"{self.compiled.lowered.graph.name}: the tune at {format_sizes(sizes)} stopped: "
                       f"{type(exc).__name__}: {str(exc)[:200]}")

    def _drop_own(self, why: str) -> None:
        """The own contender failed at a size: left out of every later race (the group itself stays)."""
        self._own_off = why
        self._note(f"{self.compiled.lowered.graph.name} on Emmy's kernels only: {why}")

    def _near_wider_reference(self, got: Sequence[torch.Tensor], want: Sequence[torch.Tensor],
                              fresh: Sequence[Any], dtype: str) -> bool:
        """Whether Emmy's 16-bit outputs are as exact as torch's: within the harness's tolerance of the same
        torch ops run on the inputs widened to f32, or no farther from that answer than torch's own (its
        worst and its root-mean-square error both). torch rounds every intermediate of a 16-bit graph to 16
        bits and Emmy keeps them in f32, so a long group can differ from torch by more than the tolerance while
        being the closer of the two to the exact answer (a bf16 post-norm decoder layer: Emmy 0.026 from the f32
        answer, torch 0.142; SigLIP's pooling head, where both are 1.1 off at scale 8.5, 2.2 from each other);
        such a group stays on Emmy. Where torch is the closer, or the ops refuse f32 inputs, the verdict stands."""
        wide = [a.float() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in fresh]
        try:
            with torch.no_grad():
                ref = self.torch_sub(*wide)
        except Exception:  # a graph that runs only at its own types: the verdict against torch stands
            return False
        ref = list(ref) if isinstance(ref, tuple | list) else [ref]
        return as_exact_as_torch(got, want, ref, dtype)

    @property
    def off(self) -> str | None:
        """Why this group runs as torch (None: it runs on Emmy)."""
        return self.status.off

    def _hand_back(self, why: str) -> None:
        self.status.off = why
        self._runners.clear()
        self._bases.clear()
        self._packs.clear()
        self._own_packs.clear()
        self._note(f"{self.compiled.lowered.graph.name} runs as torch: {why}")

    @property
    def torch_calls(self) -> int:
        """Calls of this live group that torch ran (autograd on, a size of 0, a changed attribute)."""
        return self.status.torch_calls

    def forward(self, *args: Any) -> Any:
        if self.off is not None:
            return self.torch_sub(*args)
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            self.status.torch_calls += 1
            if not self._warned_grad:  # torch keeps the gradients right; the user should know Emmy did not run
                self._warned_grad = True
                warnings.warn(NoGradientsWarning(
                    f"{self.compiled.lowered.graph.name} was called where torch tracks gradients: torch ran it (Emmy "
                    "computes no gradients); call it under torch.no_grad() to run Emmy's kernels"), stacklevel=2)
            return self.torch_sub(*args)
        sizes, text = self._sizes_of(args)
        if sizes is None:
            self.status.torch_calls += 1
            return self.torch_sub(*args)
        for pos, want in self.translated.consts:
            if float(args[pos]) != want:  # a lifted attribute changed since compile: torch computes with it
                self.status.torch_calls += 1
                return self.torch_sub(*args)
        if self.resolve_only:  # explain: the forks settled at this size, the values computed by torch
            self.compiled.resolve(sizes)
            return self.torch_sub(*args)
        self.status.last = text
        if text in self.status.raced:  # torch's ops were measured faster at this size
            return self.torch_sub(*args)
        params = [args[pos] for _, pos in self.translated.params]
        wkey = (steps_taken(), *((version_of(p), p.data_ptr()) for p in params))  # a fused optimizer bumps no version
        runner = self._runners.get(text) if wkey == self._weights_key else None
        if runner is None:
            with self._building:  # one thread settles, builds and checks a size; the others then find it
                if wkey != self._weights_key:  # a weight was edited or replaced: launches bound to the old one go
                    self._runners.clear()
                    self._bases.clear()
                    self._packs.clear()
                    self._own_packs.clear()
                    self._weights_key = wkey
                runner = self._runners.get(text)
                if runner is None:
                    if self.off is not None:  # handed back while this thread waited
                        return self.torch_sub(*args)
                    answer: list[tuple[torch.Tensor, ...]] = []
                    runner = self._settle_size(sizes, args, text, answer)
                    if runner is None:
                        return self.torch_sub(*args)
                    self._runners.put(text, runner)
                    self._drop_bases()
                    if answer:  # checked against torch on these very inputs: the call's result
                        return answer[0]
        inputs = [args[i] for i in self.translated.inputs]
        if not torch.is_grad_enabled():  # the usual inference call: no context to enter
            return runner.run(inputs)
        with torch.no_grad():
            return runner.run(inputs)
