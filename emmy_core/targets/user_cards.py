"""Cards the packaged table lacks, described by the user in a file of the table's own format.

`EMMY_CARDS=FILE` (or `--cards FILE` on `emmy fit` and `emmy eval`) names a card table
written like `gpus.json` (format `emmy-gpu-table`, version 1; `cpu` entries allowed, see
`emmy_core.targets.table`). Its cards are added to the packaged ones; a name found in both
is an error naming both files, since two descriptions of one card would make the prior's
hardware features depend on which was read. The file is read when a card is looked up,
never at import, and re-read when it changes on disk.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from emmy_core.targets.card import Card
from emmy_core.targets.table import TABLE_PATH, CardTableError, load_table

CARDS_ENV = "EMMY_CARDS"


def cards_file_from_env() -> Path | None:
    """The user's card file named by $EMMY_CARDS, or None when it is unset or empty."""
    value = os.environ.get(CARDS_ENV, "").strip()
    return Path(value) if value else None


def known_table(cards_file: Path | str | None = None) -> dict[str, Card]:
    """The packaged table plus the user's cards (`cards_file`, else $EMMY_CARDS), in that order."""
    path = Path(cards_file) if cards_file is not None else cards_file_from_env()
    if path is None:
        return load_table()
    try:
        st = path.stat()
    except OSError as exc:
        raise CardTableError(f"{path}: cannot read the card file: {exc.strerror or exc}") from exc
    return dict(_merged(str(path), st.st_mtime_ns, st.st_size))


@lru_cache(maxsize=4)
def _merged(path: str, _mtime_ns: int, _size: int) -> tuple[tuple[str, Card], ...]:
    packaged = load_table()
    user = load_table(path)
    for name in user:
        if name in packaged:
            raise CardTableError(f"{path}: card {name[:80]!r} is also described by the packaged {TABLE_PATH.name}; "
                                 f"a card is described once (remove it from {path})")
    return (*packaged.items(), *user.items())
