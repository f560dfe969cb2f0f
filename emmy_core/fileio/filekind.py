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

from emmy_core.fileio.safefile import FileWriteError, shown
from emmy_core.fileio.sourcefile import SourceError, load_json_file

_HEAD = re.compile(rb'\A\{"format":("[a-z-]{1,32}"),"version":[0-9]{1,9},\n"card":(\{[^\n]{0,20000}\}),\n')
HEAD_BYTES = 32 * 1024
DUCKDB_MAGIC = b"DUCK"  # bytes 8..12 of a DuckDB database file

FREEZE_FORMAT = "emmy-freeze"
TUNE_FORMAT = "emmy-tune"
GOLDEN_FORMAT = "emmy-golden"
"""The `format` names of Emmy's card documents (a freeze, a tune file, a golden record). They are named on
this floor, not by the parsers in `emmy_core.formats`, because saying what a file is and refusing to write
over a file of another kind must not need a format's code (the formats import them from here)."""

UNNAMED_FORMATS = {frozenset({"candidate", "installed", "verdict"}): "emmy-chain-evaluation"}
"""Emmy's own outputs from before their format was named, known by their exact top-level keys: the chain's
evaluation report was `{candidate, installed, verdict}`. A writer of that format may replace such a file
(it is the same output, one version older); nothing else without a `format` is ever replaced."""


def _unnamed_format(doc: object) -> str | None:
    if isinstance(doc, dict) and "format" not in doc:
        return UNNAMED_FORMATS.get(frozenset(doc))
    return None


def is_kernel_tuner_cache(doc: object) -> bool:
    """Whether a parsed JSON document is a Kernel Tuner cache (its own keys, and no Emmy `format`)."""
    return isinstance(doc, dict) and "cache" in doc and "tune_params" in doc and "format" not in doc


def is_duckdb(path: Path) -> bool:
    """Whether `path` is a DuckDB database file (by its magic bytes; False when it cannot be read)."""
    try:
        with path.open("rb") as fh:
            head = fh.read(16)
    except OSError:
        return False
    return head[8:12] == DUCKDB_MAGIC


def describe_file(path: Path) -> str:
    """What a file on disk is, in words (for a refusal that must say what it would have overwritten)."""
    if path.is_dir():
        return "a folder"
    if not path.is_file():
        return "not a regular file"
    if is_duckdb(path):
        return "a DuckDB database"
    try:
        with path.open("rb") as fh:
            magic = fh.read(8)
    except OSError:
        magic = b""
    if magic == b"\x89PNG\r\n\x1a\n":
        return "a PNG image"
    if magic[:4] == b"PAR1":
        return "a Parquet file"
    try:
        doc = load_json_file(path, 256 * 1024 * 1024)
    except SourceError as exc:
        return f"not a file Emmy writes ({exc.problem[:120]})"
    if is_kernel_tuner_cache(doc):
        return f"a Kernel Tuner cache of card {str(doc.get('device_name'))[:80]!r}"
    if _unnamed_format(doc) == "emmy-chain-evaluation":
        return "the chain's evaluation report, as written before its format was named"
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
    if fmt == GOLDEN_FORMAT:
        return f"a golden record{of_card}"
    named = {"emmy-export": "a dataset export's manifest", "emmy-prior": "a prior artifact",
             "emmy-eval": "an evaluation report", "emmy-chain-status": "the chain's status record"}
    if isinstance(fmt, str) and fmt in named:
        return named[fmt]
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


PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _json_format(path: Path, max_bytes: int) -> str | None:
    try:
        doc = load_json_file(path, max_bytes)
    except SourceError:
        return None
    fmt = doc.get("format") if isinstance(doc, dict) else None
    return fmt if isinstance(fmt, str) else _unnamed_format(doc)


def check_output(path: Path, fmt: str, what: str, *, max_bytes: int = 256 * 1024 * 1024) -> None:
    """Refuses (FileWriteError) to replace `path` unless it is absent or a file of the same kind: a JSON
    document whose `format` is `fmt`, or, for `fmt` "png", a PNG image. Says what the file is instead.

    A folder, a file under a plain file, or anything not a regular file is refused the same way, before
    any work is done, so a long fit does not end in a refusal."""
    path = Path(path)
    for parent in path.parents:
        if parent.exists() or parent.is_symlink():
            if not parent.is_dir():
                raise FileWriteError(f"refusing to write {what} to {shown(path)}: {shown(parent)} is "
                                     f"{describe_file(parent)}, not a folder; nothing was written")
            break
    if not path.exists() and not path.is_symlink():
        return
    if path.is_file():
        if fmt == "png":
            try:
                with path.open("rb") as fh:
                    if fh.read(len(PNG_MAGIC)) == PNG_MAGIC:
                        return
            except OSError:
                pass
        elif _json_format(path, max_bytes) == fmt:
            return
    raise FileWriteError(f"refusing to write {what} over {shown(path)}: it is {describe_file(path)}, not "
                         f"{what}; nothing was replaced (an output replaces only a file of its own kind)")
