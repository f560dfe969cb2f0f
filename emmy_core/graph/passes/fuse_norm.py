"""Fold prologues and epilogues into the row-reduction kernels (rmsnorm, layernorm, softmax).

Prologues: `rmsnorm(a + b, w)` with `a` and `b` of one shape becomes `rmsnorm(a, b, w)`
with the residual prologue: the kernel adds the two, normalises, and also writes the
sum (the residual stream); when the sum has other readers they read a `tap` node naming
that second output. `softmax(x * c)` (or `x / c`) becomes `softmax(x, scale=c)`.
Epilogues: an activation (relu, silu, gelu, gelu_tanh) or a scale by a number that is
the only reader of a norm's result runs inside the norm, before its store.
Offers `cut:prologue` (the add or scale as its own kernel, then the plain norm) and
`cut:epilogue` (the plain norm, then the steps as an elementwise kernel).
"""

from __future__ import annotations

from dataclasses import replace

from emmy_core.graph.ops import Graph, Node, prune, toposort
from emmy_core.graph.passes import Pass, to_fixpoint

SEAM = "prologue"
EPILOGUE_SEAM = "epilogue"
_ROW_OPS = ("rmsnorm", "layernorm", "softmax")


def row_step(e: Node) -> str | None:
    """The row-epilogue step that applies elementwise node `e` to its only tensor operand, or None."""
    if e.op in ("relu", "silu"):
        return e.op
    if e.op == "gelu":
        return {"none": "gelu", "tanh": "gelu_tanh"}.get(str(e.attr("approximate")))
    scalar = e.attr("scalar")
    if isinstance(scalar, float) and len(e.inputs) == 1:
        if e.op == "mul":
            return f"scale:{scalar!r}"
        if e.op == "div" and not e.attr("scalar_first") and scalar != 0.0:
            return f"scale:{1.0 / scalar!r}"
    return None


def _fold_epilogue(graph: Graph, n: Node, users: dict[str, list[str]], index: dict[str, Node]) -> Graph | None:
    readers = users[n.name]
    if len(readers) != 1 or readers[0] == "<output>":
        return None
    e = index[readers[0]]
    step = row_step(e)
    if step is None or e.type != n.type or e.inputs != (n.name,):
        return None
    fused = Node(e.name, n.op, n.inputs, n.type,
                 (*(a for a in n.attrs if a[0] != "epilogue"), ("epilogue", (*tuple(n.attr("epilogue") or ()), step))),
                 n.source)
    nodes = []
    for m in graph.nodes:
        if m.name == n.name:
            continue
        if m.name == e.name:
            m = fused
        elif m.op == "tap" and m.inputs == (n.name,):
            m = replace(m, inputs=(e.name,))
        nodes.append(m)
    return prune(replace(graph, nodes=toposort(nodes)))


def _fold_once(graph: Graph) -> Graph | None:
    index, users = graph.index(), graph.users()
    for n in graph.nodes:
        if n.op in _ROW_OPS:
            folded = _fold_epilogue(graph, n, users, index)
            if folded is not None:
                return folded
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
            fused = Node(n.name, "softmax", mul.inputs, n.type, (*n.attrs, ("scale", scale)), n.source)
            nodes = [fused if m.name == n.name else m for m in graph.nodes if m.name != mul.name]
            return prune(replace(graph, nodes=toposort(nodes)))
    return None


run = to_fixpoint(_fold_once)


PASS = Pass("fuse_norm", run, (f"cut:{SEAM}", f"cut:{EPILOGUE_SEAM}"),
            "residual add into rmsnorm; scale into softmax; activations and scales after a norm into it")
