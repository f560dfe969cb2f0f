"""Pattern-match the decomposed RMSNorm into the rmsnorm family.

Matches `x * rsqrt(mean(x*x | x**2, -1, keepdim) + eps) * w` in any operand order,
with `w` a vector over the last axis, when every intermediate feeds only the next
step. The match becomes one `rmsnorm(x, w, eps)` node, which lowers to the same
kernel as `nn.RMSNorm`. Offers no fork (the rewrite is one kernel either way).
"""

from __future__ import annotations

from dataclasses import replace

from emmy_core.graph.ops import Graph, Node, prune, toposort
from emmy_core.graph.passes import Pass


def _single(users: dict[str, list[str]], name: str) -> bool:
    return len(users[name]) == 1


def _squares(node: Node, x: str) -> bool:
    if node.op == "mul" and node.inputs == (x, x):
        return True
    return node.op == "pow" and node.inputs == (x,) and node.attr("scalar") == 2.0 and not node.attr("scalar_first")


def _match(y: Node, index: dict[str, Node], users: dict[str, list[str]]) -> tuple[str, str, float, list[str]] | None:
    """(x, w, eps, intermediates) when `y` is the last mul of a decomposed RMSNorm."""
    if y.op != "mul" or len(y.inputs) != 2:
        return None
    hidden = y.type.shape[-1]
    for p_name, w_name in (y.inputs, y.inputs[::-1]):
        p, w = index[p_name], index[w_name]
        if w.type.shape != (hidden,) or p.op != "mul" or len(p.inputs) != 2 or not _single(users, p_name):
            continue
        for x_name, r_name in (p.inputs, p.inputs[::-1]):
            r = index[r_name]
            if r.op != "rsqrt" or not _single(users, r_name):
                continue
            a = index[r.inputs[0]]
            eps = a.attr("scalar")
            if a.op != "add" or len(a.inputs) != 1 or not isinstance(eps, float) or not _single(users, a.name):
                continue
            m = index[a.inputs[0]]
            if m.op != "mean" or not m.attr("keepdim") or not _single(users, m.name):
                continue
            sq = index[m.inputs[0]]
            if not _squares(sq, x_name) or not _single(users, sq.name):
                continue
            x = index[x_name]
            if x.type.shape[-1] != hidden or x.type != y.type:
                continue
            return x_name, w_name, eps, [p_name, r_name, a.name, m.name, sq.name]
    return None


def run(graph: Graph) -> Graph:
    index, users = graph.index(), graph.users()
    replaced: dict[str, Node] = {}
    for n in graph.nodes:
        hit = _match(n, index, users)
        if hit is not None:
            x, w, eps, _ = hit
            replaced[n.name] = Node(n.name, "rmsnorm", (x, w), n.type, (("eps", eps),), n.source)
    if not replaced:
        return graph
    nodes = [replaced.get(n.name, n) for n in graph.nodes]
    return prune(replace(graph, nodes=toposort(nodes)))


PASS = Pass("match_rmsnorm", run, (), "x * rsqrt(mean(x*x) + eps) * w -> rmsnorm")
