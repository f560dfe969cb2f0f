"""The prior: features, the ranker artifact and its numpy scorer, the per-pool metrics, the fit.

Importing this package (and scoring) needs numpy only: the fit (`emmy_core.prior.fit`) is the
one place that imports catboost, polars, scikit-learn and MLflow.
"""

from emmy_core.prior.artifact import (
    Prior,
    PriorError,
    installed_prior_path,
    load_installed_prior,
    load_prior,
)
from emmy_core.prior.features import FEATURE_VERSION, FeatureRows, fork_features

__all__ = [
    "FEATURE_VERSION", "FeatureRows", "Prior", "PriorError", "fork_features", "installed_prior_path",
    "load_installed_prior", "load_prior",
]
