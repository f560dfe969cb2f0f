"""Errors of file I/O, the root of every refusal Emmy's data system makes.

A file that cannot be read as one (`inputfile.InputFileError`), a source that does not parse
(`sourcefile.SourceError`), a file that cannot be written (`safefile.FileWriteError`) or a URL folder that
cannot be reached (`urlfolder.UrlFolderError`) is a `FileError`; so is every error of the store
(`emmy_core.store.errors.StoreError` subclasses it, since the store is a file too), so one `except
FileError` catches whatever the data system refuses, and the bottom floor knows nothing of the floors
above it. Each message names the file at fault.

Every part of a message that echoes input (a name, a value, a path) is bounded: a 20 MB knob
name must not become a 20 MB error message.
"""

from __future__ import annotations

MAX_MESSAGE = 2000


def bounded(text: str, limit: int = MAX_MESSAGE) -> str:
    """`text` cut to at most about `limit` characters, saying how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters)"


class FileError(Exception):
    """A file could not be read or written as asked (the message names it and says why)."""
