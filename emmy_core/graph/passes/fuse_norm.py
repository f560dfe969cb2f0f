"""Fold prologues into the row-reduction kernels.

`rmsnorm(a + b, w)` with `a` and `b` of one shape becomes `rmsnorm(a, b, w)` with the
residual prologue: the kernel adds the two, normalises, and also writes the sum (the
residual stream). When the sum has other readers they read a `tap` node naming that
second output. `softmax(x * c)` (or `x / c`) becomes `softmax(x, scale=c)`.
Offers `cut:prologue`: the add as its own elementwise kernel, then the plain norm.
"""

from __future__ import annotations

from dataclasses import replace

from emmy_core.graph.ops import Graph, Node, prune, toposort
from emmy_core.graph.passes import Pass

SEAM = "prologue"


def _fold_once(graph: Graph) -> Graph | None:
    index, users = graph.index(), graph.users()
    for n in graph.nodes:
        if n.op == "rmsnorm" and not n.attr("prologue"):
            add = index[n.inputs[0]]
            if add.op != "add" or len(add.inputs) != 2:
                continue
            a, b = (index[i] for i in add.inputs)
            if not (a.type == b.type == add.type):
                continue
            fused = Node(n.name, "rmsnorm", (a.name, b.name, n.inputs[1]), n.type,
                         (*n.attrs, ("prologue", ("residual",))), n.source)
            nodes = [fused if m.name == n.name else m for m in graph.nodes if m.name != add.name]
            if users[add.name] != [n.name]:
                nodes.append(Node(add.name, "tap", (n.name,), add.type, (("output", "h"),), add.source))
            return prune(replace(graph, nodes=toposort(nodes)))
        if n.op == "softmax" and n.attr("scale") is None:
            mul = index[n.inputs[0]]
            scalar = mul.attr("scalar")
            if users[mul.name] != [n.name] or not isinstance(scalar, float):
                continue
            if mul.op == "mul":
                scale = scalar
            elif mul.op == "div" and not mul.attr("scalar_first") and scalar != 0.0:
                scale = 1.0 / scalar
            else:
                continue
            fused = Node(n.name, "softmax", mul.inputs, n.type, (("scale", scale),), n.source)
            nodes = [fused if m.name == n.name else m for m in graph.nodes if m.name != mul.name]
            return prune(replace(graph, nodes=toposort(nodes)))
    return None


def run(graph: Graph) -> Graph:
    while True:
        folded = _fold_once(graph)
        if folded is None:
            return graph
        graph = folded


PASS = Pass("fuse_norm", run, (f"cut:{SEAM}",), "residual add into rmsnorm; scale into softmax")
