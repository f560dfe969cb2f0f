"""Scaled dot-product attention rewritten, in a Dynamo graph, as the matrix products and softmax Emmy lowers.

`F.scaled_dot_product_attention(q, k, v, attn_mask, dropout_p=0, is_causal, scale, enable_gqa)` is one
torch op; Emmy has no attention kernel, but it lowers what attention is made of. `decompose_sdpa` replaces
each such node (without dropout) by

    q    = q viewed as [..., Hk, r * L, D]           (grouped-query attention: r query heads a key head)
    s    = q @ k^T                                   (a batched matmul)
    p    = softmax(s * scale)                        (causal or no mask: the scale folded into the softmax kernel;
                                                      causal, s + m first: m = attention_mask(...), 0 or -inf)
    p    = softmax(s * scale + m), m, keep = masked_terms(q, k, attn_mask, is_causal, r)   (a mask given)
    out  = p @ v  (times keep, a mask given)         (viewed back as [..., H, L, D])

`softmax(scale q k^T + m)` is torch's own definition (a causal mask keeps `j <= i`, aligned top-left, as
torch's `is_causal` does; a boolean mask keeps True; a float mask is added as it is, never divided by the
scale: `finfo.min / scale` overflows to -inf). A query that may attend to nothing (every entry of its row
masked -inf: a padded query of a left-padded batch) gets 0, as torch's attention gives it (its "safe
softmax"), not the NaN of a softmax over -inf alone, which the next layer would spread over every position
(0 probability times a NaN value): its mask row is made 0 and its output multiplied by `keep`, 0 there and 1
elsewhere. The masks are made by torch at every call, at the scores' full shape, because Emmy's elementwise
kernels broadcast only rows and columns. Every node gets its fake value by running the op on its operands'
fake values, so the partitioner and the translation read it like any node Dynamo made. The groups these
nodes fall into are checked against torch at build time like any other, and a group handed back to torch
computes the same decomposition with torch's ops.

Grouped-query attention stacks the r query heads that share a key head as rows of one product, instead of
copying each key and value head r times: no copy, and products of r times as many rows (at decode, r rows
where there was one). A key and value of one head broadcast over the query heads without `enable_gqa`
(multi-query attention as Falcon writes it) is the same with one key head.
"""

from __future__ import annotations

import copy
import functools
import math
import operator
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

from emmy_core.graph.dynamo import LEFT_TO_TORCH, sym_key

SDPA = frozenset({F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention})


CACHED_MASK_BYTES = 16 << 20  # a causal mask up to this size is made once per shape and kept (4 at most)


def attention_mask(q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None, is_causal: bool,
                   repeat: int = 1) -> torch.Tensor:
    """The additive mask (0 kept, -inf masked, a float mask's own values added), contiguous at the scores' shape
    `[..., H, L, S]`; with `repeat` query heads a key head, at the grouped scores' shape
    `[..., H / repeat, repeat * L, S]`.

    A causal mask with no `attn_mask` depends on the shapes alone: up to `CACHED_MASK_BYTES` it is made once per
    shape and the same tensor returned at every call (it is only ever read: the scores' residual). Made afresh,
    its memory came from the system at each call, and the page faults cost more than Emmy's three kernels
    (`bench/attention.py`: 130 us of a 400 us call at 8 heads, length 128). Fake tensors are never cached."""
    if is_causal and attn_mask is None and type(q) is torch.Tensor and not q.requires_grad:
        shape = (*q.shape[:-1], k.shape[-2])
        if q.element_size() * math.prod(shape) <= CACHED_MASK_BYTES:
            return _causal_mask(shape, q.dtype, q.device, repeat)
    return _mask(q, k, attn_mask, is_causal, repeat)


