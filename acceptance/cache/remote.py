"""The reference cache on an fsspec filesystem: a cache root given as a URL (``s3://bucket/prefix``,
``gs://…``, ``file:///shared/cache``, ``memory://…``), shared by the nodes of a cluster.

The entries are the bytes of a local folder's (:mod:`acceptance.cache.entry`: prefix, header, tensors,
XXH3-128 checksum), under the same names (``<root>/reference-v<FORMAT_VERSION>/<key[:2]>/<key>.ref``).

Writes are atomic: on a local filesystem (``file://``, a mounted folder) the entry is written to a unique
temporary file beside it, then ``os.replace``'d over the entry, as a folder cache does; elsewhere (object
stores, ``memory://``) it is built in memory and sent in one ``pipe``, which the store puts whole or not at all.
Concurrent writers of one key write the same bytes, and the last one's stays. A read checks the checksum (on a
local filesystem from the open file, elsewhere from the whole object taken in one request), so an entry torn
or written by something else is a miss (logged), never used; it is not deleted (another writer may have
replaced it meanwhile), the next write of the key replaces it. An entry deleted while it is read (eviction by
another process) is a miss, or read whole from the file already open.

fsspec is imported only here, only for a URL root (:func:`open_url`); without it, or without the package of
the URL's protocol (s3fs, gcsfs, ...), a URL is a one-line error naming what to install. Credentials and
options come from fsspec's usual configuration (``~/.config/fsspec/*.json``, ``FSSPEC_<PROTOCOL>_<OPTION>``
environment variables) and from the storage's own (``AWS_PROFILE``, ``GOOGLE_APPLICATION_CREDENTIALS``, ...).
"""

from __future__ import annotations

import datetime
import io
import logging
import os
import re
import secrets
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from acceptance.cache.entry import BinaryFile

if TYPE_CHECKING:
    from fsspec import AbstractFileSystem

log = logging.getLogger("acceptance.cache")

#: The extra that installs fsspec: ``pip install 'operator-acceptance[fsspec]'``.
EXTRA = "operator-acceptance[fsspec]"

_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://")


def is_url(root: object) -> bool:
    """Whether a cache root is a URL (``scheme://…``) rather than a folder."""
    return isinstance(root, str) and _URL.match(root) is not None


class _Files(Protocol):
    """What the cache uses of an fsspec filesystem."""

    def cat_file(self, path: str) -> bytes: ...
    def pipe_file(self, path: str, value: bytes) -> None: ...
    def mv(self, path1: str, path2: str) -> None: ...
    def rm_file(self, path: str) -> None: ...
    def makedirs(self, path: str, exist_ok: bool = False) -> None: ...
    def find(self, path: str, detail: bool = True) -> Mapping[str, Mapping[str, object]]: ...
    def ls(self, path: str, detail: bool = True) -> list[Mapping[str, object]]: ...
    def unstrip_protocol(self, name: str) -> str: ...
    def _strip_protocol(self, path: str) -> str: ...


def open_url(url: str) -> tuple[AbstractFileSystem, str]:
    """The fsspec filesystem of ``url`` and the path of the cache root on it; ``ValueError`` (one line) when
    fsspec, or the package of the URL's protocol, is not installed, or the URL is not one fsspec knows."""
    try:
        from fsspec.core import url_to_fs
    except ImportError:
        raise ValueError(
            f"{url} is a URL, and a cache on a URL needs fsspec: pip install '{EXTRA}' (or give a folder path)"
        ) from None
    try:
        fs, path = url_to_fs(url)
    except ImportError as exc:  # fsspec knows the protocol, its package (s3fs, gcsfs, ...) is missing
        raise ValueError(f"{url}: {_line(exc)}") from None
    except (ValueError, TypeError, OSError) as exc:
        raise ValueError(f"{url}: not a URL fsspec can open: {_line(exc)}") from None
    return fs, path.rstrip("/") or "/"


