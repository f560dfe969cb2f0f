"""The freeze a compile reads its goldens from: where it is, and its card's files loaded into memory.

Where: `freezes=` (a folder, a file or a list of files), else `$EMMY_FREEZES`, else the freeze
that ships with the package: `emmy_core/freezes` is the repository's `freezes/` folder itself
(a link in the source tree, followed when a wheel is built), so nothing is copied and a checkout
reads the freeze it has. In a folder, a card's files are `<card-slug>.json` (the freeze) and
`<card-slug>.<label>.json` (golden records); tune files (`<card-slug>.tune-*.json`) are
unreviewed and are not read (the one rule: `freezefolder.freeze_names`). Every file is parsed strictly by the file readers (`emmy_core.formats`) into a
`MemoryStore` (no duckdb); a file that is refused is skipped whole, its reason (file, record,
field) kept as a note. Parsed files are cached in the process by path, size and modification time.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path

from emmy_core.evidence.measured import GoldenSource

FREEZES_ENV = "EMMY_FREEZES"

FreezesArg = Path | str | Sequence[Path | str] | None


def shipped_freeze_dir() -> Path:
    """The freeze shipped with the package (the repository's `freezes/` folder)."""
    return Path(__file__).resolve().parents[1] / "freezes"


def freeze_root(freezes: FreezesArg = None) -> list[Path]:
    """What `freezes=` names, else `$EMMY_FREEZES`, else the shipped freeze (folders or files)."""
    if freezes is None:
        env = os.environ.get(FREEZES_ENV)
        freezes = env if env else shipped_freeze_dir()
    if isinstance(freezes, str | Path):
        return [Path(freezes).expanduser()]
    return [Path(p).expanduser() for p in freezes]


def card_files(card: str, freezes: FreezesArg = None) -> tuple[list[Path], list[str]]:
    """The freeze files of `card` (and notes on what was not found)."""
    from emmy_core.freezefolder.freeze_names import freeze_folder
    from emmy_core.targets import card_slug

    slug = card_slug(card)
    files: list[Path] = []
    notes: list[str] = []
    for root in freeze_root(freezes):
        if root.is_dir():
            found = freeze_folder(root, slug).reviewed
            files.extend(found)
            if not found:
                notes.append(f"freeze {root}: no file for {card} ({slug}.json)")
        elif root.is_file():
            files.append(root)
        else:
            notes.append(f"freeze {root}: no such file or folder")
    return files, notes


@functools.lru_cache(maxsize=16)
def _load(files: tuple[tuple[str, int, int], ...]) -> tuple[object, tuple[str, ...], tuple[tuple[str, tuple[str, ...]], ...]]:
    """(store of every file's rows, notes, per file the cards its goldens are for)."""
    from emmy_core.exchange.importer import load_source
    from emmy_core.fileio.errors import FileError
    from emmy_core.store import MemoryStore

    store = MemoryStore("freeze")
    notes: list[str] = []
    cards: list[tuple[str, tuple[str, ...]]] = []
    for path, _, _ in files:
        try:
            loaded = load_source(path, store)
            if loaded.kind not in ("freeze", "golden"):
                notes.append(f"freeze {path}: a {loaded.kind} file, not a freeze or golden record (skipped)")
                continue
            store.write(loaded.batch)
            cards.append((path, tuple(sorted({g.card for g in loaded.batch.goldens}))))
        except FileError as exc:
            notes.append(f"freeze file refused (skipped): {str(exc)[:400]}")
    return store, tuple(notes), tuple(cards)


def golden_source(card: str, setting: str, freezes: FreezesArg = None) -> tuple[GoldenSource | None, list[str]]:
    """The golden tier for a card and setting, from its freeze files (None when it has none)."""
    files, notes = card_files(card, freezes)
    if not files:
        return None, notes
    stamp = []
    for p in files:
        try:
            st = p.stat()
        except OSError as exc:
            notes.append(f"freeze {p}: cannot read: {exc.strerror or exc}")
            continue
        stamp.append((str(p), st.st_size, st.st_mtime_ns))
    if not stamp:
        return None, notes
    store, more, of_cards = _load(tuple(stamp))
    notes.extend(more)
    for path, names in of_cards:
        if names and card not in names:  # e.g. a file renamed to this card's slug: its goldens answer nothing here
            notes.append(f"freeze {path}: its goldens are for {', '.join(repr(n[:60]) for n in names[:3])}, not "
                         f"{card!r} (nothing in it applies to this card)")
    label = ", ".join(Path(p).name for p, _, _ in stamp)
    return GoldenSource(store, label, card, setting), notes
