"""Folders behind fsspec URLs: the tune inbox, the freeze folder and the dataset export on an object store.

A fleet keeps its files where every machine reaches them (`s3://bucket/emmy/...` in production;
`memory://` in tests; `file://` is a local folder). The rules are the local folder's:

- **An inbox** is a folder of tune files; a fold copies them down into a local staging folder, checks
  and folds them there, and deletes a key of the inbox only once every copy is in place (a crash loses
  nothing: at worst a file already folded is folded again, which changes nothing).
- **A published folder** (the freeze, the export) never shows a half-written key: its files are
  uploaded as content-addressed blobs (`objects/<sha256>`), and only then is its pointer `HEAD.json`
  (each file's name and digest) replaced, by writing a new key and moving it over the pointer (one
  PUT on an object store). A reader reads the pointer, then the blobs it names, and checks each blob's
  digest; a blob nobody points to yet is invisible. Old blobs stay (a reader mid-way still finds them).

Every network wait is bounded: an HTTP(S) or S3 store is opened with connect and read timeouts of
`NETWORK_WAIT_S`, and the first look at a folder reads its pointer directly (fsspec's `exists` on HTTP
reads a refused or silent server as "no such key"), so a server that refuses is named as one that cannot be
reached and one that accepts and never answers is given up on, naming its address.

`fsspec` is imported only when a URL is used; a plain path never comes here.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from emmy_core.fileio.errors import FileError
from emmy_core.fileio.safefile import atomic_write_text, ensure_folder

POINTER = "HEAD.json"
POINTER_FORMAT = "emmy-folder-pointer/1"
OBJECTS = "objects"
_URL = re.compile(r"[a-z][a-z0-9+.-]{0,15}://")
_NAME = re.compile(r"[A-Za-z0-9._()+-]{1,200}")
_SHA = re.compile(r"[0-9a-f]{64}")
NETWORK_WAIT_S = 20
"""Longest wait for one network step (a connection, an answer, the next bytes of one): under the 30 s a
command may stay silent, so a silent server is given up on in time."""


class UrlFolderError(FileError):
    """A URL folder that cannot be read or written as Emmy's rules require; the message names the key."""


def is_url(target: object) -> bool:
    """Whether `target` is an fsspec URL of a remote or in-memory folder (`file://` is a local path)."""
    return isinstance(target, str) and _URL.match(target) is not None and not target.startswith("file://")


def local_path(target: Path | str) -> Path:
    """A local path, from a path or a `file://` URL."""
    text = str(target)
    return Path(text[len("file://"):]) if text.startswith("file://") else Path(text)


def location(text: str) -> Path | str:
    """A folder argument as the library takes it: an fsspec URL stays a string (a `Path` would fold its
    `//`), a `file://` URL or a plain path becomes a local `Path`."""
    return text if is_url(text) else local_path(text)


def shared_location(target: Path | str) -> str:
    """Where another process (a Dask worker) finds the same folder: a URL as given, a local path or a
    `file://` URL made absolute."""
    return str(target) if is_url(target) else str(local_path(target).resolve())


def address(url: str) -> str:
    """The server part of a URL (`HOST:PORT`), or the URL itself when it has none (memory://)."""
    from urllib.parse import urlsplit

    try:
        netloc = urlsplit(url).netloc
    except ValueError:
        netloc = ""
    return netloc.rsplit("@", 1)[-1] or url.rstrip("/")


def _bounded_options(url: str) -> dict[str, Any]:
    """fsspec options that bound every network wait of `url`'s protocol (none for a local or in-memory one)."""
    protocol = url.split("://", 1)[0].lower()
    if protocol in ("http", "https"):
        import aiohttp

        return {"client_kwargs": {"timeout": aiohttp.ClientTimeout(total=None, connect=NETWORK_WAIT_S,
                                                                   sock_connect=NETWORK_WAIT_S,
                                                                   sock_read=NETWORK_WAIT_S)}}
    if protocol in ("s3", "s3a"):
        return {"config_kwargs": {"connect_timeout": NETWORK_WAIT_S, "read_timeout": NETWORK_WAIT_S}}
    return {}


def unreachable(url: str, exc: BaseException) -> UrlFolderError:
    """The refusal for a network error met at `url`: no answer in time, or cannot reach (naming the address)."""
    if isinstance(exc, TimeoutError) or "timeout" in type(exc).__name__.lower():
        return UrlFolderError(f"{url.rstrip('/')}: no answer from {address(url)} within {NETWORK_WAIT_S} s "
                              "(something there accepts connections but does not reply); given up, nothing was "
                              "read or written")
    reason = getattr(exc, "strerror", None) or str(exc)[:200] or type(exc).__name__
    return UrlFolderError(f"{url.rstrip('/')}: cannot reach {address(url)}: {type(exc).__name__}: {reason}")


