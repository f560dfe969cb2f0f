"""Tune kernels at sizes on this machine's card and record the rows: what `tune_module` (a user's torch module) and
the backend's `tune` option (each group's kernels at the first size of a size bucket) share. Apart from
`module_tune`, which lowers a module through the backend, so that the backend can call it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from emmy_core.bench.harness import BenchConfig, BenchReport, Unit
from emmy_core.targets import Card


def tune_units(units: Sequence[Unit], card: Card, *, budget: int | None = 16, strategy: str | None = None,
               tuning_db: Path | str | None = None, config: BenchConfig | None = None,
               on_kernel: Callable[[Any], None] | None = None, label: str = "tune") -> BenchReport:
    """Bench `units` (kernels at sizes) on `card`, this machine's, as `tune_module` does, recording into
    `tuning_db` under the run label `label`; the backend's `tune` option tunes each group's kernels with it."""
    from emmy_core.bench.harness import bench
    from emmy_core.bench.plan import tune_plan
    from emmy_core.exchange.recorders import db_recorder
    from emmy_core.search.strategy import check_tune
    from emmy_core.search.tune import PRIOR_STRATEGIES, StrategyChooser, strategy_prior

    check_tune(budget, strategy)
    config = config or BenchConfig(source="tune")
    chooser = None
    plan = tune_plan(list(units), card, None, config.seed)
    if budget is not None:
        prior, strategy, why = strategy_prior(strategy)
        if prior is None and strategy in PRIOR_STRATEGIES:
            raise ValueError(f"strategy {strategy!r} needs a prior: {why}")
        chooser = StrategyChooser(strategy, card, config.setting, budget, config.seed, prior, on_kernel=on_kernel)
        plan = [(u, []) for u in units]
    recorder = db_recorder(Path(tuning_db) if tuning_db is not None else None, label)
    report = bench(plan, card, None, recorder, config, chooser=chooser)
    if chooser is not None:
        report.skipped_known += chooser.skipped_known
    return report
