"""Reading untrusted source files: bounded decompression, strict JSON, errors naming file, record and field.

Every file an import reads came from another machine. Before `json.loads` sees a byte the
decompressed size is capped (streaming, so a gzip bomb stops at the cap instead of filling
memory); the text must be UTF-8; JSON must not repeat a key in one object, nor use `NaN`
or `Infinity`. Every refusal is a `SourceError` carrying the file, the record (a JSON path
such as `$.kernels[3].rows[17]`) and the field at fault (`knobs.block_m`).
"""

from __future__ import annotations

import gc
import gzip
import json
import math
import os
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

from emmy_core.fileio.errors import FileError, bounded

MAX_SOURCE_BYTES = 512 * 1024 * 1024
"""Default cap on a source file's decompressed size (bytes): beyond it the file is refused unread."""

MAX_TEXT_FIELD = 64
"""Longest short text field (names, settings, sizes are shorter still by their own rules)."""

MAX_EXACT_INT = 2**53
"""Largest integer a number field takes (beyond it a float is not exact, and far beyond it not finite)."""

_CHUNK = 1 << 20
GZIP_MAGIC = b"\x1f\x8b"


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pauses Python's cyclic garbage collector around bulk work, restoring its state afterwards.

    Reading a large source creates millions of small, acyclic containers (JSON objects, rows);
    every few hundred allocations the collector would walk all of them again, which more than
    doubles the time of a million-row import. Nothing built here forms cycles, so reference
    counting frees it all the same.
    """
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


class SourceError(FileError, ValueError):
    """A source refused: `file`, `record` (JSON path of the record) and `field` say where, `problem` why."""

    def __init__(self, file: str, record: str, field: str, problem: str) -> None:
        self.file = bounded(file, 300)
        self.record = bounded(record, 300)
        self.field = bounded(field, 120)
        self.problem = bounded(problem, 600)
        file, record, field, problem = self.file, self.record, self.field, self.problem
        where = record if not field else f"{record}.{field}" if record else field
        super().__init__(f"{file}: {where}: {problem}" if where else f"{file}: {problem}")


def json_path(base: str, *parts: str | int) -> str:
    """`json_path('$.kernels', 3, 'rows')` -> `$.kernels[3].rows` (odd keys quoted)."""
    out = base
    for p in parts:
        if isinstance(p, int):
            out += f"[{p}]"
        elif p.isidentifier() and len(p) <= 60:
            out += f".{p}"
        else:
            out += "[" + json.dumps(p[:60]) + ("...]" if len(p) > 60 else "]")
    return out


def read_bounded(path: Path | str, max_bytes: int = MAX_SOURCE_BYTES) -> bytes:
    """The (decompressed, when gzip) bytes of `path`; refuses a file whose content exceeds `max_bytes`, and
    anything that is not a regular file (a FIFO, a device), unread (`emmy_core.fileio.inputfile`)."""
    from emmy_core.fileio.inputfile import InputFileError, open_input

    name = str(path)
    try:
        # a gzip file may be up to its cap compressed; its decompressed size is capped while it streams
        with open_input(path, max_bytes, "source file") as fh:
            magic = fh.read(2)
            fh.seek(0)
            if magic == GZIP_MAGIC:
                return _read_gzip(fh, name, max_bytes)
            data = _read_plain(fh, max_bytes)
    except InputFileError as exc:
        raise SourceError(name, "", "", str(exc).removeprefix(f"{name}: ")) from None
    except OSError as exc:
        raise SourceError(name, "", "", f"cannot read: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise SourceError(name, "", "", f"file is over the cap of {max_bytes} bytes")
    return data


def _read_plain(fh: Any, max_bytes: int) -> bytes:
    """At most `max_bytes + 1` bytes of `fh`: as many as the file held when opened (`open_input` refused it
    over the cap), then in chunks should it have grown since; memory follows the file, never the cap."""
    size = min(os.fstat(fh.fileno()).st_size, max_bytes)
    data = fh.read(size + 1)
    if len(data) <= size:
        return data
    parts, total = [data], len(data)
    while total <= max_bytes:
        chunk = fh.read(min(_CHUNK, max_bytes + 1 - total))
        if not chunk:
            break
        parts.append(chunk)
        total += len(chunk)
    return b"".join(parts)


def _read_gzip(fh: Any, name: str, max_bytes: int) -> bytes:
    out = bytearray()
    try:
        with gzip.GzipFile(fileobj=fh, mode="rb") as gz:
            while True:
                chunk = gz.read(_CHUNK)
                if not chunk:
                    break
                out += chunk
                if len(out) > max_bytes:
                    raise SourceError(name, "", "", f"decompressed content exceeds the cap of {max_bytes} bytes "
                                      "(refused as a possible gzip bomb)")
    except (OSError, EOFError, zlib.error) as exc:
        raise SourceError(name, "", "", f"not a complete gzip stream: {exc}") from None
    return bytes(out)


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out = dict(pairs)
    if len(out) != len(pairs):
        seen: set[str] = set()
        for k, _ in pairs:
            if k in seen:
                raise ValueError(f"key {k[:60]!r} repeated in one object")
            seen.add(k)
    return out


def _no_constant(token: str) -> NoReturn:
    raise ValueError(f"{token} is not a JSON number")


def loads_strict(data: bytes, name: str) -> Any:
    """Strict JSON of `data`: UTF-8, no repeated keys, no NaN/Infinity; a `SourceError` naming the file else."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise SourceError(name, "", "", f"not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(text, object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        what = exc.msg.removesuffix(" at")  # "Unterminated string starting at" reads twice with ours
        raise SourceError(name, "", "", f"not valid JSON: {what} at line {exc.lineno} column {exc.colno}") from None
    except (ValueError, RecursionError) as exc:
        raise SourceError(name, "", "", f"not valid JSON: {str(exc)[:200]}") from None


def load_json_file(path: Path | str, max_bytes: int = MAX_SOURCE_BYTES) -> Any:
    """`read_bounded` then `loads_strict`."""
    data = read_bounded(path, max_bytes)
    return loads_strict(data, str(path))


class Fields:
    """Typed access to one JSON object of a source, refusing with the file, record and field at fault."""

    __slots__ = ("file", "obj", "record")

    def __init__(self, file: str, record: str, obj: object, what: str = "record") -> None:
        if not isinstance(obj, dict):
            raise SourceError(file, record, "", f"{what} must be an object, not {_kind(obj)}")
        self.file = file
        self.record = record
        self.obj = obj

    def fail(self, field: str, problem: str) -> SourceError:
        return SourceError(self.file, self.record, field, problem)

    def only(self, allowed: tuple[str, ...] | frozenset[str]) -> None:
        """Refuses keys outside `allowed` (a file from a newer writer must not be half-read)."""
        for key in self.obj:
            if key not in allowed:
                raise self.fail(str(key)[:60], f"unknown field (known: {', '.join(sorted(allowed))})")

    def has(self, key: str) -> bool:
        return key in self.obj

    def raw(self, key: str) -> Any:
        if key not in self.obj:
            raise self.fail(key, "missing")
        return self.obj[key]

    def text(self, key: str, max_len: int = MAX_TEXT_FIELD, *, optional: bool = False,
             allow_empty: bool = False) -> str | None:
        if optional and key not in self.obj:
            return None
        v = self.raw(key)
        if not isinstance(v, str):
            raise self.fail(key, f"must be text, not {_kind(v)}")
        if len(v) > max_len:
            raise self.fail(key, f"text of {len(v)} characters is longer than {max_len}")
        if not v and not allow_empty:
            raise self.fail(key, "is empty")
        return v

    def integer(self, key: str, low: int, high: int, *, optional: bool = False) -> int | None:
        if optional and key not in self.obj:
            return None
        v = self.raw(key)
        if isinstance(v, bool) or not isinstance(v, int):
            raise self.fail(key, f"must be an integer, not {_kind(v)}")
        if not low <= v <= high:
            raise self.fail(key, f"{v} is not in {low}..{high}")
        return v

    def number(self, key: str, *, optional: bool = False) -> float | None:
        if optional and key not in self.obj:
            return None
        v = self.raw(key)
        if isinstance(v, bool) or not isinstance(v, int | float):
            raise self.fail(key, f"must be a number, not {_kind(v)}")
        if isinstance(v, int) and abs(v) > MAX_EXACT_INT:
            raise self.fail(key, f"an integer of {len(str(abs(v)))} digits is out of range (at most {MAX_EXACT_INT})")
        if not math.isfinite(v):
            raise self.fail(key, "must be a finite number")
        return float(v)

    def array(self, key: str, *, optional: bool = False) -> list:
        if optional and key not in self.obj:
            return []
        v = self.raw(key)
        if not isinstance(v, list):
            raise self.fail(key, f"must be an array, not {_kind(v)}")
        return v

    def mapping(self, key: str, *, optional: bool = False) -> dict:
        if optional and key not in self.obj:
            return {}
        v = self.raw(key)
        if not isinstance(v, dict):
            raise self.fail(key, f"must be an object, not {_kind(v)}")
        return v

    def sub(self, key: str) -> Fields:
        return Fields(self.file, json_path(self.record, key), self.raw(key), key)

    def check(self, key: str, test: Callable[[Any], str | None]) -> Any:
        v = self.raw(key)
        problem = test(v)
        if problem is not None:
            raise self.fail(key, problem)
        return v


def _kind(v: object) -> str:
    return {dict: "an object", list: "an array", str: "text", bool: "a boolean", type(None): "null",
            int: "an integer", float: "a number"}.get(type(v), type(v).__name__)
