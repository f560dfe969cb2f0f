"""Rule of the partition: a tensor's slices are judged one by one, as any other node. torch's partitioner
glues every `getitem` of a node whose users are all `getitem`s into that node's group (right for a tuple);
for a fused QKV projection sliced in three, a refused slice came back every round until the graph went to
torch whole ("partitioning did not settle"), its matrix products with it."""

from __future__ import annotations

import pytest
import torch
import torch.fx as fx
from torch import nn

from emmy_core.compiler.backend import run_backend
from emmy_core.graph.partition import keep_slices_apart, slices_apart

H = 16


class FusedQKV(nn.Module):
    """One projection sliced in three unequal parts (as Phi-3 and Falcon do), then mixed."""

    def __init__(self) -> None:
        super().__init__()
        self.qkv = nn.Linear(H, 2 * H + H // 2, bias=False)
        self.out = nn.Linear(H, H, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        qkv = self.qkv(x)
        q, k, v = qkv[..., :H], qkv[..., H:2 * H], qkv[..., 2 * H:]
        return self.out(torch.relu(q) * k) + v.sum(-1, keepdim=True)


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


def test_slices_of_a_tensor_are_judged_apart_and_its_product_stays_on_emmy() -> None:
    torch.manual_seed(0)
    m = FusedQKV().eval()
    for rows in (5,):
        x = torch.randn(2, rows, H)
        out, reports = run_backend(m, (x,), prior=False, library=False)
        torch.testing.assert_close(out, m(x), rtol=1e-5, atol=1e-5)
        reasons = {f.reason for r in reports for f in r.fell_back}
        assert not any("did not settle" in why for why in reasons), reasons
        assert sum(r.matmul_flops for r in reports) > 0
        assert sum(r.matmul_flops_on_emmy for r in reports) == sum(r.matmul_flops for r in reports)
        assert any(f.op == "operator.getitem" and "halves" in f.reason for r in reports for f in r.fell_back)


def test_the_slice_marks_are_gone_after_proposing() -> None:
    gm = fx.symbolic_trace(FusedQKV())
    for n in gm.graph.nodes:  # symbolic_trace records no fake values: give the projection's one
        if n.name == "qkv":
            n.meta["val"] = torch.empty(2, 3, 2 * H + H // 2)
    before = [n.name for n in gm.graph.nodes]
    with slices_apart(gm):
        marks = [n for n in gm.graph.nodes if n.target is keep_slices_apart]
        assert len(marks) == 1 and marks[0].args[0].name == "qkv"
    assert [n.name for n in gm.graph.nodes] == before


class Chain(nn.Module):
    """Seventy small groups, each a product and a relu, kept apart by a cumulative sum torch runs."""

    def __init__(self, n: int = 70) -> None:
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(4, 4) for _ in range(n))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = torch.cumsum(torch.relu(layer(x)), dim=0)
        return x


def test_every_refusal_a_round_finds_is_taken_so_many_groups_each_refusing_a_node_settle_in_two_rounds() -> None:
    """Swin's window sizes are refused late (at the trial compile), one in each of many groups: taking one
    refusal a round, the graph ran out of rounds and went to torch whole, its products with it."""
    from emmy_core.graph.dynamo import Refused
    from emmy_core.graph.partition import MAX_ROUNDS, plan_partitions

    graphs: list[fx.GraphModule] = []

    def keep(gm: fx.GraphModule, _: object) -> fx.GraphModule:
        graphs.append(gm)
        return gm

    with torch.no_grad():
        torch.compile(Chain(), backend=keep)(torch.randn(3, 4))
    tried: list[frozenset[str]] = []

    def trial(sub: fx.GraphModule) -> None:  # a late refusal: the relu of any group that holds one
        tried.append(frozenset(n.name for n in sub.graph.nodes))
        for n in sub.graph.nodes:
            if n.op == "call_function" and n.target is torch.relu:
                raise Refused(n.name, "refused when its group is compiled")

    plan = plan_partitions(graphs[0], trial)
    assert len(plan.groups) == 70 and all(len(g) == 1 for g in plan.groups)  # each product on its own
    assert sum(why == "refused when its group is compiled" for why in plan.torch_ops.values()) == 70
    assert len(tried) == 140 < MAX_ROUNDS * 70  # a round of 70 refusals, then 70 groups tried once each
