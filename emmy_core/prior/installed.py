"""The installed prior: shipped inside the package, and the seed it was fitted with.

Its refit (import the repository freeze, export, fit with the recorded seed, install) is the
chain's: `emmy_core.chain.steps.refit_installed`.
"""

from __future__ import annotations

import json
from pathlib import Path

from emmy_core.prior.artifact import installed_prior_path

DEFAULT_SEED = 0


def recorded_seed(path: Path | None = None) -> int:
    """The seed the shipped artifact was fitted with (read raw, so a stale artifact still tells it)."""
    p = path or installed_prior_path()
    try:
        seed = json.loads(p.read_text(encoding="utf-8"))["provenance"]["seed"]
    except (OSError, ValueError, KeyError, TypeError):
        return DEFAULT_SEED
    return seed if isinstance(seed, int) and not isinstance(seed, bool) else DEFAULT_SEED
