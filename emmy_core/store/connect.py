"""Opening a DuckDB file: a bounded wait for the lock, and DuckDB's errors turned into clear ones.

DuckDB lets one process write a file, and a process holding it read-write also keeps
readers out. A second process waits up to `lock_timeout` seconds (retrying with a
growing pause), then fails with `StoreLockedError` naming the file, the wait and, when
DuckDB says so, the process holding it. No raw DuckDB trace reaches the user.

A store never reaches the network: DuckDB's automatic install and load of extensions is off (it
would fetch `sqlite_scanner` to read a SQLite file given as a store), and a file without DuckDB's
header is refused by name before DuckDB sees it.
"""

from __future__ import annotations

import functools
import os
import re
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from emmy_core.store.errors import StoreError, StoreLockedError

DEFAULT_LOCK_TIMEOUT = 30.0
_PID = re.compile(r"PID (\d+)")
_NO_EXTENSIONS = ("SET autoinstall_known_extensions = false", "SET autoload_known_extensions = false")
_MAGIC, _MAGIC_AT = b"DUCK", 8


def default_db_path() -> Path:
    """The local tuning database: `EMMY_TUNING_DB`, else `~/.cache/emmy/autotune.db` (read at call time)."""
    return _db_path_for(os.environ.get("EMMY_TUNING_DB"), os.environ.get("HOME"))


@functools.lru_cache(maxsize=16)
def _db_path_for(env: str | None, home: str | None) -> Path:
    """The path for these environment values (a compile asks at every settle; `Path.home` took 10 us)."""
    return Path(env).expanduser() if env else Path.home() / ".cache" / "emmy" / "autotune.db"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0][:300] if text else type(exc).__name__


def _is_lock_error(exc: BaseException) -> bool:
    return "lock" in str(exc).lower()


def _not_duckdb(path: Path) -> bool:
    """Whether `path` is a non-empty regular file without DuckDB's magic bytes (a missing or empty file is a
    new store; a folder or an unreadable file is left to DuckDB's own error)."""
    try:
        if not path.is_file():
            return False
        with open(path, "rb") as f:
            head = f.read(_MAGIC_AT + len(_MAGIC))
    except OSError:
        return False
    return len(head) > 0 and head[_MAGIC_AT:] != _MAGIC


def refuse_unusable(path: Path | str) -> None:
    """Refuses (StoreError naming the file and what it is) a store path a reader or a writer cannot use: a
    FIFO, a device, a socket, a folder, a link to nothing, or such a thing as its write-ahead log `<path>.wal`.

    DuckDB would block for ever on a FIFO and read a device without end; readers and writers both come
    here before DuckDB sees the path, so a write refuses exactly what a read refuses. An absent path passes
    (a writer makes a new store; a reader says there is no store)."""
    from emmy_core.fileio.inputfile import kind_of_mode
    from emmy_core.fileio.safefile import shown

    for p, role in ((Path(path), ""), (Path(f"{path}.wal"), "its write-ahead log ")):
        try:
            mode = os.stat(p).st_mode
        except FileNotFoundError:
            if p.is_symlink():
                raise StoreError(f"{shown(path)}: {role}{shown(p)} is a link to nothing: not a store file; refused "
                                 "unopened") from None
            continue
        except OSError as exc:
            raise StoreError(f"{shown(path)}: cannot look at {role}{shown(p)}: {exc.strerror or exc}") from None
        if not stat.S_ISREG(mode):
            raise StoreError(f"{shown(path)}: {role + shown(p) if role else 'it'} is {kind_of_mode(mode)}, not a "
                             "store file (an Emmy store is one regular DuckDB file): refused unopened")


def connect(path: Path, *, read_only: bool, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> Any:
    """A DuckDB connection to `path`, waiting a bounded time for another process's lock; never installs or
    loads an extension, and refuses a file that is not a DuckDB database, or not a regular file at all
    (`refuse_unusable`)."""
    import duckdb

    refuse_unusable(path)
    if _not_duckdb(Path(path)):
        raise StoreError(f"cannot open {path}: not a DuckDB database file (an Emmy store is one)")
    deadline = time.monotonic() + max(0.0, lock_timeout)
    pause = 0.02
    while True:
        try:
            con = duckdb.connect(str(path), read_only=read_only)
            for statement in _NO_EXTENSIONS:  # SET, not connect's config: a plain duckdb.connect of this process
                con.execute(statement)  # to the same file (an analyst's) would be refused as another configuration
            return con
        except duckdb.IOException as exc:
            if not _is_lock_error(exc):
                raise StoreError(f"cannot open {path}: {first_line(exc)}") from None
            left = deadline - time.monotonic()
            if left <= 0:
                holder = _PID.search(str(exc))
                who = f" (process {holder.group(1)})" if holder else ""
                raise StoreLockedError(
                    f"{path} is locked by another process{who} that has it open for writing; waited "
                    f"{lock_timeout:g} s. DuckDB allows one writing process per file: let it finish, or "
                    "write a tune file (`emmy tune --tune-file`) and import it afterwards") from None
            time.sleep(min(pause, left))
            pause = min(pause * 1.5, 0.5)
        except duckdb.ConnectionException as exc:
            raise StoreError(f"cannot open {path}: {first_line(exc)} (this process already has it open "
                             "another way: close that store first)") from None
        except duckdb.Error as exc:
            raise StoreError(f"cannot open {path}: {first_line(exc)}") from None


@contextmanager
def translated(path: Path | str, doing: str) -> Iterator[None]:
    """Turns a DuckDB error raised while `doing` into a StoreError naming the file."""
    import duckdb

    try:
        yield
    except duckdb.Error as exc:
        raise StoreError(f"{path}: {doing} failed: {first_line(exc)}") from None
