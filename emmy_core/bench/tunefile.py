"""A tune file: what one tune measured on one card, as canonical JSON (a stand-in for the store's format).

Shape (`format` "emmy-tune", `version` 1): the card (name, target, numeric description),
and per kernel its loop-program text (no identity stored: a reader recomputes it) with
its rows (sizes, setting, knobs, status, failure, median_us, spread, samples, source,
measured_at). Canonical: sorted keys, kernels sorted by text, rows by key, Python's
shortest round-trip float text, a trailing newline. The file is rewritten atomically
after every kernel, so an interrupted tune leaves whole kernels, never half a file.
When the store's tune-file writer lands, `TuneFileRecorder.write` is the one place to swap.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from emmy_core.ir import Program, render
from emmy_core.knobs.vocab import canonical_knobs
from emmy_core.targets import Card, card_slug

if TYPE_CHECKING:
    from emmy_core.bench.harness import Outcome

TUNE_FORMAT = "emmy-tune"
TUNE_VERSION = 1


def tune_file_path(path: Path | str, card: Card, now: _dt.datetime | None = None) -> Path:
    """`path` itself, or `<path>/<card-slug>.tune-<UTC stamp>.json` when `path` is a directory."""
    p = Path(path)
    if p.is_dir():
        stamp = (now or _dt.datetime.now(_dt.UTC)).strftime("%Y%m%dT%H%M%SZ")
        return p / f"{card_slug(card.name)}.tune-{stamp}.json"
    return p


def _card_numbers(card: Card) -> dict[str, float]:
    return card.numeric()


def outcome_row(o: Outcome, measured_at: str) -> dict[str, object]:
    """A recordable outcome as a tune-file row (failed rows carry the placeholder time)."""
    if not o.recordable:
        raise ValueError(f"a {o.status} outcome is not recorded")
    return {"sizes": o.unit.sizes_text, "setting": o.setting, "knobs": dict(o.knobs), "status": o.status,
            "failure": o.failure, "median_us": o.median_us,
            "spread": o.stats.spread if o.stats is not None else None,
            "samples": o.stats.samples if o.stats is not None else 0, "source": o.source,
            "measured_at": measured_at}


def canonical_json(document: dict[str, object]) -> str:
    return json.dumps(document, sort_keys=True, indent=1, ensure_ascii=True, allow_nan=False) + "\n"


class TuneFileRecorder:
    """Collects a tune's rows and keeps the tune file up to date (no dedupe: a tune file starts empty)."""

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self.card: Card | None = None
        self.kernels: dict[str, tuple[str, list[dict[str, object]]]] = {}  # text -> (c_name, rows)

    def measured_ok(self, kernel_id: str, sizes: str, card: str, setting: str) -> set[str]:
        return set()

    def record(self, program: Program, card: Card, outcomes: Sequence[Outcome]) -> None:
        if self.card is not None and self.card.name != card.name:
            raise ValueError(f"a tune file holds one card: {self.card.name!r}, not also {card.name!r}")
        self.card = card
        stamp = _dt.datetime.now(_dt.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")
        text = render(program)
        _, rows = self.kernels.setdefault(text, (program.name, []))
        rows.extend(outcome_row(o, stamp) for o in outcomes if o.recordable)
        self.write()

    def document(self) -> dict[str, object]:
        if self.card is None:
            raise ValueError("nothing recorded yet")
        kernels = []
        for text in sorted(self.kernels):
            c_name, rows = self.kernels[text]
            rows = sorted(rows, key=lambda r: (r["sizes"], r["setting"], canonical_knobs(r["knobs"])))  # type: ignore[arg-type]
            kernels.append({"loop_program": text, "c_name": c_name, "rows": rows})
        card = {"name": self.card.name, "target": self.card.target, "numbers": _card_numbers(self.card)}
        return {"format": TUNE_FORMAT, "version": TUNE_VERSION, "card": card, "kernels": kernels}

    def write(self) -> None:
        """Atomically replaces the file with the current document."""
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        tmp.write_text(canonical_json(self.document()), encoding="ascii")
        os.replace(tmp, self.path)
