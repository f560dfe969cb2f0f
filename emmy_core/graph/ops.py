"""The graph IR: a small, frozen op graph between a torch model and its loop programs.

A `Graph` is a topologically ordered tuple of `Node`s. Each node names the value it
defines, its operator (from the closed set `OPS`), the values it reads, its
`TensorType` (a shape whose dimensions are static integers or the dynamic axes
`B` and `S`, and an IR data type) and its attributes (sorted, hashable). A node
also carries the model source line it came from, so an error can point there.
Passes rewrite graphs into graphs; nothing here holds a tensor (weights travel
beside the graph, in `Captured.weights`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from math import prod

Dim = int | str  # a static size, or the name of a dynamic axis
DYNAMIC_AXES = ("B", "S")
AttrValue = int | float | str | bool | tuple

# Operators a captured graph may contain; passes add the fused ones.
SOURCE_OPS = frozenset(
    {
        "input", "param",
        "linear", "matmul",
        "add", "sub", "mul", "div", "neg", "pow",
        "silu", "gelu", "relu", "exp", "rsqrt", "tanh", "sigmoid", "sqrt", "abs", "log", "erf",
        "mean", "sum", "softmax", "rmsnorm", "layernorm",
        "reshape", "transpose", "permute",
        "half", "cat",
        "cast",
    }
)
UNARY_OPS = frozenset({"neg", "silu", "gelu", "relu", "exp", "rsqrt", "tanh", "sigmoid", "sqrt", "abs", "log", "erf"})
BINARY_OPS = frozenset({"add", "sub", "mul", "div", "pow"})
ELEMENTWISE_OPS = UNARY_OPS | BINARY_OPS
# the halves of the last axis: `half` (attr part 0 or 1) reads one half, `cat` joins two halves; they fuse into
# elementwise chains, whose kernels then compute the two halves of the last axis each as its own expression
HALF_OPS = frozenset({"half", "cat"})
LAYOUT_OPS = frozenset({"reshape", "transpose", "permute"})
NORM_OPS = frozenset({"rmsnorm", "layernorm", "softmax"})
# `cast` converts between float types (its node's type names the target); it is its own kernel, a boundary of the
# elementwise chains (their kernels read and write one data type), and `match_rmsnorm` folds the ones of an RMSNorm
FUSED_OPS = frozenset({"elementwise", "tap"})
OPS = SOURCE_OPS | FUSED_OPS


@dataclass(frozen=True)
class TensorType:
    shape: tuple[Dim, ...]
    dtype: str  # an IR data type: f32, f16, bf16

    def concrete(self, sizes: dict[str, int]) -> tuple[int, ...]:
        return tuple(d if isinstance(d, int) else sizes[d] for d in self.shape)

    def numel(self, sizes: dict[str, int]) -> int:
        return prod(self.concrete(sizes))

    def text(self) -> str:
        return f"{self.dtype}[{', '.join(str(d) for d in self.shape)}]"


@dataclass(frozen=True)
class Node:
    name: str
    op: str
    inputs: tuple[str, ...]
    type: TensorType
    attrs: tuple[tuple[str, AttrValue], ...] = ()
    source: str = ""  # "file:line: code" of the model line this came from

    def __post_init__(self) -> None:
        if self.op not in OPS:
            raise ValueError(f"node {self.name!r}: unknown operator {self.op!r}")
        object.__setattr__(self, "attrs", tuple(sorted(self.attrs)))

    def attr(self, key: str, default: AttrValue | None = None) -> AttrValue | None:
        for k, v in self.attrs:
            if k == key:
                return v
        return default

    def with_attrs(self, **changes: AttrValue) -> Node:
        merged = dict(self.attrs)
        merged.update(changes)
        return replace(self, attrs=tuple(merged.items()))

    def text(self) -> str:
        args = [*self.inputs, *(f"{k}={v!r}" for k, v in self.attrs)]
        return f"{self.name}: {self.type.text()} = {self.op}({', '.join(args)})"


@dataclass(frozen=True)
class Graph:
    name: str
    nodes: tuple[Node, ...]
    outputs: tuple[str, ...]
    sizes: tuple[tuple[str, int], ...]  # expected size of each dynamic axis, from the example inputs

    def __post_init__(self) -> None:
        seen: set[str] = set()
        for n in self.nodes:
            if n.name in seen:
                raise ValueError(f"graph {self.name}: value {n.name!r} defined twice")
            for i in n.inputs:
                if i not in seen:
                    raise ValueError(f"graph {self.name}: {n.name!r} reads {i!r} before it is defined")
            seen.add(n.name)
        for o in self.outputs:
            if o not in seen:
                raise ValueError(f"graph {self.name}: output {o!r} is not defined")

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def index(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def users(self) -> dict[str, list[str]]:
        """Value name -> names of the nodes reading it (an output counts as a user named '<output>')."""
        out: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        for n in self.nodes:
            for i in n.inputs:
                out[i].append(n.name)
        for o in self.outputs:
            out[o].append("<output>")
        return out

    def hints(self) -> dict[str, int]:
        return dict(self.sizes)

    def compute(self) -> Iterator[Node]:
        """Nodes that compute something (not inputs or parameters)."""
        return (n for n in self.nodes if n.op not in ("input", "param"))

    def text(self) -> str:
        lines = [f"graph {self.name} ({', '.join(f'{k}~{v}' for k, v in self.sizes) or 'static'})"]
        lines += [f"  {n.text()}" for n in self.nodes]
        lines.append(f"  return {', '.join(self.outputs)}")
        return "\n".join(lines)


def broadcast(a: tuple[Dim, ...], b: tuple[Dim, ...]) -> tuple[Dim, ...] | None:
    """Numpy broadcasting of two symbolic shapes, or None when they do not broadcast."""
    out: list[Dim] = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


def prune(graph: Graph) -> Graph:
    """Drops nodes no output depends on (keeps every input, so the signature does not change)."""
    index = graph.index()
    live: set[str] = set()
    stack = list(graph.outputs)
    while stack:
        name = stack.pop()
        if name in live:
            continue
        live.add(name)
        stack.extend(index[name].inputs)
    nodes = tuple(n for n in graph.nodes if n.name in live or n.op == "input")
    return replace(graph, nodes=nodes)


def toposort(nodes: list[Node] | tuple[Node, ...]) -> tuple[Node, ...]:
    """Orders nodes so every input is defined first, keeping the given order wherever it is already legal.

    A depth-first walk from each node in the given order, visiting a node's inputs in the order they
    are given: linear in nodes and edges, and iterative, so a chain thousands of nodes deep neither
    recurses nor re-copies its trail (an already ordered list comes back unchanged).
    """
    by_name = {n.name: n for n in nodes}
    position = {n.name: i for i, n in enumerate(nodes)}
    done: set[str] = set()
    on_path: set[str] = set()
    out: list[Node] = []
    for root in nodes:
        if root.name in done:
            continue
        on_path.add(root.name)
        stack: list[tuple[Node, Iterator[str]]] = [(root, _inputs_in_order(root, by_name, position))]
        while stack:
            node, pending = stack[-1]
            for i in pending:
                if i in done:
                    continue
                if i in on_path:
                    raise ValueError(f"cycle through {i!r}")
                on_path.add(i)
                stack.append((by_name[i], _inputs_in_order(by_name[i], by_name, position)))
                break
            else:
                stack.pop()
                on_path.discard(node.name)
                done.add(node.name)
                out.append(node)
    return tuple(out)


def _inputs_in_order(node: Node, by_name: dict[str, Node], position: dict[str, int]) -> Iterator[str]:
    """The inputs of `node` among `by_name`, earliest given first (the order the walk visits them in)."""
    return iter(sorted((i for i in node.inputs if i in by_name), key=position.__getitem__))
