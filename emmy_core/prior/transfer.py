"""Leave one card out: fit on every other card's forks, score the held-out card's, beside the baselines.

What a new card gets from the prior, and the split `emmy fit` validates and selects on. For each
fork of a held-out card (its measured members): the ranker's scores from a model fitted without
the card, its transfer features (`tr.*`) computed from the training cards only (the held-out
card's rows never enter them), and beside them on the same members the baselines: the rule's
first option (where the fork knows one), a random pick's expectation, the most similar other
card's order and the transfer baseline (`baselines`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from emmy_core.prior.dataset import DatasetFork
from emmy_core.prior.featurize import transfer_view
from emmy_core.prior.fold_tasks import FoldTrainer
from emmy_core.prior.geometry import knob_features
from emmy_core.prior.metrics import random_top_k
from emmy_core.prior.ranking import DIVERSE_HEAD, FIRST, RANKER, has_evidence, ranked
from emmy_core.prior.training import Params, design, fork_figures, groups_of, train
from emmy_core.prior.transfer_features import TRANSFER_NAMES

Progress = Callable[[str], None]


def fork_baselines(fork: DatasetFork, others: Sequence[DatasetFork]) -> dict[str, float | None]:
    """The baselines' figures on one fork's measured members, from the other cards' forks of its kernel
    (`emmy_core.ranking.figures.measured_baselines`)."""
    from emmy_core.ranking import RankContext
    from emmy_core.ranking.figures import measured_baselines

    return measured_baselines(RankContext(fork, others))


def score_forks(model: Any, forks: Sequence[DatasetFork], names: Sequence[str]) -> list[np.ndarray]:
    """The ranker's scores of every member of each fork's pool (CatBoost's own predict, as the fit sees it)."""
    return [np.asarray(model.predict(f.features.matrix(names)), dtype=np.float64) for f in forks]


def fork_knobs(fork: DatasetFork) -> np.ndarray:
    """The knob columns of the fork's rows (`geometry.knob_features`), what a shipped order is spread by."""
    return fork.features.values[:, knob_features(fork.features.names)]


def transfer_column(fork: DatasetFork, source: str = TRANSFER_NAMES[0]) -> np.ndarray:
    """One of the fork's transfer columns (`tr.score` unless told), as its rows hold it."""
    return fork.features.values[:, fork.features.names.index(source)]


@dataclass
class Held:
    """One validation fork of the card split: the fork with its fold's transfer columns, the ranker's
    scores, the baselines' figures from the fold's training cards, and its fold."""

    fork: DatasetFork
    ranker: np.ndarray
    baselines: dict[str, float | None]
    fold: int

    def figures(self, source: str, weight: float, no_evidence: str = RANKER, head: int = DIVERSE_HEAD) -> dict[str, Any]:
        """The fork's figures ranked by the choice (`source`, `weight`, what ranks a pool without transfer
        evidence), beside the baselines. The rule's order (FIRST) of a pool no rule ordered (no first option:
        an imported cache, in the store's order) is an arbitrary one: its top-1 and top-5 are a random
        order's expectation (`metrics.random_top_k`), never one draw's luck. The order's first `head` places
        are spread over knob values (`ranking.diversified`; 0: not)."""
        transfer = None if source == FIRST else transfer_column(self.fork, source)
        scores = ranked(source, weight, self.ranker, transfer, self.fork.first, no_evidence,
                        ordered=self.fork.first is not None, knobs=fork_knobs(self.fork), head=head)
        out: dict[str, Any] = {**fork_figures(self.fork, scores), **self.baselines}
        if source == FIRST and self.fork.first is None:
            m = self.fork.measured
            for k in (1, 5):
                out[f"top{k}"] = random_top_k(self.fork.times[m], self.fork.ok[m], k)
        return out

    @property
    def evidence(self) -> bool:
        """Whether another card of the fold's training side measured any of this pool's candidates."""
        return has_evidence(transfer_column(self.fork))


def card_split(forks: Sequence[DatasetFork], names: Sequence[str], pools: str, folds: int, seed: int, params: Params,
               progress: Progress | None = None, trainer: FoldTrainer | None = None,
               ) -> tuple[list[dict[str, Any]], list[Held]]:
    """Validation grouped by card: per fold its cards on each side and training groups, and every held-out
    fork scored by a ranker fitted without its card (transfer features from the fold's training cards).
    `trainer` fits the folds' rankers (default: one after the other in this process)."""
    from sklearn.model_selection import GroupKFold

    from emmy_core.prior.fold_tasks import train_here

    cards = np.array([f.card_name for f in forks])
    n = min(folds, len(set(cards.tolist())))
    if n < 2:
        return [], []
    out: list[dict[str, Any]] = []
    held: list[Held] = []
    splits = list(GroupKFold(n_splits=n).split(np.zeros(len(forks)), groups=cards))
    fitted = (trainer or train_here)(forks, names, pools, seed, params, [t for t, _ in splits])
    for k, ((train_idx, val_idx), trained) in enumerate(zip(splits, fitted, strict=True)):
        train_c, val_c = set(cards[train_idx].tolist()), set(cards[val_idx].tolist())
        assert not train_c & val_c, f"card fold {k}: cards in both train and validation: {sorted(train_c & val_c)}"
        if trained is None:
            continue
        model, n_groups = trained
        source = [forks[i] for i in train_idx]
        val = transfer_view([forks[i] for i in val_idx], source)
        if progress is not None:
            progress(f"card fold {k + 1}/{n} (without {', '.join(sorted(val_c))}): trained on {n_groups} groups")
        for f, s in zip(val, score_forks(model, val, names), strict=True):
            held.append(Held(f, s, fork_baselines(f, source), k))
        out.append({"fold": k, "train_cards": sorted(train_c), "validation_cards": sorted(val_c),
                    "train_groups": n_groups, "validation_forks": len(val)})
    return out, held


def leave_one_card_out(forks: Sequence[DatasetFork], names: Sequence[str], card: str, params: Params, seed: int,
                       pools: str = "measured", source: str = TRANSFER_NAMES[0],
                       weight: float = 0.0) -> list[dict[str, Any]]:
    """Per fork of `card`: the figures of the ranking (`source` blended at `weight`; fitted without `card`)
    and the baselines'.
    Forks carry their base features (`emmy_core.prior.featurize.featurize`)."""
    others = [f for f in forks if f.card_name != card]
    train_forks = transfer_view(others, others)
    held = transfer_view([f for f in forks if f.card_name == card], others)
    model = train(design(train_forks, groups_of(train_forks, pools, seed, params), names, params.balance,
                         params.residual), params,
                  seed)
    out = []
    for fork, s in zip(held, score_forks(model, held, names), strict=True):
        figures: dict[str, Any] = {"card": fork.card_name, "kernel": getattr(fork.kernel, "name", fork.kernel_id),
                                   "members": int(fork.measured.sum())}
        figures.update(Held(fork, s, fork_baselines(fork, others), 0).figures(source, weight))
        out.append(figures)
    return out
