"""Search: which candidates of a fork to measure next, under a budget, guided by the prior.

`strategy` holds the one interface (`SearchStrategy.propose`) and the strategies (first,
random, prior, explore); `replay` runs a strategy under a budget, live for a tune or over a
frozen measured pool (Kernel Tuner's simulation mode), and proves a strategy sees only what it
chose; `curves` scores strategies over an export's pools; `tune` drives the bench harness with
a strategy; `suggest` says what is most worth measuring next. Importing this package needs numpy only.
"""

from emmy_core.search.replay import FrozenPool, ReplayError, Session, check_blind, replay
from emmy_core.search.strategy import STRATEGIES, SearchPool, SearchStrategy, Trial, make_strategy

__all__ = ["STRATEGIES", "FrozenPool", "ReplayError", "SearchPool", "SearchStrategy", "Session", "Trial",
           "check_blind", "make_strategy", "replay"]
