"""Gather the elementwise ops left over into elementwise kernels, one per chain.

Every elementwise op still in the graph becomes an `elementwise` node whose `expr`
is text in the elementwise language of `emmy_core.ir.builders` over inputs named
`x0, x1, ...`; an elementwise producer read only by the chain, of the chain's own
shape, is inlined. Each input is `full` (the output's shape), `col` (a vector over
the last axis), `tail` (the output's trailing axes, leading ones 1: rotary's cos and
sin over the sequence and the head dimension) or `row` (one value per row, the last
axis 1). A half of the last axis (`half`, written `lo(x)` / `hi(x)`) and the join of
two halves (`cat`, `cat(a, b)`) are inlined too, with the elementwise ops between them
at half width: rotary's `rotate_half` becomes part of its chain, read in place, instead
of slices and a concatenation materialised by torch. A transpose or permute read only by
the chain (keeping the last axis last) is read in place through its permutation (`perms`:
rotary's q and k come from a projection as [B, S, heads, D] seen as [B, heads, S, D]).
Offers no fork.
"""

from __future__ import annotations

from dataclasses import replace

from emmy_core.graph.errors import UnsupportedOp
from emmy_core.graph.ops import ELEMENTWISE_OPS, HALF_OPS, Dim, Graph, Node, prune, toposort
from emmy_core.graph.passes import Pass

_FN = {"neg": "neg", "exp": "exp", "rsqrt": "rsqrt", "relu": "relu", "silu": "silu", "tanh": "tanh",
       "sigmoid": "sigmoid", "sqrt": "sqrt", "abs": "abs", "log": "log", "erf": "erf"}
_SYM = {"add": "+", "sub": "-", "mul": "*", "div": "/"}


def _num(v: float) -> str:
    text = repr(float(v))
    if text in ("inf", "-inf", "nan"):
        raise ValueError(f"constant {text} has no spelling in the elementwise language")
    return f"({text})" if text.startswith("-") else text


def bcast_kind(shape: tuple[Dim, ...], out: tuple[Dim, ...]) -> str | None:
    """How an input of `shape` broadcasts to `out`: full, col, row, or None when none of them."""
    if shape == out:
        return "full"
    if shape == out[-1:] or (len(shape) <= len(out) and all(d == 1 for d in shape[:-1]) and
                             shape[-1:] == out[-1:]):
        return "col"  # [C], [1, C] or [1, 1, 1, C] against [..., C] (a rotary's cos at length 1)
    if len(shape) == len(out) and shape[-1] == 1 and shape[:-1] == out[:-1]:
        return "row"
    lead = 0
    while lead < len(shape) - 1 and shape[lead] == 1:
        lead += 1
    if 2 <= len(shape) - lead < len(out) and shape[lead:] == out[len(out) - len(shape) + lead:]:
        return "tail"
    return None


CHAIN_OPS = ELEMENTWISE_OPS | HALF_OPS


