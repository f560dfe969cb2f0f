"""The one place a compiled model launches a built kernel.

`Launcher(built, sizes, name, target).bind(constants)` gives the call a runner makes on every
model call, with `constants` (the weights this launch reads) bound once. On a CPU whose builds
offer prepared launches (`CBuilt.prepare(sizes, constants) -> Launch`), the sizes and every
buffer are checked once, a matmul's weight is packed into its panels once, and each call only
writes the other buffers' pointers; a later change to a weight tensor is not seen by that launch
(`Compiled.follow_weights` notices it and binds the launch again).
Otherwise (a Triton build, which keeps its own checked launch per argument set) the call is the
backend's checked `built(buffers, sizes)` with the constants merged in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

Bound = Callable[[Mapping[str, "torch.Tensor"]], None]


class Launcher:
    """A built kernel at the sizes of its dynamic axes."""

    __slots__ = ("built", "name", "sizes", "target")

    def __init__(self, built: Any, sizes: Mapping[str, int], name: str, target: str) -> None:
        self.built = built
        self.sizes = dict(sizes)
        self.name = name
        self.target = target

    @property
    def prepared(self) -> bool:
        """Whether launches are prepared (checked and packed once) rather than checked on every call."""
        return self.target == "cpu" and hasattr(self.built, "prepare")

    def bind(self, constants: Mapping[str, torch.Tensor], packs: dict[Any, Any] | None = None) -> Bound:
        """The launch with `constants` bound; it takes the kernel's other buffers by name. `packs`: the caller's
        cache of packed weights, shared by the launches of one build at several sizes (`CBuilt.prepare`)."""
        if self.prepared:
            return self.built.prepare(self.sizes, dict(constants), packs)  # type: ignore[no-any-return]
        built, sizes, fixed = self.built, self.sizes, dict(constants)
        if not fixed:
            return lambda buffers: built(buffers, sizes)

        def run(buffers: Mapping[str, torch.Tensor]) -> None:
            built({**fixed, **buffers}, sizes)

        return run
