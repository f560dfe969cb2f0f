"""The freeze folder as a whole: the digest of what it holds, and the tune files waiting to be folded into it.

`folder_digest` names the folder's freeze and tune files and their content in one value (what
an observer of the folder compares). A tune run, here or on another machine, writes
`<card-slug>.tune-<stamp>.json` into an inbox (`_tune/files/` by default); the nightly refresh
folds what waits there, and any tune file already beside the freeze, into the freeze.
`pending_tune_files` lists them; `fold_tune_files` checks every inbox file is a tune file of
the card its name says, copies each beside the freeze through a temporary name, removes the
inbox copies only once every copy is in place, and then runs `refresh_freeze` (which folds
and removes them). A crash at any point loses nothing: at worst a file already folded is
folded again, which changes nothing.
"""

from __future__ import annotations

import hashlib
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from emmy_core.exchange.importer import Progress, load_source
from emmy_core.fileio.safefile import atomic_write_text
from emmy_core.fileio.sourcefile import SourceError, gc_paused
from emmy_core.fileio.urlfolder import (
    drop_keys,
    fetch_folder,
    inbox_keys,
    is_url,
    local_path,
    publish_folder,
    staged_inbox,
)
from emmy_core.formats.freeze import card_file_slug
from emmy_core.freezefolder.freeze_names import TUNE_NAME, freeze_folder
from emmy_core.freezefolder.refresh import RefreshReport, refresh_freeze
from emmy_core.store.errors import StoreError
from emmy_core.store.memory import MemoryStore


@dataclass
class FoldReport:
    """What a fold did: the inbox files moved beside the freeze, and the refresh that folded them."""

    moved: list[Path] = field(default_factory=list)
    refresh: RefreshReport = field(default_factory=RefreshReport)


def inbox_tune_files(inbox: Path | str | None) -> list[Path]:
    """The tune files in `inbox` (by name), sorted; an absent or unset inbox has none. For an fsspec URL inbox,
    the keys as paths (their `name` is the file's)."""

    if is_url(inbox):
        return [Path(k) for k in inbox_keys(str(inbox), TUNE_NAME)]
    if inbox is None or not Path(inbox).is_dir():
        return []
    return sorted(p for p in Path(inbox).iterdir() if p.is_file() and TUNE_NAME.match(p.name))


def pending_tune_files(freeze_dir: Path | str, inbox: Path | str | None = None) -> list[Path]:
    """Every tune file a fold would take: those beside the freeze and those in the inbox."""
    beside = freeze_folder(freeze_dir).tunes
    return sorted([*beside, *inbox_tune_files(inbox)], key=lambda p: (p.name, str(p)))


def _digest(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def folder_digest(freeze_dir: Path | str) -> str:
    """sha256 over the names and contents of the folder's freeze, golden and tune files (`freezefolder.freeze_names`;
    other files ignored)."""
    folder = freeze_folder(freeze_dir)
    text = "\n".join(f"{p.name}:{_digest(p)}" for p in sorted([*folder.reviewed, *folder.tunes]))
    return hashlib.sha256(text.encode()).hexdigest()


def _check_tune_file(path: Path) -> None:
    """Refuses (SourceError) a file named like a tune file that is not one, or holds another card."""
    with gc_paused():
        loaded = load_source(path, MemoryStore())
    if loaded.kind != "tune":
        raise SourceError(str(path), "$", "format", f"a file named like a tune file holds a {loaded.kind}")
    card = loaded.batch.cards[0].name
    m = TUNE_NAME.match(path.name)
    if m is None or card_file_slug(card) != m.group(1):
        raise SourceError(str(path), "$.card", "name", f"card {card[:80]!r} belongs in {card_file_slug(card)}.* "
                                                       f"files, not {path.name}")


def _copy_in(src: Path, dest: Path) -> None:
    """Copies a checked tune file (canonical ASCII JSON) to `dest` through a temporary file and a rename."""
    atomic_write_text(dest, src.read_text(encoding="ascii"))


def fold_tune_files(freeze_dir: Path | str, inbox: Path | str | None = None,
                    progress: Progress | None = None) -> FoldReport:
    """Moves the inbox's tune files beside the freeze, then folds every tune file there into the freeze.

    Refuses (nothing moved, nothing folded) an inbox file that is not a tune file of the card its
    name says, or whose name is taken beside the freeze by a file with other content. Either folder may be
    an fsspec URL (`emmy_core.fileio.urlfolder`: memory://, s3://, file://), under the same rules.
    """
    if is_url(freeze_dir) or is_url(inbox) or str(freeze_dir).startswith("file://") \
            or str(inbox).startswith("file://"):
        return _fold_urls(freeze_dir, inbox, progress)
    d = Path(freeze_dir)
    if not d.is_dir():
        raise StoreError(f"{d} is not a folder")
    incoming = inbox_tune_files(inbox)
    todo: list[tuple[Path, Path]] = []
    for src in incoming:
        if progress is not None:
            progress(src.name)
        _check_tune_file(src)
        dest = d / src.name
        if dest.exists():
            if not dest.is_file() or _digest(dest) != _digest(src):
                raise SourceError(str(src), "", "", f"{dest} exists with other content: not overwritten")
            continue
        todo.append((src, dest))
    for src, dest in todo:
        _copy_in(src, dest)
    for src in incoming:
        src.unlink()
    report = FoldReport(moved=[d / src.name for src in incoming])
    report.refresh = refresh_freeze(d, progress)
    return report


def _fold_urls(freeze: Path | str, inbox: Path | str | None, progress: Any = None) -> Any:
    """`fold_tune_files` where the freeze folder or the inbox is a URL: the published freeze is fetched into a
    local folder, the inbox staged into another, the fold runs there under the local rules, the freeze is
    published back (blobs, then the pointer), and only then are the inbox's keys deleted."""
    with tempfile.TemporaryDirectory(prefix="emmy-freeze-") as work:
        local = Path(work) / "freeze" if is_url(freeze) else local_path(freeze)
        if is_url(freeze):
            fetch_folder(str(freeze), local)
        keys: list[str] = []
        if inbox is not None and is_url(inbox):
            with staged_inbox(str(inbox), TUNE_NAME) as (staged, keys):
                report = fold_tune_files(local, staged, progress)
        else:
            report = fold_tune_files(local, None if inbox is None else local_path(inbox), progress)
        if is_url(freeze):
            folder = freeze_folder(local)  # the folder's own files (`freezefolder.freeze_names`), nothing else
            publish_folder(local, str(freeze), [p.name for p in [*folder.reviewed, *folder.tunes]])
        if keys:
            drop_keys(str(inbox), keys)
        return report
