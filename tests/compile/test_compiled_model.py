"""`emmy_core.compile` returns one `CompiledModel` on both paths, called exactly like the module: positional and
keyword arguments, training (gradients flow, an optimizer step changes the weights), and a method such as
`generate` with its `forward` routed through the compile; `records()` and `record` read the resolution on both."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import emmy_core
from emmy_core.compiler import NoGradientsWarning
from emmy_core.evidence.resolution import ResolutionRecord

H = 16


class Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(H, H)

    def forward(self, x: torch.Tensor, scale: float = 1.0) -> torch.Tensor:
        return torch.relu(self.a(x)) * scale

    def generate(self, x: torch.Tensor, steps: int = 3) -> torch.Tensor:
        for _ in range(steps):
            x = self(x)
        return x


class Steps(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x))

    def generate(self, x: torch.Tensor, steps: int = 3) -> torch.Tensor:
        for _ in range(steps):
            x = self(x)
        return x


class Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(H, H)
        self.b = nn.Linear(H, H)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.a(x)) + self.b(y)


class TwoGroups(nn.Module):
    """Two Emmy groups, a cumsum (torch's) between them."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(H, H)
        self.b = nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.b(torch.relu(torch.cumsum(torch.relu(self.a(x)), dim=1)))


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


def test_both_paths_return_one_type_and_read_their_resolution_one_way() -> None:
    torch.manual_seed(0)
    m = Two().eval()
    x, y = torch.randn(2, 5, H), torch.randn(2, 5, H)
    run = emmy_core.compile(m, (x, y), prior=False, library=False)
    one = emmy_core.compile(m, (x, y), prior=False, library=False, torch_ops="refuse")
    assert type(run) is type(one) is emmy_core.CompiledModel
    assert (run.torch_ops, one.torch_ops) == ("run", "refuse")
    for c in (run, one):
        records = c.records()
        assert len(records) == 1 and c.record is records[0] and records[0].resolutions
        with torch.no_grad():
            torch.testing.assert_close(c(x, y), m(x, y), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(c(x, y=y), m(x, y=y), rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(c(y=y, x=x), m(x, y), rtol=1e-5, atol=1e-5)
    assert "rule" in one.explain() and "matmul FLOPs on Emmy" in run.explain()
    assert one.one_graph.resolve("B=4,S=9") == one.resolve("B=4,S=9")
    with pytest.raises(TypeError, match="unexpected keyword argument 'z'"):
        one(x, y, z=x)


def test_record_is_the_one_record_none_an_empty_one_and_several_a_clear_error() -> None:
    torch.manual_seed(0)
    x = torch.randn(2, 5, H)
    several = emmy_core.compile(TwoGroups().eval(), (x,), prior=False, library=False)
    assert len(several.records()) == 2
    with pytest.raises(ValueError, match=r"2 Emmy groups.*records\(\)"):
        several.record  # noqa: B018
    none = emmy_core.compile(nn.Identity(), (x,), prior=False, library=False)
    assert none.records() == [] and isinstance(none.record, ResolutionRecord) and not none.record.resolutions


def test_keyword_arguments_reach_the_model_on_the_default_path() -> None:
    """#45 item 6: `emmy_core.compile(m, (x,))(x, scale=2.5)` was a TypeError."""
    torch.manual_seed(0)
    m = Scaled().eval()
    x = torch.randn(2, 5, H)
    c = emmy_core.compile(m, (x,), prior=False, library=False)
    with torch.no_grad():
        torch.testing.assert_close(c(x, scale=2.5), m(x, scale=2.5), rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("torch_ops", ["run", "refuse"])
def test_training_through_the_direct_api_changes_the_weights_as_torch_compile_does(torch_ops: str) -> None:
    """#45 item 7: gradients were None and an optimizer step changed nothing."""
    grads = {}
    for how in ("eager", "emmy"):
        torch.manual_seed(0)
        m = Two().train()
        x, y = torch.randn(2, 5, H), torch.randn(2, 5, H)
        f = emmy_core.compile(m, (x, y), prior=False, library=False, torch_ops=torch_ops) if how == "emmy" else m
        opt = torch.optim.SGD(m.parameters(), lr=0.1)
        before = m.a.weight.detach().clone()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", NoGradientsWarning)
            loss = f(x, y).pow(2).mean()
        loss.backward()
        grads[how] = {n: p.grad.clone() for n, p in m.named_parameters() if p.grad is not None}
        opt.step()
        assert not torch.equal(before, m.a.weight)
    assert grads["eager"].keys() == grads["emmy"].keys() and len(grads["emmy"]) == 4
    for n, g in grads["eager"].items():
        torch.testing.assert_close(grads["emmy"][n], g)


@pytest.mark.parametrize("torch_ops", ["run", "refuse"])
def test_a_method_like_generate_runs_with_forward_routed_through_the_compile(torch_ops: str) -> None:
    torch.manual_seed(0)
    m = Steps().eval()
    x = torch.randn(2, 5, H)
    c = emmy_core.compile(m, (x,), prior=False, library=False, torch_ops=torch_ops)
    routed = c._compiled_forward()
    ran: list[int] = []
    c._compiled_forward = lambda: lambda *a, **k: ran.append(1) or routed(*a, **k)  # type: ignore[method-assign]
    with torch.no_grad():
        torch.testing.assert_close(c.generate(x, steps=3), m.generate(x, steps=3), rtol=1e-5, atol=1e-5)
    assert len(ran) == 3  # every step's forward was the compiled one
    assert "forward" not in m.__dict__  # the module's own forward is back
    assert c.training is m.training  # a plain attribute is the module's


def test_a_method_that_raises_still_gives_the_module_its_forward_back() -> None:
    class Fails(Scaled):
        def generate(self, x: torch.Tensor, steps: int = 3) -> torch.Tensor:
            self(x)
            raise RuntimeError("boom")

    torch.manual_seed(0)
    m = Fails().eval()
    x = torch.randn(2, 5, H)
    c = emmy_core.compile(m, (x,), prior=False, library=False)
    with torch.no_grad(), pytest.raises(RuntimeError, match="boom"):
        c.generate(x)
    assert "forward" not in m.__dict__
