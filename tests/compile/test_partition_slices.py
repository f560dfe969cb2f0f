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
        out, reports = run_backend(m, (x,), prior=False)
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
