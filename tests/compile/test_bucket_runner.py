"""A new size in a size bucket already run computes on the runner made for the bucket's first size (`Runner.sized`):
its memory (allocated for the bucket's largest sizes), its launches at the new sizes, no settle, layout or binding
of its own, and still checked against torch. Where a kernel would choose otherwise there, or beyond the bucket, a
runner of its own is made."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import emmy_core
from emmy_core.compiler import runner as runner_module
from emmy_core.compiler import runner_cache
from emmy_core.compiler.backend import emmy_backend
from emmy_core.compiler.group import EmmyGroup
from emmy_core.ir.sizes import format_sizes, size_bucket

H = 32


class _Block(nn.Module):
    """A decoder layer in small: RMSNorm, causal attention, a residual, a SiLU MLP."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.rand(H) + 0.5)
        self.qkv, self.o = nn.Linear(H, 3 * H), nn.Linear(H, H)
        self.up, self.down = nn.Linear(H, 2 * H), nn.Linear(2 * H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w
        q, k, v = (t.reshape(b, s, 4, H // 4).transpose(1, 2) for t in self.qkv(h).split(H, -1))
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, H))
        return x + self.down(F.silu(self.up(x)))


class _Mlp(nn.Module):
    """A normed MLP with a residual and a softmax: what the one-graph path compiles whole."""

    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.rand(H) + 0.5)
        self.up, self.down = nn.Linear(H, 2 * H), nn.Linear(2 * H, H)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w
        return torch.softmax(x + self.down(F.silu(self.up(h))), -1)


@pytest.fixture(autouse=True)
def fresh_dynamo() -> None:
    torch._dynamo.reset()


def _groups(before: int) -> list[EmmyGroup]:
    return [g for state in emmy_core.compiler.backend._GRAPHS[before:] for g in state.live_groups()]


def _runner_at(group: EmmyGroup, s: int) -> runner_module.Runner:
    text = next(t for t in group._runners._runners if any(f"={s}" in part for part in t.split(",")))
    runner = group._runners.get(text)
    assert runner is not None
    return runner


def _run(sizes: tuple[int, ...], **options: object) -> tuple[nn.Module, list[EmmyGroup]]:
    torch.manual_seed(0)
    m = _Block().eval()
    options.setdefault("defer", False)  # every bucket settled at its first call
    c = torch.compile(m, backend=emmy_backend(prior=False, **options), dynamic=True)  # type: ignore[arg-type]
    before = len(emmy_core.compiler.backend._GRAPHS)
    with torch.no_grad():
        for s in sizes:
            x = torch.randn(2, s, H, generator=torch.Generator().manual_seed(s))
            torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-4)
    groups = _groups(before)
    assert groups and all(g.off is None for g in groups), [g.off for g in groups]
    return m, groups


def test_a_new_size_of_a_bucket_runs_on_the_memory_and_launches_of_its_first_size() -> None:
    _, groups = _run((33, 40, 57, 64), library=False)
    for g in groups:
        first = _runner_at(g, 33)
        assert first.capacity is not None and first.sizes == first.layout.sizes
        assert set(first.capacity.values()) <= {1, 2, 64, 128}  # each size's bucket: its largest
        for s in (40, 57, 64):
            r = _runner_at(g, s)
            assert r.storage == first.storage and r.layout is first.layout and r.sizes != first.sizes
        assert g._runners.held_bytes() == first.held_bytes  # four sizes, one memory
        # the record lists every size, each of the bucket's taking the first size's choices
        record = g.compiled.record
        assert len(record.sizes) == 4 and all("size bucket" not in r.note for r in record.resolutions)


def test_a_size_beyond_the_bucket_gets_a_runner_of_its_own() -> None:
    _, groups = _run((33, 65, 40), library=False)
    for g in groups:
        assert _runner_at(g, 65).storage != _runner_at(g, 33).storage
        assert _runner_at(g, 40).storage == _runner_at(g, 33).storage


def test_a_bucket_whose_runners_the_cache_dropped_makes_a_new_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runner_cache, "KEEP_SIZES", 1)
    _, groups = _run((33, 70, 40), library=False)
    for g in groups:
        r = _runner_at(g, 40)
        assert r.sizes == r.layout.sizes and r.capacity is not None  # made afresh: its first size now
        assert len(g._bases) == 1 and next(iter(g._bases.values())) is r  # the dropped ones are forgotten


