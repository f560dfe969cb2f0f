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
from emmy_core.graph.passes import Pass

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


class _Folder:
    """The graph being folded, kept as an index and its readers updated in place (no re-sort per fold)."""

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.index, self.users = graph.index(), graph.users()
        self.removed: set[str] = set()
        self.taps: list[str] = []  # taps made by prologue folds, placed by the final sort

    def _reread(self, values: tuple[str, ...], old: str, new: str) -> None:
        """Each of `values` (once per occurrence) is now read by `new` instead of `old`."""
        for v in values:
            readers = self.users[v]
            readers[readers.index(old)] = new

    def _remove(self, name: str) -> None:
        self.removed.add(name)
        del self.users[name]

    def epilogue(self, n: Node) -> bool:
        """Folds the activation or scale that is `n`'s only reader into the norm `n`."""
        readers = self.users[n.name]
        if len(readers) != 1 or readers[0] == "<output>":
            return False
        e = self.index[readers[0]]
        step = row_step(e)
        if step is None or e.type != n.type or e.inputs != (n.name,):
            return False
        self.index[e.name] = Node(
            e.name, n.op, n.inputs, n.type,
            (*(a for a in n.attrs if a[0] != "epilogue"), ("epilogue", (*tuple(n.attr("epilogue") or ()), step))),
            n.source)
        self._reread(n.inputs, n.name, e.name)
        self._remove(n.name)
        return True

    def prologue(self, n: Node) -> bool:
        """Folds the residual add of the same shape that feeds rmsnorm `n` into it (a tap keeps the sum)."""
        add = self.index[n.inputs[0]]
        if add.op != "add" or len(add.inputs) != 2:
            return False
        a, b = (self.index[i] for i in add.inputs)
        if not (a.type == b.type == add.type):
            return False
        self.index[n.name] = Node(n.name, "rmsnorm", (a.name, b.name, n.inputs[1]), n.type,
                                  (*n.attrs, ("prologue", ("residual",))), n.source)
        self._reread(add.inputs, add.name, n.name)
        others = [u for u in self.users[add.name] if u != n.name]
        self.removed.add(add.name)
        if others:  # the sum's other readers read the norm's second output
            self.index[add.name] = Node(add.name, "tap", (n.name,), add.type, (("output", "h"),), add.source)
            self.users[add.name] = others
            self.users[n.name].append(add.name)
            self.taps.append(add.name)
        else:
            del self.users[add.name]
        return True

    def softmax_scale(self, n: Node) -> bool:
        """Folds the multiply (or divide) by a number that only softmax `n` reads into it."""
        mul = self.index[n.inputs[0]]
        scalar = mul.attr("scalar")
        if self.users[mul.name] != [n.name] or not isinstance(scalar, float):
            return False
        if mul.op == "mul":
            scale = scalar
        elif mul.op == "div" and not mul.attr("scalar_first") and scalar != 0.0:
            scale = 1.0 / scalar
        else:
            return False
        self.index[n.name] = Node(n.name, "softmax", mul.inputs, n.type, (*n.attrs, ("scale", scale)), n.source)
        self._reread(mul.inputs, mul.name, n.name)
        self._remove(mul.name)
        return True

    def fold_at(self, name: str) -> bool:
        """One fold at node `name` (its epilogue first), as the passes' order of preference has it."""
        n = self.index[name]
        if n.op in _ROW_OPS and self.epilogue(n):
            return True
        if n.op == "rmsnorm" and not n.attr("prologue"):
            return self.prologue(n)
        if n.op == "softmax" and n.attr("scale") is None:
            return self.softmax_scale(n)
        return False


def run(graph: Graph) -> Graph:
    """One sweep in graph order, folding at each node until nothing more folds there.

    A fold at a node removes only values that node alone read, or moves the norm's result to
    its only reader further on, so it opens no fold at an earlier node: the sweep folds what
    folding the first foldable node and starting again would, in time linear in the graph
    (the graph is ordered and pruned once, at the end).
    """
    folder = _Folder(graph)
    for n in graph.nodes:
        while n.name not in folder.removed and folder.fold_at(n.name):
            pass
    nodes = [folder.index[n.name] for n in graph.nodes if n.name not in folder.removed]
    nodes += [folder.index[t] for t in folder.taps]
    return prune(replace(graph, nodes=toposort(nodes)))


PASS = Pass("fuse_norm", run, (f"cut:{SEAM}", f"cut:{EPILOGUE_SEAM}"),
            "residual add into rmsnorm; scale into softmax; activations and scales after a norm into it")
