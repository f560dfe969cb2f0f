"""The one rule for what a file in a freeze folder is, by its name.

A freeze folder holds, per card (`<slug>` from `card_file_slug`, lowercase words joined by `-`):
- `<slug>.json`: the card's freeze (canonical, reviewed);
- `<slug>.<label>.json`: a golden record (reviewed, read beside the freeze);
- `<slug>.tune-<stamp>.json`: a tune file waiting to be folded (unreviewed: never read as evidence).
Any other file is not the freeze's and is never read or touched. The chain's import, the refit of the
installed prior and a compile's golden tier all read the reviewed files; the fold reads the freeze
and tune files. Importing this module costs nothing (stdlib only): the compile path uses it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

SLUG = r"[a-z0-9]+(?:-[a-z0-9]+)*"
FREEZE_NAME = re.compile(rf"({SLUG})\.json\Z")
TUNE_NAME = re.compile(rf"({SLUG})\.tune-([0-9A-Za-z-]{{1,64}})\.json\Z")
GOLDEN_NAME = re.compile(rf"({SLUG})\.(?!tune-)([0-9A-Za-z_][0-9A-Za-z_.-]{{0,63}})\.json\Z")

Kind = Literal["freeze", "golden", "tune"]


def file_kind(name: str) -> tuple[Kind, str] | None:
    """What a freeze folder's file named `name` is, and the card slug it names; None: not the freeze's."""
    for kind, pattern in (("tune", TUNE_NAME), ("freeze", FREEZE_NAME), ("golden", GOLDEN_NAME)):
        m = pattern.match(name)
        if m is not None:
            return kind, m.group(1)  # type: ignore[return-value]
    return None


@dataclass
class FreezeFolder:
    """A freeze folder's files by kind, each list sorted by name."""

    freezes: list[Path] = field(default_factory=list)
    goldens: list[Path] = field(default_factory=list)
    tunes: list[Path] = field(default_factory=list)

    @property
    def reviewed(self) -> list[Path]:
        """What the chain imports and a compile reads: the freezes and the golden records."""
        return sorted([*self.freezes, *self.goldens], key=lambda p: p.name)


def freeze_folder(folder: Path | str, slug: str | None = None) -> FreezeFolder:
    """The files of `folder` by kind (only card `slug`'s when given); an absent folder holds none."""
    out = FreezeFolder()
    d = Path(folder)
    if not d.is_dir():
        return out
    for p in sorted(d.iterdir()):
        kind = file_kind(p.name)
        if kind is None or not p.is_file() or (slug is not None and kind[1] != slug):
            continue
        {"freeze": out.freezes, "golden": out.goldens, "tune": out.tunes}[kind[0]].append(p)
    return out
