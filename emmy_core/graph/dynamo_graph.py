"""A partition of a Dynamo FX graph (a fused submodule of nodes `dynamo.refusal` accepts) translated into
an Emmy `ops.Graph`: `to_graph(sub, params)`.

Shapes are read from each node's fake value with Dynamo's symbolic sizes (`SizeNames`): each distinct
symbolic size becomes one dynamic axis named `d0, d1, ...` in order of appearance, its value at run time
the expression evaluated on the symbols the inputs' own dimensions bind. The graph's inputs are the
submodule's tensor placeholders; its `param` nodes are the ones named in `params` (Dynamo passes a
module's parameters as graph inputs). Each Emmy node's `source` is the FX node's name, so a refusal
(`dynamo.Refused`) names the node to hand back to torch.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import sympy
import torch
import torch.fx as fx
import torch.nn.functional as F

from emmy_core.graph.dynamo import (
    ALIAS,
    BINARY,
    CAT,
    MATMUL,
    NORMS,
    PERMUTE,
    REDUCE,
    RESHAPE,
    SOFTMAX,
    TORCH_DTYPE_NAMES,
    UNARY,
    Refused,
    changes_dtype,
    half_part,
    node_arg,
    refusal,
    sym_key,
    target_key,
    value,
)
from emmy_core.graph.ops import Dim, Graph, Node, TensorType


@dataclass
class SizeNames:
    """The dynamic axes of one Emmy graph: each distinct symbolic size's name, expression and example value."""

    exprs: dict[str, sympy.Expr] = field(default_factory=dict)
    hints: dict[str, int] = field(default_factory=dict)
    _by_expr: dict[sympy.Expr, str] = field(default_factory=dict)

    def dim(self, d: object) -> Dim:
        key = sym_key(d)
        if isinstance(key, int):
            return key
        name = self._by_expr.get(key)
        if name is None:
            name = f"d{len(self._by_expr)}"
            self._by_expr[key] = name
            self.exprs[name] = key
            hint = d.node.hint if isinstance(d, torch.SymInt) else None
            self.hints[name] = int(hint) if hint is not None else 2
        return name

    def shape(self, v: torch.Tensor) -> tuple[Dim, ...]:
        return tuple(self.dim(d) for d in v.shape)

    def evaluate(self, bound: Mapping[sympy.Expr, int]) -> dict[str, int]:
        """Every named size where the keys of `bound` (symbols, or expressions an input shows) have those values.

        A name that is a key, or a linear form of keys with integer coefficients (`2*s0`, `s0 + 1`: every size of
        a decoder), is worked out in integers; anything else through sympy. A server calls this at each new
        length of every group, and sympy's substitution took 20-80 us a name."""
        forms = self._forms()
        out: dict[str, int] = {}
        for name, expr in self.exprs.items():
            form = forms[name]
            if expr in bound:
                out[name] = int(bound[expr])
            elif form is not None and all(s in bound for s, _ in form[1]):
                out[name] = form[0] + sum(c * int(bound[s]) for s, c in form[1])
            else:
                out[name] = int(expr.xreplace(dict(bound)))
        return out

    def _forms(self) -> dict[str, tuple[int, tuple[tuple[sympy.Expr, int], ...]] | None]:
        kept = self.__dict__.get("_linear")
        if kept is None or len(kept) != len(self.exprs):
            kept = {name: _linear_form(expr) for name, expr in self.exprs.items()}
            self.__dict__["_linear"] = kept
        return kept  # type: ignore[no-any-return]


def _linear_form(expr: sympy.Expr) -> tuple[int, tuple[tuple[sympy.Expr, int], ...]] | None:
    """`expr` as (constant, ((symbol, coefficient), ...)) with integer coefficients, or None where it is not one."""
    const, terms = 0, []
    for term, coef in expr.as_coefficients_dict().items():
        if not coef.is_Integer:
            return None
        if term == 1:
            const += int(coef)
        elif isinstance(term, sympy.Symbol):
            terms.append((term, int(coef)))
        else:
            return None
    return const, tuple(terms)


@dataclass(frozen=True)
class Translated:
    """A partition as an Emmy graph, with where its inputs come from among the submodule's arguments."""

    graph: Graph
    inputs: tuple[int, ...]  # argument positions of the graph's `input` nodes, in order
    params: tuple[tuple[str, int], ...]  # (parameter path, argument position)
    names: SizeNames
    # (key, argument position, dimension (-1: a SymInt), offset): the key is that size minus the offset. A key
    # is a symbol, or a size expression an input shows as it is (a convolution's output length `(s//5) - 1`)
    binders: tuple[tuple[sympy.Expr, int, int, int], ...]
    consts: tuple[tuple[int, float], ...] = ()  # (argument position, the value baked in): guarded at every call