def _fits(node: Node, out: Node) -> bool:
    """Whether `node`'s value can be computed inside `out`'s chain: the same rows, the same or half the last axis
    (the halves meet again at a `cat` inside the chain; a lowering refuses a chain where they do not)."""
    a, b = node.type, out.type
    if a == b:
        return True
    return a.dtype == b.dtype and a.shape[:-1] == b.shape[:-1] and isinstance(b.shape[-1], int) \
        and a.shape[-1] in (b.shape[-1], b.shape[-1] // 2)


class _Chain:
    def __init__(self, out: Node, index: dict[str, Node], users: dict[str, list[str]]) -> None:
        self.out, self.index, self.users = out, index, users
        self.leaves: dict[str, int] = {}  # leaf value -> its number, in order of first use
        self.inlined: list[str] = []
        self.perms: dict[str, tuple[int, ...]] = {}  # leaf value read through a permutation -> the permutation

    def leaf(self, name: str) -> str:
        return f"x{self.leaves.setdefault(name, len(self.leaves))}"

    def read_permutes(self) -> None:
        """Once the chain is built: each leaf that is a transpose or permute read by nothing but this chain, of a
        value read by nothing but it, keeping the last axis last, is replaced by that value read through the
        permutation (same input number), so the permuted copy is never made."""
        mine = {*self.inlined, self.out.name}
        leaves: dict[str, int] = {}
        for leaf, i in self.leaves.items():
            node = self.index[leaf]
            perm = node.attr("perm")
            source = node.inputs[0] if node.inputs else ""
            if node.op in ("transpose", "permute") and isinstance(perm, tuple) and node.type == self.out.type \
                    and perm[-1] == len(perm) - 1 and perm != tuple(range(len(perm))) \
                    and set(self.users[leaf]) <= mine and self.users[source] == [leaf] and source not in self.leaves:
                leaves[source] = i
                self.perms[source] = perm
            else:
                leaves[leaf] = i
        self.leaves = leaves

    def text(self, node: Node, root: bool = False) -> str:
        if not root:
            inline = (node.op in CHAIN_OPS and self.users[node.name] != ["<output>"] and
                      len(self.users[node.name]) == 1 and _fits(node, self.out))
            if not inline:
                return self.leaf(node.name)
            self.inlined.append(node.name)
        args = [self.text(self.index[i]) for i in node.inputs]
        if node.op in ("add", "sub", "mul", "div", "pow") and len(args) == 1:
            s = _num(float(node.attr("scalar")))  # type: ignore[arg-type]
            args = [s, args[0]] if node.attr("scalar_first") else [args[0], s]
        if node.op == "pow":
            return f"pow({args[0]}, {args[1]})"
        if node.op in _SYM:
            return f"({args[0]} {_SYM[node.op]} {args[1]})"
        if node.op == "half":
            return f"{'hi' if node.attr('part') else 'lo'}({args[0]})"
        if node.op == "cat":
            return f"cat({args[0]}, {args[1]})"
        if node.op == "gelu":
            return f"{'gelu_tanh' if node.attr('approximate') == 'tanh' else 'gelu'}({args[0]})"
        return f"{_FN[node.op]}({args[0]})"


def run(graph: Graph) -> Graph:
    index, users = graph.index(), graph.users()
    roots = [n for n in graph.nodes if n.op in CHAIN_OPS]
    chains: dict[str, _Chain] = {}
    inlined: set[str] = set()
    for n in reversed(roots):  # last op of a chain first, so it swallows its producers
        if n.name in inlined:
            continue
        chain = _Chain(n, index, users)
        expr = chain.text(n, root=True)
        chain.read_permutes()
        inlined.update(chain.inlined)
        chains[n.name] = (chain, expr)  # type: ignore[assignment]
    nodes: list[Node] = []
    for n in graph.nodes:
        if n.name in inlined:
            continue
        if n.name in chains:
            chain, expr = chains[n.name]  # type: ignore[misc]
            kinds = []
            for leaf in chain.leaves:
                if leaf in chain.perms:  # read through its permutation: the output's shape
                    kinds.append("full")
                    continue
                kind = bcast_kind(index[leaf].type.shape, n.type.shape)
                if kind is None:
                    shape = index[leaf].type.shape
                    if _fits(index[leaf], n) and shape != n.type.shape:
                        raise UnsupportedOp(n.op, n.source, f"operand {index[leaf].type.text()} is a half of "
                                            f"{n.type.text()}'s last axis computed outside the chain (the "
                                            "elementwise kernels read halves of whole inputs only)")
                    raise UnsupportedOp(n.op, n.source, f"operand {index[leaf].type.text()} broadcasts to "
                                        f"{n.type.text()} in a way the elementwise kernels do not cover")
                kinds.append(kind)
            attrs: list[tuple[str, object]] = [("expr", expr), ("bcast", tuple(kinds))]
            if chain.perms:
                attrs.append(("perms", tuple((i, chain.perms[leaf]) for i, leaf in enumerate(chain.leaves)
                                             if leaf in chain.perms)))
            n = Node(n.name, "elementwise", tuple(chain.leaves), n.type, tuple(attrs), n.source)  # type: ignore[arg-type]
        nodes.append(n)
    return prune(replace(graph, nodes=toposort(nodes)))


PASS = Pass("fuse_elementwise", run, (), "remaining elementwise chains -> one elementwise kernel each")