def test_a_sized_runner_equals_a_runner_made_at_its_sizes() -> None:
    """Through the one-graph path: the runner made at S=33 with room for its bucket, sized to S=50, computes what
    the runner made at S=50 computes, bit for bit (the same kernels at the same sizes); it refuses sizes beyond
    its bucket."""
    torch.manual_seed(0)
    m = _Mlp().eval()
    compiled = emmy_core.compile(m, (torch.randn(2, 33, H),), prior=False, library=False, torch_ops="refuse").one_graph
    small, at = {"B": 2, "S": 33}, {"B": 2, "S": 50}
    base = runner_module.Runner(compiled.layout(small, build=True), compiled._weights_on_device(), compiled.device,
                                compiled._launcher, capacity=dict(size_bucket(small)))
    assert base.serves(at) and not base.serves({"B": 2, "S": 65}) and not base.serves({"B": 3, "S": 40})
    x = torch.randn(2, 50, H)
    with torch.no_grad():
        got = base.sized(at).run([x])[0]
        want = compiled.runner(at).run([x])[0]
        torch.testing.assert_close(got, m(x), rtol=1e-4, atol=1e-4)
    assert torch.equal(got, want)
    with pytest.raises(ValueError, match="cannot compute at"):
        base.sized({"B": 2, "S": 65})
    assert format_sizes(base.sizes) == "B=2,S=33"


def test_with_the_race_a_bucket_run_by_emmy_runs_its_new_sizes_on_the_first_ones_runner() -> None:
    _, groups = _run((33, 40, 57))
    ran = [g for g in groups if len(g._runners)]  # the groups torch's ops did not outrace
    assert ran
    for g in ran:
        texts = list(g._runners._runners)
        storages = {g._runners.get(t).storage for t in texts}  # type: ignore[union-attr]
        assert len(storages) == 1, texts  # one bucket, one memory, whichever contender won its race


def test_a_new_bucket_runs_torch_at_its_first_call_and_is_settled_at_its_second() -> None:
    """`defer` (the default): a group's first bucket is settled at once; a later bucket's first call runs torch's
    ops (a one-off size pays nothing more), its second is settled, built, checked and raced, and the bucket's
    sizes after it run on its runner."""
    torch.manual_seed(0)
    m = _Block().eval()
    c = torch.compile(m, backend=emmy_backend(prior=False, library=False), dynamic=True)
    before = len(emmy_core.compiler.backend._GRAPHS)
    with torch.no_grad():
        def call(s: int) -> None:
            x = torch.randn(2, s, H, generator=torch.Generator().manual_seed(s))
            torch.testing.assert_close(c(x), m(x), rtol=1e-4, atol=1e-4)

        call(33)
        groups = _groups(before)
        assert groups and all(len(g._runners) == 1 for g in groups)  # the first bucket: settled at once
        calls = [g.torch_calls for g in groups]
        call(70)  # a new bucket, met once: torch's ops ran it, nothing made, and the report says so
        assert all(len(g._runners) == 1 and g.torch_calls == n + 1 for g, n in zip(groups, calls, strict=True))
        assert all("first call of a size bucket" in (g.status.torch_at_last() or "") for g in groups)
        report = emmy_core.compiler.backend._GRAPHS[before].report()
        assert report.matmul_flops_on_emmy == 0 < report.matmul_flops
        call(70)  # met again: settled and made
        assert all(len(g._runners) == 2 and g.status.torch_at_last() is None for g in groups)
        assert emmy_core.compiler.backend._GRAPHS[before].report().matmul_flops_on_emmy > 0
        call(100)  # the bucket's next size: on its runner
        assert all(_runner_at(g, 100).storage == _runner_at(g, 70).storage for g in groups)
        assert all(g.torch_calls == n + 1 for g, n in zip(groups, calls, strict=True))


def test_without_defer_every_bucket_is_settled_at_its_first_call() -> None:
    _, groups = _run((33, 70), library=False, defer=False)
    assert all(len(g._runners) == 2 and g.torch_calls == 0 for g in groups)
    with pytest.raises(ValueError, match="defer="):
        emmy_backend(defer="yes")  # type: ignore[arg-type]
