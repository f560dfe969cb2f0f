"""A source's cards against this machine's: a file naming this machine's CPU card must describe this CPU.

Every reader that feeds this machine's card (`emmy db import`, the refresh's fold, the freeze a
compile reads its goldens from) passes the cards of a source through `check_cards` before a
row of it is written anywhere. A card named as this machine's CPU but described otherwise
(cores, SIMD width, caches: `emmy_core.targets.sameness`) is refused with both descriptions;
another card's name is not this machine's to judge.
"""

from __future__ import annotations

from collections.abc import Sequence

from emmy_core.fileio.sourcefile import SourceError
from emmy_core.store.rows import CardRow
from emmy_core.targets.card import Card


def local_cpu() -> Card | None:
    """This machine's CPU card (None when the probe cannot describe it: then there is nothing to compare)."""
    from emmy_core.targets.cpu import ProbeError, probe_cpu

    try:
        return probe_cpu()
    except ProbeError:
        return None


def check_cards(cards: Sequence[CardRow], file: str, here: Card | None, record: str = "$.card") -> None:
    """Refuses (SourceError naming the file and record) a card that carries `here`'s name with another
    description. `record` names where a card is (`$.card`; `{i}` in it becomes the card's index)."""
    if here is None:
        return
    from emmy_core.targets.sameness import conflict

    for i, row in enumerate(cards):
        if row.name != here.name:
            continue
        where = record.format(i=i)
        try:
            other = row.to_card()
        except ValueError as exc:
            raise SourceError(file, where, "numbers", f"card {row.name!r} is this machine's name, but its "
                                                      f"description is not a card's: {exc}") from None
        problem = conflict(here, other)
        if problem is not None:
            raise SourceError(file, where, "numbers", problem)
