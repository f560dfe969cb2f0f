"""What a file on disk is, in words, and whether a writer may replace it.

A file is never written over by a file of another kind or another card (DESIGN section 7):
before replacing `<card-slug>.json`, a freeze checks that the file there is a freeze of the
same card; a golden record, that it is a golden record of the same card. Anything else is
refused, naming what the file is, and stands as it was.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from emmy_core.store.safefile import FileWriteError, shown
from emmy_core.store.sourcefile import SourceError, load_json_file

_HEAD = re.compile(rb'\A\{"format":("[a-z-]{1,32}"),"version":[0-9]{1,9},\n"card":(\{[^\n]{0,20000}\}),\n')
HEAD_BYTES = 32 * 1024


def describe_file(path: Path) -> str:
    """What a file on disk is, in words (for a refusal that must say what it would have overwritten)."""
    from emmy_core.store.cardfile import FREEZE_FORMAT, TUNE_FORMAT
    from emmy_core.store.importer import is_duckdb
    from emmy_core.store.kerneltuner import looks_like_cache

    if path.is_dir():
        return "a folder"
    if not path.is_file():
        return "not a regular file"
    if is_duckdb(path):
        return "a DuckDB database"
    try:
        doc = load_json_file(path, 256 * 1024 * 1024)
    except SourceError as exc:
        return f"not a file Emmy writes ({exc.problem[:120]})"
    if looks_like_cache(doc):
        return f"a Kernel Tuner cache of card {str(doc.get('device_name'))[:80]!r}"
    if not isinstance(doc, dict) or "format" not in doc:
        return "a JSON document that is not an Emmy file"
    fmt = doc["format"]
    card = doc.get("card")
    name = card.get("name") if isinstance(card, dict) else None
    of_card = f" of card {str(name)[:80]!r}" if name is not None else ""
    kernels = doc.get("kernels") if isinstance(doc.get("kernels"), list) else []
    rows = sum(len(k["rows"]) for k in kernels if isinstance(k, dict) and isinstance(k.get("rows"), list))
    if fmt == FREEZE_FORMAT:
        return f"a freeze{of_card} ({len(kernels)} kernels, {rows} rows)"
    if fmt == TUNE_FORMAT:
        return f"a tune file{of_card} ({len(kernels)} kernels, {rows} rows)"
    if fmt == "emmy-golden":
        return f"a golden record{of_card}"
    return f"a JSON document of format {str(fmt)[:40]!r}"



def format_and_card(path: Path) -> tuple[str, str] | None:
    """The `format` and card name of a card document (freeze, tune file, golden record), read from its
    canonical head when it has one (a large freeze is not parsed whole), else from the whole file;
    None when the file is not such a document."""
    try:
        with path.open("rb") as fh:
            head = fh.read(HEAD_BYTES)
    except OSError:
        return None
    m = _HEAD.match(head)
    if m is not None:
        try:
            fmt, card = json.loads(m.group(1)), json.loads(m.group(2))
        except ValueError:
            card = None
        if isinstance(card, dict) and isinstance(card.get("name"), str):
            return fmt, card["name"]
    try:
        doc = load_json_file(path)
    except SourceError:
        return None
    card = doc.get("card") if isinstance(doc, dict) else None
    if isinstance(doc, dict) and isinstance(doc.get("format"), str) and isinstance(card, dict) \
            and isinstance(card.get("name"), str):
        return doc["format"], card["name"]
    return None


def check_replaceable(path: Path, fmt: str, card: str, what: str) -> None:
    """Refuses (FileWriteError) to replace `path` unless it is absent or a `fmt` document of `card`."""
    if not path.exists() and not path.is_symlink():
        return
    if path.is_file() and format_and_card(path) == (fmt, card):
        return
    raise FileWriteError(f"refusing to write {what} of card {card[:80]!r} over {shown(path)}: it is "
                         f"{describe_file(path)}; nothing was replaced")
