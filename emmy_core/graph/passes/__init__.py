"""Graph passes: each module rewrites a graph into a graph and declares the forks it offers.

A pass is a `Pass(name, run, forks)`: `run(graph) -> graph` is pure, and `forks` lists
the structural decisions (`cut:<seam>`) its fused nodes offer to the compile.
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


def to_fixpoint(fold_once: Callable[[Graph], Graph | None]) -> Callable[[Graph], Graph]:
    """A pass that applies `fold_once` until it finds nothing more to fold (it returns None)."""

    def run(graph: Graph) -> Graph:
        while (folded := fold_once(graph)) is not None:
            graph = folded
        return graph

    return run
