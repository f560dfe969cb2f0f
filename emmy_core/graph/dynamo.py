"""Dynamo's FX graphs read as Emmy graphs: which node Emmy lowers (or why not), sizes, FLOPs.

A graph handed to a Dynamo backend is torch-level FX whose every node carries its fake value
(`meta["example_value"]`) with Dynamo's symbolic sizes. Shapes are read from there, so no shape
arithmetic is interpreted and no axis is recognised by its name or position: each distinct
symbolic size (a symbol `s27`, or an expression such as `2*s27` after a flatten) becomes one
dynamic axis of the Emmy graph, named `d0, d1, ...` in order of appearance, and its value at run
time is the expression evaluated on the symbols bound by the inputs' own dimensions.

`refusal(node)` says why Emmy does not lower a node (None: it does); `dynamo_graph.to_graph`
translates a partition of supported nodes into an `ops.Graph`, and raises `Refused` naming a node it
could not take after all.
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Mapping
from math import prod
from typing import Any

import sympy
import torch
import torch.fx as fx
import torch.nn.functional as F
from torch.utils._sympy.functions import FloorDiv

from emmy_core.dtypes import model_dtypes_by_torch
from emmy_core.graph.passes.fuse_elementwise import bcast_kind

TORCH_DTYPE_NAMES = model_dtypes_by_torch()

BINARY: dict[object, str] = {
    operator.add: "add", torch.add: "add", "add": "add", operator.sub: "sub", torch.sub: "sub", "sub": "sub",
    operator.mul: "mul", torch.mul: "mul", "mul": "mul", operator.truediv: "div", torch.div: "div", "div": "div",
    operator.pow: "pow", torch.pow: "pow", "pow": "pow",
}
UNARY: dict[object, str] = {
    operator.neg: "neg", torch.neg: "neg", "neg": "neg", torch.exp: "exp", "exp": "exp", torch.rsqrt: "rsqrt",
    "rsqrt": "rsqrt", torch.relu: "relu", F.relu: "relu", "relu": "relu", F.silu: "silu", F.gelu: "gelu",
    torch.tanh: "tanh", F.tanh: "tanh", "tanh": "tanh", torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid",
    "sigmoid": "sigmoid", torch.sqrt: "sqrt", "sqrt": "sqrt", torch.abs: "abs", "abs": "abs", torch.log: "log",
    "log": "log", torch.erf: "erf", "erf": "erf",
}
MATMUL: dict[object, str] = {torch.matmul: "matmul", operator.matmul: "matmul", torch.bmm: "matmul",
                             "matmul": "matmul", "bmm": "matmul"}
CAT = frozenset({torch.cat, torch.concat, torch.concatenate})
REDUCE: dict[object, str] = {torch.mean: "mean", "mean": "mean", torch.sum: "sum", "sum": "sum"}
SOFTMAX = frozenset({F.softmax, torch.softmax, "softmax"})
NORMS: dict[object, str] = {F.layer_norm: "layernorm", torch.layer_norm: "layernorm", F.rms_norm: "rmsnorm",
                            torch.rms_norm: "rmsnorm"}
RESHAPE = frozenset({"view", "reshape", torch.reshape, "unsqueeze", torch.unsqueeze, "squeeze", torch.squeeze,
                     "flatten", torch.flatten, "unflatten", torch.unflatten})
PERMUTE = frozenset({"transpose", torch.transpose, "permute", torch.permute})
ALIAS = frozenset({"contiguous", "to", "float", "half", "bfloat16", "type_as", F.dropout, "clone", torch.clone})
# the aliases that may change the data type: between float types they are Emmy `cast`s (`cast_problem`)
CASTS = frozenset({"to", "float", "half", "bfloat16", "type_as"})
# what counts toward `matmul_flops`: every matrix product, whoever runs it, as a function or a Tensor method
# (a grouped product, a mixture of experts', is also known by name: a library's own op, as `transformers`' fallback)
GROUPED_MM = frozenset(f for f in (getattr(F, "grouped_mm", None), getattr(torch, "_grouped_mm", None)) if f)
ADD_PRODUCTS = frozenset({torch.addmm, torch.baddbmm, torch.addbmm, torch.addmv, "addmm", "baddbmm", "addbmm",
                          "addmv"})  # the bias first, then the two factors
CONVS = frozenset({torch.conv1d, torch.conv2d, torch.conv3d, F.conv1d, F.conv2d, F.conv3d})
FLOP_OPS = frozenset({F.linear, F.scaled_dot_product_attention, F.multi_head_attention_forward, torch.einsum,
                      torch.mm, "mm", torch.mv, "mv", "__matmul__", *ADD_PRODUCTS, *CONVS, *GROUPED_MM, *MATMUL})


LEFT_TO_TORCH = "emmy_left_to_torch"  # node.meta key: why a rewrite left the node to torch (`refusal` reports it)


def value(node: object) -> Any:
    """The fake value Dynamo recorded for a node (a FakeTensor, a SymInt, ...), or the constant itself."""
    if isinstance(node, fx.Node):
        return node.meta.get("example_value", node.meta.get("val"))
    return node


def sym_key(d: object) -> int | sympy.Expr:
    """A size as an int, or as the sympy expression of a symbolic size (its exact floor divisions divided out:
    a size that is then a number is that int)."""
    if isinstance(d, torch.SymInt):
        expr = d.node.expr if d.node.expr.is_number else exact_divisions(d.node.expr)
        return int(expr) if expr.is_number else expr
    return int(d)  # type: ignore[call-overload]


@functools.lru_cache(maxsize=4096)
def exact_divisions(expr: sympy.Expr) -> sympy.Expr:
    """`expr` with every floor division that divides exactly replaced by its quotient, so one size has one
    expression: a window reshape shows `(s//4)` also as `((s//4)**2)//(s//4)`, which sympy leaves as it is, and
    two names for one axis read as a broadcast. Only a quotient sympy proves an integer is taken (a pure
    function of the expression, cached)."""
    if not expr.has(FloorDiv):
        return expr

    def divided(x: sympy.Expr) -> sympy.Expr:
        numerator, divisor = x.args
        quotient = sympy.cancel(numerator / divisor)
        return quotient if sympy.fraction(quotient)[1] == 1 and quotient.is_integer else x

    return expr.replace(lambda x: isinstance(x, FloorDiv), divided)


def shape_of(v: torch.Tensor) -> tuple[int | sympy.Expr, ...]:
    return tuple(sym_key(d) for d in v.shape)


def describe(node: fx.Node) -> str:
    """A node's op as a user reads it: `torch.cat`, `Tensor.to`, `operator.getitem`, ..."""
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    if node.op == "call_function":
        t = node.target
        mod = getattr(t, "__module__", None) or ""
        name = getattr(t, "__name__", str(t))
        if mod in ("", "builtins", "_operator"):
            mod = "operator" if mod == "_operator" or t in (operator.getitem,) else "torch"
        if mod.startswith("torch._C"):
            mod = "torch"
        return f"{mod}.{name}"
    return f"{node.op} {node.target}"


