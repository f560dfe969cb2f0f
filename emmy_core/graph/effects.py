"""In-place changes and other effects in a Dynamo graph, and what they demand of a partition into Emmy groups.

A model may fill a buffer through views (`out[..., :d].copy_(a)`, DeepSeek V3's keys; `out[:, i] = s`, RWKV's
scan; a key-value cache's `index_copy_`). The graph's edges do not say that a later reader of `out` must run
after those writes: only the graph's order does. Two things then keep the answer torch's:

- **no group spans a write** (`segments`): a group is one call placed where its last output was, and nodes
  that need its outputs are moved after it. A group holding a node before a write and another after it moved
  the write's operands, and so the write, past readers of the buffer (the readers saw the buffer unfilled).
  A group within one stretch between two writes moves nothing across a write.
- **the views a write goes through stay torch's views** (`left_to_torch`): Emmy computes a view into a new
  buffer, so a write into what Emmy returned would not reach the tensor torch's code writes, and a view Emmy
  took before the write would not see it. Every view of a written tensor, and the chain of views from the
  write back to the tensor, is left to torch.

Other calls kept for their effect are stretch boundaries too: a draw from torch's random generator (a
group moving one draw past another swaps the numbers they get), a functorch transform's nesting
(`torch.vmap` traced inline: `_vmap_increment_nesting` ... `_vmap_decrement_nesting`), an autocast or
inference-mode region's entry and exit, `_set_grad_enabled`. Nodes inside a transform or autocast region
are left to torch: they compute on batched (or autocast) tensors whose shapes (or types) the graph's
metadata does not show (transformers' masks are built under `vmap`; Mamba's fell there).
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Iterable

import torch
import torch.fx as fx
import torch.nn.functional as F

from emmy_core.graph.dynamo import ALIAS, PERMUTE, RESHAPE, target_key, value

IN_REGION = "inside a vmap, grad or jvp transform or an autocast region: torch runs what it sees there"
_OPENS = frozenset({"_vmap_increment_nesting", "_grad_increment_nesting", "_jvp_increment_nesting",
                    "_enter_autocast"})
_CLOSES = frozenset({"_vmap_decrement_nesting", "_grad_decrement_nesting", "_jvp_decrement_nesting",
                     "_exit_autocast"})
_BARRIERS = frozenset({"_set_grad_enabled", "_enter_inference_mode", "_exit_inference_mode", *_OPENS, *_CLOSES})
WRITES_VIEW = "a view of a tensor changed in place: torch keeps it a view, so the change reaches what it shows"
CHANGES_IN_PLACE = "changes a tensor in place: torch runs it, where the model put it"
_IN_PLACE_OPERATORS = frozenset({operator.setitem, operator.iadd, operator.isub, operator.imul, operator.itruediv,
                                 operator.ifloordiv, operator.imod, operator.ipow, operator.iand, operator.ior,
                                 operator.ixor, operator.ilshift, operator.irshift, operator.imatmul})
# what may return its operand or a view of it (a conversion to the same type returns its operand itself)
_VIEWS = frozenset({*RESHAPE, *PERMUTE, *(ALIAS - {"clone", torch.clone}), operator.getitem, "narrow", torch.narrow,
                    "select", torch.select, "expand", "expand_as", "view_as", "t", torch.t, "split", torch.split,
                    "chunk", torch.chunk, "unbind", torch.unbind, "diagonal", torch.diagonal, "as_strided",
                    "unfold", "movedim", torch.movedim, "moveaxis", "swapaxes", "swapdims", "detach", torch.detach,
                    "view_as_real", "view_as_complex", "squeeze_", "unsqueeze_", F.dropout})


def _name(target: object) -> str:
    return target if isinstance(target, str) else getattr(target, "__name__", "")


def _inplace_flag(node: fx.Node) -> bool:
    """`inplace=True` by keyword or by position (`F.relu(x, True)`), read from the function's signature."""
    if node.kwargs.get("inplace") is True:
        return True
    if node.op != "call_function" or len(node.args) < 2:
        return False
    try:
        bound = inspect.signature(node.target).bind_partial(*node.args, **node.kwargs)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return False
    return bound.arguments.get("inplace") is True


def mutates(node: fx.Node) -> bool:
    """Whether `node` changes a tensor in place: a method or function whose name ends in `_` (`copy_`,
    `index_copy_`, `torch.relu_`), `x[i] = v` and the augmented operators, `out=`, or `inplace=True`."""
    if node.op not in ("call_function", "call_method"):
        return False
    name = _name(node.target)
    if node.target in _IN_PLACE_OPERATORS:
        return True
    if name.endswith("_") and not name.endswith("__") and name != "_":
        return True
    return node.kwargs.get("out") is not None or _inplace_flag(node)


