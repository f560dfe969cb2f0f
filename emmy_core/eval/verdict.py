"""Whether a candidate prior may replace the installed one: the rule the chain's install step obeys.

The headline is the measured view's top-1 slowdown over every pool (the geometric mean of what
the prior's picks cost against the fastest measured): it is the figure that tracks deployed
speed (seed 09: a rank is only a screen). Both priors are evaluated on the same dataset, so
the figure is over the same pools. The candidate passes unless it is slower than the installed
prior beyond a stated tolerance, or has no figure where the installed prior has one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

VERDICT_FIGURE = "top1"
DEFAULT_TOLERANCE = 0.02  # a candidate may be up to 2 % slower (geometric mean of top-1 slowdowns)


@dataclass(frozen=True)
class Verdict:
    """Whether the candidate may replace the installed prior, and why (figures and tolerance stated)."""

    passed: bool
    reason: str
    candidate: float | None
    installed: float | None
    tolerance: float

    def to_json(self) -> dict[str, Any]:
        return {"passed": self.passed, "reason": self.reason, "candidate": self.candidate,
                "installed": self.installed, "tolerance": self.tolerance, "headline": VERDICT_FIGURE}


def verdict(candidate: Mapping[str, Any], installed: Mapping[str, Any] | None,
            tolerance: float = DEFAULT_TOLERANCE) -> Verdict:
    """The verdict on two evaluation reports (`EvalReport.to_json()`) of the same dataset; `installed`
    None: there is no installed prior, and the candidate passes."""
    cand = candidate["mean"].get(VERDICT_FIGURE)
    if installed is None:
        return Verdict(True, "no installed prior to compare against", cand, None, tolerance)
    inst = installed["mean"].get(VERDICT_FIGURE)
    if inst is None:
        return Verdict(True, f"the installed prior has no {VERDICT_FIGURE} figure on this dataset", cand, None, tolerance)
    if cand is None:
        return Verdict(False, f"the candidate has no {VERDICT_FIGURE} figure where the installed prior has {inst:.4f}",
                       None, inst, tolerance)
    pools = candidate["mean"].get(f"{VERDICT_FIGURE}_pools", 0)
    limit = inst * (1.0 + tolerance)
    if cand > limit:
        return Verdict(False, f"candidate {VERDICT_FIGURE} slowdown {cand:.4f} is worse than the installed prior's "
                              f"{inst:.4f} beyond the tolerance of {tolerance:.1%} (limit {limit:.4f}; {pools} pools)",
                       cand, inst, tolerance)
    return Verdict(True, f"candidate {VERDICT_FIGURE} slowdown {cand:.4f} against the installed prior's {inst:.4f} "
                         f"(tolerance {tolerance:.1%}; {pools} pools)", cand, inst, tolerance)
