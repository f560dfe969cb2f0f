"""What `emmy_core.compile(...)` returns, on either path: one `CompiledModel`, called exactly like the module.

Its default mode (`torch_ops="run"`) is the emmy Dynamo backend: the module goes through
`torch.compile(module, backend=emmy_backend(...), dynamic=True)` (the same partition, translation, passes,
lowering, resolver and check against torch as `backend="emmy"`) and is called once on the example inputs,
which builds the example's sizes. Ops Emmy does not lower run as torch runs them; nothing is refused for them.
Each compile is its own Dynamo region (`isolate_recompiles`), so compiles of many instances of one module
class do not share Dynamo's recompile limit per `forward` (past it Dynamo runs the module as plain torch; its
global cap of 256 still holds).

Its one-graph mode (`torch_ops="refuse"`) holds the strict one-graph `Compiled` (`compiled.py`): the whole
module on Emmy kernels with named axes `B`, `S`, which alone offers `resolve`, `prepare`, `layout`, `runner` and
`follow_weights` (in the default mode each raises a TypeError saying what to use instead).

In both modes the object is called like the module (positional and keyword arguments), a call where torch
tracks gradients runs as torch so training works (Emmy's kernels have no backward; warned once, counted),
a method of the module such as `generate` runs with its `forward` routed through the compiled one,
`records()` gives every resolution record and `record` the one where there is one (or none), and
`explain()` prints what ran where.
"""

from __future__ import annotations

import contextlib
import inspect
import json
import threading
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn

from emmy_core.compiler.backend import GraphState
from emmy_core.compiler.compiled import Compiled, NoGradientsWarning, card_of, check_arguments
from emmy_core.compiler.coverage import GraphReport, render_reports
from emmy_core.compiler.layout import Layout
from emmy_core.compiler.runner import Runner
from emmy_core.evidence.context import PriorArg
from emmy_core.evidence.freeze import FreezesArg
from emmy_core.evidence.resolution import Resolution, ResolutionRecord
from emmy_core.targets.card import Card

MODES = ("run", "refuse")  # torch_ops=: torch runs what Emmy does not lower, or one graph all on Emmy kernels


def _one_graph_only(what: str, instead: str) -> NoReturn:
    raise TypeError(f"{what} belongs to the one-graph mode, emmy_core.compile(..., torch_ops='refuse') (one graph on "
                    f"Emmy kernels with named axes B, S); this model was compiled on the Dynamo path (the default): "
                    f"{instead}")


