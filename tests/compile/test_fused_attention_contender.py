"""Torch's side of a group holding a whole attention runs torch's fused attention (`with_fused_attention`): the
group's reference, its race's contender and its fallback are the op torch itself would run, not the
decomposition Emmy lowers run by torch op by op, so the race settles Emmy's attention against torch's own on the
machine at hand (on an Intel Xeon torch's fused kernel beat Emmy's causal attention; the race never saw it)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import torch
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from emmy_core.compiler import group as be
from emmy_core.compiler.backend import _GRAPHS, emmy_backend
from emmy_core.graph.attention import SDPA, decompose_sdpa, with_fused_attention


class Attention(nn.Module):
    """Causal grouped-query attention between its projections (4 query heads, 2 key heads)."""

    def __init__(self, d: int = 64, heads: int = 4, kv_heads: int = 2) -> None:
        super().__init__()
        self.heads, self.kv_heads, self.dim = heads, kv_heads, d // heads
        self.q = nn.Linear(d, d, bias=False)
        self.k = nn.Linear(d, kv_heads * self.dim, bias=False)
        self.v = nn.Linear(d, kv_heads * self.dim, bias=False)
        self.o = nn.Linear(d, d, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, n, _ = x.shape
        q = self.q(x).view(b, n, self.heads, self.dim).transpose(1, 2)
        k = self.k(x).view(b, n, self.kv_heads, self.dim).transpose(1, 2)
        v = self.v(x).view(b, n, self.kv_heads, self.dim).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        return self.o(a.transpose(1, 2).reshape(b, n, -1))


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


def _targets(gm: fx.GraphModule) -> set[object]:
    return {n.target for n in gm.graph.nodes if n.op == "call_function"}


def _captured(model: nn.Module, x: torch.Tensor) -> tuple[fx.GraphModule, list[Any]]:
    """Dynamo's graph of `model` with its attention decomposed, and the inputs it is called with."""
    got: list[tuple[fx.GraphModule, list[Any]]] = []

    def grab(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> Callable[..., Any]:
        assert decompose_sdpa(gm, {})
        got.append((gm, list(example_inputs)))
        return gm.forward

    with torch.no_grad():
        torch.compile(model, backend=grab, dynamic=False)(x)
    return got[0]


def test_a_whole_decomposition_is_put_back_as_torchs_fused_attention() -> None:
    torch.manual_seed(0)
    model, x = Attention().eval(), torch.randn(2, 16, 64)
    gm, inputs = _captured(model, x)
    assert torch.softmax in _targets(gm) and not _targets(gm) & SDPA
    fused = with_fused_attention(gm)
    assert fused is not None and _targets(fused) & SDPA and torch.softmax not in _targets(fused)
    with torch.no_grad():
        torch.testing.assert_close(fused(*inputs)[0], model(x))
        torch.testing.assert_close(gm(*inputs)[0], model(x))  # the decomposed graph itself is untouched


def test_a_decomposition_whose_middle_value_is_handed_out_is_left_as_it_is() -> None:
    """Put back there, torch would run its fused attention and the decomposition's ops both."""
    torch.manual_seed(0)
    gm, _ = _captured(Attention().eval(), torch.randn(2, 16, 64))
    graph = copy.deepcopy(gm.graph)
    probs = next(n for n in graph.nodes if n.target is torch.softmax)
    out = graph.output_node()
    out.args = ((*out.args[0], probs),)
    assert with_fused_attention(fx.GraphModule(gm, graph)) is None
    assert with_fused_attention(fx.GraphModule(gm, fx.Graph())) is None  # no attention: nothing to put back


def _attention_group(before: int) -> be.EmmyGroup:
    groups = [g for s in _GRAPHS[before:] for g in s.live_groups()]
    (group,) = [g for g in groups if "softmax" in g.nodes]
    return group


def test_the_attention_groups_torch_side_is_torchs_fused_attention() -> None:
    torch.manual_seed(0)
    model, x = Attention().eval(), torch.randn(2, 16, 64)
    before = len(_GRAPHS)
    fn = torch.compile(model, backend=emmy_backend(prior=False), dynamic=False)
    with torch.no_grad():
        torch.testing.assert_close(fn(x), model(x), rtol=1e-5, atol=1e-5)
    group = _attention_group(before)
    assert _targets(group.torch_sub) & SDPA and torch.softmax not in _targets(group.torch_sub)


def test_a_race_emmys_attention_loses_runs_torchs_fused_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    """Emmy's side made slower for real (2 ms a call): the attention's group runs torch's fused kernel at that size,
    its answer torch's own."""
    import time

    real = be.race
    raced: list[set[str]] = []

    def emmy_slowed(sides: dict[str, Callable[[], object]], **kw: object) -> object:
        raced.append(set(sides))
        return real({k: (lambda f=f: (f(), time.sleep(0.002))) if k != "torch" else f for k, f in sides.items()},
                    **kw)

    monkeypatch.setattr(be, "race", emmy_slowed)
    torch.manual_seed(0)
    model, x = Attention().eval(), torch.randn(2, 16, 64)
    before = len(_GRAPHS)
    fn = torch.compile(model, backend=emmy_backend(prior=False), dynamic=False)
    with torch.no_grad():
        got = fn(x)
        again = fn(x)
    group = _attention_group(before)
    assert raced and group.status.raced, group.status
    assert all("torch's ops measured fastest" in why for why in group.status.raced.values())
    torch.testing.assert_close(got, model(x), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(again, got)


def test_on_a_gpu_card_the_attention_group_races_torchs_fused_attention_under_the_interpreter() -> None:
    """The same plumbing on the Triton path (SDPA's fused kernels on a GPU), run here by Triton's interpreter."""
    from emmy_core.codegen.triton_gen import interpreting

    if not interpreting() or torch.cuda.is_available():
        pytest.skip("Triton's interpreter is off in this process, or a GPU is here")
    torch.manual_seed(0)
    model, x = Attention().eval(), torch.randn(1, 8, 64)
    before = len(_GRAPHS)
    fn = torch.compile(model, backend=emmy_backend(card="NVIDIA H200", prior=False), dynamic=False)
    with torch.no_grad():
        torch.testing.assert_close(fn(x), model(x), rtol=1e-4, atol=1e-4)
    group = _attention_group(before)
    assert type(group.compiled.builder.backend).__name__ == "TritonBackend"  # type: ignore[union-attr]
    assert _targets(group.torch_sub) & SDPA and group.status.races
