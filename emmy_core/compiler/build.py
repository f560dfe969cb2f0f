"""Building the kernels a compile runs, once each, and the build check the resolver blocks options by.

The backend is the card's target's: C with OpenMP for a CPU, Triton for a GPU (on CPU tensors
only under Triton's interpreter, as the tests run it). Builds are kept by (kernel identity,
schedule id) for the life of the compile, on top of the backend's own on-disk cache. `check`
is what `emmy_core.evidence.resolve` calls on an answer: an option whose source does not
generate or does not compile is blocked with the compiler's first line, and the fork is
resolved again.

`build_all` builds many pairs at once (C compiles run side by side, one per core): a compile
settles every fork without building, builds all the chosen kernels together, and only when one
fails resolves again with the check (`Compiled._planned`). Within `reporting_builds(report)` it
says how many are built as they finish (`emmy compile`'s progress: a cold C build takes seconds).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from emmy_core.codegen.backend import BuildError, get_setting
from emmy_core.graph.forks import Fork, ForkOption, ScheduleOption
from emmy_core.ir.errors import IRError
from emmy_core.ir.identity import kernel_id
from emmy_core.ir.nodes import Program
from emmy_core.targets.card import Card

BuildReport = Callable[[int, int], None]
_report: ContextVar[BuildReport | None] = ContextVar("emmy_build_report", default=None)


@contextmanager
def reporting_builds(report: BuildReport) -> Iterator[None]:
    """Within it, each `Builder.build_all` of this thread calls `report(done, total)` as each kernel it builds is
    done, built or not (from the builder's threads): a compile's progress, whose builds are deep inside it."""
    token = _report.set(report)
    try:
        yield
    finally:
        _report.reset(token)


def backend_for(card: Card) -> Any:
    """The code generator of the card's target."""
    if card.target == "cpu":
        from emmy_core.codegen.c import CBackend

        return CBackend()
    from emmy_core.codegen.triton_gen import TritonBackend

    return TritonBackend()


def runnable_here(card: Card) -> str | None:
    """Why kernels for `card` cannot run in this process (None: they can)."""
    if card.target == "cpu":
        return None
    import torch

    if torch.cuda.is_available():
        return None
    from emmy_core.codegen.triton_gen import interpreting

    if interpreting():
        return None
    return (f"{card.name} is a GPU and this machine has none (Triton's interpreter is off); "
            "its forks can be resolved and explained, not run")


class Builder:
    """Builds (kernel, schedule) pairs for one card and setting, each once."""

    def __init__(self, card: Card, setting: str, backend: Any | None = None) -> None:
        get_setting(setting)
        self.card = card
        self.setting = setting
        self.backend = backend if backend is not None else backend_for(card)
        self.built: dict[tuple[str, str], Any] = {}
        self.failed: dict[tuple[str, str], str] = {}

    def build(self, program: Program, option: ScheduleOption) -> Any:
        """The built kernel (BuildError / IRError when it does not build; remembered)."""
        key = (kernel_id(program), option.schedule_id)
        if key in self.failed:
            raise BuildError(self.failed[key])
        if key not in self.built:
            try:
                self.built[key] = self.backend.build(program, dict(option.knobs), self.setting)
            except (BuildError, IRError) as exc:
                self.failed[key] = str(exc)
                raise
        return self.built[key]

    def build_all(self, pairs: Iterable[tuple[Program, ScheduleOption]]) -> bool:
        """Builds every pair not built yet, side by side on a CPU card (the C compiler is a separate process,
        so threads overlap its runs); whether all of them built. A failure is remembered, as `build` does."""
        todo = {(kernel_id(p), o.schedule_id): (p, o) for p, o in pairs}
        todo = {k: v for k, v in todo.items() if k not in self.built}
        if any(k in self.failed for k in todo):
            return False

        report, done, counting = _report.get(), [0], threading.Lock()
        if report is not None and todo:
            report(0, len(todo))

        def one(pair: tuple[Program, ScheduleOption]) -> bool:
            try:
                self.build(*pair)
            except (BuildError, IRError):
                return False
            finally:
                if report is not None:
                    with counting:
                        done[0] += 1
                        report(done[0], len(todo))
            return True

        workers = min(len(todo), os.cpu_count() or 1) if self.card.target == "cpu" else 1
        if workers <= 1:
            return all([one(pair) for pair in todo.values()])
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="emmy-build") as pool:
            return all(list(pool.map(one, todo.values())))

    def check(self, fork: Fork, option: ForkOption) -> str | None:
        """Why `option` cannot be used (it does not build), or None; structural options are not built here."""
        if not isinstance(option, ScheduleOption):
            return None
        try:
            self.build(fork.kernel, option)
        except (BuildError, IRError) as exc:
            lines = str(exc).strip().splitlines()
            return f"does not build: {' / '.join(lines[:3])[:300]}"
        return None
