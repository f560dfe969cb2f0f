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
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from emmy_core.prior.dataset import Fork
from emmy_core.prior.features import with_transfer
from emmy_core.prior.ranking import combine
from emmy_core.prior.training import Params, design, fork_figures, groups_of, train
from emmy_core.prior.transfer_features import TRANSFER_NAMES, TransferTable

Progress = Callable[[str], None]


def fork_baselines(fork: Fork, others: Sequence[Fork]) -> dict[str, float | None]:
    """The baselines' figures on one fork's measured members, from the other cards' forks of its kernel
    (`emmy_core.ranking.figures.measured_baselines`)."""
    from emmy_core.ranking import RankContext
    from emmy_core.ranking.figures import measured_baselines

    return measured_baselines(RankContext(fork, others))


def transfer_view(forks: Sequence[Fork], source: Sequence[Fork]) -> list[Fork]:
    """Copies of `forks` whose `tr.*` columns come from `source`'s cards, each fork's own card left out
    (the arrays are shared; only the feature rows are new)."""
    table = TransferTable.from_forks(source)
    out = []
    for f in forks:
        cols = table.columns(f.kernel_id, f.sizes, f.setting, f.card.numeric() if f.card is not None else None,
                             f.card_name, f.schedule_ids)
        out.append(replace(f, features=with_transfer(f.features, cols)))
    return out


def score_forks(model: Any, forks: Sequence[Fork], names: Sequence[str]) -> list[np.ndarray]:
    """The ranker's scores of every member of each fork's pool (CatBoost's own predict, as the fit sees it)."""
    return [np.asarray(model.predict(f.features.matrix(names)), dtype=np.float64) for f in forks]


def transfer_column(fork: Fork, source: str = TRANSFER_NAMES[0]) -> np.ndarray:
    """One of the fork's transfer columns (`tr.score` unless told), as its rows hold it."""
    return fork.features.values[:, fork.features.names.index(source)]


@dataclass
class Held:
    """One validation fork of the card split: the fork with its fold's transfer columns, the ranker's
    scores, the baselines' figures from the fold's training cards, and its fold."""

    fork: Fork
    ranker: np.ndarray
    baselines: dict[str, float | None]
    fold: int

    def figures(self, source: str, weight: float) -> dict[str, Any]:
        """The fork's figures ranked by the blend of `source` at `weight`, beside the baselines."""
        scores = combine(self.ranker, transfer_column(self.fork, source), weight)
        out: dict[str, Any] = {**fork_figures(self.fork, scores), **self.baselines}
        return out


def card_split(forks: Sequence[Fork], names: Sequence[str], pools: str, folds: int, seed: int, params: Params,
               progress: Progress | None = None) -> tuple[list[dict[str, Any]], list[Held]]:
    """Validation grouped by card: per fold its cards on each side and training groups, and every held-out
    fork scored by a ranker fitted without its card (transfer features from the fold's training cards)."""
    from sklearn.model_selection import GroupKFold

    cards = np.array([f.card_name for f in forks])
    n = min(folds, len(set(cards.tolist())))
    if n < 2:
        return [], []
    out: list[dict[str, Any]] = []
    held: list[Held] = []
    for k, (train_idx, val_idx) in enumerate(GroupKFold(n_splits=n).split(np.zeros(len(forks)), groups=cards)):
        train_c, val_c = set(cards[train_idx].tolist()), set(cards[val_idx].tolist())
        assert not train_c & val_c, f"card fold {k}: cards in both train and validation: {sorted(train_c & val_c)}"
        source = [forks[i] for i in train_idx]
        train_forks = transfer_view(source, source)
        val = transfer_view([forks[i] for i in val_idx], source)
        groups = groups_of(train_forks, pools, seed, params)
        if not groups:
            continue
        if progress is not None:
            progress(f"card fold {k + 1}/{n} (without {', '.join(sorted(val_c))}): training on {len(groups)} groups")
        model = train(design(train_forks, groups, names, params.balance), params, seed)
        for f, s in zip(val, score_forks(model, val, names), strict=True):
            held.append(Held(f, s, fork_baselines(f, source), k))
        out.append({"fold": k, "train_cards": sorted(train_c), "validation_cards": sorted(val_c),
                    "train_groups": len(groups), "validation_forks": len(val)})
    return out, held


def leave_one_card_out(forks: Sequence[Fork], names: Sequence[str], card: str, params: Params, seed: int,
                       pools: str = "measured", source: str = TRANSFER_NAMES[0],
                       weight: float = 0.0) -> list[dict[str, Any]]:
    """Per fork of `card`: the figures of the ranking (`source` blended at `weight`; fitted without `card`)
    and the baselines'.
    Forks carry their base features (`emmy_core.prior.fit.featurize`)."""
    others = [f for f in forks if f.card_name != card]
    train_forks = transfer_view(others, others)
    held = transfer_view([f for f in forks if f.card_name == card], others)
    model = train(design(train_forks, groups_of(train_forks, pools, seed, params), names, params.balance), params,
                  seed)
    out = []
    for fork, s in zip(held, score_forks(model, held, names), strict=True):
        figures: dict[str, Any] = {"card": fork.card_name, "kernel": getattr(fork.kernel, "name", fork.kernel_id),
                                   "members": int(fork.measured.sum())}
        figures.update(Held(fork, s, fork_baselines(fork, others), 0).figures(source, weight))
        out.append(figures)
    return out
