"""What a worker reads of the export and the prior a task names, checked against the digests the task
carries: a worker never computes on content other than what the process that sent the task read.

The Dask tasks of a fit (`fold_tasks`), an evaluation (`eval.card_tasks`) and a search replay
(`search.replay_tasks`) carry only paths and digests; each worker reads the files itself, through
these two functions, and fails the task naming the file when its content differs.
"""

from __future__ import annotations

from emmy_core.prior.artifact import Prior
from emmy_core.prior.dataset import Dataset


def read_checked_dataset(path: str, cards_file: str | None, digest: str, reader: str) -> Dataset:
    """The export at `path`, refused (RuntimeError naming it) unless its digest is `digest`, the one `reader`
    (the fit, the evaluation, the search) read."""
    from emmy_core.prior.dataset import read_dataset

    data = read_dataset(path, cards_file)
    if data.digest != digest:
        raise RuntimeError(f"dataset {path}: its digest is {data.digest[:16]} on this worker, the {reader} read "
                           f"{digest[:16]}: the export changed (or differs here)")
    return data


def load_checked_prior(path: str | None, digest: str, reader: str) -> Prior:
    """The prior at `path` (None: the installed one), refused (RuntimeError naming it) unless its content
    digest is `digest`, the one `reader` loaded."""
    from emmy_core.prior import load_installed_prior, load_prior
    from emmy_core.prior.provenance import content_digest

    prior = load_prior(path) if path is not None else load_installed_prior()
    have = content_digest(prior.doc)
    if have != digest:
        raise RuntimeError(f"prior {path or 'installed'}: its content digest is {have[:16]} on this worker, the "
                           f"{reader} loaded {digest[:16]}: the file changed (or differs here)")
    return prior
