"""Errors of the store. Each says which file, record or field is at fault; none wraps a raw DuckDB trace.

Every store error is a `emmy_core.fileio.errors.FileError` (the store is a file), so a caller that
catches `FileError` catches both a refused file and a refused store; a caller that catches `StoreError`
catches only what the store itself refuses. Messages that echo input are bounded (`fileio.errors.bounded`).
"""

from __future__ import annotations

from emmy_core.fileio.errors import FileError


class StoreError(FileError):
    """The store cannot do what was asked (the message says why, naming the file)."""


class BatchError(StoreError, ValueError):
    """A batch was refused before anything was written: the message names the origin, record and field."""


class StoreLockedError(StoreError):
    """Another process holds the file's write lock, and it was not released within the bounded wait."""


class VersionMismatchError(StoreError):
    """The file was written under another schema or identity version (nothing migrates); `found` holds
    the versions it was written under."""

    def __init__(self, message: str, found: dict[str, str] | None = None) -> None:
        super().__init__(message)
        self.found = dict(found or {})
