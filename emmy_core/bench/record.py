"""Where a bench's rows go, as an interface: the bench never imports the store (a higher layer).

A `Recorder` answers the dedupe question (which schedules of a kernel at sizes on a card
and setting are already measured ok) and takes one kernel's recordable outcomes (ok and
failed; flagged ones never get here) at a time, so a bench that stops half-way has
written whole kernels only. Implementations: `emmy_core.store.recorders.StoreRecorder` (the
store's one writer) and `TuneFileRecorder` (a tune file, the store's format), beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol

from emmy_core.graph.forks import ForkKey
from emmy_core.ir import Program
from emmy_core.targets import Card

if TYPE_CHECKING:
    from emmy_core.bench.harness import Outcome


class Recorder(Protocol):
    def measured_ok(self, key: ForkKey) -> set[str]:
        """Schedule ids of the variants of a pool (a fork's key) already measured ok (skipped by a bench)."""

    def record(self, program: Program, card: Card, outcomes: Sequence[Outcome]) -> None:
        """Writes one kernel's recordable outcomes (with the kernel and the card) in one transaction."""