def masked_terms(q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor, is_causal: bool,
                 repeat: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """`attention_mask` of a given mask with every row masked -inf throughout made 0, and `keep` at
    `[..., rows, 1]`: 0 for those rows, 1 for the rest (the attention's output is multiplied by it, so a query
    that may attend to nothing gets 0, as torch gives it, where a softmax over -inf alone gives NaN).

    In 16 bits, a row whose largest entry is finite, not 0 and under 2**24 in size is shifted by it. torch adds
    the mask to the scores in f32, so a row masked by a finite value throughout (-10000, `finfo(f16).min`)
    keeps its scores; Emmy's scores pass between its kernels in 16 bits, where that value rounded them away. A
    softmax does not change when its row is shifted, so the shift gives torch's answer. A larger value (as
    `finfo(bf16).min`) rounds the scores away in f32 too, and is left as it is, as torch's is."""
    m = _base(q, k, attn_mask, is_causal)  # at the mask's own broadcast shape: the rows are read before the spread
    dead = (m == float("-inf")).all(-1, keepdim=True)
    if m.dtype in (torch.float16, torch.bfloat16):
        top = m.amax(-1, keepdim=True)
        near = (top != 0) & (top.abs() < 2.0 ** 24)
        m = torch.where(near, (m.float() - top.float()).to(m.dtype), m)
    return _spread(m.masked_fill_(dead, 0.0), q, repeat), _spread((~dead).to(q.dtype), q, repeat)  # m is new here


@functools.lru_cache(maxsize=4)
def _causal_mask(shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, repeat: int) -> torch.Tensor:
    with torch.inference_mode(False), torch.no_grad():  # a plain tensor, usable in any later mode
        q = torch.empty(*shape[:-1], 1, dtype=dtype, device=device)
        return _mask(q, torch.empty(shape[-1], 1, dtype=dtype, device=device), None, True, repeat)


def _mask(q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None, is_causal: bool,
          repeat: int) -> torch.Tensor:
    return _spread(_base(q, k, attn_mask, is_causal), q, repeat)


def _base(q: torch.Tensor, k: torch.Tensor, attn_mask: torch.Tensor | None, is_causal: bool) -> torch.Tensor:
    """The additive mask at the broadcast shape of `attn_mask` and `[L, S]` (not yet spread over the heads)."""
    length, source = q.shape[-2], k.shape[-2]
    if is_causal:  # -inf where j > i, in one op beside the copy (this runs on every call)
        m = torch.full((length, source), float("-inf"), dtype=q.dtype, device=q.device).triu(1)
    else:
        m = torch.zeros(length, source, dtype=q.dtype, device=q.device)
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:  # torch.where broadcasts a batched mask ([B, 1, L, S]) as SDPA does
            m = torch.where(attn_mask, m, torch.full((), float("-inf"), dtype=q.dtype, device=q.device))
        else:
            m = m + attn_mask.to(q.dtype)
    return m


def _spread(m: torch.Tensor, q: torch.Tensor, repeat: int) -> torch.Tensor:
    """`m` (its last axis the keys', or 1) made contiguous at the scores' shape, the `repeat` query heads of a key
    head stacked as rows."""
    m = m.expand(*q.shape[:-1], m.shape[-1])
    if repeat > 1:  # the flatten of the expanded view is the one copy
        m = m.unflatten(-3, (q.shape[-3] // repeat, repeat)).flatten(-3, -2)
    return m.contiguous()


def _value(x: object) -> Any:
    return x.meta.get("example_value", x.meta.get("val")) if isinstance(x, fx.Node) else x


def _arg(node: fx.Node, i: int, name: str, default: object) -> Any:
    return node.args[i] if len(node.args) > i else node.kwargs.get(name, default)


DECODE = ("a decode step (one query position): its cache grows every step, and Emmy would settle and check its "
          "kernels at every new length (attention='auto'; attention=True rewrites it as Emmy's kernels)")


TENSOR_MASK = ("a mask given as a tensor: torch's fused attention reads it as it is, where Emmy's decomposition "
               "spreads it over every head and row at every call (attention='auto'; attention=True rewrites it as "
               "Emmy's kernels)")


def torch_wins(node: fx.Node) -> str | None:
    """Why an attention node stays torch's fused kernel without a race (`attention="auto"`), or None where Emmy's
    decomposition is raced against it: on a CPU a query of one position (a decode step), or a mask given as a
    tensor, is torch's; every other attention is rewritten, and the group holding it races torch's fused kernel
    at the first size of each size bucket (`with_fused_attention`: torch's side of the group runs
    `scaled_dot_product_attention` itself), so the machine at hand settles it.

    What stays a rule, and why no race settles it:
    - A decode step: its cache is one position longer at every call, a size the group has never run, and every
      new size is checked against torch (on its bucket's runner: `Runner.sized`); with torch's the groups around
      it keep their sizes. `bench/generate.py --attention true` (a 2-core AMD EPYC, f32, where Emmy's attention
      wins a prompt's): at lengths met before, 1.30x eager a token at hidden 64 and 1.56-1.96x at 1024 over two
      runs (the default: 1.24-1.33x and 1.60-1.63x); but a generate meeting its lengths for the first time ran
      0.44x and 0.53x eager (the default 1.28x and 1.52x), and a group keeps 512 lengths, so a server of longer
      contexts would meet new ones at every token.
    - A mask given as a tensor (a padded batch's): Emmy's decomposition reads it spread over every head and row,
      made by torch at every call, and the group holds that spread mask, not the one torch's kernel reads, so
      torch's side of its race cannot be torch's fused kernel. On an Intel Xeon (AVX-512, 2 cores;
      `bench/attention.py --mask tensor --dims 64`) Emmy's ran at 0.52-0.58x torch's speed, and a
      `transformers` Llama with a left-padded batch ran 4.30 / 79.0 ms with torch's attention against
      4.77 / 82.6 ms with Emmy's.

    The causal case was once this rule's too (Emmy's on every CPU); the race replaced it: on an AMD EPYC (AVX-512,
    2 cores) Emmy's was 1.30-1.70x torch's fused kernel in f32 from head dimension 64 and 2.8-3.4x in f16, on an
    Intel Xeon 0.67-0.81x."""
    q = _value(node.args[0]) if node.args else None
    if not isinstance(q, torch.Tensor) or q.device.type != "cpu":
        return None
    if q.dim() >= 2 and isinstance(q.shape[-2], int) and q.shape[-2] == 1:
        return DECODE
    if isinstance(_value(_arg(node, 3, "attn_mask", None)), torch.Tensor):
        return TENSOR_MASK
    return None


FUSED_FORM = "emmy_fused_attention"  # node.meta key of a decomposition's output: the attention call it replaced


@dataclass(frozen=True)
class FusedForm:
    """The attention call a decomposition replaced, kept on the decomposition's output: what `with_fused_attention`
    puts back, so that torch's side of a race runs torch's fused kernel. Its operands are named by the nodes of
    the decomposition that read them (a group holding it reads them under other names: a placeholder of the
    group's, an output of the group before). Only an attention without a mask given as a tensor has one (that
    mask is not what the group reads)."""

    q: tuple[str, int]  # each operand as the decomposition's node that reads it, and where in its arguments
    k: tuple[str, int]
    v: tuple[str, int]
    causal: bool
    scale: float
    gqa: bool
    made: tuple[str, ...]  # the decomposition's nodes, its output last


def with_fused_attention(sub: fx.GraphModule) -> fx.GraphModule | None:
    """A copy of a group's torch graph with every whole attention decomposition in it (`decompose_sdpa`) put back as
    torch's `scaled_dot_product_attention`, or None where there is none: torch's side of the group's race and its
    fallback then run torch's fused attention, not the decomposition's ops one by one, so that the race measures
    Emmy's attention against the kernel torch itself would run. A decomposition split between groups, or one whose
    operands or middle values the group does not hold alone, is left as it is."""
    graph = copy.deepcopy(sub.graph)
    # the decomposition's own nodes by name (a group reading a value another group made holds it as a placeholder
    # of that value's name: not a node of the decomposition)
    nodes = {n.name: n for n in graph.nodes if n.op == "call_function"}
    done: list[FusedForm] = []
    for out in [n for n in graph.nodes if FUSED_FORM in n.meta]:
        form: FusedForm = out.meta[FUSED_FORM]
        if not all(name in nodes for name in form.made) or \
                not all(i < len(nodes[name].args) for name, i in (form.q, form.k, form.v)):
            continue
        q, k, v = (nodes[name].args[i] for name, i in (form.q, form.k, form.v))
        with graph.inserting_after(out):
            fused = graph.call_function(F.scaled_dot_product_attention, (q, k, v),
                                        {"is_causal": form.causal, "scale": form.scale, "enable_gqa": form.gqa})
        out.replace_all_uses_with(fused)
        fused.meta = {key: value for key, value in out.meta.items() if key != FUSED_FORM}
        done.append(form)
    if not done:
        return None
    graph.eliminate_dead_code()
    left = {n.name for n in graph.nodes if n.op == "call_function"} & {name for form in done for name in form.made}
    if left:  # a middle value the group hands out: torch would compute the attention twice
        return None
    graph.lint()
    return fx.GraphModule(sub, graph)


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


def _size(d: object) -> object:
    """A size as an int where it is a number (one Dynamo writes as an exact floor division, `(4*s*((s**2)//s))//(s**2)`
    where two sizes got one symbol, is its quotient), else its expression."""
    key = sym_key(d)
    return int(key) if getattr(key, "is_number", False) else key


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
    head_dim = _size(qv.shape[-1])
    if scale is None:
        scale_value = float(head_dim) ** -0.5 if isinstance(head_dim, int) else -1.0
    elif isinstance(scale, int | float) and not isinstance(scale, bool):
        scale_value = float(scale)
    elif isinstance(scale, fx.Node) and scale.name in consts:
        scale_value = consts[scale.name]
    else:
        return False
    if scale_value <= 0 or (mask is not None and not isinstance(_value(mask), torch.Tensor)):
        return False
    heads_q, heads_k = _size(qv.shape[-3]), _size(kv.shape[-3])
    repeat = 1
    if heads_q != heads_k and (gqa or heads_k == 1):  # a key head of 1 broadcast over the query heads is GQA too
        if not (isinstance(heads_q, int) and isinstance(heads_k, int)) or heads_q % heads_k:
            return False
        repeat = heads_q // heads_k
    add = node_adder(graph, node, consts)
    if add is None:
        return False
    the_scale = scale if isinstance(scale, fx.Node) else scale_value
    before = set(graph.nodes)
    with graph.inserting_before(node):
        rows = q
        if repeat > 1:  # the query heads of one key head stacked as rows: [..., Hk, r * L, D], a view of q
            rows = add(torch.flatten, add(torch.unflatten, q, -3, (heads_k, repeat)), -3, -2)
        scores = add(torch.matmul, rows, add(torch.transpose, k, -2, -1))
        keep = None
        if mask is not None:  # torch's order: the mask added to the scaled scores, so it is never divided
            terms = add(masked_terms, q, k, mask, causal, repeat)
            keep = add(operator.getitem, terms, 1)
            scores = add(operator.add, add(operator.mul, scores, the_scale), add(operator.getitem, terms, 0))
            probs = add(torch.softmax, scores, -1)
        else:
            if causal:  # 0 or -inf: the scale folded into the softmax kernel
                scores = add(operator.add, scores, add(attention_mask, q, k, None, causal, repeat))
            probs = add(torch.softmax, add(operator.mul, scores, the_scale), -1)
        out = add(torch.matmul, probs, v)
        if keep is not None:  # 0 for a query that may attend to nothing, as torch gives it
            out = add(operator.mul, out, keep)
        if repeat > 1:  # back to [..., H, L, D]
            out = add(torch.flatten, add(torch.unflatten, out, -2, (repeat, -1)), -4, -3)
    if mask is None:  # the mask torch makes (`attention_mask`) runs outside any group: not part of the form
        made = [n for n in graph.nodes if n.op == "call_function" and n not in before and n.target is not attention_mask]

        def reader(x: fx.Node) -> tuple[str, int]:  # an operand by the decomposition's node that reads it
            return next((n.name, i) for n in made for i, a in enumerate(n.args) if a is x)

        out.meta[FUSED_FORM] = FusedForm(reader(q), reader(k), reader(v), causal, scale_value, gqa,
                                         tuple(n.name for n in made))
    node.replace_all_uses_with(out)
    graph.erase_node(node)
    return True
