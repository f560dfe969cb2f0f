"""Rankers: anything that orders a fork's candidates, behind one interface (after TVM MetaSchedule's CostModel).

A ranker's `rank(context, candidates)` gives one score per candidate (higher first; equal scores keep
the emitted order), or None when it has no opinion on this pool. The learned prior is one ranker; the
baselines it must beat are the others: the transfer baseline, the most similar card, the rule's first
option and a random pick. The evaluation loops over them (`emmy_core.eval.figures`), so a figure of a
baseline is computed the way the prior's is. Importing this package needs numpy only.
"""

from emmy_core.ranking.rankers import (
    BASELINES,
    FirstOption,
    PriorRanker,
    RandomPick,
    RankContext,
    Ranker,
    SimilarCard,
    Transfer,
)

__all__ = ["BASELINES", "FirstOption", "PriorRanker", "RandomPick", "RankContext", "Ranker", "SimilarCard",
           "Transfer"]
