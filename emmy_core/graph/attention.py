"""Scaled dot-product attention rewritten, in a Dynamo graph, as the matrix products and softmax Emmy lowers.

`F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p=0, is_causal, scale, enable_gqa)` is one
torch op; Emmy has no attention kernel, but it lowers what attention is made of. `decompose_sdpa` replaces
each such node (without dropout) by

    q    = q viewed as [..., Hk, r * L, D]           (grouped-query attention: r query heads a key head)
    m    = attention_mask(q, k, attn_mask, is_causal, scale, r)   (torch runs it; masked only)
    s    = q @ k^T (+ m)                             (a batched matmul, the mask its residual epilogue)
    p    = softmax(s * scale)                        (the scale folded into the softmax kernel)
    out  = p @ v                                     (viewed back as [..., H, L, D])

The mask is additive and already divided by the scale, so `softmax((q k^T + m/scale) * scale)` is
`softmax(scale q k^T + m)`: torch's own definition (a causal mask keeps `j <= i`, aligned top-left, as
torch's `is_causal` does; a boolean mask keeps True). It is materialised at the scores' full shape,
because Emmy's elementwise kernels broadcast only rows and columns. Every node gets its fake value by
running the op on its operands' fake values, so the partitioner and the translation read it like any
node Dynamo made. The groups these nodes fall into are checked against torch at build time like any
other, and a group handed back to torch computes the same decomposition with torch's ops.

Grouped-query attention stacks the r query heads that share a key head as rows of one product, instead of
copying each key and value head r times: no copy, and products of r times as many rows (at decode, r rows
where there was one).
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from emmy_core.graph.dynamo import LEFT_TO_TORCH

SDPA = frozenset({F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention})


def attention_mask(q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None, is_causal: bool,
                   scale: float, repeat: int = 1) -> torch.Tensor:
    """The additive mask divided by `scale` (0 kept, -inf masked), contiguous at the scores' shape `[..., H, L, S]`;
    with `repeat` query heads a key head, at the grouped scores' shape `[..., H / repeat, repeat * L, S]`."""
    length, source = q.shape[-2], k.shape[-2]
    if is_causal:  # -inf where j > i, in one op beside the copy (this runs on every call)
        m = torch.full((length, source), float("-inf"), dtype=q.dtype, device=q.device).triu(1)
    else:
        m = torch.zeros(length, source, dtype=q.dtype, device=q.device)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:  # torch.where broadcasts a batched mask ([B, 1, L, S]) as SDPA does
            m = torch.where(attn_mask, m, torch.full((), float("-inf"), dtype=q.dtype, device=q.device))
        else:
            m = m + attn_mask.to(q.dtype) / scale
    m = m.expand(*q.shape[:-1], source)
    if repeat > 1:  # the flatten of the expanded view is the one copy
        m = m.unflatten(-3, (q.shape[-3] // repeat, repeat)).flatten(-3, -2)
    return m.contiguous()


def _value(x: object) -> Any:
    return x.meta.get("example_value", x.meta.get("val")) if isinstance(x, fx.Node) else x


def _arg(node: fx.Node, i: int, name: str, default: object) -> Any:
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


FASTER = "torch's fused attention is faster here (attention='auto'; attention=True rewrites it as Emmy's kernels)"
DECODE = ("a decode step (one query position): its cache grows every step, and Emmy would settle and check its "
          "kernels at every new length (attention='auto'; attention=True rewrites it as Emmy's kernels)")


def torch_wins(node: fx.Node) -> str | None:
    """Why torch's fused attention is expected to beat Emmy's decomposition for this attention node
    (`attention="auto"`), or None where Emmy's is expected to win: on a CPU, f32 is torch's, and so is a
    query of one position (decode); 16-bit attention over more positions, and any attention elsewhere (no
    measurement yet), is Emmy's.

    Measured with `bench/attention.py` (causal grouped-query attention, 8 query heads, 2 key heads, B=1, on
    this project's AVX2 CPU, untuned): torch's time over Emmy's was 0.56-0.64 in f32 at head dimensions 32-128
    and length 128 (torch's flash kernel for the CPU wins everywhere), and 0.94-1.70 in f16 (Emmy's wins
    from head dimension 64, and ties at 32), where torch computes 16-bit attention slowly on a CPU. In a
    decode step the cache is one position longer at every call, a size the group has never run: with Emmy's
    attention each new length settled and checked its group again (`bench/generate.py`: 15-32 ms a token
    beyond eager's 3-11 ms, f16), with torch's the groups around it keep their sizes."""
    q = _value(node.args[0]) if node.args else None
    if not isinstance(q, torch.Tensor) or q.device.type != "cpu":
        return None
    if q.dim() >= 2 and isinstance(q.shape[-2], int) and q.shape[-2] == 1:
        return DECODE
    return None if q.dtype in (torch.float16, torch.bfloat16) else FASTER


def decompose_sdpa(gm: fx.GraphModule, consts: dict[str, float],
                   unless: Callable[[fx.Node], str | None] | None = None) -> list[str]:
    """Rewrites every attention node of `gm` without dropout (in place), but those `unless` gives a reason to
    leave to torch (recorded for the report); the names of the nodes rewritten.

    `consts` gives the value of a scale Dynamo passes as a symbolic float (a module attribute it lifted);
    a scale that is neither a number nor such a value leaves its node to torch."""
    done: list[str] = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in SDPA:
            continue
        why = unless(node) if unless is not None else None
        if why is not None:
            node.meta[LEFT_TO_TORCH] = why
        elif _rewrite(gm.graph, node, consts):
            done.append(node.name)
    if done:
        gm.graph.lint()
        gm.recompile()
    return done


def node_adder(graph: fx.Graph, node: fx.Node, consts: Mapping[str, float]) -> Callable[..., fx.Node] | None:
    """`add(target, *args, **kwargs)`: a new call node in `graph` (at its insertion point) for a rewrite of `node`,
    its fake value made by running `target` on its operands' fake values in the mode of `node`'s own; None where
    `node`'s first operand has no fake mode to run in.

    A lifted float (named in `consts`) has an unbacked fake value: the op is run with its compile-time value."""
    first = _value(node.args[0]) if node.args else None
    fake_mode = getattr(first, "fake_mode", None)
    if fake_mode is None:
        return None

    def fake(a: object) -> Any:
        if isinstance(a, tuple | list):
            return type(a)(fake(x) for x in a)
        return consts[a.name] if isinstance(a, fx.Node) and a.name in consts else _value(a)

    def add(target: Callable[..., Any], *args: Any, **kwargs: Any) -> fx.Node:
        made = graph.call_function(target, args, kwargs)
        with fake_mode:
            made.meta["example_value"] = target(*map(fake, args), **{n: fake(a) for n, a in kwargs.items()})
        made.meta["stack_trace"] = node.meta.get("stack_trace")
        return made

    return add


def _rewrite(graph: fx.Graph, node: fx.Node, consts: dict[str, float]) -> bool:
    """Replaces one attention node by its decomposition; False (nothing changed) where it does not apply."""
    q, k, v = node.args[:3]
    mask = _arg(node, 3, "attn_mask", None)
    dropout = _arg(node, 4, "dropout_p", 0.0)
    causal = _arg(node, 5, "is_causal", False)
    scale = _arg(node, 6, "scale", None)
    gqa = node.kwargs.get("enable_gqa", False)
    qv, kv, vv = (_value(x) for x in (q, k, v))
    if not all(isinstance(t, torch.Tensor) and t.dim() >= 3 for t in (qv, kv, vv)):
        return False
    if dropout not in (0, 0.0) or not isinstance(causal, bool) or not isinstance(gqa, bool):
        return False
    if scale is None:
        scale_value = float(qv.shape[-1]) ** -0.5 if isinstance(qv.shape[-1], int) else -1.0
    elif isinstance(scale, int | float) and not isinstance(scale, bool):
        scale_value = float(scale)
    elif isinstance(scale, fx.Node) and scale.name in consts:
        scale_value = consts[scale.name]
    else:
        return False
    if scale_value <= 0 or (mask is not None and not isinstance(_value(mask), torch.Tensor)):
        return False
    heads_q, heads_k = qv.shape[-3], kv.shape[-3]
    repeat = 1
    if gqa and heads_q != heads_k:
        if not (isinstance(heads_q, int) and isinstance(heads_k, int)) or heads_q % heads_k:
            return False
        repeat = heads_q // heads_k
    add = node_adder(graph, node, consts)
    if add is None:
        return False
    the_scale = scale if isinstance(scale, fx.Node) else scale_value
    with graph.inserting_before(node):
        rows = q
        if repeat > 1:  # the query heads of one key head stacked as rows: [..., Hk, r * L, D], a view of q
            rows = add(torch.flatten, add(torch.unflatten, q, -3, (heads_k, repeat)), -3, -2)
        scores = add(torch.matmul, rows, add(torch.transpose, k, -2, -1))
        if causal or mask is not None:
            scores = add(operator.add, scores, add(attention_mask, q, k, mask, causal, the_scale, repeat))
        probs = add(torch.softmax, add(operator.mul, scores, the_scale), -1)
        out = add(torch.matmul, probs, v)
        if repeat > 1:  # back to [..., H, L, D]
            out = add(torch.flatten, add(torch.unflatten, out, -2, (repeat, -1)), -4, -3)
    node.replace_all_uses_with(out)
    graph.erase_node(node)
    return True
