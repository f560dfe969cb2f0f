"""Tune files: what one tune measured on one card, in the freeze's shape (format "emmy-tune").

`emmy tune --tune-file` writes one beside the freeze (`freezes/<card-slug>.tune-<stamp>.json`);
the nightly refresh folds tune files into the freeze and removes them. A tune file is
self-contained: every kernel its rows, goldens and decisions name is in it. The rows are
checked by the store's own batch rules before a byte is written, and the file is written
through a temporary name and a rename.

A tune never writes over a file that is not its own kind: `merge_into_tune_file` writes over
an existing file only when it is a tune file of the same card (name and description) and setting, and then merges
the new rows into it by the writer's rules (under a lock on the folder, so two tunes merging
into one file keep each other's rows). Anything else is refused, naming what the file is.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path

from emmy_core.fileio.filekind import TUNE_FORMAT, describe_file
from emmy_core.fileio.safefile import (
    FileWriteError,
    FolderBusyError,
    atomic_write_text,
    ensure_folder,
    locked_folder,
    shown,
    write_new,
)
from emmy_core.fileio.sourcefile import SourceError, load_json_file
from emmy_core.formats.cardfile import CardDocument, parse_card_document
from emmy_core.formats.freeze import (
    ROW_COLUMNS,
    CardSnapshot,
    card_file_slug,
    render_snapshot,
)
from emmy_core.ir import Kernel
from emmy_core.store.batch import MEASUREMENT_COLUMNS, Batch, Prepared
from emmy_core.store.errors import BatchError
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
    """Writes a new tune file for one card; refuses (BatchError) rows the store would refuse, or naming
    a kernel not given in `kernels`, or another card; refuses (FileWriteError) to write over any existing
    file (a tune merges into its own with `merge_into_tune_file`). Returns the path written."""
    path = Path(path)
    if path.exists() or path.is_symlink():
        raise FileWriteError(f"refusing to write a tune file over {shown(path)}: it is {describe_file(path)}")
    batch = Batch(str(path), list(kernels), [card], list(measurements), list(routing), list(goldens))
    p = batch.prepare()
    if p.need_kernels:
        raise BatchError(f"{path}: a tune file is self-contained, but kernel {sorted(p.need_kernels)[0][:12]} is "
                         "named and not given in kernels")
    atomic_write_text(path, render_snapshot(snapshot_of_batch(p, card), TUNE_FORMAT))
    return path


def tune_file_path(target: str | Path, card: str) -> Path:
    """Where a tune writes: `target` itself, or, when it ends with a slash or is an existing folder,
    `<card-slug>.tune-<stamp>.json` inside it."""
    text = str(target)
    if text.endswith(("/", os.sep)) or Path(text).is_dir():
        return Path(text) / tune_file_name(card)
    return Path(text)


def _settings_of(doc: CardDocument) -> set[str]:
    return {r.setting for r in doc.batch.measurements} | {g.setting for g in doc.batch.goldens}


def read_own_tune_file(path: Path, card: str, setting: str) -> CardDocument | None:
    """The tune file at `path` when a tune of `card` and `setting` may write over it (None: no file);
    refuses (FileWriteError) anything else, naming what the file is."""
    if not path.exists() and not path.is_symlink():
        return None
    refuse = f"refusing to write the tune's rows over {shown(path)}"
    if not path.is_file():
        raise FileWriteError(f"{refuse}: it is {describe_file(path)}, not a tune file")
    try:
        doc = parse_card_document(load_json_file(path), str(path), (TUNE_FORMAT,))
    except SourceError as exc:
        what = describe_file(path)
        if what.startswith("a tune file"):
            raise FileWriteError(f"{refuse}: it is a tune file that does not read back ({exc}); nothing was "
                                 "written") from None
        raise FileWriteError(f"{refuse}: it is {what}, not a tune file; nothing was written") from None
    if doc.card.name != card:
        raise FileWriteError(f"{refuse}: it is a tune file of card {doc.card.name[:80]!r}, not of {card[:80]!r}; "
                             "nothing was written")
    others = sorted(_settings_of(doc) - {setting})
    if others:
        raise FileWriteError(f"{refuse}: it is a tune file of setting {others[0]!r}, not {setting!r}; "
                             "nothing was written")
    return doc


def _same_description(path: Path, card: CardRow, found: CardRow) -> None:
    """Refuses merging into a tune file whose card, of the same name, describes other hardware."""
    from emmy_core.targets.sameness import conflict

    try:
        problem = conflict(card.to_card(), found.to_card(), "the tune's card")
    except ValueError as exc:
        problem = f"its card does not describe a card: {exc}"
    if problem is not None:
        raise FileWriteError(f"refusing to write the tune's rows over {shown(path)}: {problem}")


MERGE_WAIT_S = 300.0  # how long a tune waits for another process's lock on its tune file's folder


def merge_into_tune_file(path: Path, *, card: CardRow, setting: str, kernels: Iterable[Kernel | str],
                         measurements: Iterable[MeasurementRow], wait_s: float | None = MERGE_WAIT_S,
                         say: Callable[[str], None] | None = None) -> Path:
    """Writes the rows into the tune file at `path`: a new file, or merged (by the writer's rules: the
    better row of a key wins, a working row is never replaced by a failure) into an existing tune file
    of the same card and setting. Anything else at `path` is refused before a byte is written.

    The merge holds the folder's lock; another process holding it longer than `wait_s` seconds (`say` is
    told once it waits) leaves `path` as it was, and the rows go whole into a tune file of their own beside
    it (`unmerged_names`: a refresh folds it like any other) before `FolderBusyError` names that file."""
    path = Path(path)
    ensure_folder(path.parent)
    rows = list(measurements)
    kernels = list(kernels)
    wrong = sorted({r.setting for r in rows} - {setting})
    if wrong:
        raise BatchError(f"{shown(path)}: a row of setting {wrong[0][:40]!r} in a tune of setting {setting!r}")
    try:
        with locked_folder(path.parent, wait_s, say):
            old = read_own_tune_file(path, card.name, setting)
            batch = Batch(str(path), kernels, [card], rows)
            if old is not None:
                _same_description(path, card, old.card)
                batch = Batch(str(path), [*old.batch.kernels, *batch.kernels], [card],
                              [*old.batch.measurements, *rows], list(old.batch.routing), list(old.batch.goldens))
            atomic_write_text(path, _render(path, batch, card))
    except FolderBusyError as exc:
        kept = write_new(_render(path, Batch(str(path), kernels, [card], rows), card), unmerged_names(path, card.name))
        raise FolderBusyError(f"{exc}; the tune's {len(rows)} rows are whole in {shown(kept)}, a tune file of "
                              "their own (a refresh folds it; `emmy db import` reads it)") from None
    return path


def _render(path: Path, batch: Batch, card: CardRow) -> str:
    p = batch.prepare()
    if p.need_kernels:
        raise BatchError(f"{shown(path)}: a tune file is self-contained, but kernel "
                         f"{sorted(p.need_kernels)[0][:12]} is named and not given in kernels")
    return render_snapshot(snapshot_of_batch(p, card), TUNE_FORMAT)


def unmerged_names(path: Path, card: str) -> Iterator[Path]:
    """Names for rows that could not be merged into `path`: beside a tune file named by the card
    (`tune_file_name`: `<slug>.tune-<stamp>.json`), `<slug>.tune-<stamp>-unmerged[-N].json`, still a tune
    file's name, so a refresh folds it; beside any other name, `<stem>.unmerged[.N].json`."""
    prefix, name = f"{card_file_slug(card)}.tune-", path.name
    stamp = name[len(prefix):-len(".json")] if name.startswith(prefix) and name.endswith(".json") else None
    for n in range(1, 10_000):
        extra = "" if n == 1 else f"-{n}"
        if stamp and re.fullmatch(r"[0-9A-Za-z-]{1,40}", stamp):
            yield path.with_name(f"{prefix}{stamp}-unmerged{extra}.json")
        else:
            yield path.with_name(f"{path.stem}.unmerged{extra.replace('-', '.')}{path.suffix or '.json'}")
