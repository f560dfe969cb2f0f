"""Following the module's weights after compile: what changed since the compiled model last read them.

A CPU launch packs a matmul's weight into panels once (`launch.py`), and a weight on another
device than the module's is copied once, so a compiled model would otherwise keep running on the
weights it first read. `WeightWatch` notes, per weight path, the module's own tensor, its torch
version counter (bumped by every in-place edit: `add_`, `copy_`, an optimizer step) and where its
data lives. `changes()` compares them on every call (a few attribute reads per weight) and says
which paths were edited in place and which were replaced (`model.linear.weight = nn.Parameter(...)`,
`p.data = ...`, or a submodule replaced). An edit made through `p.data` in place bypasses torch's
version counter and cannot be seen this way (as for autograd): assign or edit the parameter itself.
Inference tensors (made under `torch.inference_mode()`) have no version counter: they are followed by
identity and storage only (`version_of`), so an in-place edit of one is not seen either. torch's fused
optimizers write parameters without bumping their version: after any optimizer step (`steps.steps_taken`)
every weight is read anew.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import torch
from torch import nn

from emmy_core.compiler.steps import steps_taken
from emmy_core.graph.errors import GraphError


@dataclass
class _Watched:
    path: str
    chain: tuple[tuple[nn.Module, str, nn.Module], ...]  # (parent, attribute, child) from the root down
    owner: nn.Module
    leaf: str
    is_param: bool
    tensor: torch.Tensor  # the module's own tensor at compile (a Parameter or a buffer)
    version: int
    data_ptr: int


@dataclass(frozen=True)
class WeightChange:
    path: str
    tensor: torch.Tensor  # the weight now (detached)
    replaced: bool  # a new tensor (or new data) rather than the same tensor edited in place


class WeightWatch:
    """The weights a compiled model read, watched for edits and replacements in its module."""

    def __init__(self, module: nn.Module, paths: Mapping[str, torch.Tensor]) -> None:
        self._root = module
        self._steps = steps_taken()
        self._items: list[_Watched] = []
        for path in paths:
            found = _resolve(module, path)
            if found is None:
                raise GraphError(f"weight {path} is not a parameter or buffer of {type(module).__name__}")
            self._items.append(found)

    def _current(self, w: _Watched) -> _Watched | None:
        """`w` as the module holds it now: itself when its submodules are the same ones, else looked up anew."""
        for parent, name, child in w.chain:
            if parent._modules.get(name) is not child:
                return _resolve(self._root, w.path)
        return w

    def tensors(self) -> list[torch.Tensor]:
        """The module's weight tensors as last seen."""
        return [w.tensor for w in self._items]

    def changes(self) -> list[WeightChange]:
        """The weights edited or replaced since the last call (or since compile); each noted as seen. After an
        optimizer step, every weight (a fused step bumps no version counter)."""
        out: list[WeightChange] = []
        steps = steps_taken()
        stepped, self._steps = steps != self._steps, steps
        for i, w in enumerate(self._items):
            now = self._current(w)
            if now is None:
                raise GraphError(f"parameter {w.path} is no longer in the module; compile the model again")
            t = (now.owner._parameters if now.is_param else now.owner._buffers).get(now.leaf)
            if t is None:
                raise GraphError(f"parameter {w.path} is no longer in the module; compile the model again")
            if not stepped and t is w.tensor and version_of(t) == w.version and t.data_ptr() == w.data_ptr:
                continue
            replaced = t is not w.tensor or t.data_ptr() != w.data_ptr
            self._items[i] = _Watched(w.path, now.chain, now.owner, now.leaf, now.is_param, t, version_of(t),
                                      t.data_ptr())
            out.append(WeightChange(w.path, t.detach(), replaced))
        return out


def version_of(t: torch.Tensor) -> int:
    """`t._version`, or -1 for an inference tensor, which keeps no version counter (reading it raises)."""
    return -1 if t.is_inference() else t._version


def _resolve(root: nn.Module, path: str) -> _Watched | None:
    """The parameter or buffer at `path` under `root` now, with the submodules that lead to it."""
    *mods, leaf = path.split(".")
    chain: list[tuple[nn.Module, str, nn.Module]] = []
    owner = root
    for name in mods:
        child = owner._modules.get(name)
        if child is None:
            return None
        chain.append((owner, name, child))
        owner = child
    is_param = leaf in owner._parameters
    tensor = owner._parameters.get(leaf) if is_param else owner._buffers.get(leaf)
    if tensor is None:
        return None
    return _Watched(path, tuple(chain), owner, leaf, is_param, tensor, version_of(tensor), tensor.data_ptr())


def check_same_kind(path: str, old: torch.Tensor, new: torch.Tensor) -> None:
    """A replaced weight must have the compiled one's shape and data type (else the kernels do not fit it)."""
    if tuple(new.shape) != tuple(old.shape) or new.dtype != old.dtype:
        raise GraphError(f"parameter {path} changed from {old.dtype} {tuple(old.shape)} to {new.dtype} "
                         f"{tuple(new.shape)} since compile; compile the model again")
