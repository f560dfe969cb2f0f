"""What every code generator offers: source text for a (kernel, knobs, setting), and a launchable build.

A `Built` kernel takes torch tensors by buffer name (inputs and preallocated outputs,
contiguous, on the backend's device) and the sizes of the dynamic axes, and writes
its outputs in place. Backends raise `BuildError` when source does not compile and
`LaunchError` when a build cannot run on the arguments; the bench harness turns both
into failed rows (failures are data), never into `None`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from emmy_core.ir import Program

if TYPE_CHECKING:  # torch is imported by backends at use, not by this interface
    import torch


class BuildError(RuntimeError):
    """Generated source failed to compile; carries the compiler's message."""


class LaunchError(RuntimeError):
    """A build could not be launched on the given arguments."""


@dataclass(frozen=True)
class Setting:
    """A compile setting: part of every measurement key. `deploy` is what a compile ships."""

    name: str
    doc: str
    c_flags: tuple[str, ...]  # for the cpu target
    warmup: int  # timing: launches before measuring
    repeats: int  # timing: measured launches (the median is recorded)


SETTINGS: dict[str, Setting] = {
    s.name: s
    for s in (
        Setting("deploy", "what a compile ships: full optimisation, full timing", ("-O3", "-march=native"), 3, 15),
        Setting("rank", "cheaper, for ranking many candidates: -O1, fewer repeats", ("-O1",), 1, 5),
    )
}
DEFAULT_SETTING = "deploy"


def get_setting(name: str) -> Setting:
    try:
        return SETTINGS[name]
    except KeyError:
        raise ValueError(f"unknown setting {name!r}; known: {', '.join(SETTINGS)}") from None


class Built(Protocol):
    def __call__(self, buffers: dict[str, torch.Tensor], sizes: dict[str, int]) -> None: ...


class Backend(Protocol):
    target: str  # "cpu" | "cuda"

    def source(self, program: Program, knobs: dict[str, object], setting: str) -> str: ...

    def build(self, program: Program, knobs: dict[str, object], setting: str) -> Built: ...