class CompiledModel:
    """A module compiled to Emmy kernels: call it like the module; `explain()` says what runs where.

    `torch_ops` is its mode: "run" (Dynamo's graphs, torch running what Emmy does not lower) or "refuse" (one
    graph all on Emmy kernels, `one_graph`). Either mode reads its resolution the same way: `records()`, and
    `record` where there is one record or none."""

    def __init__(self, module: nn.Module, card: Card, setting: str, *, run: Any = None,
                 graphs: list[GraphState] | None = None, backend: Any = None, one_graph: Compiled | None = None
                 ) -> None:
        if (one_graph is None) == (run is None):
            raise ValueError("a CompiledModel holds either Dynamo's compiled module (run=) or one graph (one_graph=)")
        self.module = module
        self.card = card
        self.setting = setting
        self.torch_ops = "run" if run is not None else "refuse"
        self.graphs: list[GraphState] = graphs if graphs is not None else []  # Dynamo's graphs (shared with recompiles)
        self._run = run
        self._backend = backend
        self._one = one_graph
        self._forward_original = module.forward  # what a routed method's forward computes (`_routed`)
        self._forward_compiled: Any = None
        self._routing = threading.Lock()
        self._signature = _signature(module)
        self._warned_grad = False
        self.torch_calls = 0  # one-graph mode: calls torch ran because it tracked gradients

    # ---- calling it like the module ----------------------------------------------------------------------------

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self._one is None:  # Dynamo's guards and the backend's groups decide, as for torch.compile
            return self._run(*args, **kwargs)
        inputs = self._bind(args, kwargs)
        if torch.is_grad_enabled() and (any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)
                                        or any(p.requires_grad for p in self.module.parameters())):
            self.torch_calls += 1
            if not self._warned_grad:  # torch keeps the gradients right; the user should know Emmy did not run
                self._warned_grad = True
                warnings.warn(NoGradientsWarning(
                    f"{type(self.module).__name__} was called where torch tracks gradients: torch ran it (Emmy "
                    "computes no gradients); call it under torch.no_grad() to run Emmy's kernels"), stacklevel=2)
            return self._forward_original(*args, **kwargs)
        return self._one(*inputs)

    def _bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[Any]:
        """The one graph's inputs in the order of the module's `forward` parameters, from a call's positional and
        keyword arguments (a TypeError as the module itself would raise for arguments it does not take)."""
        if not kwargs or self._signature is None:
            return list(args)
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TypeError(f"{type(self.module).__name__}.forward: {exc}") from None
        bound.apply_defaults()
        return list(bound.arguments.values())

    def __getattr__(self, name: str) -> Any:
        """The module's own attributes; its methods (`generate`, ...) run with `forward` routed through this compile,
        as `model.forward = torch.compile(model.forward, ...)` would run them."""
        if name.startswith("_") or name in ("module",):
            raise AttributeError(f"{type(self).__name__} has no attribute {name!r}")
        attr = getattr(self.module, name)
        if not (inspect.ismethod(attr) and attr.__self__ is self.module) or name == "forward":
            return attr

        def routed(*args: Any, **kwargs: Any) -> Any:
            with self._routed():
                return attr(*args, **kwargs)

        routed.__name__ = name
        routed.__doc__ = attr.__doc__
        return routed

    @contextlib.contextmanager
    def _routed(self) -> Iterator[None]:
        """The module's `forward` is the compiled one while a method of the module runs (one such method at a
        time; the module's own `forward` is put back after, even when it raises)."""
        with self._routing:
            had = "forward" in self.module.__dict__
            before = self.module.__dict__.get("forward")
            self.module.forward = self._compiled_forward()  # type: ignore[method-assign]
            try:
                yield
            finally:
                if had:
                    self.module.forward = before  # type: ignore[method-assign]
                else:
                    del self.module.forward

    def _compiled_forward(self) -> Callable[..., Any]:
        if self._one is not None:
            return self
        if self._forward_compiled is None:  # the forward itself through the same backend, its graphs reported here
            self._forward_compiled = torch.compile(self._forward_original, backend=self._backend, dynamic=True,
                                                   isolate_recompiles=True)
        return self._forward_compiled  # type: ignore[no-any-return]

    # ---- its resolution, on either path -----------------------------------------------------------------------

    def reports(self) -> list[GraphReport]:
        """The coverage of each graph Dynamo handed over, at the sizes it last ran (none in the one-graph mode,
        where every op is on Emmy kernels or the compile was refused)."""
        return [g.report() for g in self.graphs]

    def records(self) -> list[ResolutionRecord]:
        """Every resolution record: the one graph's, or each Emmy group's (one per group, every size it ran at)."""
        if self._one is not None:
            return [self._one.record]
        return [grp.compiled.record for g in self.graphs for grp in g.live_groups()]

    @property
    def record(self) -> ResolutionRecord:
        """The resolution record where there is one (the one graph's, or the only Emmy group's), or an empty one
        where no group runs on Emmy; with several groups, `records()` gives each."""
        records = self.records()
        if len(records) == 1:
            return records[0]
        if not records:
            return ResolutionRecord(type(self.module).__name__, self.card.name, self.setting)
        raise ValueError(f"{type(self.module).__name__} runs {len(records)} Emmy groups, each with its own record: "
                         "records() gives them, explain() prints them")

    def explain(self, as_json: bool = False, width: int = 120) -> str:
        """The coverage of every graph, then the resolution record of each group on Emmy kernels as a table fitted
        to `width` columns (or JSON); in the one-graph mode, its record."""
        from emmy_core.evidence.render import render_record

        if self._one is not None:
            return self._one.explain(as_json, width)
        groups = [grp for g in self.graphs for grp in g.live_groups()]
        if as_json:
            return json.dumps({"graphs": [r.to_json() for r in self.reports()],
                               "records": [grp.compiled.record.to_json() for grp in groups]},
                              indent=2, sort_keys=True)
        if not self.graphs:
            return (f"{type(self.module).__name__}: Dynamo handed no graph to the emmy backend, so torch runs all of it "
                    "(its forward has no tensor op, or Dynamo skipped it: see its warnings)")
        parts = [render_reports(self.reports())]
        parts += [render_record(grp.compiled.record, None, width) for grp in groups if grp.off is None]
        return "\n\n".join(parts)

    # ---- what only the one-graph mode has: there, or a clear error --------------------------------------------

    @property
    def one_graph(self) -> Compiled:
        """The one graph (`torch_ops="refuse"`): its lowering, builder, runners."""
        if self._one is None:
            _one_graph_only("the one graph", "Dynamo's graphs are in reports() and records()")
        return self._one

    def resolve(self, sizes: Mapping[str, int] | str) -> list[Resolution]:
        """Settles every fork at the model's `sizes` (e.g. `B=8,S=128`) without building (one-graph mode)."""
        if self._one is None:
            _one_graph_only("resolve(sizes)", "each group settles its forks when it first runs at a size: call the "
                            "model at it, or emmy_core.explain(...) to resolve without running")
        return self._one.resolve(sizes)

    def prepare(self, sizes: Mapping[str, int] | str) -> list[Resolution]:
        """Settles every fork at `sizes` with each chosen kernel built (one-graph mode)."""
        if self._one is None:
            _one_graph_only("prepare(sizes)", "each group is built and checked against torch when it first runs at a "
                            "size: call the model at it")
        return self._one.prepare(sizes)

    def layout(self, sizes: Mapping[str, int] | str) -> Layout:
        """Every buffer a call at `sizes` would use, nothing allocated (one-graph mode)."""
        if self._one is None:
            _one_graph_only("layout(sizes)", "each group lays out its own buffers when it first runs at a size")
        return self._one.layout(sizes)

    def runner(self, sizes: Mapping[str, int] | str) -> Runner:
        """The runner at `sizes`, built and allocated (one-graph mode)."""
        if self._one is None:
            _one_graph_only("runner(sizes)", "Dynamo's graphs call each group's runners; call the model")
        return self._one.runner(sizes)

    def follow_weights(self) -> list[str]:
        """Takes in the module's weights changed since they were last read (one-graph mode; every call does it)."""
        if self._one is None:
            _one_graph_only("follow_weights()", "every call reads the module's parameters as graph inputs and "
                            "rebuilds a launch whose weight was edited in place or replaced; there is nothing to take in")
        return self._one.follow_weights()


