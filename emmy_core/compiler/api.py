"""The two entry points of the compiler: `compile` (a model on generated kernels: by default through the emmy
Dynamo backend, torch running what Emmy does not lower; with `torch_ops="refuse"` the strict one-graph
path) and `explain` (resolve only, one graph). `compile` returns a `CompiledModel` (`graphs.py`) on either path,
its mode the path; `explain` the one-graph `Compiled` (`compiled.py`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch import nn

from emmy_core.compiler.compiled import Compiled, check_arguments, prepare
from emmy_core.compiler.graphs import MODES, CompiledModel, compile_graphs
from emmy_core.evidence.context import PriorArg
from emmy_core.evidence.freeze import FreezesArg
from emmy_core.targets.card import Card


def compile(module: nn.Module, example_inputs: Sequence[torch.Tensor], *, card: str | Card = "local",
            setting: str = "deploy", strict_evidence: bool = False, tuning_db: Path | str | None = None,
            freezes: FreezesArg = None, prior: PriorArg = None, torch_ops: str = "run",
            library: bool = True, defer: bool = True) -> CompiledModel:
    """Compiles `module` for `card` (default: this machine's) from its example inputs: a `CompiledModel`, called
    exactly like the module (positional and keyword arguments, training, `generate` through `forward`), whose
    mode is the path taken (`.torch_ops`) and whose resolution is read the same way on both (`records()`,
    `record`, `explain()`).

    `torch_ops="run"` (the default) compiles it through the emmy Dynamo backend, the path of
    `torch.compile(module, backend="emmy")`: groups of the ops Emmy lowers run on Emmy kernels, every other
    op runs as torch (`explain()` names it and why), sizes are Dynamo's symbolic shapes, each group is built
    and checked against torch when a size first runs. `torch_ops="refuse"` is the one-graph mode: the whole
    module on Emmy kernels as one graph with named dynamic axes `B` and `S` (`resolve`, `prepare`, `layout`,
    `one_graph`), or a refusal naming the op and model line Emmy does not lower; `strict_evidence=True` (a
    fork past the measured tiers is an error) applies only there, since it settles every fork at compile.

    Every fork is settled by the best evidence: the freeze's goldens (`freezes=`, `$EMMY_FREEZES`
    or the freeze shipped with the package), the local tuning database (`tuning_db=`,
    `$EMMY_TUNING_DB` or `~/.cache/emmy/autotune.db`), the prior (`prior=`: None the installed one,
    a path, a loaded prior, or False for none), the rule's first option. The example's sizes are
    settled and their kernels built now; other sizes when first called, except that on the Dynamo path a size
    bucket (sizes rounded up to powers of two) after a group's first is settled at its second call, its first
    run by torch's ops (`defer=True`: a size met once costs no settle; `defer=False` settles at the first). The module's weights are
    followed: every call takes in a weight edited in place (torch's version counter) or replaced by one
    of the same shape and type (the one-graph path refuses one of another shape or type).

    Every matrix product's first option is torch's own kernel (`library=True`, `emmy_core.knobs.route`): where
    no measurement says Emmy's kernel wins on this card, the product runs as torch runs it, so a compiled model
    is never slower than not compiling. `library=False` offers Emmy's kernels only (to measure or test them).
    """
    check_arguments(module, prior, strict_evidence, library)
    if torch_ops == "run":
        if strict_evidence:
            raise TypeError("strict_evidence=True applies to torch_ops='refuse' (one graph, every fork settled at "
                            "compile); the Dynamo path (the default) settles each group's forks when its sizes first "
                            "run: pass torch_ops='refuse' with it")
        if not isinstance(defer, bool):
            raise TypeError(f"defer= must be True or False, got {type(defer).__name__}")
        return compile_graphs(module, example_inputs, card=card, setting=setting, tuning_db=tuning_db,
                              freezes=freezes, prior=prior, library=library, defer=defer)
    if torch_ops not in MODES:
        raise TypeError(f"torch_ops= must be 'run' (the default: torch runs what Emmy does not lower) or 'refuse' "
                        f"(one graph all on Emmy kernels), got {str(torch_ops)[:40]!r}")
    compiled, sizes = prepare(module, example_inputs, card, setting, strict_evidence=strict_evidence,
                               tuning_db=tuning_db, freezes=freezes, prior=prior, build=True, library=library)
    if compiled.builder is not None:
        compiled.prepare(sizes)
    else:
        compiled.resolve(sizes)
    return CompiledModel(module, compiled.card, setting, one_graph=compiled)


def explain(module: nn.Module, example_inputs: Sequence[torch.Tensor], sizes: Mapping[str, int] | str | None = None,
            *, card: str | Card = "local", setting: str = "deploy", tuning_db: Path | str | None = None,
            freezes: FreezesArg = None, prior: PriorArg = None, name: str | None = None,
            library: bool = True) -> Compiled:
    """A compile that resolves only (no build, no allocation), with `sizes` (default: the example's) resolved."""
    compiled, example = prepare(module, example_inputs, card, setting, strict_evidence=False, tuning_db=tuning_db,
                                 freezes=freezes, prior=prior, build=False, name=name, library=library)
    compiled.resolve(sizes if sizes is not None else example)
    return compiled

