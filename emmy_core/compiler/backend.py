"""The `emmy` Dynamo backend: `torch.compile(model, backend="emmy")` runs Emmy kernels where Emmy lowers the
ops and torch everywhere else.

Dynamo captures the model (graph breaks, guards, symbolic sizes) and hands each FX graph to
`backend(gm, example_inputs)`. The graph is partitioned (`emmy_core.graph.partition`): each group of
ops Emmy lowers becomes an Emmy graph, run through the same passes and lowering as
`emmy_core.compile`, and a `Compiled` whose forks are settled by the same resolver into the same
resolution record; every other op stays as torch runs it. Nothing is refused for an op Emmy does not
lower: the op runs as torch, and the report names it with the reason.

At each new size a group is built (forks settled, kernels built, buffers allocated) and checked
against the torch ops it replaces on fresh random inputs, with the harness's tolerance for its data
type; a mismatch (or a build that fails) hands the group back to torch for good, with a note, so it
never gives a wrong answer. Parameters arrive as graph inputs, so the weights a launch reads are the
module's own tensors: a launch packs a matmul's weight once, and is rebuilt when the weight tensor's
version (`t._version`, bumped by every in-place edit) or storage changes. A group whose inputs need
gradients runs as torch (Emmy's kernels have no backward).

`compile_reports()` gives, for every graph this process compiled, the op count, the ops on Emmy
kernels, the matrix-product FLOPs at the sizes it last ran and how many of them ran on Emmy, and every
op that fell back with the reason.
"""

from __future__ import annotations

import warnings
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import sympy
import torch
import torch.fx as fx
from torch import nn

from emmy_core.compiler.build import Builder, runnable_here
from emmy_core.compiler.compiled import Compiled, card_of
from emmy_core.compiler.coverage import FellBack, GraphReport
from emmy_core.compiler.group import EmmyGroup, GroupStatus
from emmy_core.compiler.handover import copy_graph, drop_graphargs, lifted_floats, literal_sizes
from emmy_core.evidence.context import PriorArg, PriorUnavailableWarning, open_sources
from emmy_core.evidence.freeze import FreezesArg
from emmy_core.evidence.sources import Sources
from emmy_core.graph.attention import attention_mask, decompose_sdpa, torch_wins, with_fused_attention
from emmy_core.graph.dynamo import describe, is_compute, matmul_flops, value
from emmy_core.graph.dynamo_graph import to_graph
from emmy_core.graph.lower import Lowered
from emmy_core.graph.mha import decompose_mha
from emmy_core.graph.partition import fuse, plan_partitions
from emmy_core.graph.pipeline import compile_graph
from emmy_core.ir.sizes import format_sizes
from emmy_core.search.strategy import check_tune
from emmy_core.targets.card import Card
from emmy_core.threads import warn_if_spinning

FALLBACKS = ("eager", "inductor")  # how the ops left to torch run
BACKEND_OPTIONS = frozenset({"card", "setting", "tuning_db", "freezes", "prior", "attention", "fallback",
                             "library", "tune", "defer"})


