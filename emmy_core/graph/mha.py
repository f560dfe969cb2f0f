"""`nn.MultiheadAttention`'s functional form rewritten, in a Dynamo graph, as the projections and attention Emmy lowers.

Dynamo hands `F.multi_head_attention_forward` over as one node whose value is a pair (the output and the
attention weights), so torch ran all of it, its four projections included, and the report could not even
name it. `decompose_mha` replaces each such node of an evaluation (no dropout) by what it computes:

    q, k, v = the input projections          (one linear of the packed weight where query, key and value
                                              are one tensor, as in self-attention)
    each     viewed [B, H, L, hd]
    mask     = attn_mask and key_padding_mask as one additive mask (True masks out, as nn.MultiheadAttention
               reads a boolean mask; a 3-D attn_mask is [B * H, L, S])
    out      = scaled_dot_product_attention(q, k, v, mask)              (need_weights=False)
               or p = softmax(q k^T * scale + mask), out = p v          (need_weights=True: p is returned,
                                                                          averaged over heads by default;
                                                                          and eager's fast path, below)
    out      = the output projection of the heads joined, [L, B, E]

A query whose every key is masked gets what eager `nn.MultiheadAttention` gives it, so compiling never changes
a model's answer: NaN where eager computes a softmax over -inf alone (need_weights=True, and its fast path:
self-attention, batch_first, evaluation without gradients, which runs `torch._native_multi_head_attention`), 0
where eager runs `scaled_dot_product_attention` (need_weights=False otherwise). Dynamo traces the functional
form even where eager takes the fast path, and marks it: torch then makes the output contiguous after its
transpose back to batch first ("keep the traced slowpath layout aligned with eager fastpath"), which is how
`eager_fast_path` knows it.

The attention this makes is then decomposed, or left to torch's fused kernel, as any other
(`emmy_core.graph.attention`). A node with bias_k or bias_v, add_zero_attn, static keys or values, an
unbatched query, or in training, stays torch's, with the reason in the report.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from emmy_core.graph.attention import node_adder
from emmy_core.graph.dynamo import LEFT_TO_TORCH

MHA = frozenset({F.multi_head_attention_forward})
ARGS = ("query", "key", "value", "embed_dim_to_check", "num_heads", "in_proj_weight", "in_proj_bias", "bias_k",
        "bias_v", "add_zero_attn", "dropout_p", "out_proj_weight", "out_proj_bias", "training", "key_padding_mask",
        "need_weights", "attn_mask", "use_separate_proj_weight", "q_proj_weight", "k_proj_weight", "v_proj_weight",
        "static_k", "static_v", "average_attn_weights", "is_causal")
DEFAULTS = {"training": True, "key_padding_mask": None, "need_weights": True, "attn_mask": None,
            "use_separate_proj_weight": False, "q_proj_weight": None, "k_proj_weight": None, "v_proj_weight": None,
            "static_k": None, "static_v": None, "average_attn_weights": True, "is_causal": False}


def _value(x: object) -> Any:
    return x.meta.get("example_value", x.meta.get("val")) if isinstance(x, fx.Node) else x


def _args(node: fx.Node) -> dict[str, Any]:
    got = dict(DEFAULTS)
    got.update(zip(ARGS, node.args, strict=False))
    got.update(node.kwargs)
    return got


def why_not(node: fx.Node) -> str | None:
    """Why this multi-head attention node stays torch's (None: it is rewritten)."""
    a = _args(node)
    if a["training"] is not False:
        return "multi-head attention in training (its dropout)"
    if any(a[k] is not None for k in ("bias_k", "bias_v", "static_k", "static_v")) or a["add_zero_attn"] is not False:
        return "multi-head attention with bias_k/bias_v, static keys or values, or add_zero_attn"
    q, k, v = (_value(a[n]) for n in ("query", "key", "value"))
    if not all(isinstance(t, torch.Tensor) and t.dim() == 3 for t in (q, k, v)):
        return "multi-head attention of an unbatched query"
    e, h = a["embed_dim_to_check"], a["num_heads"]
    if not (isinstance(e, int) and isinstance(h, int) and h > 0 and e % h == 0 and q.shape[-1] == e):
        return "multi-head attention whose width or head count is not a constant"
    weights = ("q_proj_weight", "k_proj_weight", "v_proj_weight") if a["use_separate_proj_weight"] \
        else ("in_proj_weight",)
    if not all(isinstance(_value(a[w]), torch.Tensor) for w in (*weights, "out_proj_weight")):
        return "multi-head attention without its projection weights"
    if a["is_causal"] and a["attn_mask"] is None:
        return "multi-head attention marked causal with no mask"
    if not isinstance(a["need_weights"], bool) or not isinstance(a["average_attn_weights"], bool):
        return "multi-head attention whose need_weights is not a constant"
    for user in node.users:
        if user.target is not operator.getitem or not isinstance(user.args[1], int) or \
                (user.args[1] == 1 and not a["need_weights"]):
            return "multi-head attention whose result is read other than as (output, weights)"
    return None


