"""Writing files without losing the ones they replace.

Every file Emmy writes over (a freeze, a tune file, an export, a database swapped in by a
fresh import) is written in full under a temporary name in the same folder, flushed to the
disk, and only then renamed over the old one, so that a crash, a full disk or a file-size
limit leaves the old file whole. Several files that belong together (a freeze of several
cards) are all staged before the first rename, so either none is replaced or the message
says exactly which were. File-system errors become a `FileWriteError` naming the file and
the reason, never a raw traceback.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from emmy_core.fileio.errors import FileError

MAX_NAME = 200  # longest file name echoed in a message


class FileWriteError(FileError):
    """A file could not be written; the message names it, says why, and which old files stand."""


def shown(path: Path | str) -> str:
    """A path as a message shows it (a hostile name is cut short)."""
    text = str(path)
    return text if len(text) <= MAX_NAME else text[:MAX_NAME] + "..."


def why(exc: BaseException) -> str:
    """The reason of a file-system error in words (a file-size limit is named as such)."""
    if isinstance(exc, OSError):
        if exc.errno == errno.EFBIG:
            return "file too large (a file-size limit such as `ulimit -f` was reached)"
        if exc.errno == errno.ENOSPC:
            return "no space left on the device"
        if exc.errno == errno.EDQUOT:
            return "disk quota exceeded"
        if exc.strerror:
            return exc.strerror[0].lower() + exc.strerror[1:]
    return str(exc)[:300] or type(exc).__name__


def ensure_folder(folder: Path) -> None:
    """Creates `folder` (and its parents); refuses clearly when it is a file or cannot be made."""
    if folder.is_dir():
        return
    if folder.exists() or folder.is_symlink():
        raise FileWriteError(f"{shown(folder)} exists and is not a folder: nothing was written")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise FileWriteError(f"cannot create the folder {shown(folder)}: {why(exc)}; nothing was written") from None


def fsync_folder(folder: Path) -> None:
    """Makes a rename inside `folder` durable (best effort where the file system has no folder fsync)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass  # some file systems refuse fsync on a folder; the rename itself is still atomic
    finally:
        os.close(fd)


def _stage(path: Path, content: str | bytes) -> Path:
    """`content` (ASCII text, or bytes) written and flushed under a temporary name beside `path`; the
    temporary path."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name[:100]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(content if isinstance(content, bytes) else content.encode("ascii"))
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o644)  # mkstemp makes it private; these files are meant to be shared
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return Path(tmp)


def _holds(path: Path, content: str | bytes) -> bool:
    """Whether `path` is a plain file (not a link) whose bytes are already `content`."""
    data = content if isinstance(content, bytes) else content.encode("ascii")
    try:
        return (not path.is_symlink() and path.is_file() and path.stat().st_size == len(data)
                and path.read_bytes() == data)
    except OSError:
        return False  # unreadable: written over as usual, which names the file if that fails too


def atomic_write_text(path: Path, text: str | bytes) -> None:
    """Writes `text` (ASCII text, or bytes) to `path` through a temporary file in the same folder and a
    rename.

    On any failure the old file (if any) stands as it was and no temporary file is left; the message names
    `path` (never the temporary file) and says so."""
    write_all([(Path(path), lambda: text)])


def fresh_folder(parent: Path, name: str) -> Path:
    """Creates and returns a new folder `parent/name`, or `name-2`, `name-3`, ... when taken (two runs in
    the same second with the same content must not collide, nor share a folder)."""
    ensure_folder(parent)
    for n in range(1, 10_000):
        folder = parent / (name if n == 1 else f"{name}-{n}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        except OSError as exc:
            raise FileWriteError(f"cannot create the folder {shown(folder)}: {why(exc)}; nothing was written") \
                from None
        return folder
    raise FileWriteError(f"no free folder name beside {shown(parent / name)}")


def through_link(path: Path) -> Path:
    """Where a write to `path` lands: a link to an existing file or folder is followed (the file the user
    pointed at is updated and the link kept); anything else is `path` itself."""
    if path.is_symlink() and path.exists():
        return Path(os.path.realpath(path))
    return path


def write_all(files: Iterable[tuple[Path, Callable[[], str | bytes]]]) -> list[Path]:
    """Writes several files as one: each text (made by its callable, one at a time) is staged beside its
    file; only when every one is staged are they renamed into place. Returns the paths, which all hold
    their texts; a file that already holds its text is left untouched (its time and identity kept: a
    refreshed freeze that changed nothing moves nothing). A path that links to a file writes that file.

    A failure while staging replaces nothing; a failure while renaming (which a full disk cannot cause)
    names the files already replaced and those left as they were."""
    staged: list[tuple[Path, Path, Path | None]] = []  # (path, where it lands, staged text; None: already holds it)
    try:
        for path, make in files:
            target = through_link(path)
            ensure_folder(target.parent)
            if target.is_dir():
                raise FileWriteError(f"{shown(path)} is a folder, not a file: nothing was replaced")
            text = make()
            if _holds(target, text):
                staged.append((path, target, None))
                continue
            try:
                staged.append((path, target, _stage(target, text)))
            except OSError as exc:
                raise FileWriteError(f"cannot write {shown(path)}: {why(exc)}; no file was replaced (the old "
                                     "ones stand as they were)") from None
    except BaseException:
        for _, _, tmp in staged:
            if tmp is not None:
                tmp.unlink(missing_ok=True)
        raise
    replaced: list[Path] = []
    for i, (path, target, tmp) in enumerate(staged):
        if tmp is None:
            continue
        try:
            os.replace(tmp, target)
        except OSError as exc:
            for _, _, left in staged[i:]:
                if left is not None:
                    left.unlink(missing_ok=True)
            rest = [shown(p) for p, _, _ in staged[i:]]
            raise FileWriteError(
                f"cannot put {shown(path)} in place: {why(exc)}; replaced: {', '.join(map(shown, replaced)) or 'none'}; "
                f"not replaced (the old files stand): {', '.join(rest)}") from None
        replaced.append(path)
    for folder in sorted({through_link(p).parent for p in replaced}):
        fsync_folder(folder)
    return [path for path, _, _ in staged]


class FolderBusyError(FileWriteError):
    """Another process held a folder's lock for longer than the caller would wait; nothing was changed."""


