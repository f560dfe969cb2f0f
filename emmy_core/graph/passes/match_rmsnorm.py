"""Pattern-match the decomposed RMSNorm into the rmsnorm family.

Matches `x * rsqrt(mean(x*x | x**2, -1, keepdim) + eps) * w` in any operand order,
with `w` a vector over the last axis, when every intermediate feeds only the next
step. The match becomes one `rmsnorm(x, w, eps)` node, which lowers to the same
kernel as `nn.RMSNorm`. Offers no fork (the rewrite is one kernel either way).

Hugging Face's 16-bit form, `w * (xf * rsqrt(mean(xf**2, -1, keepdim) + eps)).to(f16)` with
`xf = x.to(f32)`, matches too: the casts fold into the kernel (it reads and writes f16 and
computes in f32 anyway), and the node says `weight_after_round`, so the kernel rounds the
normalised row to f16 before the weight multiplies it, as torch does.
"""

from __future__ import annotations

from dataclasses import replace

from emmy_core.graph.ops import Graph, Node, TensorType, prune, toposort
from emmy_core.graph.passes import Pass


def _single(users: dict[str, list[str]], name: str) -> bool:
    return len(users[name]) == 1


def _squares(node: Node, x: str) -> bool:
    if node.op == "mul" and node.inputs == (x, x):
        return True
    return node.op == "pow" and node.inputs == (x,) and node.attr("scalar") == 2.0 and not node.attr("scalar_first")


def _widened(node: Node, index: dict[str, Node], dtype: str) -> bool:
    """Whether `node` is a cast to f32 of a value of `dtype` (a 16-bit type) and the same shape."""
    return node.op == "cast" and node.type.dtype == "f32" and dtype != "f32" and \
        index[node.inputs[0]].type == TensorType(node.type.shape, dtype)


def _match(y: Node, index: dict[str, Node], users: dict[str, list[str]]) -> tuple[str, str, float, bool] | None:
    """(x, w, eps, weight_after_round) when `y` is the last mul of a decomposed RMSNorm."""
    if y.op != "mul" or len(y.inputs) != 2:
        return None
    hidden = y.type.shape[-1]
    for p_name, w_name in (y.inputs, y.inputs[::-1]):
        p, w = index[p_name], index[w_name]
        if w.type != TensorType((hidden,), y.type.dtype) or not _single(users, p_name):
            continue
        rounded = p.op == "cast" and y.type.dtype != "f32" and index[p.inputs[0]].type == TensorType(y.type.shape, "f32")
        if rounded:  # the 16-bit form: the normalised row is computed in f32 and cast back before the weight
            p_name = p.inputs[0]
            p = index[p_name]
            if not _single(users, p_name):
                continue
        if p.op != "mul" or len(p.inputs) != 2:
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
            if rounded:
                if not _widened(x, index, y.type.dtype):
                    continue
                x_name, x = x.inputs[0], index[x.inputs[0]]
            if x.type.shape[-1] != hidden or x.type != y.type:
                continue
            return x_name, w_name, eps, rounded
    return None


def run(graph: Graph) -> Graph:
    index, users = graph.index(), graph.users()
    replaced: dict[str, Node] = {}
    for n in graph.nodes:
        hit = _match(n, index, users)
        if hit is not None:
            x, w, eps, rounded = hit
            attrs: tuple[tuple[str, float | bool], ...] = (("eps", eps),) + ((("weight_after_round", True),)
                                                                            if rounded else ())
            replaced[n.name] = Node(n.name, "rmsnorm", (x, w), n.type, attrs, n.source)
    if not replaced:
        return graph
    nodes = [replaced.get(n.name, n) for n in graph.nodes]
    return prune(replace(graph, nodes=toposort(nodes)))


PASS = Pass("match_rmsnorm", run, (), "x * rsqrt(mean(x*x) + eps) * w -> rmsnorm (also through f16 -> f32 -> f16 casts)")
