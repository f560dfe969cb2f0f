"""A card's tune served from a frozen cache: its rows delivered as tune files without the card's hardware.

Where a card is not at hand (a test of the fleet's placement, a machine being replaced), the tune of
that card can be replayed from a frozen card file of it (a freeze or a tune file): every measurement
the file holds for the setting is written into the inbox as a new tune file of that card, exactly as a
tune on the card would deliver it. The file is parsed strictly (a file of another card is refused naming
both), and nothing is timed here, so it runs on any machine.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from emmy_core.store.errors import StoreError


@dataclass
class ReplayReport:
    """The tune files a replay wrote (one per setting) and the rows each holds."""

    card: str
    files: dict[str, Path] = field(default_factory=dict)
    rows: dict[str, int] = field(default_factory=dict)


def replay_tune(card: str, frozen: Path | str, inbox: Path | str, settings: Sequence[str] = (),
                stamp: str | None = None) -> ReplayReport:
    """Writes the rows of `frozen` (a freeze or tune file of `card`) for `settings` (default: every setting
    the file holds) into `inbox` as tune files of `card`, one per setting."""
    from emmy_core.fileio.sourcefile import load_json_file
    from emmy_core.formats.cardfile import parse_card_document
    from emmy_core.formats.tunefile import tune_file_name, tune_stamp, write_tune_file

    doc = parse_card_document(load_json_file(Path(frozen)), str(frozen))
    if doc.card.name != card:
        raise StoreError(f"{frozen}: a frozen cache of card {doc.card.name[:80]!r}, not of {card[:80]!r}: the tune "
                         "of a card replays only that card's file")
    held = sorted({r.setting for r in doc.batch.measurements})
    chosen = list(settings) or held
    missing = [s for s in chosen if s not in held]
    if missing:
        raise StoreError(f"{frozen}: no row of setting {missing[0]!r} (it holds {', '.join(held) or 'none'})")
    Path(inbox).mkdir(parents=True, exist_ok=True)
    base = stamp or tune_stamp()
    report = ReplayReport(card)
    for i, setting in enumerate(chosen):
        rows = [r for r in doc.batch.measurements if r.setting == setting]
        used = {r.kernel_id for r in rows}
        kernels = [k for k in doc.batch.kernels if _kid(k) in used]
        path = Path(inbox) / tune_file_name(card, f"{base}{i}" if len(chosen) > 1 else base)
        report.files[setting] = write_tune_file(path, card=doc.card, kernels=kernels, measurements=rows)
        report.rows[setting] = len(rows)
    return report


def _kid(kernel: object) -> str:
    from emmy_core.ir import kernel_id

    return kernel_id(kernel[0] if isinstance(kernel, tuple) else kernel)  # type: ignore[arg-type]