def written(node: fx.Node) -> fx.Node | None:
    """The node whose tensor a write changes: `out=`'s, else the first operand's."""
    target = node.kwargs.get("out") if node.kwargs.get("out") is not None else (node.args[0] if node.args else None)
    return target if isinstance(target, fx.Node) else None


def _is_view(node: fx.Node) -> bool:
    return node.op in ("call_function", "call_method") and target_key(node) in _VIEWS


def _base(node: fx.Node) -> fx.Node:
    """The tensor a chain of views starts from."""
    while _is_view(node) and node.args and isinstance(node.args[0], fx.Node):
        node = node.args[0]
    return node


def _storage(node: object) -> int | None:
    """The identity of the storage a node's tensor lives in, as Dynamo's fake values keep it (a view shares its
    base's storage, a new tensor has its own); None where the node has no tensor value."""
    v = value(node)
    if not isinstance(v, torch.Tensor):
        return None
    try:
        return int(v.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError, AttributeError):
        return None


def _aliases_an_operand(node: fx.Node, storage: int) -> bool:
    """Whether `node` returns a view of (or itself as) one of its tensor operands: the same storage."""
    operands = [*node.args, *node.kwargs.values()]
    flat = [x for a in operands for x in (a if isinstance(a, tuple | list) else (a,))]
    return any(isinstance(a, fx.Node) and _storage(a) == storage for a in flat)


def left_to_torch(nodes: Iterable[fx.Node]) -> dict[str, str]:
    """What torch must run for the model's effects to stay its own: every in-place write, every view of a tensor
    some node writes, every node inside a transform or autocast region (FX name -> why). A view is what shares
    its operand's storage in Dynamo's fake values (`.T`, `.data`, `swapaxes`, `ravel`, `broadcast_to`, ...:
    no list of view ops to keep complete); where a node has no fake value, the listed view ops are followed."""
    nodes = list(nodes)
    out: dict[str, str] = {}
    bases: set[fx.Node] = set()
    storages: set[int] = set()
    depth = 0
    for n in nodes:
        if n.op == "call_function" and _name(n.target) in _OPENS | _CLOSES:
            depth = max(0, depth + (1 if _name(n.target) in _OPENS else -1))
        elif depth and n.op in ("call_function", "call_method", "call_module"):
            out[n.name] = IN_REGION
        if mutates(n):
            out[n.name] = CHANGES_IN_PLACE
            w = written(n)
            if w is not None:
                bases.add(_base(w))
                if (st := _storage(w)) is not None:
                    storages.add(st)
    for n in nodes:  # every view of a written storage, whatever op made it
        st = _storage(n) if n.op in ("call_function", "call_method") else None
        if st is not None and st in storages and _aliases_an_operand(n, st):
            out.setdefault(n.name, WRITES_VIEW)
    todo = list(bases)
    seen = set(bases)
    while todo:  # every listed view of a written tensor, at any depth (nodes without fake values)
        node = todo.pop()
        for user in node.users:
            if user not in seen and _is_view(user) and user.args and user.args[0] is node:
                seen.add(user)
                out.setdefault(user.name, WRITES_VIEW)
                todo.append(user)
    return out


_RANDOM = frozenset({"rand", "randn", "rand_like", "randn_like", "randint", "randint_like", "randperm", "bernoulli",
                     "multinomial", "normal", "poisson", "rrelu", "native_dropout"})
_DROPOUTS = frozenset({"dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"})


def draws_random(node: fx.Node) -> bool:
    """Whether `node` draws from torch's random generator: `rand*`, `bernoulli`, ..., or a dropout whose
    `training` is not False (a dropout in eval is the identity, and every model calls one)."""
    if node.op not in ("call_function", "call_method"):
        return False
    name = _name(node.target)
    if name in _RANDOM:
        return True
    if name not in _DROPOUTS:
        return False
    try:
        bound = inspect.signature(node.target).bind_partial(*node.args, **node.kwargs)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return True
    return bound.arguments.get("training", True) is not False


def kept_for_effect(node: fx.Node) -> bool:
    """An in-place write, a draw from the random generator (two draws that trade places draw each other's
    numbers), or a call that changes torch's state (a transform's nesting, autocast, grad mode)."""
    return mutates(node) or draws_random(node) or (node.op == "call_function" and _name(node.target) in _BARRIERS)


def segments(nodes: Iterable[fx.Node]) -> dict[fx.Node, int]:
    """Each node's stretch of the graph: the count of calls kept for their effect before it (each opens a new
    stretch)."""
    seg, out = 0, {}
    for n in nodes:
        if kept_for_effect(n):
            seg += 1
            out[n] = seg
            seg += 1
        else:
            out[n] = seg
    return out