def eager_fast_path(node: fx.Node) -> bool:
    """Whether eager `nn.MultiheadAttention` would have run this call on its fast path, which Dynamo's trace
    replaced by the functional form: self-attention whose output, transposed back to batch first, is made
    contiguous (the mark torch's `forward` leaves where only tracing kept it off the fast path)."""
    a = _args(node)
    if a["need_weights"] or not (a["query"] is a["key"] is a["value"]):
        return False
    for user in node.users:
        if user.target is operator.getitem and user.args[1] == 0:
            for t in user.users:
                if t.op == "call_method" and t.target == "transpose" and \
                        any(c.op == "call_method" and c.target == "contiguous" for c in t.users):
                    return True
    return False


def decompose_mha(gm: fx.GraphModule, consts: Mapping[str, float]) -> list[str]:
    """Rewrites every multi-head attention node of `gm` it can (in place), and marks the others with their reason
    for the report; the names of the nodes rewritten."""
    done: list[str] = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in MHA:
            continue
        why = why_not(node)
        if why is not None:
            node.meta[LEFT_TO_TORCH] = why
            continue
        _rewrite(gm.graph, node, consts)
        done.append(node.name)
    if done:
        gm.graph.eliminate_dead_code()
        gm.graph.lint()
        gm.recompile()
    return done


def _rewrite(graph: fx.Graph, node: fx.Node, consts: Mapping[str, float]) -> None:
    a = _args(node)
    add = node_adder(graph, node, consts)
    assert add is not None  # why_not checked the operands are fake tensors
    query, key, value = a["query"], a["key"], a["value"]
    e, h = a["embed_dim_to_check"], a["num_heads"]
    hd = e // h
    dtype = _value(query).dtype

    def heads(x: fx.Node) -> fx.Node:  # [L, B, E] -> [B, H, L, hd]
        return add(torch.permute, add(torch.unflatten, x, -1, (h, hd)), (1, 2, 0, 3))

    def part(t: fx.Node | None, i: int) -> fx.Node | None:  # the i-th third of a packed weight or bias
        return None if t is None else add(torch.narrow, t, 0, i * e, e)

    def additive(m: fx.Node) -> fx.Node:  # a boolean mask (True: masked out) as 0 / -inf of the query's dtype
        if _value(m).dtype != torch.bool:
            return m
        return add(torch.masked_fill, add(torch.zeros_like, m, dtype=dtype), m, float("-inf"))

    with graph.inserting_before(node):
        if a["use_separate_proj_weight"]:
            bias = a["in_proj_bias"]
            projected = [add(F.linear, x, a[w], part(bias, i)) for i, (x, w) in
                         enumerate(((query, "q_proj_weight"), (key, "k_proj_weight"), (value, "v_proj_weight")))]
        elif query is key is value:  # one product of the packed weight, split as views
            both = add(torch.unflatten, add(F.linear, query, a["in_proj_weight"], a["in_proj_bias"]), -1, (3, e))
            projected = [add(torch.select, both, -2, i) for i in range(3)]
        else:
            projected = [add(F.linear, x, part(a["in_proj_weight"], i), part(a["in_proj_bias"], i))
                         for i, x in enumerate((query, key, value))]
        q, k, v = (heads(x) for x in projected)
        mask = None
        if a["attn_mask"] is not None:
            mask = additive(a["attn_mask"])
            if _value(mask).dim() == 3:  # [B * H, L, S] -> [B, H, L, S]
                mask = add(torch.unflatten, mask, 0, (-1, h))
        if a["key_padding_mask"] is not None:  # [B, S] -> [B, 1, 1, S]
            padding = add(torch.unsqueeze, add(torch.unsqueeze, additive(a["key_padding_mask"]), 1), 1)
            mask = padding if mask is None else add(operator.add, mask, padding)
        weights = None
        if a["need_weights"] or eager_fast_path(node):  # a softmax over -inf alone is NaN, as eager's is
            scores = add(operator.mul, add(torch.matmul, q, add(torch.transpose, k, -2, -1)), hd ** -0.5)
            if mask is not None:
                scores = add(operator.add, scores, mask)
            probs = add(torch.softmax, scores, -1)
            out = add(torch.matmul, probs, v)
            if a["need_weights"]:
                weights = add(torch.mean, probs, 1) if a["average_attn_weights"] else probs
        else:
            out = add(F.scaled_dot_product_attention, q, k, v, attn_mask=mask)
        out = add(torch.flatten, add(torch.permute, out, (2, 0, 1, 3)), -2)  # [L, B, E]
        out = add(F.linear, out, a["out_proj_weight"], a["out_proj_bias"])
    for user in list(node.users):
        user.replace_all_uses_with(out if user.args[1] == 0 else weights)  # type: ignore[arg-type]
        graph.erase_node(user)
    graph.erase_node(node)