class GraphState:
    """What the backend knows of one graph it compiled: for its report, updated on every call."""

    def __init__(self, name: str, gm: fx.GraphModule, torch_ops: dict[str, str], built: bool = True) -> None:
        self.name = name
        self.built = built
        self.ops = [(n.name, describe(n)) for n in gm.graph.nodes if is_compute(n)]
        self.flops = {n.name: f for n in gm.graph.nodes if (f := matmul_flops(n)) is not None}
        self.torch_ops = dict(torch_ops)
        self.groups: list[GroupStatus] = []
        self._live: list[weakref.ref[EmmyGroup]] = []
        self.notes: list[str] = []
        self.binders: list[tuple[sympy.Symbol, int, int]] = []
        seen: set[sympy.Symbol] = set()
        for pos, ph in enumerate(n for n in gm.graph.nodes if n.op == "placeholder"):
            v = value(ph)
            dims = [(-1, v)] if isinstance(v, torch.SymInt) else \
                list(enumerate(v.shape)) if isinstance(v, torch.Tensor) else []
            for d, size in dims:
                if isinstance(size, torch.SymInt) and isinstance(size.node.expr, sympy.Symbol) \
                        and size.node.expr not in seen:
                    seen.add(size.node.expr)
                    self.binders.append((size.node.expr, pos, d))
        self.last: dict[sympy.Symbol, int] = {}
        self.calls = 0
        self.torch_calls = 0  # calls of the graph in which torch ran one of its live groups (a unit with `calls`)

    def group_torch_calls(self) -> int:
        """Group calls torch ran, over every group of this graph (a call of the graph runs each group once)."""
        return sum(g.torch_calls for g in self.groups)

    def add(self, group: EmmyGroup) -> None:
        self.groups.append(group.status)
        self._live.append(weakref.ref(group))

    def live_groups(self) -> list[EmmyGroup]:
        """The groups of this graph still alive (their compiled model not yet freed)."""
        return [g for r in self._live if (g := r()) is not None]

    def saw(self, args: Sequence[Any]) -> None:
        self.calls += 1
        if self.binders:
            self.last = {s: int(args[p]) if d < 0 else int(args[p].shape[d]) for s, p, d in self.binders}

    def report(self) -> GraphReport:
        live = {n for g in self.groups if g.torch_at_last() is None for n in g.nodes}
        fell = []
        for node, op in self.ops:
            if node in live:
                continue
            why = self.torch_ops.get(node)
            if why is None:
                why = next((f"its group runs as torch: {w}" for g in self.groups
                            if node in g.nodes and (w := g.torch_at_last())), "not in a group Emmy runs")
            fell.append(FellBack(node, op, why))

        def at_last(f: object) -> int:  # 0 for a size the graph has not run at yet
            if not isinstance(f, sympy.Expr):
                return int(f)  # type: ignore[call-overload]
            v = f.xreplace(self.last)
            return int(v) if v.is_number else 0

        flops = {n: at_last(f) for n, f in self.flops.items()}
        return GraphReport(self.name, len(self.ops), sum(1 for n, _ in self.ops if n in live), sum(flops.values()),
                           sum(v for n, v in flops.items() if n in live), {str(s): v for s, v in self.last.items()},
                           tuple(fell), tuple(self.notes), len(self.groups), self.built, self.calls,
                           self.torch_calls, tuple(r for g in self.groups if (r := g.race_at_last()) is not None))


_GRAPHS: list[GraphState] = []  # every graph the backend compiled in this process, for compile_reports()


def compile_reports() -> list[GraphReport]:
    """The coverage of every graph the `emmy` backend compiled in this process, in compile order."""
    return [g.report() for g in _GRAPHS]


