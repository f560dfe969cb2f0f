"""The group route (`emmy_core.compiler.race`): a group runs as torch ran it at a size where torch's ops are
measured faster, on the machine at hand; Emmy's group keeps a size where it is at least as fast. The verdict
is per size, said in the report, and never taken with `library=False` (Emmy's kernels only)."""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from emmy_core.compiler import group as be
from emmy_core.compiler.backend import _GRAPHS, compile_reports, emmy_backend
from emmy_core.compiler.race import RACE_ROUNDS, Race, race


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


class Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up = nn.Linear(32, 64)
        self.down = nn.Linear(64, 32)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(torch.relu(self.up(x)) * 0.5)


def test_race_keeps_emmy_where_it_is_as_fast() -> None:
    assert Race((2.0, 1.0, 3.0), (2.0, 5.0, 1.0)).verdict("m=8") is None  # a tie by the median: Emmy keeps it


def test_race_verdict_names_both_times_and_the_size() -> None:
    why = Race((3e-6, 5e-6, 4e-6), (1e-6, 2e-6, 9e-6)).verdict("m=8")
    assert why is not None and "m=8" in why and "2 us against Emmy's 4 us" in why and "3 rounds" in why


def test_race_refuses_uneven_rounds() -> None:
    with pytest.raises(ValueError, match="as many rounds"):
        Race((1.0,), ()).verdict("m=8")


def test_race_times_both_sides_alternately_within_its_bounds() -> None:
    calls: list[str] = []

    def slow() -> None:
        calls.append("emmy")
        time.sleep(0.002)

    result = race(slow, lambda: calls.append("torch"), rounds=(3, 5), seconds=0.0)
    assert len(result.emmy) == len(result.torch) == 3  # the least rounds once the time is spent
    assert calls[:2] == ["emmy", "torch"]  # the warm call of each
    assert calls[2:4] == ["emmy", "torch"] and calls[4:6] == ["torch", "emmy"]  # who goes first alternates
    assert result.verdict("m=1") is not None and result.emmy_median >= 0.002 > result.torch_median
    assert len(race(lambda: None, lambda: None, seconds=10.0).emmy) == RACE_ROUNDS[1]


def test_group_route_runs_torch_at_a_size_torch_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    """Emmy's side made slower for real (2 ms a call): its group hands that size to torch, the answer is torch's,
    and the report says why; a group that is not outraced stays on Emmy."""
    real = be.race
    monkeypatch.setattr(be, "race", lambda emmy, torch_ops: real(lambda: (emmy(), time.sleep(0.002)), torch_ops))
    torch.manual_seed(0)
    model = Mlp().eval()
    x = torch.randn(3, 32)
    before = len(_GRAPHS)
    fn = torch.compile(model, backend=emmy_backend(prior=False), dynamic=False)
    with torch.no_grad():
        got, want = fn(x), model(x)
    torch.testing.assert_close(got, want)
    groups = [g for s in _GRAPHS[before:] for g in s.live_groups()]
    assert groups and all(g.status.raced for g in groups)
    assert all("torch's ops measured faster" in why for g in groups for why in g.status.raced.values())
    report = compile_reports()[before]
    assert report.ops_on_emmy == 0 and any("measured faster" in f.reason for f in report.fell_back)
    with torch.no_grad():
        torch.testing.assert_close(fn(x), want)  # the next call at the size runs torch's ops without a new race


def test_group_route_keeps_a_group_that_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    real = be.race
    monkeypatch.setattr(be, "race", lambda emmy, torch_ops: real(emmy, lambda: (torch_ops(), time.sleep(0.002))))
    model = Mlp().eval()
    x = torch.randn(3, 32)
    before = len(_GRAPHS)
    fn = torch.compile(model, backend=emmy_backend(prior=False), dynamic=False)
    with torch.no_grad():
        torch.testing.assert_close(fn(x), model(x))
    groups = [g for s in _GRAPHS[before:] for g in s.live_groups()]
    assert groups and not any(g.status.raced for g in groups)
    assert compile_reports()[before].ops_on_emmy > 0


def test_group_route_is_off_with_library_off(monkeypatch: pytest.MonkeyPatch) -> None:
    raced: list[int] = []
    monkeypatch.setattr(be, "race", lambda *a: raced.append(1))
    model = Mlp().eval()
    fn = torch.compile(model, backend=emmy_backend(prior=False, library=False), dynamic=False)
    with torch.no_grad():
        fn(torch.randn(3, 32))
    assert raced == []