def _fs(url: str) -> tuple[Any, str]:
    """The file system and root of `url`; UrlFolderError naming the URL when fsspec does not know its protocol,
    lacks the package for it, or cannot reach it. Network waits are bounded (`NETWORK_WAIT_S`)."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url, **_bounded_options(url))
    except ValueError as exc:  # fsspec: "Protocol not known: ..."
        raise UrlFolderError(f"{url}: not a file system Emmy can use ({exc}); give memory://, file://, s3:// "
                             "or another fsspec protocol whose package is installed") from None
    except ImportError as exc:
        raise UrlFolderError(f"{url}: the package for this protocol is not installed ({exc})") from None
    except OSError as exc:
        raise UrlFolderError(f"{url}: cannot be reached: {type(exc).__name__}: {exc}") from None
    return fs, root.rstrip("/")


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# ---- the inbox ------------------------------------------------------------------------------------

def inbox_keys(url: str, pattern: re.Pattern[str]) -> list[str]:
    """The keys directly under `url` whose names match `pattern`, sorted by name (none for an absent folder)."""
    fs, root = _fs(url)
    if not fs.exists(root):
        return []
    names = [p for p in fs.ls(root, detail=False) if pattern.match(p.rstrip("/").rsplit("/", 1)[-1])]
    return sorted(names, key=lambda p: p.rsplit("/", 1)[-1])


def read_key(url: str, key: str) -> bytes:
    """The content of one key `inbox_keys(url, ...)` listed (to digest what waits without moving it)."""
    fs, _ = _fs(url)
    return bytes(fs.cat_file(key))


@contextmanager
def staged_inbox(url: str, pattern: re.Pattern[str]) -> Iterator[tuple[Path, list[str]]]:
    """The inbox's matching keys copied into a local folder: (folder, keys). The caller folds the folder and
    calls `drop_keys(url, keys)` only once the fold has them in place."""
    fs, _ = _fs(url)
    keys = inbox_keys(url, pattern)
    with tempfile.TemporaryDirectory(prefix="emmy-inbox-") as tmp:
        for key in keys:
            name = key.rsplit("/", 1)[-1]
            atomic_write_text(Path(tmp) / name, fs.cat_file(key))
        yield Path(tmp), keys


def deliver(files: list[Path], url: str) -> list[str]:
    """Puts finished local tune files into the inbox at `url`: each under a hidden partial key first, then
    moved to its name, so a fold never takes half a file (an inbox lists only tune-file names)."""
    fs, root = _fs(url)
    keys = []
    for f in files:
        staged = f"{root}/.{f.name}.partial"
        fs.pipe_file(staged, f.read_bytes())
        fs.mv(staged, f"{root}/{f.name}")
        keys.append(f"{root}/{f.name}")
    return keys


def drop_keys(url: str, keys: list[str]) -> None:
    """Deletes inbox keys (after their fold is in place)."""
    fs, _ = _fs(url)
    for key in keys:
        fs.rm_file(key)


# ---- published folders (pointer + content-addressed blobs) -----------------------------------------

def _read_pointer_key(fs: Any, url: str, root: str) -> bytes | None:
    """The pointer's bytes, None when there is none; a store that refuses or does not answer is refused
    (UrlFolderError naming its address), never read as "nothing published"."""
    try:
        return bytes(fs.cat_file(f"{root}/{POINTER}"))
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
        return None
    except Exception as exc:  # aiohttp, botocore and OSError alike: a network boundary
        raise unreachable(url, exc) from None


def read_pointer(url: str) -> dict[str, str]:
    """The published folder's files (name -> sha256); {} when nothing was published yet."""
    fs, root = _fs(url)
    data = _read_pointer_key(fs, url, root)
    if data is None:
        return {}
    where = f"{url.rstrip('/')}/{POINTER}"
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise UrlFolderError(f"{where}: not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != POINTER_FORMAT or not isinstance(doc.get("files"), dict):
        raise UrlFolderError(f"{where}: field format must be {POINTER_FORMAT!r} with a files mapping")
    files = doc["files"]
    for name, sha in files.items():
        if not (isinstance(name, str) and _NAME.fullmatch(name) and isinstance(sha, str) and _SHA.fullmatch(sha)):
            raise UrlFolderError(f"{where}: record files[{str(name)[:60]!r}]: a file name and a sha256 expected")
    return dict(files)


def fetch_folder(url: str, out: Path) -> dict[str, str]:
    """Copies the published folder's files into the local folder `out` (each blob's digest checked)."""
    fs, root = _fs(url)
    files = read_pointer(url)
    ensure_folder(out)
    for name, sha in sorted(files.items()):
        blob = f"{url.rstrip('/')}/{OBJECTS}/{sha}"
        try:
            data = fs.cat_file(f"{root}/{OBJECTS}/{sha}")
        except FileNotFoundError:
            raise UrlFolderError(f"{blob}: missing: the blob of file {name}, which {POINTER} names, is gone; nothing "
                                 "was read (export to this URL again to repair it)") from None
        except Exception as exc:  # a network boundary
            raise unreachable(url, exc) from None
        if _sha(data) != sha:
            raise UrlFolderError(f"{url.rstrip('/')}/{OBJECTS}/{sha}: its content does not have that digest "
                                 f"(file {name}); nothing was read")
        atomic_write_text(out / name, data)
    return files


def check_replaceable(url: str, marker: str, what: str) -> None:
    """Refuses (UrlFolderError) publishing `what` at `url` unless nothing is there yet, or a published folder
    whose pointer names `marker` (a folder of the same kind: an output replaces only its own kind). Called
    before the work, so a refusal comes first; it also finds an unknown protocol or an unreachable store."""
    fs, root = _fs(url)
    shown = url.rstrip("/")
    _read_pointer_key(fs, url, root)  # reachable and answering, before anything else is asked of it
    try:
        if fs.isfile(root):
            raise UrlFolderError(f"{shown} is a file, not a folder: refusing to replace it with {what}")
        keys = fs.ls(root, detail=False) if fs.exists(root) else []
        files = read_pointer(url) if keys else {}
    except (OSError, NotImplementedError) as exc:
        raise UrlFolderError(f"{shown}: cannot be reached: {type(exc).__name__}: {str(exc)[:200]}") from None
    if not keys:
        return
    if not files:
        raise UrlFolderError(f"{shown} holds keys and no {POINTER}: it is not {what}; refusing to publish over it")
    if marker not in files:
        raise UrlFolderError(f"{shown}/{POINTER} does not name {marker}: the folder there is not {what}; "
                             "refusing to replace it")


def _holds(fs: Any, key: str, sha: str) -> bool | None:
    """Whether the blob at `key` is there with the digest `sha`: True; there but corrupt: False; absent: None."""
    try:
        return _sha(bytes(fs.cat_file(key))) == sha
    except FileNotFoundError:
        return None


def publish_folder(folder: Path, url: str, names: list[str] | None = None,
                   notify: Callable[[str], None] | None = None) -> dict[str, str]:
    """Publishes the files of the local `folder` (all, or `names`) as the folder at `url`: blobs first, then
    the pointer swapped in one move. Returns the pointer's files. A store that fails before the move leaves
    the folder as readers knew it (the blobs written meanwhile are named by no pointer): UrlFolderError.

    A blob already there is kept only when its content has its digest: a corrupt one (tampered, or cut
    short) is written again, and `notify` (default: stderr) hears which, so that exporting again repairs
    a published folder instead of pointing at the bad blob once more."""
    fs, root = _fs(url)
    say = notify or (lambda m: print(m, file=sys.stderr, flush=True))
    chosen = sorted(names) if names is not None else sorted(p.name for p in folder.iterdir() if p.is_file())
    files: dict[str, str] = {}
    try:
        for name in chosen:
            if not _NAME.fullmatch(name):
                raise UrlFolderError(f"{folder / name}: a name a published folder cannot hold")
            data = (folder / name).read_bytes()
            sha = _sha(data)
            key = f"{root}/{OBJECTS}/{sha}"
            held = _holds(fs, key, sha)
            if not held:
                tmp = f"{root}/{OBJECTS}/.{sha}.partial"
                fs.pipe_file(tmp, data)
                fs.mv(tmp, key)
                if held is False:
                    say(f"{url.rstrip('/')}/{OBJECTS}/{sha}: the blob of {name} there did not have its digest "
                        "(corrupt); it was written again")
            files[name] = sha
        doc = json.dumps({"format": POINTER_FORMAT, "files": files}, indent=1, sort_keys=True) + "\n"
        staged = f"{root}/.{POINTER}.{_sha(doc.encode())[:16]}.partial"
        fs.pipe_file(staged, doc.encode())
    except TimeoutError as exc:
        raise unreachable(url, exc) from None
    except (OSError, NotImplementedError) as exc:
        raise UrlFolderError(f"cannot publish {folder.name} to {url.rstrip('/')}: {type(exc).__name__}: "
                             f"{str(exc)[:200]}; its {POINTER} was not replaced, so the folder there stands as "
                             "it was") from None
    try:
        fs.mv(staged, f"{root}/{POINTER}")
    except (OSError, NotImplementedError) as exc:
        raise UrlFolderError(f"cannot move the new {POINTER} into {url.rstrip('/')}: {type(exc).__name__}: "
                             f"{str(exc)[:200]}; readers see the old pointer unless the store completed the move"
                             ) from None
    return files
