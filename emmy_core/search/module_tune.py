"""Tune a user's torch module: the kernels the emmy backend lowers it to, measured on this machine and recorded.

`emmy tune --model llama_block` tunes the reference models' one-graph lowering. A model compiled with
`torch.compile(model, backend="emmy")` (or `emmy_core.compile`) is lowered group by group, at the sizes
Dynamo hands over; its kernels are found by running the module once through the backend without building
(`build=False`: it partitions and settles forks at each size, torch computes), then taking each Emmy
group's kernels at every size that group ran. `tune_module` benches them with the one harness and a
search strategy (`emmy_core.search.tune`), recording into the tuning database the backend reads: the next
compile of the module on this card answers those forks from the local tier.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from emmy_core.bench.harness import BenchConfig, BenchReport, Unit
from emmy_core.targets import Card


def module_units(module: nn.Module, example_inputs: Sequence[Any], *, card: str | Card = "local",
                 setting: str = "deploy", attention: bool | str = "auto") -> list[Unit]:
    """One unit per kernel of every Emmy group the backend makes of `module` at `example_inputs` (graph order,
    repeats kept for the harness to count), each at the sizes its group ran; nothing is built or timed."""
    from emmy_core.compiler.backend import emmy_backend
    from emmy_core.compiler.graphs import compile_collecting

    run, states = compile_collecting(module, emmy_backend(card=card, setting=setting, build=False,
                                                          attention=attention, prior=False))
    with torch.no_grad():
        run(*example_inputs)
    name = type(module).__name__
    units: list[Unit] = []
    for state in states:
        for group in state.live_groups():
            if group.off is not None:
                continue
            for sizes in group.sizes_seen():
                units += [Unit(k.program, k.sizes(sizes), label=f"{name}:{group.compiled.lowered.graph.name}:{k.node}")
                          for k in group.compiled.lowered.kernels]
    del run
    return units


def tune_module(module: nn.Module, example_inputs: Sequence[Any], *, budget: int | None = 16,
                strategy: str | None = None, tuning_db: Path | str | None = None, attention: bool | str = "auto",
                config: BenchConfig | None = None, on_kernel: Callable[[Any], None] | None = None) -> BenchReport:
    """Bench the kernels `module` lowers to at `example_inputs` on this machine's card and record the rows into
    `tuning_db` (default: the local tuning database): `budget` candidates per kernel chosen by `strategy`
    (default `prior` when the installed prior loads, else `random`; the first option always among them), or
    every candidate with `budget=None`. `config` is the harness's (setting, seed, timeouts, the spread and
    load limits a timing must pass to be recorded, progress); `on_kernel` is told each kernel's search as it
    ends. Rows already measured ok are not measured again. ValueError for an unknown strategy, a budget below
    1, or a strategy that needs a prior when none loads."""
    from emmy_core.search.strategy import check_tune
    from emmy_core.search.tune_units import tune_units
    from emmy_core.targets import local_card

    check_tune(budget, strategy)
    config = config or BenchConfig(source="tune")
    card = local_card()
    units = module_units(module, example_inputs, card=card, setting=config.setting, attention=attention)
    return tune_units(units, card, budget=budget, strategy=strategy, tuning_db=tuning_db, config=config,
                      on_kernel=on_kernel, label=f"tune {type(module).__name__}")
