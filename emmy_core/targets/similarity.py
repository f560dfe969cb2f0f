"""How far apart two cards are, when one card's measurements are read as evidence for another.

One distance serves every reader (the `tr.sim` transfer column and the most-similar-card baseline),
over two numeric descriptions (`Card.numeric()`, or the copy a transfer table carries):

    distance = mean over the quantities both describe of (log a - log b) ** 2
             + VENDOR_DISTANCE where one card is AMD's and the other is not

Quantities are the measured numbers (units, bandwidth, caches, clocks, peaks). Flags (`is_amd`, the
tensor-core families) are not quantities: a log of 0 or 1 means nothing, so they never enter the mean.
The vendor term is there because a vendor brings its own compiler, wavefront and memory system, and
the numbers alone do not see it: they put the MI250X nearer four NVIDIA cards than the W6600, yet on
Kernel Tuner's convolution pools the W6600's best configuration runs within 2% of the MI250X's best
where every NVIDIA card's runs 6.6x slower, and on dedispersion, with the numbers alone weighting the
transfer, the MI250X got 1.81x its best against 1.05x from the plain mean. A distance is infinite when
the two share no quantity (nothing compares).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from emmy_core.targets.card import INSTRUCTION_FLAGS

VENDOR_FLAG = "is_amd"
FLAG_FIELDS: frozenset[str] = frozenset((VENDOR_FLAG, *INSTRUCTION_FLAGS))
VENDOR_DISTANCE = 2.0  # above every distance of numbers between two GPUs of one vendor in the table (at most 1.6)


def hardware_distance(a: Mapping[str, float] | None, b: Mapping[str, float] | None) -> float:
    """The distance between two numeric descriptions (see the module's docstring); inf when nothing compares."""
    if not a or not b:
        return math.inf
    shared = [k for k in a if k not in FLAG_FIELDS and k in b and a[k] > 0 and b[k] > 0]
    if not shared:
        return math.inf
    quantities = sum((math.log(a[k]) - math.log(b[k])) ** 2 for k in shared) / len(shared)
    vendors = a.get(VENDOR_FLAG), b.get(VENDOR_FLAG)
    apart = None not in vendors and vendors[0] != vendors[1]
    return quantities + (VENDOR_DISTANCE if apart else 0.0)