def emmy_backend(*, card: str | Card = "local", setting: str = "deploy", tuning_db: Path | str | None = None,
                 freezes: FreezesArg = None, prior: PriorArg = None, check: bool = True,
                 build: bool = True, attention: bool | str = "auto", fallback: str = "eager",
                 library: bool = True, tune: int | None = None, defer: bool = True) -> Callable[..., Any]:
    """A Dynamo backend for `card` and `setting` with the given evidence sources (as `emmy_core.compile` takes them).

    `check=False` skips the check against torch at each new size (for timing the check's cost only);
    `build=False` only partitions and settles forks at each size run, while torch computes (what `emmy explain`
    uses: the coverage and the record of a card this machine cannot run); `attention` says where
    `scaled_dot_product_attention` runs: `"auto"`, rewritten as Emmy's matmuls and softmax, and the group
    holding it raced against torch's fused kernel (with the library route on), but a decode step's or one under a
    mask given as a tensor, left to torch's fused kernel (`emmy_core.graph.attention.torch_wins` says why);
    `True`, always rewritten;
    `False`, always torch's. `fallback` says how the ops left to torch run: `eager`, one by one as torch
    runs them, or `inductor`, compiled by Inductor around the Emmy groups (`emmy_core.compiler.opaque`:
    each group one op Inductor does not look into), so that a mask's index math, rotary tables and
    attention left to torch are fused as `torch.compile` would fuse them. `library`: every matrix product's
    first option is torch's own kernel (True), or Emmy's kernels are the only candidates (False). `tune=N`: at
    the first size of each size bucket a group runs, its kernels are tuned on this machine before they are settled
    (N of Emmy's candidates each, chosen as `emmy tune` chooses them, and torch's kernel beside them), the rows
    recorded into `tuning_db` (default: the local tuning database), where this and every later compile reads them.
    `defer` (the default): a size bucket after a group's first runs torch's ops at its first call, and is settled,
    built, checked and raced at its second, so a size met once (a long prompt in a new bucket) costs nothing more
    than torch's call, where settling a bucket costs tens of milliseconds a group; `False` settles every bucket
    at its first call."""
    from emmy_core.codegen.backend import get_setting

    get_setting(setting)
    if not (isinstance(attention, bool) or attention == "auto"):
        raise ValueError(f"attention={attention!r}: one of True (Emmy's), False (torch's) or 'auto' (where Emmy's wins)")
    if fallback not in FALLBACKS:
        raise ValueError(f"fallback={fallback!r}: the ops left to torch run by one of {', '.join(FALLBACKS)}")
    if not isinstance(library, bool):
        raise ValueError(f"library={library!r}: True (torch's own kernel is a candidate) or False (Emmy's only)")
    if tune is not None:
        check_tune(tune, None)
    if not isinstance(defer, bool):
        raise ValueError(f"defer={defer!r}: True (a bucket after a group's first is settled at its second call) or "
                         "False (at its first)")
    warned: list[bool] = []

    def compile_fx(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        the_card = card_of(card)
        name = f"graph{len(_GRAPHS)}"
        if build:
            # a GPU card without a GPU runs here only under Triton's interpreter, on the CPU's tensors
            device = "cuda" if the_card.target != "cpu" and torch.cuda.is_available() else "cpu"
        else:  # resolving only: the partition is the one the inputs' device would get
            device = next((t.device.type for t in example_inputs if isinstance(t, torch.Tensor)), "cpu")
        params = {ph.name for ph, ex in zip((n for n in gm.graph.nodes if n.op == "placeholder"), example_inputs,
                                            strict=False) if isinstance(ex, nn.Parameter)}
        sources = open_sources(the_card, setting, freezes=freezes, tuning_db=tuning_db, prior=prior,
                               library=library)
        # Emmy's kernels only: the race's contender where a product went to torch's kernel for want of evidence
        own_sources = sources.emmy_only() if library and build else None
        why = next(s for s in sources.items if s.tier == "prior").unavailable()
        if why is not None and prior is not False and not warned:
            warned.append(True)
            warnings.warn(PriorUnavailableWarning(f"the emmy backend for {the_card.name}: {why}; forks no measurement "
                                                  "settles fall to the rule's first option"), stacklevel=2)
        builder = Builder(the_card, setting) if build and runnable_here(the_card) is None else None
        if builder is not None and the_card.target == "cpu":
            warn_if_spinning()
        tuner = _tuner(the_card, setting, sources, tune, tuning_db) if tune is not None and builder is not None else None
        lowered: dict[str, Lowered] = {}

        sources_of = [getattr(n, "_dynamo_source", None) for n in gm.graph.find_nodes(op="placeholder")]
        if fallback == "inductor":  # Inductor may ask Dynamo to trace the frame again: its graph stays as handed over
            gm = copy_graph(gm)
        literal_sizes(gm)
        consts = lifted_floats(gm, example_inputs, params)
        decompose_mha(gm, consts)  # nn.MultiheadAttention: its projections become Emmy's, its attention is as below
        if attention:
            decompose_sdpa(gm, consts, unless=torch_wins if attention == "auto" else None)

        def trial(sub: fx.GraphModule) -> None:
            tr = to_graph(sub, params, f"{name}.trial", consts)
            compile_graph(tr.graph)

        plan = plan_partitions(gm, trial, device, consts)
        state = GraphState(name, gm, plan.torch_ops, built=build)
        groups = [tuple(n.name for n in g if is_compute(n)) for g in plan.groups]
        for sub_name, nodes in zip(fuse(gm, plan), groups, strict=True):
            sub = getattr(gm, sub_name)
            tr = to_graph(sub, params, f"{name}.{sub_name}", consts)
            lowered[sub_name] = compile_graph(tr.graph)
            compiled = Compiled(lowered[sub_name], the_card, setting, sources, strict_evidence=False,
                                device=torch.device(device), builder=builder, buckets=build)
            own = Compiled(lowered[sub_name], the_card, setting, own_sources, strict_evidence=False,
                           device=torch.device(device), builder=builder, buckets=True) \
                if own_sources is not None and builder is not None else None
            # torch's side (the reference, the race's contender, the fallback) runs a whole attention as torch's
            # fused kernel, not as the decomposition Emmy lowers: the race measures Emmy's against torch's own
            torch_side = with_fused_attention(sub) or sub
            call = next(n for n in gm.graph.nodes if n.op == "call_module" and n.target == sub_name)
            kept = frozenset(i for i, a in enumerate(call.args) if isinstance(a, fx.Node) and a.target is attention_mask)
            group = EmmyGroup(torch_side, tr, compiled, nodes, state.notes.append, check, resolve_only=not build,
                              route=library, own=own, tune=tuner, kept=kept, defer=defer and build)
            setattr(gm, sub_name, group)
            state.add(group)
        gm.recompile()
        drop_graphargs(gm, root=False)
        forward = gm.forward
        if fallback == "inductor" and build:
            forward = _inductor_around(gm, example_inputs, sources_of)
        _GRAPHS.append(state)

        dropped: list[bool] = []

        def run(*args: Any) -> Any:
            if not dropped:  # Dynamo is done with its graph's inputs by the first call
                dropped.append(True)
                drop_graphargs(gm, root=True)
            state.saw(args)
            before = state.group_torch_calls()
            out = forward(*args)
            if state.group_torch_calls() != before:  # counted per call of the graph, as `calls` is
                state.torch_calls += 1
            return out

        run.emmy_graph = state  # type: ignore[attr-defined]
        run.emmy_module = gm  # type: ignore[attr-defined]  # keeps its groups alive for Inductor's code
        return run

    # Named as the registered backend it is (torch.compile takes a callable's name as its backend's): Dynamo then
    # clears, once it compiled, the weak references its fake tensors keep to the real ones (the parameters among
    # them), as for every registered backend; it keeps them for another callable, and torch.utils.swap_tensors
    # refuses a tensor a weak reference points to
    compile_fx.__name__ = "emmy"
    return compile_fx


def _tuner(card: Card, setting: str, sources: Sources, budget: int, tuning_db: Path | str | None
           ) -> Callable[[Compiled, dict[str, int]], str]:
    """What a group calls at the first size of a bucket with `tune` on: its kernels at those sizes benched on this
    machine and recorded (`search.module_tune.tune_units`), then forgotten by the sources, which read them anew."""
    def tune_group(compiled: Compiled, sizes: dict[str, int]) -> str:
        from emmy_core.bench.harness import BenchConfig, Unit
        from emmy_core.search.tune_units import tune_units

        name = compiled.lowered.graph.name
        units = [Unit(k.program, k.sizes(sizes), label=f"{name}:{k.node}") for k in compiled.lowered.kernels]
        report = tune_units(units, card, budget=budget, tuning_db=tuning_db,
                            config=BenchConfig(setting=setting, source="tune"), label=f"torch.compile tune {name}")
        sources.forget(sorted({u.kernel_id for u in units}))
        return (f"{name} tuned at {format_sizes(sizes) or 'its static sizes'}: {report.rows_recorded} rows recorded, "
                f"{report.count('ok')} ok, {report.count('failed')} failed, "
                f"{report.count('flagged')} flagged (timed on a busy machine, not recorded), {report.skipped_known} known, "
                f"{report.wall_s:.1f} s")

    return tune_group


def _inductor_around(gm: fx.GraphModule, example_inputs: Sequence[Any], sources: list[Any]) -> Callable[..., Any]:
    """`gm` (the backend's copy of Dynamo's graph, partitioned) with its Emmy groups made opaque, compiled by
    Inductor. The partition rebuilt the graph's placeholders; Inductor reads Dynamo's source of each input from
    them, so they get it back."""
    from torch._inductor.compile_fx import compile_fx

    from emmy_core.compiler.opaque import opaque_groups

    placeholders = list(gm.graph.find_nodes(op="placeholder"))
    if len(placeholders) != len(sources):
        raise RuntimeError(f"the partition changed the graph's inputs ({len(sources)} -> {len(placeholders)})")
    for node, source in zip(placeholders, sources, strict=True):
        if source is not None:
            node._dynamo_source = source  # type: ignore[attr-defined]
    opaque_groups(gm, {name: m for name, m in gm.named_children() if isinstance(m, EmmyGroup)})
    return compile_fx(gm, list(example_inputs))


def run_backend(module: nn.Module, inputs: Sequence[Any], **options: Any) -> tuple[Any, list[GraphReport]]:
    """`module(*inputs)` through `torch.compile` with the emmy backend (`options` as `emmy_backend` takes them) from
    fresh Dynamo caches, without gradients, and the reports of the graphs it compiled."""
    torch._dynamo.reset()
    before = len(_GRAPHS)
    with torch.no_grad():
        out = torch.compile(module, backend=emmy_backend(**options))(*inputs)
    return out, [g.report() for g in _GRAPHS[before:]]


def backend(gm: fx.GraphModule, example_inputs: Sequence[Any], options: dict[str, Any] | None = None,
            **unknown: Any) -> Callable[..., Any]:
    """The `emmy` backend as `torch.compile(model, backend="emmy")` finds it: this machine's card, deploy setting;
    `torch.compile(..., options={...})` passes `emmy_backend`'s keyword arguments (e.g. `{"fallback": "inductor"}`)."""
    if unknown:
        raise TypeError(f"the emmy backend takes no {', '.join(sorted(unknown))} (torch.compile's mode is Inductor's;"
                        " give the emmy backend's settings as options={...})")
    given = dict(options or {})
    bad = sorted(set(given) - BACKEND_OPTIONS)
    if bad:
        raise TypeError(f"the emmy backend has no option {', '.join(map(repr, bad))}; it takes "
                        f"{', '.join(sorted(BACKEND_OPTIONS))}")
    return emmy_backend(**given)(gm, example_inputs)
