"""The one place a compiled model launches a built kernel.

Today a launch is the backend's checked call, `built(buffers, sizes)`: it verifies every buffer's
shape, dtype, contiguity and overlap on every call. When the C backend's prepared launches land
(`CBuilt.prepare(sizes, constants) -> Launch`, checked once, weights packed once), switching to
them is a change to this module only: the runner hands `Launcher` the same buffers every call.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch


class Launcher:
    """A built kernel bound to the sizes of its dynamic axes; call it with its buffers by name."""

    __slots__ = ("built", "name", "sizes")

    def __init__(self, built: Any, sizes: Mapping[str, int], name: str) -> None:
        self.built = built
        self.sizes = dict(sizes)
        self.name = name

    def __call__(self, buffers: Mapping[str, torch.Tensor]) -> None:
        self.built(buffers, self.sizes)
