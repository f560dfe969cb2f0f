"""Translation of torch.fx nodes into graph nodes, with symbolic shapes over the dynamic axes.

Every supported call (function, method or leaf module) maps to one operator of
`ops.SOURCE_OPS`; shape reads (`x.shape`, `x.size()`, indexing them) become
symbolic values that `view` and `reshape` may use. Anything else raises
`UnsupportedOp` with the op's name and the model line.
"""

from __future__ import annotations

import operator
from collections import Counter
from math import prod

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from emmy_core.dtypes import model_dtypes_by_torch, torch_dtype
from emmy_core.graph.errors import GraphError, UnsupportedOp
from emmy_core.graph.ops import UNARY_OPS, Dim, Node, TensorType, broadcast

_DTYPES = model_dtypes_by_torch()

_FUNCTIONS: dict[object, str] = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
    operator.neg: "neg", operator.pow: "pow", operator.matmul: "matmul",
    torch.add: "add", torch.sub: "sub", torch.mul: "mul", torch.div: "div", torch.neg: "neg",
    torch.pow: "pow", torch.matmul: "matmul", torch.bmm: "matmul", torch.exp: "exp",
    torch.rsqrt: "rsqrt", torch.relu: "relu", torch.softmax: "softmax", torch.mean: "mean",
    torch.sum: "sum", torch.transpose: "transpose", torch.permute: "permute", torch.reshape: "reshape",
    F.silu: "silu", F.gelu: "gelu", F.relu: "relu", F.softmax: "softmax", F.linear: "linear",
    F.rms_norm: "rmsnorm", F.layer_norm: "layernorm", torch.tanh: "tanh", F.tanh: "tanh", torch.sigmoid: "sigmoid",
    F.sigmoid: "sigmoid", torch.sqrt: "sqrt", torch.abs: "abs", torch.log: "log", torch.erf: "erf",
}
_METHODS: dict[str, str] = {
    "add": "add", "sub": "sub", "mul": "mul", "div": "div", "neg": "neg", "pow": "pow",
    "matmul": "matmul", "exp": "exp", "rsqrt": "rsqrt", "relu": "relu", "softmax": "softmax",
    "mean": "mean", "sum": "sum", "view": "reshape", "reshape": "reshape", "transpose": "transpose",
    "permute": "permute", "tanh": "tanh", "sigmoid": "sigmoid", "sqrt": "sqrt", "abs": "abs", "log": "log",
    "erf": "erf",
}
_MODULES: dict[type, str] = {
    nn.Linear: "linear", nn.RMSNorm: "rmsnorm", nn.LayerNorm: "layernorm", nn.SiLU: "silu",
    nn.GELU: "gelu", nn.ReLU: "relu", nn.Softmax: "softmax", nn.Tanh: "tanh", nn.Sigmoid: "sigmoid",
}
_ALIASES = frozenset({"contiguous"})


def ir_dtype(dtype: torch.dtype, what: str) -> str:
    if dtype not in _DTYPES:
        raise GraphError(f"{what}: data type {dtype} is not supported (f32, f16, bf16)")
    return _DTYPES[dtype]


def _norm_dim(d: object, rank: int, op: str, src: str) -> int:
    if not isinstance(d, int) or not -rank <= d < rank:
        raise UnsupportedOp(op, src, f"dimension {d!r} for a rank-{rank} tensor")
    return d % rank