def _signature(module: nn.Module) -> inspect.Signature | None:
    """The signature of the module's `forward` (None where Python cannot read one)."""
    try:
        return inspect.signature(module.forward)
    except (TypeError, ValueError):
        return None


def compile_graphs(module: nn.Module, example_inputs: Sequence[Any], *, card: str | Card = "local",
                   setting: str = "deploy", tuning_db: Path | str | None = None, freezes: FreezesArg = None,
                   prior: PriorArg = None, library: bool = True, defer: bool = True) -> CompiledModel:
    """`module` through `torch.compile` with the emmy backend for `card` and `setting` with these evidence sources
    (dynamic shapes, its own recompile region), run once on `example_inputs` without gradients so the example's
    sizes are built. Arguments of the wrong kind and an unknown card are refused before Dynamo starts."""
    from emmy_core.compiler import backend as be

    check_arguments(module, prior, False, library)
    the_card = card_of(card)
    graphs: list[GraphState] = []
    backend = collecting(be.emmy_backend(card=the_card, setting=setting, tuning_db=tuning_db, freezes=freezes,
                                         prior=prior, library=library, defer=defer), graphs)
    run = torch.compile(module, backend=backend, dynamic=True, isolate_recompiles=True)
    with torch.no_grad():
        run(*example_inputs)
    return CompiledModel(module, the_card, setting, run=run, graphs=graphs, backend=backend)


def collecting(backend: Any, graphs: list[GraphState]) -> Callable[..., Any]:
    """An emmy `backend` (`emmy_backend(...)`) that appends every graph Dynamo hands it over to `graphs`."""

    def collect(gm: Any, example: Sequence[Any]) -> Any:
        fn = backend(gm, example)
        graphs.append(fn.emmy_graph)
        return fn

    return collect


def compile_collecting(module: nn.Module, backend: Any) -> tuple[Any, list[GraphState]]:
    """`module` through `torch.compile` with an emmy `backend` (`emmy_backend(...)`), dynamic shapes, in its own
    recompile region, and the list every graph Dynamo hands it over is appended to (its `GraphState`)."""
    graphs: list[GraphState] = []
    return torch.compile(module, backend=collecting(backend, graphs), dynamic=True, isolate_recompiles=True), graphs
