"""`emmy_core.compile(...)`'s default path: the direct API on the emmy Dynamo backend (`torch_ops="run"`).

The module is compiled with `torch.compile(module, backend=emmy_backend(...), dynamic=True)` (the same
partition, translation, passes, lowering, resolver and check against torch as `backend="emmy"`) and
called once on the example inputs, which builds the example's sizes. Ops Emmy does not lower run as
torch runs them; nothing is refused for them. Each compile is its own Dynamo region
(`isolate_recompiles`), so compiles of many instances of one module class do not share Dynamo's recompile
limit per `forward` (past it Dynamo runs the module as plain torch; its global cap of 256 still holds).

`CompiledGraphs` is called like the module (without gradients, as `Compiled` is); `explain()` prints
the coverage of every graph Dynamo handed over and the resolution record of every group that runs on
Emmy kernels, `reports()` and `records()` give them as data. What the one-graph `Compiled`
(`torch_ops="refuse"`) offers on the named axes `B`, `S` (`resolve`, `prepare`, `layout`, `runner`,
one `record`, `follow_weights`) has no meaning here: each raises a TypeError saying what to use.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn

import torch
from torch import nn

from emmy_core.compiler.backend import GraphState
from emmy_core.compiler.compiled import NoGradientsWarning, card_of, check_arguments
from emmy_core.compiler.coverage import GraphReport, render_reports
from emmy_core.evidence.context import PriorArg
from emmy_core.evidence.freeze import FreezesArg
from emmy_core.evidence.resolution import ResolutionRecord
from emmy_core.targets.card import Card


def _one_graph_only(what: str, instead: str) -> NoReturn:
    raise TypeError(f"{what} belongs to emmy_core.compile(..., torch_ops='refuse') (one graph on Emmy kernels with "
                    f"named axes B, S); this model was compiled on the Dynamo path (the default): {instead}")


class CompiledGraphs:
    """A module compiled through the emmy Dynamo backend: call it like the module; `explain()` says what runs where."""

    def __init__(self, module: nn.Module, run: Any, graphs: list[GraphState], card: Card, setting: str) -> None:
        self.module = module
        self.card = card
        self.setting = setting
        self._run = run
        self.graphs = graphs  # every graph Dynamo handed over for this module, shared with later recompiles
        self._warned_no_grad = False

    def __call__(self, *inputs: Any) -> Any:
        if not self._warned_no_grad and torch.is_grad_enabled() and (
                any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)
                or any(p.requires_grad for p in self.module.parameters())):
            self._warned_no_grad = True
            warnings.warn(NoGradientsWarning(
                f"{type(self.module).__name__}: Emmy computes no gradients; this call runs without them (call it "
                "under torch.no_grad() or torch.inference_mode() to say so)"), stacklevel=2)
        with torch.no_grad():
            return self._run(*inputs)

    def reports(self) -> list[GraphReport]:
        """The coverage of each graph of this module at the sizes it last ran."""
        return [g.report() for g in self.graphs]

    def records(self) -> list[ResolutionRecord]:
        """The resolution record of each group compiled to Emmy kernels (one per group, every size it ran at)."""
        return [grp.compiled.record for g in self.graphs for grp in g.live_groups()]

    def explain(self, as_json: bool = False, width: int = 120) -> str:
        """The coverage of every graph, then the resolution record of each group on Emmy kernels as a table fitted
        to `width` columns (or JSON)."""
        from emmy_core.evidence.render import render_record

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

    # ---- what only the one-graph path has: a clear error, not an AttributeError ------------------------------

    @property
    def record(self) -> ResolutionRecord:
        """One record for the whole model is the one-graph path's; here each Emmy group has its own."""
        _one_graph_only("one resolution record for the whole model", "records() gives each Emmy group's, explain() "
                        "prints them")

    def resolve(self, sizes: Mapping[str, int] | str) -> NoReturn:
        """Sizes by named axes are the one-graph path's; here a group settles its forks when it first runs a size."""
        _one_graph_only("resolve(sizes)", "each group settles its forks when it first runs at a size: call the model "
                        "at it, or emmy_core.explain(...) to resolve without running")

    def prepare(self, sizes: Mapping[str, int] | str) -> NoReturn:
        """Sizes by named axes are the one-graph path's; here a group is built when it first runs a size."""
        _one_graph_only("prepare(sizes)", "each group is built and checked against torch when it first runs at a "
                        "size: call the model at it")

    def layout(self, sizes: Mapping[str, int] | str) -> NoReturn:
        """One buffer layout for the whole model is the one-graph path's; here each group allocates its own."""
        _one_graph_only("layout(sizes)", "each group lays out its own buffers when it first runs at a size")

    def runner(self, sizes: Mapping[str, int] | str) -> NoReturn:
        """One runner per size is the one-graph path's; here Dynamo's graphs call each group's runners."""
        _one_graph_only("runner(sizes)", "Dynamo's graphs call each group's runners; call the model")

    def follow_weights(self) -> NoReturn:
        """Following weights on demand is the one-graph path's; here every call reads them as graph inputs."""
        _one_graph_only("follow_weights()", "every call reads the module's parameters as graph inputs and rebuilds "
                        "a launch whose weight was edited in place or replaced; there is nothing to take in")


def compile_graphs(module: nn.Module, example_inputs: Sequence[Any], *, card: str | Card = "local",
                   setting: str = "deploy", tuning_db: Path | str | None = None, freezes: FreezesArg = None,
                   prior: PriorArg = None) -> CompiledGraphs:
    """`module` through `torch.compile` with the emmy backend for `card` and `setting` with these evidence sources
    (dynamic shapes, its own recompile region), run once on `example_inputs` without gradients so the example's
    sizes are built. Arguments of the wrong kind and an unknown card are refused before Dynamo starts."""
    from emmy_core.compiler import backend as be

    check_arguments(module, prior, False)
    the_card = card_of(card)
    run, graphs = compile_collecting(module, be.emmy_backend(card=the_card, setting=setting, tuning_db=tuning_db,
                                                             freezes=freezes, prior=prior))
    with torch.no_grad():
        run(*example_inputs)
    return CompiledGraphs(module, run, graphs, the_card, setting)


def compile_collecting(module: nn.Module, backend: Any) -> tuple[Any, list[GraphState]]:
    """`module` through `torch.compile` with an emmy `backend` (`emmy_backend(...)`), dynamic shapes, in its own
    recompile region, and the list every graph Dynamo hands it over is appended to (its `GraphState`)."""
    graphs: list[GraphState] = []

    def collect(gm: Any, example: Sequence[Any]) -> Any:
        fn = backend(gm, example)
        graphs.append(fn.emmy_graph)
        return fn

    return torch.compile(module, backend=collect, dynamic=True, isolate_recompiles=True), graphs