def _first_with(sub: fx.GraphModule, symbol: sympy.Symbol) -> str | None:
    """The first computing node of `sub` whose value has a size that depends on `symbol`."""
    for n in sub.graph.nodes:
        v = value(n)
        if n.op != "placeholder" and isinstance(v, torch.Tensor) and \
                any(symbol in getattr(sym_key(x), "free_symbols", ()) for x in v.shape):
            return str(n.name)
    return None


def to_graph(sub: fx.GraphModule, params: Mapping[str, object], name: str,
             consts: Mapping[str, float] | None = None) -> Translated:
    """The Emmy graph of a fused partition; `params` names the placeholders that are module parameters,
    `consts` the symbolic floats taken at their compile-time value (see `refusal`)."""
    consts = consts or {}
    baked: list[tuple[int, float]] = []
    names = SizeNames()
    nodes: list[Node] = []
    env: dict[fx.Node, str] = {}
    inputs: list[int] = []
    param_pos: list[tuple[str, int]] = []
    symbols: dict[sympy.Symbol, tuple[int, int, int]] = {}
    shifted: dict[sympy.Symbol, tuple[int, int, int]] = {}  # shown only as symbol + offset (a cache's length + 1)
    shown: dict[sympy.Expr, tuple[int, int, int]] = {}  # every symbolic size an input shows, as it is
    placeholders = [n for n in sub.graph.nodes if n.op == "placeholder"]

    def shows(e: object, pos: int, d: int) -> None:
        if isinstance(e, sympy.Expr) and e.free_symbols:
            shown.setdefault(e, (pos, d, 0))
        if isinstance(e, sympy.Symbol):
            symbols.setdefault(e, (pos, d, 0))
        elif (isinstance(e, sympy.Add) and len(e.args) == 2 and len(e.free_symbols) == 1
              and isinstance(sym := next(iter(e.free_symbols)), sympy.Symbol) and (e - sym).is_Integer):
            shifted.setdefault(sym, (pos, d, int(e - sym)))

    for pos, ph in enumerate(placeholders):
        v = value(ph)
        if ph.name in consts:
            baked.append((pos, consts[ph.name]))
            continue
        if isinstance(v, torch.SymInt):
            shows(v.node.expr, pos, -1)
            continue
        if not isinstance(v, torch.Tensor):
            continue
        if v.dtype not in TORCH_DTYPE_NAMES:
            raise Refused(ph.name, f"an input of {v.dtype}")
        for d, size in enumerate(v.shape):
            shows(sym_key(size), pos, d)
        shape = names.shape(v)
        if ph.name in params and all(isinstance(s, int) for s in shape):
            nodes.append(Node(ph.name, "param", (), TensorType(shape, TORCH_DTYPE_NAMES[v.dtype]), (("path", ph.name),)))
            param_pos.append((ph.name, pos))
        else:
            nodes.append(Node(ph.name, "input", (), TensorType(shape, TORCH_DTYPE_NAMES[v.dtype])))
            inputs.append(pos)
        env[ph] = ph.name
    outputs: tuple[str, ...] = ()
    for n in sub.graph.nodes:
        if n.op == "placeholder":
            continue
        if n.op == "output":
            items = n.args[0] if isinstance(n.args[0], tuple | list) else (n.args[0],)
            outputs = tuple(env[x] for x in items)
            continue
        made = _node(n, env, names, consts)
        if isinstance(made, str):
            env[n] = made
        else:
            nodes.extend(made)
            env[n] = made[-1].name
    for sym, at in shifted.items():
        symbols.setdefault(sym, at)
    direct: dict[sympy.Expr, tuple[int, int, int]] = {}
    for nm, expr in names.exprs.items():
        missing = [s for s in expr.free_symbols if s not in symbols]
        if missing and expr in shown:  # an input has this very size: read it there (no symbol to solve for)
            direct[expr] = shown[expr]
        elif missing:  # named at the first of the group's nodes that has the size, so the partition hands back that one
            raise Refused(_first_with(sub, missing[0]) or next(iter(env.values())),
                          f"size {nm} = {expr} depends on {missing[0]}, which no input shows")
    binders = tuple((s, pos, d, off) for s, (pos, d, off) in (*symbols.items(), *direct.items()))
    graph = Graph(name, tuple(nodes), outputs, tuple(sorted(names.hints.items())))
    return Translated(graph, tuple(inputs), tuple(param_pos), names, binders, tuple(baked))


