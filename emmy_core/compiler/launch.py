"""The one place a compiled model launches a built kernel.

`Launcher(built, sizes, name, target).bind(constants, fixed, per_call)` gives the call a runner makes on every
model call, with `constants` (the weights this launch reads) bound once. On a CPU whose builds
offer prepared launches (`CBuilt.prepare(sizes, constants) -> Launch`), the sizes and every
buffer are checked once, a matmul's weight is packed into its panels once, and each call only
writes the other buffers' pointers; a later change to a weight tensor is not seen by that launch
(`Compiled.follow_weights` notices it and binds the launch again).
Otherwise (a Triton build, which keeps its own checked launch per argument set) the call is the
backend's checked `built(buffers, sizes)` with the constants merged in.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
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

    def bind(self, constants: Mapping[str, torch.Tensor], fixed: Mapping[str, torch.Tensor],
             per_call: Sequence[tuple[str, str, tuple[int, ...]]], packs: dict[Any, Any] | None = None) -> Bound:
        """The call a runner makes: `call(env)`. `constants` (the weights this launch reads) and `fixed` (buffers
        the runner allocated once) are bound now; each `(buffer, key, shape)` of `per_call` is read from `env`
        at every call. `packs`: the caller's cache of packed weights, shared by the launches of one build at
        several sizes (`CBuilt.prepare`).

        Prepared, only the per-call pointers are written at each call (`Launch.over`: no dictionary, no view);
        otherwise the backend's checked call gets every buffer by name, the per-call ones viewed at `shape`."""
        if self.prepared:
            launch = self.built.prepare(self.sizes, dict(constants), packs)
            return launch.over(fixed, {b: key for b, key, _ in per_call})  # type: ignore[no-any-return]
        built, sizes, bound = self.built, self.sizes, {**constants, **fixed}

        def run(env: Mapping[str, torch.Tensor]) -> None:
            buffers = dict(bound)
            for b, key, shape in per_call:
                buffers[b] = env[key].view(shape)
            built(buffers, sizes)

        return run