def target_key(node: fx.Node) -> object:
    """What a node calls: the function for `call_function`, else the method or module name."""
    return node.target if node.op == "call_function" else str(node.target)


def node_arg(node: fx.Node, i: int, name: str, default: object = None) -> object:
    """A node's argument at position `i` or by keyword `name` (`default` when absent)."""
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _is_number(x: object) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _last_dim(dim: object, rank: int) -> bool:
    if isinstance(dim, list | tuple) and len(dim) == 1:
        dim = dim[0]
    return isinstance(dim, int) and not isinstance(dim, bool) and rank > 0 and dim % rank == rank - 1


def is_compute(node: fx.Node) -> bool:
    """A node that computes a tensor, or several (what the coverage counts as an op)."""
    if node.op not in ("call_function", "call_method", "call_module"):
        return False
    v = value(node)
    return isinstance(v, torch.Tensor) or (isinstance(v, tuple | list) and any(isinstance(t, torch.Tensor) for t in v))


def refusal(node: fx.Node, device: str = "cpu", consts: Mapping[str, float] | None = None) -> str | None:
    """Why Emmy does not lower `node` (None when it does); the partitioner's test and the report's reason.

    `consts` names the nodes whose symbolic float (a module attribute Dynamo lifted to an input, such as a
    norm's eps or attention's scale) Emmy takes at the value it had when compiled, guarded at every call."""
    consts = consts or {}
    out = value(node)
    if node.op not in ("call_function", "call_method"):
        return f"a {node.op} node"
    if LEFT_TO_TORCH in node.meta:  # a rewrite that chose torch for this node said why
        return str(node.meta[LEFT_TO_TORCH])
    if not isinstance(out, torch.Tensor):
        return "does not compute one tensor"
    if out.dtype not in TORCH_DTYPE_NAMES:
        return f"computes {out.dtype}; Emmy's kernels take f32, f16, bf16"
    if out.device.type != device:
        return f"on {out.device}; this compile's card runs on {device}"
    k = target_key(node)
    tensors = [value(a) for a in (*node.args, *node.kwargs.values()) if isinstance(value(a), torch.Tensor)]
    if k in CAT:
        return _cat_problem(node)
    for a in node.args:
        if isinstance(a, list | tuple) and any(isinstance(value(x), torch.Tensor) for x in a):
            return "takes a list of tensors"
    if k in ALIAS:
        x = value(node.args[0]) if node.args else None
        if not isinstance(x, torch.Tensor):
            return "no tensor operand"
        if x.dtype != out.dtype:
            return cast_problem(node) if k in CASTS else "changes the data type"
        if k is F.dropout and node_arg(node, 2, "training", True) and node_arg(node, 1, "p", 0.5) not in (0, 0.0):
            return "dropout while training"
        if k == "to" and any(isinstance(a, torch.device | str) for a in node.args[1:]):
            return "moves the tensor"
        return None
    if any(t.dtype != out.dtype for t in tensors):
        return "mixes data types"
    if k in RESHAPE or k in PERMUTE:
        return None
    if k is operator.getitem:
        part = half_part(node)
        return part if isinstance(part, str) else None
    shape = shape_of(out)
    if k in BINARY:
        a, b = node_arg(node, 0, "input"), node_arg(node, 1, "other")
        if BINARY[k] == "pow":
            b = node_arg(node, 1, "exponent")
            return None if _is_number(b) and isinstance(value(a), torch.Tensor) else "pow of a tensor exponent"
        for x in (a, b):
            v = value(x)
            if isinstance(v, torch.Tensor):
                if v.dim() == 0:
                    return "a 0-d tensor operand"
                kind = bcast_kind(shape_of(v), shape)  # type: ignore[arg-type]
                if kind is None:
                    return f"broadcasts {list(shape_of(v))} to {list(shape)} (Emmy broadcasts rows and columns)"
                if kind != "full" and not isinstance(shape[-1], int):
                    return "broadcasts over a dynamic last axis"
            elif not _is_number(x) and not (isinstance(x, fx.Node) and x.name in consts):
                return f"operand {type(v).__name__} is neither a tensor nor a number"
        if len(node.kwargs) > (1 if "other" in node.kwargs or "input" in node.kwargs else 0):
            return "unsupported keyword arguments"
        return None
    if k in UNARY:
        extra = {kk for kk in node.kwargs if kk not in ("approximate", "inplace", "input")}
        if extra or len(node.args) > 1 or node.kwargs.get("inplace"):
            return "unsupported arguments"
        return None
    if k is F.linear:
        w = value(node_arg(node, 1, "weight"))
        if not isinstance(w, torch.Tensor) or w.dim() != 2 or not all(isinstance(sym_key(d), int) for d in w.shape):
            return "a weight that is not a static matrix"
        return None
    if k is torch.addmm:
        if node.kwargs.get("beta", 1) != 1 or node.kwargs.get("alpha", 1) != 1:
            return "addmm with alpha or beta"
        a, b, c = (value(x) for x in node.args[:3])
        if not (isinstance(a, torch.Tensor) and a.dim() == 1 and isinstance(b, torch.Tensor) and b.dim() == 2
                and isinstance(c, torch.Tensor) and c.dim() == 2):
            return "addmm other than bias + matrix @ matrix"
        if not all(isinstance(sym_key(d), int) for d in c.shape):
            return "a right operand that is not static"
        return None
    if k in MATMUL:
        a, b = (value(x) for x in node.args[:2])
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.dim() >= 2 and b.dim() >= 2):
            return "a product of vectors"
        if b.dim() == 2:
            if not all(isinstance(sym_key(d), int) for d in b.shape):
                return "a matrix right operand with a dynamic size"
        elif shape_of(a)[:-2] != shape_of(b)[:-2]:
            return "batch axes that broadcast"
        return None
    if k in REDUCE:
        x = value(node.args[0])
        dim = node_arg(node, 1, "dim")
        if not _last_dim(dim, x.dim()) or set(node.kwargs) - {"dim", "keepdim"} or len(node.args) > 3:
            return "a reduction over other than the last axis"
        if not isinstance(sym_key(x.shape[-1]), int):
            return "a reduction over a dynamic axis"
        return None
    if k in SOFTMAX:
        x = value(node.args[0])
        dim = node_arg(node, 1, "dim")
        if not _last_dim(dim, x.dim()):
            return "softmax over other than the last axis"
        dt = node.kwargs.get("dtype")
        if dt is not None and dt != x.dtype:
            return "softmax with a data type change"
        return None
    if k in NORMS:
        layer = NORMS[k] == "layernorm"
        x = value(node.args[0])
        shape_arg = node_arg(node, 1, "normalized_shape")
        w = node_arg(node, 2, "weight")
        bias = node_arg(node, 3, "bias") if layer else 0
        if not isinstance(shape_arg, list | tuple) or len(shape_arg) != 1 or shape_arg[0] != x.shape[-1]:
            return "normalises over other than the last axis"
        if not isinstance(sym_key(x.shape[-1]), int):
            return "normalises a dynamic axis"
        if w is None or bias is None:
            return "a norm without an elementwise weight (and bias)"
        eps = node_arg(node, 4 if layer else 3, "eps")
        if eps is not None and not _is_number(eps) and not (isinstance(eps, fx.Node) and eps.name in consts):
            return "eps is not a constant (Dynamo made it symbolic)"
        return None
    return "Emmy has no kernel for it"