def _node(n: fx.Node, env: dict[fx.Node, str], names: SizeNames, consts: Mapping[str, float]) -> list[Node] | str:
    """The Emmy nodes of one FX node (the last defines its value), or the name of the value it aliases."""
    made = _one(n, env, names, consts)
    return made if isinstance(made, str | list) else [made]


def _one(n: fx.Node, env: dict[fx.Node, str], names: SizeNames, consts: Mapping[str, float]) -> Node | list[Node] | str:
    why = refusal(n, consts=consts)
    if why is not None:
        raise Refused(n.name, why)
    out = value(n)
    k = target_key(n)
    ttype = TensorType(names.shape(out), TORCH_DTYPE_NAMES[out.dtype])

    def t(x: object) -> str:
        if not isinstance(x, fx.Node) or x not in env:
            raise Refused(n.name, f"operand {str(x)[:40]} is not a tensor of the partition")
        return env[x]

    def num(x: object) -> float:
        return consts[x.name] if isinstance(x, fx.Node) else float(x)  # type: ignore[arg-type]

    def make(op: str, ins: Sequence[str], **attrs: object) -> Node:
        return Node(n.name, op, tuple(ins), ttype, tuple(attrs.items()), n.name)  # type: ignore[arg-type]

    if k in ALIAS:
        if changes_dtype(n):  # `refusal` accepted it: a conversion between float types
            return make("cast", (t(n.args[0]),))
        return t(n.args[0])
    if k is operator.getitem:
        return make("half", (t(n.args[0]),), part=half_part(n))
    if k in CAT:
        return make("cat", tuple(t(p) for p in (n.args[0] if n.args else n.kwargs["tensors"])))
    if k in RESHAPE:
        return make("reshape", (t(n.args[0]),), target=ttype.shape)
    if k in PERMUTE:
        x = value(n.args[0])
        rank = x.dim()
        if k in ("transpose", torch.transpose):
            d0, d1 = (int(d) % rank for d in n.args[1:3])
            perm = list(range(rank))
            perm[d0], perm[d1] = perm[d1], perm[d0]
        else:
            dims = n.args[1:] if not (len(n.args) == 2 and isinstance(n.args[1], list | tuple)) else n.args[1]
            perm = [int(d) % rank for d in dims]  # type: ignore[union-attr]
        return make("transpose" if k in ("transpose", torch.transpose) else "permute", (t(n.args[0]),),
                    perm=tuple(perm))
    if k in BINARY:
        op = BINARY[k]
        a = node_arg(n, 0, "input")
        b = node_arg(n, 1, "exponent" if op == "pow" else "other")
        a_tensor, b_tensor = (isinstance(x, fx.Node) and x.name not in consts for x in (a, b))
        if a_tensor and b_tensor:
            return make(op, (t(a), t(b)))
        if a_tensor:
            return make(op, (t(a),), scalar=num(b), scalar_first=False)
        return make(op, (t(b),), scalar=num(a), scalar_first=True)
    if k in UNARY:
        op = UNARY[k]
        if op == "gelu":
            return make(op, (t(n.args[0]),), approximate=str(n.kwargs.get("approximate", "none")))
        return make(op, (t(n.args[0]),))
    if k is F.linear:
        ins = [t(n.args[0]), t(node_arg(n, 1, "weight"))]
        bias = node_arg(n, 2, "bias")
        if bias is not None:
            ins.append(t(bias))
        return make("linear", ins)
    if k is torch.addmm:  # bias + x @ w: a product, then the bias add fuse_epilogue folds back
        mm = Node(f"{n.name}__mm", "matmul", (t(n.args[1]), t(n.args[2])), ttype, (), n.name)
        return [mm, make("add", (mm.name, t(n.args[0])))]
    if k in MATMUL:
        return make("matmul", (t(n.args[0]), t(n.args[1])))
    if k in REDUCE:
        keepdim = bool(node_arg(n, 2, "keepdim", False))
        return make(REDUCE[k], (t(n.args[0]),), keepdim=keepdim)
    if k in SOFTMAX:
        return make("softmax", (t(n.args[0]),))
    if k in NORMS:
        layer = NORMS[k] == "layernorm"
        ins = [t(n.args[0]), t(node_arg(n, 2, "weight"))]
        eps = node_arg(n, 4 if layer else 3, "eps")
        eps = num(eps) if eps is not None else None
        if layer:
            ins.append(t(node_arg(n, 3, "bias")))
            eps = 1e-5 if eps is None else eps
        elif eps is None:
            eps = float(torch.finfo(out.dtype).eps)
        return make(NORMS[k], ins, eps=float(eps))  # type: ignore[arg-type]
    raise Refused(n.name, "Emmy has no kernel for it")
