"""The pools of a dataset scored by a prior: one record of figures per pool, and price points per card.

`score_pools` is the loop behind `evaluate` (`eval.report`): every fork with a golden (golden view) or
measured members (measured view) is ranked by the prior in the compile context of its own card, its figures
computed beside the baselines (`eval.figures`), and a seeded sample of its measured rows priced for the
price-against-time plot. A card's records depend on its own forks and the other cards' measurements of the
same kernel only, so the loop runs in this process over every card or on a worker over one
(`eval.card_tasks`) and gives the same records.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from emmy_core.eval import figures as fg
from emmy_core.eval.extern_order import FileOrder
from emmy_core.ir import Extern
from emmy_core.prior import Prior
from emmy_core.prior.dataset import Dataset, DatasetFork
from emmy_core.ranking import PriorRanker, RankContext

MAX_POINTS = 400  # measured rows per fork priced for the price-against-time plot (a seeded sample)
Progress = Callable[[str], None]


def group_key(fork: DatasetFork) -> str:
    """The group a fork's price points go to: `card / setting`."""
    return f"{fork.card_name} / {fork.setting}"


@dataclass
class PricePoints:
    """Measured working rows of one card and setting with the prior's price for them (µs both)."""

    times: list[np.ndarray] = field(default_factory=list)
    prices: list[np.ndarray] = field(default_factory=list)

    def arrays(self) -> tuple[np.ndarray, np.ndarray]:
        return (np.concatenate(self.times) if self.times else np.zeros(0),
                np.concatenate(self.prices) if self.prices else np.zeros(0))


Scored = tuple[list[dict[str, Any]], dict[str, PricePoints]]  # records per pool, price points per card / setting


def kernel_label(fork: DatasetFork) -> str:
    """The kernel's name as a person knows it (an extern kernel with its problem size)."""
    k = fork.kernel
    if isinstance(k, Extern):
        return f"{k.name} {'x'.join(map(str, k.problem))}"
    return k.name


def _others_index(forks: Sequence[DatasetFork]) -> dict[tuple[str, str, str], list[DatasetFork]]:
    """Forks by (kernel, sizes, setting): where the baselines look for other cards' measurements."""
    out: dict[tuple[str, str, str], list[DatasetFork]] = {}
    for f in forks:
        out.setdefault((f.kernel_id, f.sizes, f.setting), []).append(f)
    return out


def _price_sample(prior: Prior, fork: DatasetFork, into: PricePoints) -> None:
    ok = np.flatnonzero(fork.ok)
    if not len(ok):
        return
    rng = np.random.default_rng(len(into.times))
    pick = np.sort(rng.choice(ok, size=min(MAX_POINTS, len(ok)), replace=False))
    into.times.append(fork.times[pick])
    into.prices.append(prior.price(fork.kernel, fork.sizes, fork.card, fork.setting, [fork.knobs[i] for i in pick]))


def score_pools(data: Dataset, prior: Prior, pools: str, extern_order: FileOrder | None,
                cards: Collection[str] | None, progress: Progress | None = None) -> Scored:
    """Every pool of `data` on `cards` (default every card) scored by `prior` in the `pools` view: one record per
    pool, in the forks' order, and the price points per card and setting. What `evaluate` does in this
    process, and what each worker does for its one card (`eval.card_tasks`)."""
    index = _others_index(data.forks)
    ranker = PriorRanker(prior)
    records: list[dict[str, Any]] = []
    points: dict[str, PricePoints] = {}
    golden, measured = pools in ("golden", "both"), pools in ("measured", "both")
    for i, fork in enumerate(data.forks):
        has_golden = golden and fork.golden is not None
        m = np.flatnonzero(fork.measured)
        has_measured = measured and len(m) > 0
        if not (has_golden or has_measured) or (cards is not None and fork.card_name not in cards):
            continue
        candidates = np.arange(len(fork.knobs)) if has_golden else m
        scores = ranker.rank(RankContext(fork), candidates)
        others = index[(fork.kernel_id, fork.sizes, fork.setting)]
        order = extern_order.get((fork.kernel_id, fork.card_name)) if extern_order is not None else None
        record: dict[str, Any] = {
            "card": fork.card_name, "setting": fork.setting, "kernel": kernel_label(fork),
            "kernel_id": fork.kernel_id, "sizes": fork.sizes, "extern": isinstance(fork.kernel, Extern),
            "family": fork.family,
            "members": len(fork.knobs), "measured_members": len(m), "working_members": int(fork.ok.sum())}
        if has_golden:
            record.update(fg.golden_view(fork, scores, others, order))
        if has_measured:
            record.update(fg.measured_view(fork, scores[m] if has_golden else scores, others, order))
            _price_sample(prior, fork, points.setdefault(group_key(fork), PricePoints()))
        records.append(record)
        if progress is not None and (i + 1) % 100 == 0:
            progress(f"scored {i + 1}/{len(data.forks)} forks")
    return records, points
