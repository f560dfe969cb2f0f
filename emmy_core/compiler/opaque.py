"""Emmy's groups as one opaque torch op, so that Inductor can compile the torch ops around them.

With `fallback="inductor"` the emmy backend hands each partitioned graph to Inductor instead of
running its torch ops eagerly: the ops Emmy does not lower (a causal mask's index math, rotary
tables, embeddings, and attention when it is left to torch) are fused and compiled as
`torch.compile` would, while each Emmy group stays one call of `emmy::group`, an op Inductor
does not look into. Its real kernel calls the group (which builds, checks and runs Emmy's
kernels, or torch for a group handed back); its fake kernel runs the group's torch ops on fake
tensors for the output shapes. A group's outputs are contiguous, as Emmy's runner allocates them.

The op is registered on first use (nothing at import). Groups are looked up by a number
in a weak table, so a compiled model that is freed takes its groups with it.
"""

from __future__ import annotations

import itertools
import operator
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.fx as fx
from torch import nn

OP = "emmy::group"
_groups: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_numbers = itertools.count()
_library: list[torch.library.Library] = []  # the registration, kept alive once made


TENSOR, INT, FLOAT, SIZE = 0, 1, 2, 3  # what each argument of a group is (`kinds`)
FAKE_FLOAT = 0.5  # a float argument's stand-in for the fake kernel: floats change no shape


def _arguments(tensors: Sequence[torch.Tensor], ints: Sequence[Any], kinds: Sequence[int],
               lengths: Sequence[int], fake: bool = False) -> list[Any]:
    """The group's arguments again from the op's: a float travels as a 0-d f64 tensor, a size as its ints."""
    ti, ii, li = iter(tensors), iter(ints), iter(lengths)
    out: list[Any] = []
    for k in kinds:
        if k == TENSOR:
            out.append(next(ti))
        elif k == INT:
            out.append(next(ii))
        elif k == FLOAT:
            t = next(ti)
            out.append(FAKE_FLOAT if fake else float(t.item()))
        else:
            out.append(torch.Size([next(ii) for _ in range(next(li))]))
    return out


def _outputs(out: Any) -> list[torch.Tensor]:
    return list(out) if isinstance(out, tuple | list) else [out]


def _group(number: int) -> Any:
    group = _groups.get(number)
    if group is None:
        raise RuntimeError(f"{OP}: group {number} is gone (its compiled model was freed)")
    return group


def _run(number: int, tensors: list[torch.Tensor], ints: list[Any], kinds: list[int],
         lengths: list[int]) -> list[torch.Tensor]:
    outs = _outputs(_group(number)(*_arguments(tensors, ints, kinds, lengths)))
    seen = {t.untyped_storage().data_ptr() for t in tensors}
    fresh = []
    for o in outs:  # an op's outputs alias none of its inputs nor each other, laid out as its fake kernel says
        ptr = o.untyped_storage().data_ptr()
        fresh.append(o.clone(memory_format=torch.contiguous_format) if ptr in seen else o.contiguous())
        seen.add(ptr)
    return fresh


def _fake(number: int, tensors: list[torch.Tensor], ints: list[Any], kinds: list[int],
          lengths: list[int]) -> list[torch.Tensor]:
    outs = _outputs(_group(number).torch_sub(*_arguments(tensors, ints, kinds, lengths, fake=True)))
    return [torch.empty(o.shape, dtype=o.dtype, device=o.device) for o in outs]


def group_op() -> Any:
    """`torch.ops.emmy.group`, registered on first use: (number, tensors, ints, kinds, lengths) -> the group's
    outputs. `kinds` says what each of the group's arguments is (TENSOR, INT, FLOAT, SIZE); a float travels as a
    0-d f64 tensor among the tensors, a size as its ints, `lengths` long."""
    if not _library:
        lib = torch.library.Library("emmy", "DEF")
        lib.define("group(int number, Tensor[] tensors, SymInt[] ints, int[] kinds, int[] lengths) -> Tensor[]")
        lib.impl("group", _run, "CompositeExplicitAutograd")
        torch.library.register_fake(OP, _fake, lib=lib)
        _library.append(lib)
    return torch.ops.emmy.group.default


def opaque_groups(gm: fx.GraphModule, groups: Mapping[str, nn.Module]) -> None:
    """Rewrites each `call_module` of an Emmy group in `gm` (`groups`: the backend's `EmmyGroup`s by name, each
    with the `torch_sub` it replaces) as one call of `emmy::group`, then recompiles gm."""
    op = group_op()
    for node in list(gm.graph.nodes):
        if node.op != "call_module" or node.target not in groups:
            continue
        group = groups[node.target]
        number = next(_numbers)
        _groups[number] = group
        tensors: list[Any] = []
        ints: list[Any] = []
        kinds: list[int] = []
        lengths: list[int] = []
        with gm.graph.inserting_before(node):
            for a in node.args:
                v = a.meta.get("example_value", a.meta.get("val")) if isinstance(a, fx.Node) else a
                if isinstance(v, torch.Tensor):
                    tensors.append(a)
                    kinds.append(TENSOR)
                elif isinstance(v, bool) or not isinstance(v, int | float | torch.SymInt | torch.SymFloat | tuple):
                    raise TypeError(f"{OP}: a group argument of type {type(v).__name__} ({a}) has no place in it")
                elif isinstance(v, int | torch.SymInt):
                    ints.append(a)
                    kinds.append(INT)
                elif isinstance(v, float | torch.SymFloat):
                    tensors.append(gm.graph.call_function(torch.scalar_tensor, (a,), {"dtype": torch.float64}))
                    kinds.append(FLOAT)
                else:  # a size: its ints
                    ints += [gm.graph.call_function(operator.getitem, (a, i)) if isinstance(a, fx.Node) else a[i]
                             for i in range(len(v))]
                    kinds.append(SIZE)
                    lengths.append(len(v))
        torch_sub: Any = group.torch_sub
        single = not isinstance(torch_sub.graph.output_node().args[0], tuple | list)
        with gm.graph.inserting_before(node):
            call = gm.graph.call_function(op, (number, tensors, ints, kinds, lengths))
            node.replace_all_uses_with(gm.graph.call_function(operator.getitem, (call, 0)) if single else call)
        gm.graph.erase_node(node)
    gm.recompile()