def changes_dtype(node: fx.Node) -> bool:
    """Whether a node's tensor result has another data type than its first (tensor) argument."""
    x, out = (value(node.args[0]) if node.args else None), value(node)
    return isinstance(x, torch.Tensor) and isinstance(out, torch.Tensor) and x.dtype != out.dtype


def cast_problem(node: fx.Node) -> str | None:
    """Why a data type change (`Tensor.to(dtype)`, `.float()`, `.half()`, `.bfloat16()`, `.type_as(t)`) is not an
    Emmy `cast` (None: it is one). Emmy converts between its float types only, on the tensor's own device, into a
    fresh contiguous tensor: a device move, a memory format or a non-blocking copy (whose completion torch defers)
    stays with torch, and so does a conversion from or to any other type (`refusal` names the result's)."""
    x = value(node.args[0])
    if x.dtype not in TORCH_DTYPE_NAMES:
        return f"converts from {x.dtype}; Emmy's casts are between f32, f16, bf16"
    k = target_key(node)
    allowed = {"to": {"dtype", "device", "copy", "non_blocking", "memory_format"}, "type_as": {"other"}}.get(str(k), set())
    if set(node.kwargs) - allowed:
        return f"a conversion with arguments {sorted(set(node.kwargs) - allowed)}"
    # `to(dtype | other, non_blocking, copy)`: a fresh copy is what a cast makes anyway
    if node.kwargs.get("non_blocking") or (k == "to" and len(node.args) > 2 and node.args[2] is True):
        return "a non-blocking copy (torch completes it later)"
    if node.kwargs.get("memory_format") not in (None, torch.preserve_format):
        return "a conversion that changes the memory format"
    rest = node.args[1:]
    if k == "to":
        if "device" in node.kwargs or any(isinstance(a, torch.device | str | int) and not isinstance(a, bool)
                                          for a in rest):
            return "moves the tensor"
        if any(isinstance(value(a), torch.Tensor) for a in rest):
            return None  # `x.to(other)`: other's type and device, and the device is this compile's (checked above)
        if not all(isinstance(a, torch.dtype) or isinstance(a, bool) for a in rest):
            return "a conversion with arguments other than a data type"
        return None
    if k == "type_as":
        return None
    return "a conversion with arguments" if rest else None