def _try_lock(fd: int) -> bool:
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    return True


@contextmanager
def locked_folder(folder: Path, wait_s: float | None = None,
                  say: Callable[[str], None] | None = None, poll_s: float = 0.1) -> Iterator[None]:
    """An exclusive lock on a folder (flock on its descriptor) for a read-merge-write of a file in it,
    so that two processes merging into one file never lose each other's rows. When another process
    holds it, `say` is told once, and after `wait_s` seconds (None: no bound) a `FolderBusyError` is
    raised with nothing done: a hung holder stops the next caller with a message, not silence."""
    fd = os.open(folder, os.O_RDONLY)
    try:
        if not _try_lock(fd):
            if say is not None:
                say(f"waiting for another process's lock on {shown(folder)} (a freeze refresh or a tune file's "
                    "merge)")
            deadline = None if wait_s is None else time.monotonic() + wait_s
            while not _try_lock(fd):
                if deadline is not None and time.monotonic() >= deadline:
                    raise FolderBusyError(
                        f"{shown(folder)}: another process held its lock (a freeze refresh or a tune file's merge) "
                        f"for the {wait_s:g} s this waits; nothing was changed: run again when it has ended")
                time.sleep(poll_s)
        yield
    finally:
        os.close(fd)  # closing releases the lock


def aside_name(path: Path, label: str) -> Path:
    """A free name beside `path` that carries `label`: `autotune.db` -> `autotune.<label>.db`
    (then `autotune.<label>.2.db`, ... when taken)."""
    stem, suffix = (path.stem, path.suffix) if path.suffix else (path.name, "")
    for n in range(1, 10_000):
        extra = "" if n == 1 else f".{n}"
        candidate = path.with_name(f"{stem}.{label}{extra}{suffix}")
        if not candidate.exists() and not Path(str(candidate) + ".wal").exists():
            return candidate
    raise FileWriteError(f"no free name beside {shown(path)} to move it aside to")


def write_new(text: str | bytes, names: Iterable[Path]) -> Path:
    """Writes `text` whole as a new file under the first of `names` that is free, never over a file: the
    complete file is linked into place under a name that must not exist, so two writers at once get two
    files. Returns the path written."""
    names = iter(names)
    first = next(names)
    tmp = _stage(first, text)
    try:
        for target in itertools.chain([first], names):
            try:
                os.link(tmp, target)
            except FileExistsError:
                continue  # taken, or taken between a look and the link: the next name
            except OSError as exc:
                raise FileWriteError(f"cannot write {shown(target)}: {why(exc)}; nothing was written") from None
            fsync_folder(target.parent)
            return target
        raise FileWriteError(f"no free name beside {shown(first)} to write to; nothing was written")
    finally:
        tmp.unlink(missing_ok=True)


_RENAME_EXCHANGE = 2


def _exchange(a: Path, b: Path) -> bool:
    """Atomically exchanges two paths (Linux renameat2 RENAME_EXCHANGE); False where unsupported."""
    import ctypes
    import ctypes.util

    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        fn = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd = -100
    fn.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def swap_folder(new: Path, old: Path) -> Path | None:
    """Puts the complete folder `new` in place of `old` (absent or a folder). With an exchange the switch
    is atomic; elsewhere the old folder is first renamed beside it. Returns where the old content now
    is (for the caller to remove), or None when there was none."""
    if not old.exists():
        os.replace(new, old)
        fsync_folder(old.parent)
        return None
    if _exchange(new, old):
        fsync_folder(old.parent)
        return new
    aside = Path(tempfile.mkdtemp(prefix=f".{old.name[:100]}.old.", dir=old.parent))
    os.replace(old, aside / "content")
    os.replace(new, old)
    fsync_folder(old.parent)
    return aside
