"""`fallback="inductor"`: the ops the emmy backend leaves to torch are compiled by Inductor around Emmy's groups,
each group one opaque `emmy::group` op; the result equals eager at sizes not seen at compile time, the groups
still run Emmy's kernels, and the backend's options come through `torch.compile(..., options=...)`."""

from __future__ import annotations

import pytest
import torch
import torch._inductor.metrics as inductor_metrics
import torch.fx as fx
import torch.nn.functional as F
from torch import nn

from emmy_core.compiler.backend import compile_reports, emmy_backend
from tests.compile.test_backend import H, WithCumsum


class WithIndexMath(nn.Module):
    """A linear, a sign flip on every other position built from integer index math (as a causal mask is, which
    Emmy leaves to torch), a linear."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(H, H)
        self.b = nn.Linear(H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        even = (torch.arange(x.shape[1], device=x.device) % 2 == 0)[None, :, None]
        return self.b(torch.where(even, F.relu(self.a(x)), -x))


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


def _run(backend: object, options: dict | None = None) -> tuple[int, list]:
    """Inductor kernels generated, and the reports, for WithCumsum compiled so and run at three sizes."""
    torch.manual_seed(0)
    m = WithIndexMath().eval()
    before = len(compile_reports())
    inductor_metrics.reset()
    c = torch.compile(m, backend=backend, dynamic=True, options=options)
    with torch.no_grad():
        for shape in ((2, 5, H), (1, 1, H), (3, 9, H)):
            x = torch.randn(*shape)
            torch.testing.assert_close(c(x), m(x), rtol=1e-5, atol=1e-5)
    return inductor_metrics.generated_kernel_count, compile_reports()[before:]


def test_the_ops_left_to_torch_are_compiled_by_inductor_around_emmys_groups() -> None:
    kernels, reports = _run("emmy", {"fallback": "inductor", "prior": False, "library": False, "defer": False})
    assert kernels >= 1  # the cumsum between the two groups is Inductor's kernel, not eager torch's
    assert 1 <= len(reports) <= 2  # a size of 1 may be compiled apart (Dynamo specialises it)
    for report in reports:
        assert report.matmul_flops and report.matmul_flops_on_emmy == report.matmul_flops  # both linears on Emmy
        assert any("arange" in f.op for f in report.fell_back)
    eager_kernels, _ = _run(emmy_backend(defer=False, prior=False, library=False))
    assert eager_kernels == 0  # the default runs the ops left to torch as eager torch runs them


def test_an_unknown_backend_option_or_fallback_is_refused_naming_what_it_takes() -> None:
    m = WithCumsum().eval()
    with pytest.raises(Exception, match=r"has no option 'fallbak'.*fallback"):
        torch.compile(m, backend="emmy", options={"fallbak": "inductor"})(torch.randn(2, 5, H))
    with pytest.raises(ValueError, match="eager, inductor"):
        emmy_backend(defer=False, fallback="aot")


class _Sub(nn.Module):
    def forward(self, x: torch.Tensor, f: float, size: torch.Size) -> torch.Tensor:
        return (x * f).reshape(size) + 1


class _Group(nn.Module):
    """Stands for an EmmyGroup: called with the group's arguments, its `torch_sub` the torch ops it replaces."""

    def __init__(self) -> None:
        super().__init__()
        self.torch_sub = fx.symbolic_trace(_Sub())
        self.calls = 0

    def forward(self, *args: object) -> torch.Tensor:
        self.calls += 1
        return self.torch_sub(*args)


def test_an_opaque_group_takes_floats_and_sizes_and_its_fake_kernel_gives_the_shapes() -> None:
    from torch._subclasses.fake_tensor import FakeTensorMode

    from emmy_core.compiler.opaque import FLOAT, SIZE, TENSOR, opaque_groups

    g = fx.Graph()
    x, f, s = g.placeholder("x"), g.placeholder("f"), g.placeholder("s")
    x.meta["val"], f.meta["val"], s.meta["val"] = torch.empty(2, 3), 0.5, torch.Size([3, 2])
    g.output(g.call_module("grp", (x, f, s)))
    root = nn.Module()
    root.grp = _Group()
    gm = fx.GraphModule(root, g)
    opaque_groups(gm, {"grp": root.grp})
    (call,) = [n for n in gm.graph.nodes if n.op == "call_function" and "emmy" in str(n.target)]
    assert call.args[3] == [TENSOR, FLOAT, SIZE] and call.args[4] == [2]  # kinds, lengths
    a = torch.randn(2, 3)
    torch.testing.assert_close(gm(a, 0.5, torch.Size([3, 2])), (a * 0.5).reshape(3, 2) + 1, rtol=0, atol=0)
    assert root.grp.calls == 1  # the real kernel called the group
    with FakeTensorMode() as mode:
        out = gm(mode.from_tensor(a), 0.5, torch.Size([3, 2]))
    assert out.shape == (3, 2) and root.grp.calls == 1  # the fake kernel ran the torch ops, not the group
