"""A small but complete evaluation report (the shape `EvalReport.to_json` writes), for tests of what reads one."""

from __future__ import annotations

from typing import Any

from emmy_core.chain.evaluation import Evaluation
from emmy_core.eval.report import REPORT_FORMAT, REPORT_VERSION

CARD = "Intel(R) Xeon(R) Processor AVX-512 x2 / deploy"


def report(top1: float, source: str = "candidate.json") -> dict[str, Any]:
    """One prior's report over one measured pool whose top-1 slowdown is `top1`."""
    summary = {"top1": top1, "top1_pools": 1, "measured_pools": 1}
    return {"format": REPORT_FORMAT, "version": REPORT_VERSION, "feature_version": 1, "dataset_digest": "d" * 64,
            "pools": "measured", "prior": {"source": source, "provenance": {"seed": 0}},
            "minimum_sizes": {"top1": "2"}, "mean": summary, "by_card": {CARD: summary}, "by_family": {},
            "forks": 1, "undescribed_pools": 0, "undescribed_cards": [], "extern_order": False,
            "per_pool": [{"card": CARD.split(" / ")[0], "setting": "deploy", "kernel": "k", "kernel_id": "a" * 64,
                          "sizes": "B=1", "top1": top1, "measured_members": 3}]}


def evaluation(candidate: float, installed: float | None, unusable: str = "") -> Evaluation:
    """An evaluation of a candidate beside an installed prior (None: there is none), at the chain's tolerance."""
    return Evaluation(report(candidate), report(installed, "installed.json") if installed is not None else None,
                      unusable, 0.02)
