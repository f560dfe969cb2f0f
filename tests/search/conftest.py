"""Fixtures of the search's tests: the evaluation's small Kernel Tuner exports and hand-written priors."""

from tests.eval.conftest import caches_export, constant_prior, tile_prior  # noqa: F401