def half_part(node: fx.Node) -> int | str:
    """Which half of the last axis `x[..., :n]` or `x[..., n:]` reads (0 or 1; n half the static last axis),
    or why the `getitem` is not such a slice."""
    x = value(node.args[0]) if node.args else None
    if not isinstance(x, torch.Tensor) or x.dim() == 0 or len(node.args) != 2:
        return "indexes other than a tensor"
    idx = node.args[1] if isinstance(node.args[1], tuple) else (node.args[1],)
    rest = [i for i in idx if i is not Ellipsis]
    if len(rest) > x.dim() or sum(i is Ellipsis for i in idx) > 1 or not (Ellipsis in idx or len(rest) == x.dim()):
        return "an index that does not reach the last axis"
    if not rest or any(not isinstance(i, slice) or i != slice(None) for i in idx[:-1] if i is not Ellipsis) \
            or idx[-1] is Ellipsis:
        return "an index other than a slice of the last axis"
    last, cut = idx[-1], sym_key(x.shape[-1])
    if not isinstance(last, slice) or not all(v is None or (isinstance(v, int) and not isinstance(v, bool))
                                              for v in (last.start, last.stop, last.step)):
        return "an index other than a constant slice of the last axis"
    if not isinstance(cut, int) or cut % 2:
        return "a slice of a dynamic or odd last axis"
    start, stop, step = last.indices(cut)
    halves = {(0, cut // 2): 0, (cut // 2, cut): 1}
    if step != 1 or (start, stop) not in halves:
        return f"a slice [{start}:{stop}] of a last axis of {cut} that is not one of its halves"
    return halves[(start, stop)]


def _cat_problem(node: fx.Node) -> str | None:
    """Why a `torch.cat` is not two halves joined along the last axis (None: it is)."""
    parts = node.args[0] if node.args else node.kwargs.get("tensors")
    dim = node_arg(node, 1, "dim", 0)
    if set(node.kwargs) - {"dim", "tensors"} or not isinstance(parts, list | tuple) or len(parts) != 2 \
            or not all(isinstance(value(p), torch.Tensor) for p in parts):
        return "a concatenation of other than two tensors"
    a, b = (value(p) for p in parts)
    out = value(node)
    if not _last_dim(dim, out.dim()):
        return "a concatenation along other than the last axis"
    if a.dtype != out.dtype or b.dtype != out.dtype:
        return "mixes data types"
    half = sym_key(a.shape[-1])
    if not isinstance(half, int) or sym_key(b.shape[-1]) != half or \
            shape_of(a)[:-1] != shape_of(out)[:-1] or shape_of(b)[:-1] != shape_of(out)[:-1]:
        return "a concatenation of other than two equal static halves of the same rows"
    return None


def alias_only(node: fx.Node) -> bool:
    """A node that computes nothing (a view, transpose, no-op or float conversion); a partition of only these is left
    to torch: on Emmy it would be the same copy or conversion, with a call's overhead on top."""
    k = target_key(node)
    return k in ALIAS or k in RESHAPE or k in PERMUTE


def matmul_flops(node: fx.Node) -> sympy.Expr | int | None:
    """Multiply-add FLOPs (2 per MAC) of a matrix product node, over Dynamo's symbols; None for others.

    Every product counts, as a function or a Tensor method: linear, matmul, mm, bmm, mv and their `add` forms,
    convolutions, attention (and `nn.MultiheadAttention`'s functional form, its projections with it), `einsum`
    of two or more operands, and a grouped product (`grouped_mm`: a mixture of experts' tokens times their
    expert's weight)."""
    if node.op not in ("call_function", "call_method"):
        return None
    k = target_key(node)
    grouped = k in GROUPED_MM or _named_grouped_mm(k)
    if k not in FLOP_OPS and not grouped:
        return None
    if k is F.multi_head_attention_forward:
        return _mha_flops(node)
    out = value(node)
    if not isinstance(out, torch.Tensor):
        return None
    n_out = prod(shape_of(out)) if out.dim() else 1
    if k is torch.einsum:
        return _einsum_flops(node)
    if k in ADD_PRODUCTS:  # the bias comes first: the inner size is the left factor's
        left = value(node_arg(node, 1, "batch1" if k in (torch.baddbmm, torch.addbmm, "baddbmm", "addbmm")
                              else "mat" if k in (torch.addmv, "addmv") else "mat1"))
        if k in (torch.addbmm, "addbmm"):  # the batch is summed over: each batch entry's product counts
            return 2 * n_out * sym_key(left.shape[0]) * sym_key(left.shape[-1])
        return 2 * n_out * sym_key(left.shape[-1])
    if k is F.scaled_dot_product_attention:
        q, kk = value(node_arg(node, 0, "query")), value(node_arg(node, 1, "key"))
        return 4 * prod(shape_of(q)) * sym_key(kk.shape[-2])
    if k in CONVS:  # a model may pass the weight by keyword
        w = value(node_arg(node, 1, "weight"))
        return 2 * n_out * prod(shape_of(w)[1:])
    a = value(node_arg(node, 0, "input" if not grouped else "mat_a"))
    if not isinstance(a, torch.Tensor):  # a library's grouped op names its operands its own way
        a = value(node.args[0]) if node.args else None
    if not isinstance(a, torch.Tensor):
        return None
    return 2 * n_out * sym_key(a.shape[-1])


def _named_grouped_mm(k: object) -> bool:
    """A registered op (torch.ops.ns.name) of a grouped matrix product, by name: not its backward."""
    if not isinstance(k, torch._ops.OpOverload | torch._ops.OpOverloadPacket):
        return False
    name = str(k)
    return "grouped_mm" in name and "backward" not in name


def _einsum_flops(node: fx.Node) -> int | sympy.Expr | None:
    """An einsum's products, contracted left to right as torch does without opt_einsum: each pair's every index
    (2 per MAC); None for one operand (a transpose or a reduction, no product)."""
    args = list(node.args) or list(node.kwargs.values())
    equation = args[0] if args else None
    ops = args[1:]
    if len(ops) == 1 and isinstance(ops[0], list | tuple):
        ops = list(ops[0])
    tensors = [value(o) for o in ops]
    if not isinstance(equation, str) or len(tensors) < 2 or not all(isinstance(t, torch.Tensor) for t in tensors):
        return None
    lhs, _, rhs = equation.replace(" ", "").partition("->")
    terms = lhs.split(",")
    if len(terms) != len(tensors):
        return None
    sizes: dict[str, int | sympy.Expr] = {}
    subscripts: list[str] = []
    for term, t in zip(terms, tensors, strict=True):
        if "..." in term:  # the ellipsis's axes as letters of their own, aligned from the right
            extra = t.dim() - (len(term) - 3)
            term = term.replace("...", "".join(chr(0x100 + extra - i) for i in range(extra, 0, -1)))
        if len(term) != t.dim():
            return None
        for letter, d in zip(term, t.shape, strict=True):
            size = sym_key(d)
            if size != 1 or letter not in sizes:
                sizes[letter] = size
        subscripts.append(term)
    out = set(rhs) if "->" in equation else {c for c in sizes if sum(s.count(c) for s in subscripts) == 1}
    total: int | sympy.Expr = 0
    left = subscripts[0]
    for i, right in enumerate(subscripts[1:], start=1):
        later = out.union(*(set(s) for s in subscripts[i + 1:]))
        both = set(left) | set(right)
        total += 2 * prod(sizes[c] for c in both)
        left = "".join(sorted(c for c in both if c in later))
    return total


def _mha_flops(node: fx.Node) -> int | sympy.Expr | None:
    """`F.multi_head_attention_forward`'s products: the query, key, value and output projections and attention's
    two products, at the query's [L, B, E] and the key's [S, B, E] (an unbatched one [L, E])."""
    q, kk = value(node_arg(node, 0, "query")), value(node_arg(node, 1, "key"))
    if not (isinstance(q, torch.Tensor) and isinstance(kk, torch.Tensor)):
        return None
    e = sym_key(q.shape[-1])
    rows_q = prod(shape_of(q)[:-1])
    rows_k = prod(shape_of(kk)[:-1])
    return 2 * e * e * (2 * rows_q + 2 * rows_k) + 4 * rows_q * sym_key(kk.shape[0]) * e


class Refused(Exception):
    """A node of a partition Emmy could not take after all: its FX name and why."""

    def __init__(self, node: str, reason: str) -> None:
        super().__init__(f"{node}: {reason}")
        self.node = node
        self.reason = reason
