"""Fold elementwise chains that follow a matmul into its epilogue.

A matmul whose only reader is an elementwise op absorbs it when the op is one of
the epilogue steps the matmul family has (`emmy_core.ir.builders.EPILOGUE_STEPS`):
`+ v[N]` (bias), relu / gelu / gelu_tanh / silu, `+ r` of the output's shape
(residual), `* c` or `/ c` for a number (scale), `* g` of the output's shape (the
SwiGLU gate product). Steps that read an input appear at most once. A fused matmul
is offered to its own reader in turn (one sweep in graph order), so
`silu(x @ Wg) * (x @ Wu)` becomes one matmul with epilogue (silu, mul). Offers `cut:epilogue`: the plain matmul followed by one elementwise
kernel of the epilogue.
"""

from __future__ import annotations

from dataclasses import replace

from emmy_core.graph.ops import Graph, Node, prune, toposort
from emmy_core.graph.passes import Pass

SEAM = "epilogue"
_ACTS = {"relu": "relu", "silu": "silu"}


def step_for(e: Node, m: Node, other: Node | None) -> str | None:
    """The epilogue step that applies `e` to the output of matmul `m` (other: e's other operand)."""
    if e.type != m.type:
        return None
    steps = tuple(m.attr("epilogue") or ())
    if e.op in _ACTS:
        return _ACTS[e.op]
    if e.op == "gelu":
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(str(e.attr("approximate")))
    scalar = e.attr("scalar")
    if isinstance(scalar, float):
        if e.op == "mul":
            return f"scale:{scalar!r}"
        if e.op == "div" and not e.attr("scalar_first") and scalar != 0.0:
            return f"scale:{1.0 / scalar!r}"
        return None
    if other is None or other.type.dtype != m.type.dtype:
        return None
    if e.op == "add" and other.type.shape == m.type.shape[-1:] and "bias" not in steps:
        return "bias"
    if e.op == "add" and other.type.shape == m.type.shape and "residual" not in steps:
        return "residual"
    if e.op == "mul" and other.type.shape == m.type.shape and "mul" not in steps:
        return "mul"
    return None


def run(graph: Graph) -> Graph:
    """One sweep in graph order, folding each elementwise op into the matmul it reads when it can.

    What the sweep folds is what folding the first foldable op and starting again would fold (a fold
    at `e` removes a matmul only `e` read and turns `e` into a matmul, so it opens no fold before `e`),
    but in time linear in the graph: the index and the readers are updated in place, and the graph is
    ordered and pruned once at the end.
    """
    index, users = graph.index(), graph.users()
    removed: set[str] = set()
    for name in [n.name for n in graph.nodes]:
        e = index[name]
        if e.op not in ("add", "mul", "div", "relu", "silu", "gelu"):
            continue
        cands = [i for i in dict.fromkeys(e.inputs) if index[i].op == "matmul" and users[i] == [e.name]]
        # prefer the matmul that already has an epilogue (the SwiGLU gate), then the first operand
        cands.sort(key=lambda i: not index[i].attr("epilogue"))
        for m_name in cands:
            m = index[m_name]
            others = [i for i in e.inputs if i != m_name]
            other = index[others[0]] if others else None
            step = step_for(e, m, other)
            if step is None:
                continue
            index[e.name] = Node(e.name, "matmul", m.inputs + ((other.name,) if other is not None and
                                                             not step.startswith("scale") else ()),
                                 m.type, (("b_transposed", m.attr("b_transposed")),
                                          ("epilogue", (*tuple(m.attr("epilogue") or ()), step))), m.source)
            for i in m.inputs:  # the fused node reads what the matmul read
                readers = users[i]
                readers[readers.index(m_name)] = e.name
            removed.add(m_name)
            del users[m_name]
            break
    nodes = [index[n.name] for n in graph.nodes if n.name not in removed]
    return prune(replace(graph, nodes=toposort(nodes)))


PASS = Pass("fuse_epilogue", run, (f"cut:{SEAM}",), "bias, activation, residual, scale, gate mul into the matmul")
