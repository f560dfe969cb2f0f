"""Opening a file a user named as input: regular files only, the size capped before a byte is read.

Every input path (`--file`, `--prior`, `--cards`, `--extern-order`, a source to import, a report
to compare) goes through `open_input`. A FIFO would block the reader forever and `/dev/zero`
would read until memory runs out, so the file is opened without blocking, checked with `fstat`
on the descriptor actually opened (no gap between the check and the read for a swap to slip
through), refused unless it is a regular file, and refused unread when larger than the cap.
"""

from __future__ import annotations

import fcntl
import os
import stat
from typing import BinaryIO

from emmy_core.fileio.errors import FileError


class InputFileError(FileError, ValueError):
    """An input file that cannot be read as one: the message names the file and says why."""


def kind_of_mode(mode: int) -> str:
    """What a file of this `st_mode` is, in words (for a refusal that names it)."""
    if stat.S_ISDIR(mode):
        return "a folder"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_input(path: os.PathLike[str] | str, max_bytes: int, what: str = "file") -> BinaryIO:
    """`path` opened for binary reading, after checking it is a regular file of at most `max_bytes`.

    InputFileError (naming the file and what it is) otherwise; nothing is read from a refused file."""
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        raise InputFileError(f"{name}: no such {what}") from None
    except IsADirectoryError:
        raise InputFileError(f"{name}: is a folder, not a {what}") from None
    except OSError as exc:
        raise InputFileError(f"{name}: cannot read the {what}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputFileError(f"{name}: is {kind_of_mode(st.st_mode)}, not a regular file: refused unread (a {what} "
                                 "must be a regular file)")
        if st.st_size > max_bytes:
            raise InputFileError(f"{name}: is {st.st_size} bytes, over the cap of {max_bytes} for a {what}: "
                                 "refused unread")
        flags = fcntl.fcntl(fd, fcntl.F_GETFL)
        fcntl.fcntl(fd, fcntl.F_SETFL, flags & ~os.O_NONBLOCK)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_input(path: os.PathLike[str] | str, max_bytes: int, what: str = "file") -> bytes:
    """The bytes of a regular file of at most `max_bytes` (`open_input`); a file that grows past the cap
    while it is read is refused too."""
    with open_input(path, max_bytes, what) as fh:
        try:  # what fstat says plus one byte, so a small file under a large cap allocates little; a file that
            # grew since is read on to the cap
            size = min(max_bytes, os.fstat(fh.fileno()).st_size)
            data = fh.read(size + 1)
            if len(data) > size:
                data += fh.read(max_bytes + 1 - len(data))
        except OSError as exc:
            raise InputFileError(f"{os.fspath(path)}: cannot read the {what}: {exc.strerror or exc}") from None
    if len(data) > max_bytes:
        raise InputFileError(f"{os.fspath(path)}: grew past the cap of {max_bytes} bytes while read: refused")
    return data
