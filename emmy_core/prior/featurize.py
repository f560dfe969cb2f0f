"""Filling the dataset forks' feature rows: each fork's own features, then its transfer columns from the
cards of a fold's training side (the card being predicted never among them).

The fit, its folds (in process or on a Dask worker) and the evaluations fill features the same way, so
the one place is here, below all of them."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

from emmy_core.prior.dataset import DatasetFork
from emmy_core.prior.features import fork_features, with_transfer
from emmy_core.prior.transfer_features import TransferTable

Progress = Callable[[str], None]


def featurize(forks: Sequence[DatasetFork], progress: Progress | None = None) -> list[str]:
    """Fills every fork's feature rows (the one feature function; transfer columns missing until a fold
    fills them, `transfer_view`); returns the union of column names."""
    names: dict[str, None] = {}
    for i, fork in enumerate(forks):
        fork.features = fork_features(fork.kernel, fork.sizes, fork.card, fork.setting, fork.knobs)
        names.update(dict.fromkeys(fork.features.names))
        if progress is not None and (i + 1) % 50 == 0:
            progress(f"features of {i + 1}/{len(forks)} forks")
    fixed = [n for n in names if not n.startswith("x.")]
    return [*fixed, *sorted(n for n in names if n.startswith("x."))]



def transfer_view(forks: Sequence[DatasetFork], source: Sequence[DatasetFork]) -> list[DatasetFork]:
    """Copies of `forks` whose `tr.*` columns come from `source`'s cards, each fork's own card left out
    (the arrays are shared; only the feature rows are new)."""
    table = TransferTable.from_forks(source)
    out = []
    for f in forks:
        cols = table.columns(f.kernel_id, f.sizes, f.setting, f.card.numeric() if f.card is not None else None,
                             f.card_name, f.schedule_ids)
        out.append(replace(f, features=with_transfer(f.features, cols)))
    return out
