"""Graph passes: each module rewrites a graph into a graph and declares the forks it offers.

A pass is a `Pass(name, run, forks)`: `run(graph) -> graph` is pure, and `forks` lists
the structural decisions (`cut:<seam>`) its fused nodes offer to the compile. A pass runs in
time linear in the graph (one sweep, the graph sorted once; `tests/faults/test_compile_scaling.py`).
The order they run in is the one list in `emmy_core.graph.pipeline`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from emmy_core.graph.ops import Graph


@dataclass(frozen=True)
class Pass:
    name: str
    run: Callable[[Graph], Graph]
    forks: tuple[str, ...] = ()
    doc: str = ""
