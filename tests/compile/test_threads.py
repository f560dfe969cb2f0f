"""A compiled model called from several Python threads at once gives every caller its own answer: a runner's
buffers are allocated once per size and shared by its calls, and its kernels run with the GIL released, so
its calls are serialised (torch's own ops allocate per call and need no such care)."""

from __future__ import annotations

import threading

import pytest
import torch
from torch import nn

import emmy_core
from emmy_core.compiler.backend import emmy_backend
from emmy_core.compiler.group import EmmyGroup


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(64, 256), nn.Linear(256, 64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def _hammer(fn, module: nn.Module, threads: int = 4, calls: int = 30) -> list[str]:  # type: ignore[no-untyped-def]
    """Every thread calls `fn` on its own input `calls` times and checks each answer against eager's."""
    inputs = [torch.randn(2, 48, 64, generator=torch.Generator().manual_seed(i)) for i in range(threads)]
    with torch.no_grad():
        wants = [module(x) for x in inputs]
    wrong: list[str] = []
    start = threading.Barrier(threads)

    def work(i: int) -> None:
        start.wait()
        with torch.no_grad():
            for c in range(calls):
                if not torch.allclose(fn(inputs[i]), wants[i], rtol=1e-4, atol=1e-4):
                    wrong.append(f"thread {i}, call {c}")

    pool = [threading.Thread(target=work, args=(i,)) for i in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return wrong


def test_concurrent_calls_through_the_backend_each_get_their_own_answer() -> None:
    torch.manual_seed(0)
    m = _Mlp().eval()
    c = torch.compile(m, backend=emmy_backend(prior=False, library=False))
    with torch.no_grad():  # compiled and built at this size before the threads start
        x = torch.randn(2, 48, 64)
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-4)
    assert _hammer(c, m) == []


def test_concurrent_calls_of_the_one_graph_path_each_get_their_own_answer() -> None:
    torch.manual_seed(0)
    m = _Mlp().eval()
    compiled = emmy_core.compile(m, (torch.randn(2, 48, 64),), prior=False, library=False, torch_ops="refuse")
    assert _hammer(compiled, m) == []


def test_threads_meeting_a_new_size_together_build_it_once_and_each_get_their_own_answer(
        monkeypatch: pytest.MonkeyPatch) -> None:
    builds: dict[int, int] = {}
    build = EmmyGroup._build

    def counted(self, sizes, args):  # type: ignore[no-untyped-def]
        builds[id(self)] = builds.get(id(self), 0) + 1
        return build(self, sizes, args)

    monkeypatch.setattr(EmmyGroup, "_build", counted)
    torch.manual_seed(0)
    m = _Mlp().eval()
    c = torch.compile(m, backend=emmy_backend(prior=False, library=False), dynamic=True)
    before = len(emmy_core.compiler.backend._GRAPHS)
    with torch.no_grad():  # compiled at another length; the threads all start at 48, new to every group
        x = torch.randn(2, 9, 64)
        torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-4)
    assert _hammer(c, m, calls=5) == []
    groups = [g for state in emmy_core.compiler.backend._GRAPHS[before:] for g in state.live_groups()]
    assert groups and all(g.off is None and len(g._runners) == 2 for g in groups)
    assert [builds[id(g)] for g in groups] == [2] * len(groups)  # length 9, then 48 once for all four threads


def test_concurrent_calls_at_sizes_of_one_bucket_each_get_their_own_answer() -> None:
    """Sizes of one bucket run on one memory (`Runner.sized`): threads calling at different sizes of it take
    turns, and each gets the answer of its own size."""
    torch.manual_seed(0)
    m = _Mlp().eval()
    c = torch.compile(m, backend=emmy_backend(prior=False, library=False), dynamic=True)
    lengths = (33, 40, 50, 64)
    inputs = [torch.randn(2, s, 64, generator=torch.Generator().manual_seed(s)) for s in lengths]
    with torch.no_grad():
        wants = [m(x) for x in inputs]
        for x, want in zip(inputs, wants, strict=True):  # each size made and checked before the threads start
            torch.testing.assert_close(c(x), want, rtol=1e-4, atol=1e-4)
    wrong: list[str] = []
    start = threading.Barrier(len(lengths))

    def work(i: int) -> None:
        start.wait()
        with torch.no_grad():
            for n in range(30):
                if not torch.allclose(c(inputs[i]), wants[i], rtol=1e-4, atol=1e-4):
                    wrong.append(f"S={lengths[i]}, call {n}")

    pool = [threading.Thread(target=work, args=(i,)) for i in range(len(lengths))]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert wrong == []
