"""Errors of the store. Each says which file, record or field is at fault; none wraps a raw DuckDB trace."""

from __future__ import annotations


class StoreError(Exception):
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
