"""Splitting a Dynamo graph into subgraphs Emmy runs and ops torch runs, with torch's partitioner.

`plan_partitions` asks `CapabilityBasedPartitioner` for the largest acyclic groups of nodes
`dynamo.refusal` accepts, then tries each group the way the backend will compile it (translated to
an Emmy graph, every pass run, lowered). A group the passes or lowering refuse names the node at
fault (its FX name travels as the Emmy node's source); that node is handed to torch with the reason
and the graph is partitioned again, so one op Emmy cannot take never costs its neighbours. A group
of nothing but views, no-ops and float conversions is left to torch: moving it to Emmy would only copy. `fuse` then
replaces each accepted group with a call to a submodule `emmy_<i>`.

torch's partitioner moves every `getitem` user of a node whose users are all `getitem`s into that node's
group, whatever the support says: right for unpacking a tuple, wrong for slicing a tensor (a fused QKV
projection's three slices, a rotary `x[..., :d]`). A refused slice then came back every round, until the
rounds ran out and the whole graph went to torch. While proposing, such a tensor gets one extra user the
partitioner does not take (`keep_slices_apart`), so its slices are judged as any other node.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import torch.fx as fx
from torch.fx.passes.infra.partitioner import CapabilityBasedPartitioner
from torch.fx.passes.operator_support import OperatorSupportBase
from torch.fx.passes.utils.fuser_utils import fuse_as_graphmodule, fuse_by_partitions

from emmy_core.graph.dynamo import Refused, alias_only, is_compute, refusal, value
from emmy_core.graph.effects import left_to_torch, segments

PREFIX = "emmy_"
MAX_ROUNDS = 256  # partitioning again after the refusals found late in a round; a graph needing more goes to torch whole


class EmmySupport(OperatorSupportBase):
    """The partitioner's question: does Emmy take this node (and has no later check handed it back)?"""

    def __init__(self, refused: Mapping[str, str], device: str, consts: Mapping[str, float]) -> None:
        self.refused = refused
        self.device = device
        self.consts = consts

    def is_node_supported(self, submodules: Mapping[str, object], node: fx.Node) -> bool:
        if node.target is keep_slices_apart:
            return False
        return node.name not in self.refused and refusal(node, self.device, self.consts) is None


def keep_slices_apart(x: object) -> None:
    """The target of the extra user `slices_apart` gives a sliced tensor while partitions are proposed; never run."""
    raise AssertionError("keep_slices_apart is a partitioning marker and never runs")


@contextmanager
def slices_apart(gm: fx.GraphModule) -> Iterator[None]:
    """Gives every tensor whose users are all `getitem`s one more user, for as long as partitions are proposed."""
    marks = []
    for n in list(gm.graph.nodes):
        if n.users and isinstance(value(n), torch.Tensor) and \
                all(u.op == "call_function" and u.target is operator.getitem for u in n.users):
            with gm.graph.inserting_after(n):
                marks.append(gm.graph.call_function(keep_slices_apart, (n,)))
    try:
        yield
    finally:
        for m in marks:
            gm.graph.erase_node(m)


@dataclass
class PartitionPlan:
    """The groups Emmy runs (nodes in graph order) and, for every op torch runs, why."""

    groups: list[list[fx.Node]] = field(default_factory=list)
    torch_ops: dict[str, str] = field(default_factory=dict)  # FX node name -> reason


def plan_partitions(gm: fx.GraphModule, trial: Callable[[fx.GraphModule], None], device: str = "cpu",
                    consts: Mapping[str, float] | None = None) -> PartitionPlan:
    """The partition of `gm`; `trial(sub)` compiles a candidate group and raises `Refused` (or any error) if it cannot.
    `consts`: the symbolic floats Emmy takes at their compile-time value (`dynamo.refusal`)."""
    consts = consts or {}
    refused: dict[str, str] = dict(left_to_torch(gm.graph.nodes))  # writes, their views, transform regions
    for n in gm.graph.nodes:
        if is_compute(n) and n.name not in refused:
            why = refusal(n, device, consts)
            if why is not None:
                refused[n.name] = why
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    stretch = segments(gm.graph.nodes)
    passed: set[frozenset[str]] = set()  # groups whose trial passed: met again in a later round, not tried again
    for _ in range(MAX_ROUNDS):
        with slices_apart(gm):
            parts = CapabilityBasedPartitioner(gm, EmmySupport(refused, device, consts),
                                               allows_single_node_partition=True).propose_partitions()
        plan = PartitionPlan(torch_ops=dict(refused))
        again = False
        # every group is tried in a round, and every refusal found is taken before partitioning again: a graph
        # with a refusal in each of many groups (Swin's window sizes) settles in a few rounds, not one a group
        for nodes in sorted(split_at_writes([p.nodes for p in parts], order, stretch), key=lambda g: order[g[0]]):
            if all(alias_only(n) for n in nodes):
                for n in nodes:
                    if is_compute(n):
                        plan.torch_ops[n.name] = "a view, no-op or conversion with no other Emmy kernel in its group"
                continue
            names = frozenset(n.name for n in nodes)
            if names not in passed:
                why = _trial_refusal(gm, nodes, trial)
                if why:
                    refused.update(why)
                    again = True
                    continue
                passed.add(names)
            plan.groups.append(nodes)
        if not again:
            return plan
    plan = PartitionPlan(torch_ops={n.name: "partitioning did not settle" for n in gm.graph.nodes if is_compute(n)})
    return plan


def _trial_refusal(gm: fx.GraphModule, nodes: list[fx.Node], trial: Callable[[fx.GraphModule], None]
                   ) -> dict[str, str]:
    """The nodes a group's trial compile hands to torch, with why (empty: the group compiles)."""
    sub, _, _ = fuse_as_graphmodule(gm, nodes, "trial", always_return_tuple=True)
    names = {n.name for n in nodes}
    try:
        trial(sub)
    except Refused as exc:
        return {exc.node if exc.node in names else nodes[-1].name: exc.reason}
    except Exception as exc:  # any refusal of the passes or lowering: hand its node back to torch
        culprit = getattr(exc, "source", None)
        why = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        if culprit in names:
            return {culprit: getattr(exc, "reason", "") or why}
        return {n.name: f"its group does not lower: {why}" for n in nodes}
    return {}


def split_at_writes(parts: list[Iterable[fx.Node]], order: Mapping[fx.Node, int],
                    stretch: Mapping[fx.Node, int]) -> list[list[fx.Node]]:
    """Each proposed group cut where an in-place write lies between its nodes (`effects.segments`), in graph
    order: a group is one call at its last output's place, and one that spanned a write moved the write past
    the readers after it. The pieces stay acyclic: graph order is a topological order, and each piece lies
    wholly before the next."""
    out: list[list[fx.Node]] = []
    for p in parts:
        pieces: dict[int, list[fx.Node]] = {}
        for n in sorted(p, key=order.__getitem__):
            pieces.setdefault(stretch[n], []).append(n)
        out.extend(pieces.values())
    return out


def fuse(gm: fx.GraphModule, plan: PartitionPlan) -> list[str]:
    """Replaces each group of `plan` in `gm` with a call to submodule `emmy_<i>` (returning a tuple); their names."""
    if not plan.groups:
        return []
    fuse_by_partitions(gm, [dict.fromkeys(g) for g in plan.groups], prefix=PREFIX, always_return_tuple=True)
    return [f"{PREFIX}{i}" for i in range(len(plan.groups))]
