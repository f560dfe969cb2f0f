"""Tune files: what one tune measured on one card, in the freeze's shape (format "emmy-tune").

`emmy tune --tune-file` writes one beside the freeze (`freezes/<card-slug>.tune-<stamp>.json`);
the nightly refresh folds tune files into the freeze and removes them. A tune file is
self-contained: every kernel its rows, goldens and decisions name is in it. The rows are
checked by the store's own batch rules before a byte is written, and the file is written
through a temporary name and a rename.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Iterable
from pathlib import Path

from emmy_core.ir import Kernel
from emmy_core.store.batch import MEASUREMENT_COLUMNS, Batch, Prepared
from emmy_core.store.cardfile import TUNE_FORMAT
from emmy_core.store.errors import BatchError
from emmy_core.store.freeze import (
    ROW_COLUMNS,
    CardSnapshot,
    atomic_write_text,
    card_file_slug,
    render_snapshot,
)
from emmy_core.store.rows import CardRow, GoldenRow, MeasurementRow, RoutingRow, StoredGolden

STAMP = re.compile(r"[0-9]{8}T[0-9]{6}Z(-[0-9a-z]{1,16})?\Z")


def tune_stamp(now: _dt.datetime | None = None) -> str:
    """A stamp for a tune file name: UTC time to the second plus the process id (two tunes never collide)."""
    now = now or _dt.datetime.now(_dt.UTC)
    return f"{now.astimezone(_dt.UTC):%Y%m%dT%H%M%SZ}-{os.getpid():x}"


def tune_file_name(card: str, stamp: str | None = None) -> str:
    """`<card-slug>.tune-<stamp>.json`."""
    stamp = stamp or tune_stamp()
    if not STAMP.match(stamp):
        raise ValueError(f"tune stamp {stamp[:40]!r} does not match {STAMP.pattern}")
    return f"{card_file_slug(card)}.tune-{stamp}.json"


def _better(a: tuple, b: tuple) -> bool:
    """Whether row `a` beats row `b` of one key (the writer's rule: ok beats failed, then the lower median)."""
    if a[0] == "ok":
        return b[0] == "failed" or a[1] < b[1]
    return False


def snapshot_of_batch(p: Prepared, card: CardRow) -> CardSnapshot:
    """A validated batch as a one-card snapshot (duplicate keys resolved as the writer resolves them)."""
    c = p.columns
    wrong = sorted({x for x in c["card"] if x != card.name})
    if wrong:
        raise BatchError(f"{p.origin}: a tune file holds one card ({card.name!r}); a row names {wrong[0]!r}")
    wrong = sorted({g[2] for g in p.goldens if g[2] != card.name})
    if wrong:
        raise BatchError(f"{p.origin}: a tune file holds one card ({card.name!r}); a golden names {wrong[0]!r}")
    best: dict[tuple, int] = {}
    for i, key in enumerate(zip(c["kernel_id"], c["sizes"], c["schedule_id"], c["setting"], strict=True)):
        j = best.get(key)
        if j is None or _better((c["status"][i], c["median_us"][i]), (c["status"][j], c["median_us"][j])):
            best[key] = i
    keep = sorted(best.values())
    cols = {n: [c[n][i] for i in keep] for n in ROW_COLUMNS if n in MEASUREMENT_COLUMNS}
    routing = [RoutingRow(*r) for r in p.routing]
    goldens = [StoredGolden(*g) for g in p.goldens]
    return CardSnapshot(card, dict(p.kernels), dict(p.schedules), cols, routing, goldens)


def write_tune_file(path: Path | str, *, card: CardRow, kernels: Iterable[Kernel | str],
                    measurements: Iterable[MeasurementRow], routing: Iterable[RoutingRow] = (),
                    goldens: Iterable[GoldenRow] = ()) -> Path:
    """Writes a tune file for one card; refuses (BatchError) rows the store would refuse, or naming
    a kernel not given in `kernels`, or another card. Returns the path written."""
    path = Path(path)
    batch = Batch(str(path), list(kernels), [card], list(measurements), list(routing), list(goldens))
    p = batch.prepare()
    if p.need_kernels:
        raise BatchError(f"{path}: a tune file is self-contained, but kernel {sorted(p.need_kernels)[0][:12]} is "
                         "named and not given in kernels")
    atomic_write_text(path, render_snapshot(snapshot_of_batch(p, card), TUNE_FORMAT))
    return path