class Translator:
    """Walks fx nodes in order, appending graph nodes; `env` maps fx nodes to values."""

    def __init__(self, gm: fx.GraphModule, hints: dict[str, int]) -> None:
        self.gm = gm
        self.hints = hints
        self.env: dict[fx.Node, object] = {}
        self.nodes: list[Node] = []
        self._by_name: dict[str, Node] = {}
        self.weights: dict[str, torch.Tensor] = {}
        self._param_value: dict[str, str] = {}

    # -- bookkeeping
    def node(self, name: str) -> Node:
        return self._by_name[name]

    def _add(self, node: Node) -> str:
        if node.name in self._by_name:
            raise GraphError(f"value {node.name!r} defined twice")
        self.nodes.append(node)
        self._by_name[node.name] = node
        return node.name

    def add_input(self, name: str, type_: TensorType) -> None:
        self._add(Node(name, "input", (), type_))

    def _fresh(self, base: str) -> str:
        name, k = base, 1
        while name in self._by_name:
            k += 1
            name = f"{base}_{k}"
        return name

    def param(self, path: str, src: str) -> str:
        """The value of parameter (or buffer) `path`, one `param` node per path."""
        if path in self._param_value:
            return self._param_value[path]
        try:
            t = self.gm.get_parameter(path)
        except AttributeError:
            try:
                t = self.gm.get_buffer(path)
            except AttributeError as exc:
                raise UnsupportedOp(f"get_attr {path}", src, "not a parameter or buffer") from exc
        t = t.detach()
        if t.dim() == 0:
            raise UnsupportedOp(f"get_attr {path}", src, "scalar tensors are not supported")
        name = self._fresh("w_" + path.replace(".", "_"))
        self._add(Node(name, "param", (), TensorType(tuple(int(s) for s in t.shape), ir_dtype(t.dtype, path)),
                       (("path", path),), src))
        self.weights[path] = t
        self._param_value[path] = name
        return name

    def describe(self, n: fx.Node) -> str:
        if n.op == "call_module":
            return f"{type(self.gm.get_submodule(str(n.target))).__name__} ({n.target})"
        if n.op == "call_method":
            return f"Tensor.{n.target}"
        if n.op == "call_function":
            mod = getattr(n.target, "__module__", None) or ""
            return f"{mod + '.' if mod and mod != 'builtins' else ''}{getattr(n.target, '__name__', n.target)}"
        return f"{n.op} {n.target}"

    def tensor(self, arg: object, op: str, src: str) -> str:
        v = self.env.get(arg) if isinstance(arg, fx.Node) else None
        if isinstance(v, str) and v not in self._by_name:  # a dynamic axis read from a shape (`x.shape[0]`)
            raise UnsupportedOp(op, src, f"computes with the dynamic axis {v} read from a shape; a shape read "
                                "may only be passed whole to view or reshape (or write -1)")
        if not isinstance(v, str):
            raise UnsupportedOp(op, src, f"expects a tensor, got {type(arg).__name__} {str(arg)[:40]}")
        return v

    def _type(self, value: str) -> TensorType:
        return self._by_name[value].type

    def outputs(self, args: object, src: str) -> tuple[str, ...]:
        items = args if isinstance(args, tuple | list) else (args,)
        return tuple(self.tensor(a, "return", src) for a in items)

    # -- translation
    def translate(self, n: fx.Node, src: str) -> None:
        if n.op == "get_attr":
            self.env[n] = self.param(str(n.target), src)
            return
        what = self.describe(n)
        if n.op == "call_function" and n.target is getattr:
            self._getattr(n, what, src)
            return
        if n.op == "call_function" and n.target is operator.getitem:
            self._getitem(n, what, src)
            return
        if n.op == "call_method" and n.target == "size":
            self._size(n, what, src)
            return
        if n.op == "call_method" and n.target in _ALIASES:
            self.env[n] = self.tensor(n.args[0], what, src)
            return
        if n.op == "call_module":
            mod = self.gm.get_submodule(str(n.target))
            if isinstance(mod, nn.Identity):
                self.env[n] = self.tensor(n.args[0], what, src)
                return
            op = _MODULES.get(type(mod))
            if op is None:
                raise UnsupportedOp(what, src)
            self.env[n] = self._module(n, mod, op, what, src)
            return
        op = _FUNCTIONS.get(n.target) if n.op == "call_function" else _METHODS.get(str(n.target))
        if op is None:
            raise UnsupportedOp(what, src)
        self.env[n] = self._call(n, op, what, src)

    def _emit(self, n: fx.Node, op: str, inputs: tuple[str, ...], shape: tuple[Dim, ...], dtype: str,
              src: str, **attrs: object) -> str:
        return self._add(Node(self._fresh(n.name), op, inputs, TensorType(tuple(shape), dtype),
                              tuple(attrs.items()), src))  # type: ignore[arg-type]

    # shape reads
    def _getattr(self, n: fx.Node, what: str, src: str) -> None:
        if n.args[1] != "shape":
            raise UnsupportedOp(f"getattr .{n.args[1]}", src)
        self.env[n] = self._type(self.tensor(n.args[0], what, src)).shape

    def _size(self, n: fx.Node, what: str, src: str) -> None:
        shape = self._type(self.tensor(n.args[0], what, src)).shape
        dim = n.args[1] if len(n.args) > 1 else n.kwargs.get("dim")
        self.env[n] = shape if dim is None else shape[_norm_dim(dim, len(shape), what, src)]

    def _getitem(self, n: fx.Node, what: str, src: str) -> None:
        base = self.env.get(n.args[0]) if isinstance(n.args[0], fx.Node) else None
        if not isinstance(base, tuple) or not isinstance(n.args[1], int | slice):
            raise UnsupportedOp("tensor indexing", src, "only indexing a shape is supported")
        self.env[n] = base[n.args[1]]

    def _dims(self, args: tuple, op: str, src: str) -> list[Dim]:
        if len(args) == 1 and isinstance(args[0], tuple | list | torch.Size):
            args = tuple(args[0])
        out: list[Dim] = []
        for a in args:
            v = self.env.get(a) if isinstance(a, fx.Node) else a
            if isinstance(v, tuple):
                out.extend(v)
            elif isinstance(v, int | str) and not isinstance(v, bool):
                out.append(v)
            else:
                raise UnsupportedOp(op, src, f"size argument {str(a)[:40]} is not a constant or a shape read")
        return out

    # calls
    def _module(self, n: fx.Node, mod: nn.Module, op: str, what: str, src: str) -> str:
        x = self.tensor(n.args[0], what, src)
        xt = self._type(x)
        if op == "linear":
            assert isinstance(mod, nn.Linear)
            ins = (x, self.param(f"{n.target}.weight", src))
            if mod.bias is not None:
                ins += (self.param(f"{n.target}.bias", src),)
            return self._linear(n, ins, what, src)
        if op in ("rmsnorm", "layernorm"):
            assert isinstance(mod, nn.RMSNorm | nn.LayerNorm)
            shape = tuple(mod.normalized_shape)
            if len(shape) != 1 or xt.shape[-1] != shape[0]:
                raise UnsupportedOp(what, src, f"normalises over {shape}; only the last dimension is supported")
            if not mod.elementwise_affine:
                raise UnsupportedOp(what, src, "without an elementwise weight")
            ins = (x, self.param(f"{n.target}.weight", src))
            if op == "layernorm":
                if getattr(mod, "bias", None) is None:
                    raise UnsupportedOp(what, src, "layernorm without a bias")
                ins += (self.param(f"{n.target}.bias", src),)
            eps = mod.eps if mod.eps is not None else _default_eps(op, xt.dtype)
            return self._emit(n, op, ins, xt.shape, xt.dtype, src, eps=float(eps))
        if op == "softmax":
            assert isinstance(mod, nn.Softmax)
            _norm_last(mod.dim, len(xt.shape), what, src)
            return self._emit(n, "softmax", (x,), xt.shape, xt.dtype, src)
        if op == "gelu":
            assert isinstance(mod, nn.GELU)
            return self._emit(n, "gelu", (x,), xt.shape, xt.dtype, src, approximate=mod.approximate)
        return self._emit(n, op, (x,), xt.shape, xt.dtype, src)

    def _linear(self, n: fx.Node, ins: tuple[str, ...], what: str, src: str) -> str:
        xt, wt = self._type(ins[0]), self._type(ins[1])
        if len(wt.shape) != 2 or xt.shape[-1] != wt.shape[1]:
            raise UnsupportedOp(what, src, f"input {xt.text()} and weight {wt.text()} do not fit")
        return self._emit(n, "linear", ins, (*xt.shape[:-1], wt.shape[0]), xt.dtype, src)

    def _call(self, n: fx.Node, op: str, what: str, src: str) -> str:
        args, kwargs = list(n.args), dict(n.kwargs)
        if op in ("add", "sub", "mul", "div", "pow"):
            return self._binary(n, op, args, kwargs, what, src)
        x = self.tensor(args[0], what, src)
        xt = self._type(x)
        if op in UNARY_OPS:
            approximate = kwargs.pop("approximate", "none")
            kwargs.pop("inplace", None)
            _no_more(args[1:], kwargs, what, src)
            if op == "gelu":
                return self._emit(n, op, (x,), xt.shape, xt.dtype, src, approximate=str(approximate))
            return self._emit(n, op, (x,), xt.shape, xt.dtype, src)
        if op == "linear":
            w = self.tensor(args[1] if len(args) > 1 else kwargs.pop("weight"), what, src)
            b = args[2] if len(args) > 2 else kwargs.pop("bias", None)
            return self._linear(n, (x, w) if b is None else (x, w, self.tensor(b, what, src)), what, src)
        if op in ("rmsnorm", "layernorm"):
            return self._norm_function(n, op, x, args, kwargs, what, src)
        if op == "matmul":
            return self._matmul(n, x, self.tensor(args[1], what, src), what, src)
        if op in ("mean", "sum"):
            dim = args[1] if len(args) > 1 else kwargs.pop("dim", None)
            keepdim = args[2] if len(args) > 2 else kwargs.pop("keepdim", False)
            _no_more(args[3:], kwargs, what, src)
            dim = dim[0] if isinstance(dim, tuple | list) and len(dim) == 1 else dim
            _norm_last(dim, len(xt.shape), what, src)
            shape = (*xt.shape[:-1], 1) if keepdim else xt.shape[:-1]
            return self._emit(n, op, (x,), shape, xt.dtype, src, keepdim=bool(keepdim))
        if op == "softmax":
            dim = args[1] if len(args) > 1 else kwargs.pop("dim", None)
            dtype = kwargs.pop("dtype", None)
            if dtype is not None and ir_dtype(dtype, what) != xt.dtype:
                raise UnsupportedOp(what, src, "softmax with a dtype change")
            kwargs.pop("_stacklevel", None)
            _no_more(args[2:], kwargs, what, src)
            _norm_last(dim, len(xt.shape), what, src)
            return self._emit(n, "softmax", (x,), xt.shape, xt.dtype, src)
        if op == "transpose":
            rank = len(xt.shape)
            d0, d1 = (_norm_dim(d, rank, what, src) for d in args[1:3])
            perm = list(range(rank))
            perm[d0], perm[d1] = perm[d1], perm[d0]
            return self._emit(n, "transpose", (x,), tuple(xt.shape[p] for p in perm), xt.dtype, src,
                              perm=tuple(perm))
        if op == "permute":
            dims = [_norm_dim(d, len(xt.shape), what, src) for d in self._dims(tuple(args[1:]), what, src)]
            if sorted(dims) != list(range(len(xt.shape))):
                raise UnsupportedOp(what, src, f"{dims} is not a permutation")
            return self._emit(n, "permute", (x,), tuple(xt.shape[p] for p in dims), xt.dtype, src,
                              perm=tuple(dims))
        if op == "reshape":
            shape = self._reshape(xt.shape, self._dims(tuple(args[1:]) or (kwargs.pop("shape"),), what, src),
                                  what, src)
            return self._emit(n, "reshape", (x,), shape, xt.dtype, src, target=tuple(shape))
        raise UnsupportedOp(what, src)  # pragma: no cover - every op of the tables is handled above

    def _norm_function(self, n: fx.Node, op: str, x: str, args: list, kwargs: dict, what: str, src: str) -> str:
        """`F.rms_norm(x, shape, weight, eps)` / `F.layer_norm(x, shape, weight, bias, eps)`."""
        names = ["normalized_shape", "weight", "eps"] if op == "rmsnorm" else \
            ["normalized_shape", "weight", "bias", "eps"]
        vals = dict(zip(names, args[1:], strict=False))
        for k in names:
            if k in kwargs:
                vals[k] = kwargs.pop(k)
        _no_more(args[1 + len(names):], kwargs, what, src)
        xt = self._type(x)
        shape = tuple(vals.get("normalized_shape") or ())
        if len(shape) != 1 or xt.shape[-1] != shape[0]:
            raise UnsupportedOp(what, src, f"normalises over {shape}; only the last dimension is supported")
        if vals.get("weight") is None or (op == "layernorm" and vals.get("bias") is None):
            raise UnsupportedOp(what, src, "without an elementwise weight (and bias)")
        ins = (x, self.tensor(vals["weight"], what, src))
        if op == "layernorm":
            ins += (self.tensor(vals["bias"], what, src),)
        eps = vals.get("eps")
        if eps is None:
            eps = _default_eps(op, xt.dtype)
        if not isinstance(eps, int | float):
            raise UnsupportedOp(what, src, "eps is not a number")
        return self._emit(n, op, ins, xt.shape, xt.dtype, src, eps=float(eps))

    def _binary(self, n: fx.Node, op: str, args: list, kwargs: dict, what: str, src: str) -> str:
        a, b = args[0], args[1] if len(args) > 1 else kwargs.pop("other", kwargs.pop("exponent", None))
        _no_more(args[2:], kwargs, what, src)
        ta, tb = (isinstance(v, fx.Node) for v in (a, b))
        if ta and tb:
            x, y = self.tensor(a, what, src), self.tensor(b, what, src)
            xt, yt = self._type(x), self._type(y)
            shape = broadcast(xt.shape, yt.shape)
            if shape is None or xt.dtype != yt.dtype:
                raise UnsupportedOp(what, src, f"operands {xt.text()} and {yt.text()} do not broadcast")
            return self._emit(n, op, (x, y), shape, xt.dtype, src)
        scalar, tensor_arg, first = (b, a, False) if ta else (a, b, True)
        if not isinstance(scalar, int | float) or isinstance(scalar, bool):
            raise UnsupportedOp(what, src, f"operand {str(scalar)[:40]} is neither a tensor nor a number")
        x = self.tensor(tensor_arg, what, src)
        xt = self._type(x)
        return self._emit(n, op, (x,), xt.shape, xt.dtype, src, scalar=float(scalar), scalar_first=first)

    def _matmul(self, n: fx.Node, a: str, b: str, what: str, src: str) -> str:
        at, bt = self._type(a), self._type(b)
        if len(at.shape) < 2 or len(bt.shape) < 2 or at.shape[-1] != bt.shape[-2]:
            raise UnsupportedOp(what, src, f"operands {at.text()} and {bt.text()} do not multiply")
        batch_a, batch_b = at.shape[:-2], bt.shape[:-2]
        if batch_b and batch_b != batch_a:
            raise UnsupportedOp(what, src, f"batch dimensions {batch_a} and {batch_b} differ")
        return self._emit(n, "matmul", (a, b), (*batch_a, at.shape[-2], bt.shape[-1]), at.dtype, src)

    def _reshape(self, shape: tuple[Dim, ...], target: list[Dim], what: str, src: str) -> tuple[Dim, ...]:
        sym_in = Counter(d for d in shape if isinstance(d, str))
        static_in = prod(d for d in shape if isinstance(d, int))
        if target.count(-1) > 1:
            raise UnsupportedOp(what, src, "more than one -1")
        sym_out = Counter(d for d in target if isinstance(d, str))
        static_out = prod(d for d in target if isinstance(d, int) and d != -1)
        if any(isinstance(d, int) and d < -1 for d in target) or static_out == 0:
            raise UnsupportedOp(what, src, f"bad size in {target}")
        if -1 in target:
            left = sym_in - sym_out
            if sym_out - sym_in:
                raise UnsupportedOp(what, src, "names a dynamic axis the input does not have")
            if len(left) == 1 and sum(left.values()) == 1 and static_in == static_out:
                fill: Dim = next(iter(left))
            elif not left and static_in % static_out == 0:
                fill = static_in // static_out
            else:
                raise UnsupportedOp(what, src, f"reshape {shape} -> {target} merges or splits a dynamic axis")
            target = [fill if d == -1 else d for d in target]
        if Counter(d for d in target if isinstance(d, str)) != sym_in or \
                prod(d for d in target if isinstance(d, int)) != static_in:
            raise UnsupportedOp(what, src, f"reshape {shape} -> {target} merges or splits a dynamic axis")
        return tuple(target)


def _default_eps(op: str, dtype: str) -> float:
    """torch's default: 1e-5 for layer_norm, the machine epsilon of the input's type for rms_norm."""
    if op == "layernorm":
        return 1e-5
    return float(torch.finfo(torch_dtype(dtype)).eps)


def _norm_last(dim: object, rank: int, what: str, src: str) -> None:
    if not isinstance(dim, int) or dim % max(rank, 1) != rank - 1:
        raise UnsupportedOp(what, src, f"over dimension {dim!r}; only the last dimension is supported")


def _no_more(args: list, kwargs: dict, what: str, src: str) -> None:
    if args or kwargs:
        extra = [str(a)[:20] for a in args] + sorted(kwargs)
        raise UnsupportedOp(what, src, f"unsupported arguments {', '.join(extra)}")