def _line(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__


@dataclass(frozen=True)
class Listed:
    """One file found under the cache root: its path, bytes and last write (ns since the epoch; 0 unknown)."""

    path: str
    size: int
    written_ns: int


def _written_ns(info: Mapping[str, object]) -> int:
    """A file's last write from an fsspec ``info`` dict: ``mtime`` (local), ``LastModified`` (S3), ``updated``
    (GCS), ``last_modified`` (Azure), else ``created`` (memory); 0 when none is given."""
    for field in ("mtime", "LastModified", "updated", "last_modified", "created"):
        value = info.get(field)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return int(value * 1e9)
        if isinstance(value, str):
            try:
                value = datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
            except ValueError:
                continue
        if isinstance(value, datetime.datetime):
            if value.tzinfo is None:
                value = value.replace(tzinfo=datetime.timezone.utc)
            return int(value.timestamp() * 1e9)
    return 0


class RemoteFiles:
    """The cache root ``path`` on the fsspec filesystem ``fs``: whole-entry reads and atomic writes."""

    def __init__(self, fs: AbstractFileSystem, path: str):
        from fsspec.implementations.local import LocalFileSystem

        self.fs: _Files = fs
        self.path = path
        self.renames = isinstance(fs, LocalFileSystem)  # a rename is atomic (os.rename); elsewhere one put

    def url(self, path: str) -> str:
        """``path`` on this filesystem as a URL (for messages)."""
        return self.fs.unstrip_protocol(path)

    def open(self, path: str) -> tuple[BinaryFile, int] | None:
        """The file open for reading, and its size; ``None`` when it is not there (never stored, evicted, or
        deleted while read). On a local filesystem the open file itself (read as a folder's entries are, and
        still whole if the entry is replaced or evicted meanwhile); elsewhere the whole object in one request,
        in memory."""
        try:
            if self.renames:
                f = open(self.local(path), "rb", buffering=0)  # the caller closes it
                return f, os.fstat(f.fileno()).st_size
            data = self.fs.cat_file(path)
        except (FileNotFoundError, IsADirectoryError, NotADirectoryError):
            return None
        return io.BytesIO(data), len(data)

    def local(self, path: str) -> str:
        """``path`` of a local filesystem as the operating system names it."""
        return self.fs._strip_protocol(path)

    def write(self, path: str, fill: Callable[[BinaryFile], None]) -> None:
        """Store at ``path`` what ``fill(file)`` writes, atomically (see the module docstring): on a local
        filesystem into a temporary file beside it, then renamed over it; elsewhere built in memory and put in one
        request. ``OSError`` and the storage's own errors propagate."""
        if not self.renames:
            buf = io.BytesIO()
            fill(buf)
            self.fs.pipe_file(path, buf.getvalue())
            return
        target = self.local(path)
        parent, name = os.path.split(target)
        tmp = os.path.join(parent, f".{name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
        try:
            f = open(tmp, "xb")  # the caller's fill writes it; closed below
        except FileNotFoundError:  # first entry in this folder
            os.makedirs(parent, exist_ok=True)
            f = open(tmp, "xb")
        try:
            with f:
                fill(f)
            os.replace(tmp, target)
        except BaseException:
            self.remove(tmp)
            raise

    def remove(self, path: str) -> bool:
        """Delete a file; whether it is gone (refused: not)."""
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            pass
        except Exception:  # refused (permissions, the storage's own errors): kept
            return False
        return True

    def prune(self, top: str) -> None:
        """Remove the empty folders under ``top`` and ``top`` itself, on a filesystem that has folders (a folder
        a concurrent writer has just filled stays)."""
        if not self.renames:
            return  # object stores have no folders: a prefix ends with its last object
        for folder, _, _ in sorted(os.walk(self.local(top)), key=lambda w: -len(w[0])):
            try:
                os.rmdir(folder)
            except OSError:
                pass

    def tops(self) -> list[str]:
        """The ``reference-v*`` folders under the root."""
        try:
            listed = self.fs.ls(self.path, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return []
        names = [str(item["name"]).rstrip("/") for item in listed if item.get("type") == "directory"]
        return [n for n in names if n.rsplit("/", 1)[-1].startswith("reference-v")]

    def files(self, top: str) -> Iterator[Listed]:
        """Every file under the folder ``top``."""
        try:
            found = self.fs.find(top, detail=True)
        except (FileNotFoundError, NotADirectoryError):
            return
        for name, info in found.items():
            size = info.get("size")
            yield Listed(str(name), size if isinstance(size, int) else 0, _written_ns(info))
