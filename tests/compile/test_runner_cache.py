"""A compiled graph keeps a bounded number of runners (each holds its size's intermediates), least recently used
dropped first; a size met again after it was dropped is built again and still equals torch."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from torch import nn

import emmy_core
from emmy_core.compiler import runner_cache as runner_module
from emmy_core.compiler.backend import emmy_backend
from emmy_core.compiler.runner_cache import RunnerCache


@dataclass
class _Held:
    held_bytes: int
    storage: int = 0  # the memory it holds (runners of one bucket's sizes share it): its own where 0

    def __post_init__(self) -> None:
        self.storage = self.storage or id(self)


def test_the_least_recently_used_runner_is_dropped_first_beyond_the_count() -> None:
    cache = RunnerCache(keep=2, keep_bytes=1 << 40)
    a, b, c = _Held(1), _Held(1), _Held(1)
    cache.put("S=1", a)  # type: ignore[arg-type]
    cache.put("S=2", b)  # type: ignore[arg-type]
    assert cache.get("S=1") is a  # used: now the most recent
    cache.put("S=3", c)  # type: ignore[arg-type]
    assert "S=2" not in cache and cache.get("S=1") is a and cache.get("S=3") is c and len(cache) == 2
    assert cache.get("S=2") is None


def test_runners_beyond_the_byte_budget_are_dropped_but_never_the_one_just_built() -> None:
    cache = RunnerCache(keep=10, keep_bytes=100)
    cache.put("S=1", _Held(60))  # type: ignore[arg-type]
    cache.put("S=2", _Held(60))  # type: ignore[arg-type]
    assert len(cache) == 1 and "S=2" in cache
    cache.put("S=3", _Held(500))  # over the budget alone: still kept, as the one in use
    assert len(cache) == 1 and "S=3" in cache


def test_runners_sharing_a_memory_count_once_toward_the_sizes_kept_and_all_toward_the_runners_kept() -> None:
    cache = RunnerCache(keep=1, keep_bytes=1 << 40, keep_sized=3)
    base = _Held(10)
    for s in (33, 40, 50):
        cache.put(f"S={s}", _Held(10, base.storage) if s != 33 else base)  # type: ignore[arg-type]
    assert len(cache) == 3 and cache.memories() == 1
    cache.put("S=60", _Held(10, base.storage))  # type: ignore[arg-type]
    assert list(cache._runners) == ["S=40", "S=50", "S=60"]  # beyond the runners kept: the oldest goes
    cache.put("S=100", _Held(10))  # type: ignore[arg-type]
    assert list(cache._runners) == ["S=100"]  # beyond the memories kept: the bucket's every runner goes


def test_runners_sharing_their_memory_count_it_once() -> None:
    cache = RunnerCache(keep=10, keep_bytes=100)
    base = _Held(60)
    cache.put("S=65", base)  # type: ignore[arg-type]
    cache.put("S=70", _Held(60, base.storage))  # type: ignore[arg-type]
    cache.put("S=71", _Held(60, base.storage))  # type: ignore[arg-type]
    assert len(cache) == 3 and cache.held_bytes() == 60
    cache.put("S=200", _Held(60))  # another memory: over the budget, the oldest go until it fits
    assert cache.held_bytes() == 60 and list(cache._runners) == ["S=200"]


class _Mlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.up, self.down = nn.Linear(16, 32), nn.Linear(32, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.relu(self.up(x)))


def _mlp_groups(lengths: tuple[int, ...]) -> list:  # type: ignore[type-arg]
    """The live groups of `_Mlp` through the backend, called at each of `lengths` (each answer equal to eager's)."""
    torch.manual_seed(0)
    m = _Mlp().eval()
    c = torch.compile(m, backend=emmy_backend(prior=False, library=False), dynamic=True)
    before = len(emmy_core.compiler.backend._GRAPHS)
    with torch.no_grad():
        for s in lengths:
            x = torch.randn(2, s, 16)
            torch.testing.assert_close(c(x), m(x))
        groups = [g for state in emmy_core.compiler.backend._GRAPHS[before:] for g in state.live_groups()]
    assert groups and all(g.off is None for g in groups)
    return groups


def test_a_backend_group_keeps_at_most_keep_sizes_runners_and_rebuilds_a_dropped_size(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_module, "KEEP_SIZES", 2)
    groups = _mlp_groups((3, 5, 7, 9, 3))
    assert all(g._runners.memories() <= 2 for g in groups)  # S=5 and S=7 share their bucket's
    assert all(len(g.sizes_seen()) == 4 for g in groups)  # every size it ran is still known to a tune


def test_the_one_graph_path_keeps_at_most_keep_sizes_runners(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_module, "KEEP_SIZES", 2)
    torch.manual_seed(0)
    m = _Mlp().eval()
    compiled = emmy_core.compile(m, (torch.randn(2, 3, 16),), prior=False, library=False, torch_ops="refuse").one_graph
    with torch.no_grad():
        for s in (3, 5, 7, 3):
            x = torch.randn(2, s, 16)
            torch.testing.assert_close(compiled(x), m(x))
            assert len(compiled._runners) <= 2
    assert "B=2,S=3" in compiled._runners and "B=2,S=7" in compiled._runners and "B=2,S=5" not in compiled._runners


def test_a_group_keeps_the_sizes_of_its_last_calls_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """The sizes a group worked out from its inputs' shapes are kept for its last SIZES_KEPT distinct ones (a server
    meets ever new lengths); one dropped and met again is worked out again, and computes as ever."""
    from emmy_core.compiler import group as group_module

    monkeypatch.setattr(group_module, "SIZES_KEPT", 3)
    groups = _mlp_groups((3, 5, 7, 9, 11, 3))
    assert all(len(g._sizes) == len(g._texts) == 3 for g in groups)
    assert all(len(g.sizes_seen()) == 3 for g in groups)  # of the five distinct sizes, the last three
