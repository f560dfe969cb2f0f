"""`emmy_core.compile(..., torch_ops="run")`: the direct API on the Dynamo backend's path.

The module is compiled with `torch.compile(module, backend=emmy_backend(...), dynamic=True)` (the same
partition, translation, passes, lowering, resolver and check against torch as `backend="emmy"`) and
called once on the example inputs, which builds the example's sizes. Ops Emmy does not lower run as
torch runs them; nothing is refused for them. `CompiledGraphs` is called like the module (without
gradients, as `Compiled` is) and its `explain()` prints the coverage of every graph Dynamo handed over
and the resolution record of every group that runs on Emmy kernels.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from emmy_core.compiler.backend import GraphReport, GraphState, render_reports
from emmy_core.compiler.compiled import NoGradientsWarning


class CompiledGraphs:
    """A module compiled through the emmy Dynamo backend: call it like the module; `explain()` says what runs where."""

    def __init__(self, module: nn.Module, run: Any, graphs: list[GraphState]) -> None:
        self.module = module
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

    def explain(self, as_json: bool = False) -> str:
        """The coverage of every graph, then the resolution record of each group on Emmy kernels (or JSON)."""
        from emmy_core.evidence.render import render_record

        groups = [(g.name, grp) for g in self.graphs for grp in g.live_groups()]
        if as_json:
            return json.dumps({"graphs": [r.to_json() for r in self.reports()],
                               "records": [grp.compiled.record.to_json() for _, grp in groups]},
                              indent=2, sort_keys=True)
        parts = [render_reports(self.reports())]
        parts += [render_record(grp.compiled.record) for _, grp in groups if grp.off is None]
        return "\n\n".join(parts)


def compile_graphs(module: nn.Module, example_inputs: Sequence[Any], **options: Any) -> CompiledGraphs:
    """`module` through `torch.compile` with the emmy backend (`options` as `emmy_backend` takes them, dynamic
    shapes), run once on `example_inputs` without gradients so the example's sizes are built."""
    from emmy_core.compiler import backend as be

    if not isinstance(module, nn.Module):
        raise TypeError(f"compile takes a torch.nn.Module, got {type(module).__name__} (wrap a function in a "
                        "Module's forward)")
    graphs: list[GraphState] = []
    inner = be.emmy_backend(**options)

    def collect(gm: Any, example: Sequence[Any]) -> Any:
        fn = inner(gm, example)
        graphs.append(fn.emmy_graph)
        return fn

    run = torch.compile(module, backend=collect, dynamic=True)
    with torch.no_grad():
        run(*example_inputs)
    return CompiledGraphs(module, run, graphs)
