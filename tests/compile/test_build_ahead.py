"""Rule of a compile's builds: every fork is settled first, then the chosen kernels are built side by side
(C compiles overlap, one per core), and the plans are the ones settling with a build check one kernel at
a time gives; a chosen kernel that does not build is blocked and its fork settled again, as before."""

from __future__ import annotations

import os
import threading

import pytest
import torch

import emmy_core
from emmy_core.codegen.backend import BuildError
from emmy_core.codegen.c import CBackend
from emmy_core.compiler import build as build_mod
from emmy_core.graph.models import build_model


def _mlp():  # type: ignore[no-untyped-def]
    module, inputs = build_model("mlp", torch.float32)
    return module, inputs({"B": 2, "S": 8})


class Paired(CBackend):
    """A C backend whose first two builds each wait for the other to start: a compile that builds one kernel
    at a time never gets past the first (the barrier breaks after its timeout and the compile fails)."""

    def __init__(self) -> None:
        super().__init__()
        self.barrier = threading.Barrier(2, timeout=20)
        self.threads: set[str] = set()
        self.started = 0
        self.lock = threading.Lock()

    def build(self, program, knobs, setting):  # type: ignore[no-untyped-def]
        with self.lock:
            self.started += 1
            first_two = self.started <= 2
            self.threads.add(threading.current_thread().name)
        if first_two:
            self.barrier.wait()
        return super().build(program, knobs, setting)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="side by side needs two cores")
def test_chosen_kernels_build_side_by_side_and_plans_equal_one_by_one(monkeypatch: pytest.MonkeyPatch,
                                                                       tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EMMY_BUILD_CACHE", str(tmp_path / "cache"))
    module, example = _mlp()
    paired = Paired()
    monkeypatch.setattr(build_mod, "backend_for", lambda card: paired)
    ahead = emmy_core.compile(module, example, prior=False, library=False, torch_ops="refuse")
    assert len(paired.threads) >= 2 and all(t.startswith("emmy-build") for t in paired.threads)
    assert not paired.barrier.broken
    monkeypatch.setattr(build_mod.Builder, "build_all", lambda self, pairs: False)  # one by one, as before
    monkeypatch.setattr(build_mod, "backend_for", lambda card: CBackend())
    one = emmy_core.compile(module, example, prior=False, library=False, torch_ops="refuse")
    assert [r.to_json() for r in ahead.record.resolutions] == [r.to_json() for r in one.record.resolutions]
    with torch.no_grad():
        assert torch.equal(ahead(*example), one(*example))


def test_a_chosen_kernel_that_does_not_build_is_blocked_and_settled_again(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setenv("EMMY_BUILD_CACHE", str(tmp_path / "cache"))
    module, example = _mlp()
    refused: list[str] = []

    class FirstFails(CBackend):
        def build(self, program, knobs, setting):  # type: ignore[no-untyped-def]
            if program.name.startswith("matmul") and not refused:
                refused.append(program.name)
                raise BuildError(f"{program.name}: refused once by the test")
            return super().build(program, knobs, setting)

    monkeypatch.setattr(build_mod, "backend_for", lambda card: FirstFails())
    c = emmy_core.compile(module, example, prior=False, library=False, torch_ops="refuse")
    blocked = [r for r in c.record.resolutions if r.kernel == refused[0] and r.blocked]
    assert blocked and "refused once by the test" in blocked[0].blocked[0][1]
    with torch.no_grad():
        torch.testing.assert_close(c(*example), module(*example), rtol=1e-4, atol=1e-4)
