"""Errors of the store. Each says which file, record or field is at fault; none wraps a raw DuckDB trace.

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
