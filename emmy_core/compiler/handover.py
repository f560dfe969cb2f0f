"""What the `emmy` backend takes from Dynamo's graph before it rewrites it, and what it leaves in it after.

- `lifted_floats`: the float attributes of the module (a norm's eps, attention's scale) Dynamo passes as 0-d
  tensors, at their values now;
- `literal_sizes`: the sizes the graph computes that are numbers (where two sizes share one symbol), as
  numbers;
- `copy_graph`: a copy to rewrite where Dynamo's own graph must stay as handed over (Inductor may trace it again);
- `drop_graphargs`: Dynamo's per-input metadata, which holds a weak reference to each input, dropped from the
  graphs the backend keeps.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx as fx


def lifted_floats(gm: fx.GraphModule, example_inputs: Sequence[Any], params: set[str]) -> dict[str, float]:
    """`{node: value}` of each `.item()` of a 0-d float input that is no parameter: a float attribute of the
    module (a norm's eps, attention's scale) that Dynamo passes as a tensor so a change needs no recompile.
    Emmy's kernels take it as the constant it is now; `EmmyGroup` runs torch at a call where it differs."""
    placeholders = dict(zip((n for n in gm.graph.nodes if n.op == "placeholder"), example_inputs, strict=False))
    out: dict[str, float] = {}
    for n in gm.graph.nodes:
        if n.op != "call_method" or n.target != "item" or len(n.args) != 1:
            continue
        src = n.args[0]
        ex = placeholders.get(src) if isinstance(src, fx.Node) else None
        if isinstance(ex, torch.Tensor) and ex.dim() == 0 and ex.is_floating_point() and src.name not in params:
            out[n.name] = float(ex.item())
    return out


def literal_sizes(gm: fx.GraphModule) -> int:
    """Puts the number in place of each use of a size the graph computes that is a number whatever its symbols
    (`sym_key`: its exact floor divisions divided out), and drops the computation where nothing else reads it;
    returns how many sizes were numbers. Under `dynamic=True` with a batch equal to the length at the first
    call, Dynamo gives both one symbol `s` and computes `x.shape[-1] // 2` as `(16*s**2//s**2)//2`: a rotary
    embedding's halves then read as a dynamic slice, where a static graph has `x[..., :8]`."""
    from emmy_core.graph.dynamo import sym_key

    numbers: dict[fx.Node, int] = {}
    for n in gm.graph.nodes:
        ex = n.meta.get("example_value")
        if n.op in ("call_function", "call_method") and isinstance(ex, torch.SymInt):
            k = sym_key(ex)
            if isinstance(k, int):
                numbers[n] = k
    if not numbers:
        return 0
    for n in gm.graph.nodes:
        if n not in numbers:
            n.args = fx.node.map_arg(n.args, lambda a: numbers.get(a, a))  # type: ignore[arg-type,return-value]
            n.kwargs = fx.node.map_arg(n.kwargs, lambda a: numbers.get(a, a))  # type: ignore[arg-type,return-value]
    for n in reversed(list(numbers)):
        if not n.users:
            gm.graph.erase_node(n)
    gm.recompile()
    return len(numbers)


def drop_graphargs(gm: fx.GraphModule, root: bool) -> None:
    """Drops Dynamo's `grapharg` from the placeholders of every graph in `gm` (its groups' own, split from it,
    carry copies), and from `gm`'s own where `root`. Each holds a weak reference to its input, a parameter among
    them, and `torch.utils.swap_tensors` refuses a tensor any weak reference points to: with swapped parameters
    (`torch.__future__.set_swap_module_params_on_conversion(True)`), `model.to(dtype)` and `load_state_dict`
    failed after the first compiled call. Dynamo reads `gm`'s own after the backend returned, so those go at the
    first call. The backend reads none of it after compile."""
    for m in gm.modules():
        if isinstance(m, fx.GraphModule) and (root or m is not gm):
            for node in m.graph.find_nodes(op="placeholder"):
                node.meta.pop("grapharg", None)


def copy_graph(gm: fx.GraphModule) -> fx.GraphModule:
    """`gm` with a copy of its graph (the same submodules and attributes), to rewrite without touching `gm`."""
    graph = fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    copy = fx.GraphModule(gm, graph)
    copy.meta = dict(gm.meta)
    return copy
