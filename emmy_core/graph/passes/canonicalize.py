"""Canonical forms the later passes match on.

`linear(x, w[, b])` becomes `matmul(x, w, b_transposed)` followed by `add(., b)` (the
bias add is an ordinary elementwise op until `fuse_epilogue` folds it back); a
`matmul(a, transpose(b))` that swaps the last two axes reads `b` in place with
`b_transposed`. Every matmul states `b_transposed`. Offers no fork.
"""

from __future__ import annotations

from dataclasses import replace

from emmy_core.graph.ops import Graph, Node, prune, toposort
from emmy_core.graph.passes import Pass


def _swaps_last_two(node: Node) -> bool:
    perm = node.attr("perm")
    if node.op not in ("transpose", "permute") or not isinstance(perm, tuple) or len(perm) < 2:
        return False
    r = len(perm)
    return perm == (*range(r - 2), r - 1, r - 2)


def run(graph: Graph) -> Graph:
    index = graph.index()
    taken = set(index)
    out: list[Node] = []
    for n in graph.nodes:
        if n.op == "linear":
            mm_name = n.name if len(n.inputs) == 2 else _fresh(f"{n.name}_mm", taken)
            mm = Node(mm_name, "matmul", n.inputs[:2], n.type, (("b_transposed", True), ("epilogue", ())),
                      n.source)
            out.append(mm)
            if len(n.inputs) == 3:
                out.append(Node(n.name, "add", (mm_name, n.inputs[2]), n.type, (), n.source))
            continue
        if n.op == "matmul" and n.attr("b_transposed") is None:
            a, b = n.inputs
            if _swaps_last_two(index[b]):
                n = replace(n, inputs=(a, index[b].inputs[0]))
                n = n.with_attrs(b_transposed=True, epilogue=())
            else:
                n = n.with_attrs(b_transposed=False, epilogue=())
        out.append(n)
    return prune(replace(graph, nodes=toposort(out)))


def _fresh(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        k += 1
        name = f"{base}_{k}"
    taken.add(name)
    return name


PASS = Pass("canonicalize", run, (), "linear -> matmul + bias add; transposed right operands read in place")
