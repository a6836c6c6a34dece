"""The reference cache's folder: atomic writes of checksummed entries (:mod:`acceptance.cache.entry`), writes
deferred or left to a thread, the size cap (see :mod:`acceptance.cache`)."""

from __future__ import annotations

import dataclasses
import errno
import logging
import os
import re
import secrets
import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence
from pathlib import Path

import torch

from acceptance.cache.entry import (
    FORMAT_VERSION,
    SUFFIX,
    Corrupt,
    entry_header,
    entry_size,
    nbytes,
    prepare,
    read_entry,
    write_entry,
)
from acceptance.cache.remote import Listed, RemoteFiles, is_url, open_url

log = logging.getLogger("acceptance.cache")

#: Environment variable naming the cache root (overrides the platform default).
ENV_VAR = "ACCEPTANCE_CACHE_DIR"
#: Default size cap: 2 GiB.
DEFAULT_MAX_BYTES = 2 * 1024**3
#: Most bytes of tensors :meth:`ReferenceCache.put_later` keeps queued (deferred, or for the writer thread).
QUEUED_BYTES = 64 << 20
#: Eviction brings the total down to this fraction of the cap.
EVICT_TO = 0.9
#: Seconds between two looks at a URL root for an entry that missed (a request each; a folder looks every time).
RELOOK_S = 1.0
#: A temporary file older than this (seconds) was left by a crashed writer.
STALE_TEMP_S = 3600.0


# --------------------------------------------------------------------------- keys


_KEY_RE = re.compile(r"[0-9a-f]{64}")


def _check_key(key: str) -> str:
    if not (isinstance(key, str) and _KEY_RE.fullmatch(key)):
        raise ValueError(f"cache key must be 64 lowercase hex digits (from acceptance.cache.key), got {key!r}")
    return key


#: Write errors that concern the cache folder itself (not a folder, not writable, read-only, full, over quota):
#: after one, no further entry is tried in the run.
_FOLDER_ERRORS = frozenset({errno.ENOTDIR, errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT})


@dataclasses.dataclass(frozen=True)
class CacheInfo:
    """State of a reference cache.

    ``entries``/``bytes``: readable entries of this format version on disk and
    their total size (bytes, headers included); ``stale_bytes``: files of other
    format versions and temporary files, which :meth:`ReferenceCache.clear`
    removes. ``hits``/``misses``/``corrupt``/``write_errors`` count this
    process's calls on this cache object (``corrupt``: entries that failed a
    check on read and were deleted).
    """

    root: Path | str
    enabled: bool
    max_bytes: int
    entries: int
    bytes: int
    stale_bytes: int
    hits: int
    misses: int
    corrupt: int
    write_errors: int


def default_root() -> Path | str:
    """``$ACCEPTANCE_CACHE_DIR`` when set and non-empty (a folder, or a URL such as ``s3://bucket/prefix``: see
    :mod:`acceptance.cache.remote`), else ``platformdirs.user_cache_dir("acceptance")`` (``~/.cache/acceptance``
    on Linux)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return env.rstrip("/") if is_url(env) else Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("acceptance"))


class ReferenceCache:
    """Disk cache of reference tensors (inputs, baseline and oracle outputs) by :func:`key`.

    ``root``: cache folder, or a URL of an fsspec filesystem (``s3://bucket/prefix``, ``file:///nfs/cache``:
    :mod:`acceptance.cache.remote`; ``ValueError`` when fsspec is not installed) shared by several machines
    (default :func:`default_root`); nothing is created
    until the first write. ``max_bytes``: size cap in bytes, enforced by
    least-recently-used eviction (see the module docstring). ``enabled=False``:
    :meth:`get` always misses and :meth:`put` writes nothing (``info``/``clear``
    still work on the folder). ``read_only=True``: :meth:`get` reads, :meth:`put` writes nothing (a run whose
    references are computed where the code under test could reach them, ``--no-isolation``). Safe to share
    between threads and processes, and picklable (a copy is a new object on the same root: no counters, no
    queue).
    """

    def __init__(
        self,
        root: Path | str | None = None,
        *,
        max_bytes: int = DEFAULT_MAX_BYTES,
        enabled: bool = True,
        read_only: bool = False,
    ) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ValueError(f"max_bytes: expected a positive integer number of bytes, got {max_bytes!r}")
        root = root if root is not None else default_root()
        self.root: Path | str = root.rstrip("/") if isinstance(root, str) and is_url(root) else Path(root).expanduser()
        self.max_bytes = max_bytes
        self.enabled = bool(enabled)
        self.read_only = bool(read_only)
        self._remote: RemoteFiles | None = None  # the fsspec filesystem of a URL root
        if isinstance(self.root, str) and self.enabled:  # a disabled cache does not touch the storage
            self._remote = RemoteFiles(*open_url(self.root))
        self._dir = Path(self.root) / f"reference-v{FORMAT_VERSION}"
        #: Seconds between two looks for an entry that missed, before each trial computes what it would hold
        #: (:class:`acceptance.measure.references.CaseReferences`): a folder's miss costs microseconds, a URL's
        #: a request.
        self.relook_s = 0.0 if self._remote is None else RELOOK_S
        self._lock = threading.Lock()
        self._total: int | None = None  # bytes on disk: last scan plus own writes since
        self._stamp = 0
        self._hits = self._misses = self._corrupt = self._write_errors = 0
        self._unwritable = False  # the folder takes no entry (once seen, writes are not tried)
        self._reported: set[int | str | None] = set()  # errno values (or error types) of errors already logged
        self._deferring = False  # put_later queues its entries (see defer)
        self._queue: deque[tuple[str, Sequence[torch.Tensor], int]] = deque()  # (key, tensors, bytes), oldest first
        self._queued = 0  # bytes of tensors in the queue
        self._writer: threading.Thread | None = None  # the thread that writes the queue (see write_behind)
        self._changed = threading.Condition()  # the queue, while a writer thread runs

    def __reduce__(self) -> tuple[object, ...]:
        return _rebuilt, (self.root, self.max_bytes, self.enabled, self.read_only)

    # ------------------------------------------------------------------ paths and time

    def path(self, key: str) -> Path:
        """File of the entry for ``key`` in a folder root (``ValueError`` for a URL root: :meth:`location`)."""
        _check_key(key)
        if self._remote is not None:
            raise ValueError(f"{self.root} is a URL: its entries have no local path (use location())")
        return self._dir / key[:2] / f"{key}{SUFFIX}"

    def location(self, key: str) -> str:
        """Where the entry for ``key`` is: its file, or its path on the URL's filesystem."""
        if self._remote is None:
            return str(self.path(key))
        _check_key(key)
        return f"{self._remote.path}/reference-v{FORMAT_VERSION}/{key[:2]}/{key}{SUFFIX}"

    def _now(self) -> int:
        """Strictly increasing nanosecond stamps within this object (last-use times)."""
        with self._lock:
            self._stamp = max(time.time_ns(), self._stamp + 1)
            return self._stamp

    def _count(self, field: str) -> None:
        with self._lock:
            setattr(self, field, getattr(self, field) + 1)

    # ------------------------------------------------------------------ get / put

    def get(self, key: str) -> tuple[torch.Tensor, ...] | None:
        """The tensors stored under ``key`` (fresh, contiguous CPU tensors), or
        ``None`` on a miss. A corrupt entry is deleted (from a folder), counted, logged, and is a miss."""
        _check_key(key)
        if not self.enabled:
            self._count("_misses")
            return None
        if self._remote is not None:
            return self._remote_get(key)
        path = self.path(key)
        try:
            f = open(path, "rb", buffering=0)
        except OSError:
            self._count("_misses")
            return None
        with f:
            st = os.fstat(f.fileno())
            try:
                tensors = read_entry(f, st.st_size, key)
            except Corrupt as exc:
                self._drop(path, st, str(exc))
                self._count("_misses")
                return None
            except OSError:
                self._count("_misses")
                return None
        stamp = self._now()
        try:
            os.utime(path, ns=(stamp, stamp))  # last use, for eviction
        except OSError:
            pass
        self._count("_hits")
        return tensors

    def _remote_get(self, key: str) -> tuple[torch.Tensor, ...] | None:
        """:meth:`get` on a URL's filesystem: the entry read (:meth:`acceptance.cache.remote.RemoteFiles.open`)
        and checked; any failure is a miss."""
        assert self._remote is not None
        where = self.location(key)
        tensors = None
        try:
            opened = self._remote.open(where)
            if opened is not None:
                with opened[0] as f:
                    tensors = read_entry(f, opened[1], key)
        except Corrupt as exc:  # not deleted: the next write of the key replaces it (it may have already)
            self._count("_corrupt")
            log.warning("reference cache: ignored corrupt entry %s (%s)", self._remote.url(where), exc)
        except Exception as exc:  # the storage's own errors (network, permissions): the run goes on uncached
            self._report_once(f"reference cache: cannot read {self._remote.url(where)}: {exc}", f"read {type(exc)}")
        self._count("_misses" if tensors is None else "_hits")
        return tensors

    def _report_once(self, message: str, cause: str) -> None:
        """Log ``message`` unless one of the same ``cause`` was logged by this object already."""
        with self._lock:
            if cause in self._reported:
                return
            self._reported.add(cause)
        log.warning("%s; later failures alike are not reported", message)

    def _drop(self, path: Path, st: os.stat_result, why: str) -> None:
        """Delete a corrupt entry unless another writer has replaced it since it was opened."""
        self._count("_corrupt")
        log.warning("reference cache: dropped corrupt entry %s (%s)", path, why)
        try:
            now = os.stat(path)
            if (now.st_ino, now.st_dev) == (st.st_ino, st.st_dev):
                os.unlink(path)
        except OSError:
            pass

    def put(self, key: str, tensors: Sequence[torch.Tensor]) -> bool:
        """Store ``tensors`` (CPU, any supported dtype and shape; non-contiguous ones
        are stored contiguous) under ``key``. Returns whether an entry was written:
        ``False`` when disabled, when the entry alone exceeds ``max_bytes``, or on
        an I/O error (counted in ``write_errors`` and logged, never raised)."""
        _check_key(key)
        tensors = prepare(tensors)
        if not self.enabled or self.read_only:
            return False
        header = entry_header(key, tensors)
        size = entry_size(header, tensors)
        if size > self.max_bytes:
            return False
        if self._unwritable:
            self._count("_write_errors")
            return False
        if self._remote is not None:
            return self._remote_put(key, header, tensors, size)
        path = self.path(key)
        tmp = path.parent / f".{key}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
            try:
                fd = os.open(tmp, flags, 0o644)
            except FileNotFoundError:  # first entry in this folder
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(tmp, flags, 0o644)
            with os.fdopen(fd, "wb") as f:
                write_entry(f, header, tensors)
            stamp = self._now()
            os.utime(tmp, ns=(stamp, stamp))
            os.replace(tmp, path)
        except OSError as exc:
            self._count("_write_errors")
            if exc.errno in _FOLDER_ERRORS:  # no entry will fit: the run goes on without storing any
                self._unwritable = True
            if exc.errno not in self._reported:  # one line per cause, not one per entry
                self._reported.add(exc.errno)
                log.warning(
                    "reference cache: cannot write %s: %s%s",
                    path,
                    exc,
                    "; no further entry is written in this run"
                    if self._unwritable
                    else "; later entries that fail alike are not reported",
                )
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        self._grown(size)
        return True

    def _grown(self, size: int) -> None:
        """Count ``size`` more bytes written; evict when over the cap (a first write scans the folder)."""
        with self._lock:
            grown = None if self._total is None else self._total + size
            self._total = grown
        if grown is None or grown > self.max_bytes:
            self._evict()

    def _remote_put(self, key: str, header: bytes, tensors: Sequence[torch.Tensor], size: int) -> bool:
        """:meth:`put` on a URL's filesystem: the entry built in memory, then written atomically
        (:meth:`acceptance.cache.remote.RemoteFiles.write`)."""
        assert self._remote is not None
        where = self.location(key)
        try:
            self._remote.write(where, lambda f: write_entry(f, header, tensors))
        except Exception as exc:  # the storage's own errors as well as OSError: the run goes on
            self._count("_write_errors")
            if isinstance(exc, PermissionError):
                self._unwritable = True
            self._report_once(f"reference cache: cannot write {self._remote.url(where)}: {exc}", f"write {type(exc)}")
            return False
        self._grown(size)
        return True

    # ------------------------------------------------------------------ deferred writes

    def defer(self, on: bool = True) -> None:
        """While on, :meth:`put_later` queues its entries for :meth:`write_next` (a process writes them when it
        would otherwise wait); turning it off writes the queue (:meth:`settle`)."""
        self._deferring = on
        if not on:
            self.settle()

    def write_behind(self) -> None:
        """From now on a thread of this process writes the entries :meth:`put_later` queues, as they come. The
        hashing and the file writes release the GIL, so the writes overlap with what this process computes
        meanwhile (a worker's next calls). :meth:`settle` waits for them."""
        with self._changed:
            if self._writer is None and self.enabled:
                self._writer = threading.Thread(target=self._write_queue, name="cache writes", daemon=True)
                self._writer.start()

    def _write_queue(self) -> None:
        while True:
            with self._changed:
                while not self._queue:
                    self._changed.wait()
                key, tensors, size = self._queue[0]  # counted as queued until written
            try:
                self.put(key, tensors)
            except Exception as exc:  # tensors put() refuses: the queue goes on
                log.warning("reference cache: entry %s not written: %s", key, exc)
            with self._changed:
                self._queue.popleft()
                self._queued -= size
                self._changed.notify_all()

    def settle(self) -> None:
        """Return once every queued entry is written: by the thread (:meth:`write_behind`), else here."""
        if self._writer is None:
            while self.write_next():
                pass
            return
        with self._changed:
            while self._queue and self._writer.is_alive():
                self._changed.wait(1.0)

    def put_later(self, key: str, tensors: Sequence[torch.Tensor]) -> None:
        """:meth:`put`, now or queued: for the writer thread (:meth:`write_behind`), else while deferring
        (:meth:`defer`). At most :data:`QUEUED_BYTES` of tensors wait: beyond that the oldest is written first
        (by the thread: this call waits for it). The queue holds the tensors themselves: the caller must not
        change them afterwards."""
        if not (self._deferring or self._writer is not None) or not self.enabled or self.read_only:
            self.put(key, tensors)
            return
        size = sum(nbytes(t.dtype, t.shape) for t in tensors)
        with self._changed:
            self._queue.append((key, tensors, size))
            self._queued += size
            self._changed.notify_all()
            while self._writer is not None and self._queued > QUEUED_BYTES and len(self._queue) > 1:
                self._changed.wait()  # the thread writes the oldest
        while self._queued > QUEUED_BYTES and self.write_next():  # no thread: written here (write_next)
            pass

    def write_next(self) -> bool:
        """Write the oldest queued entry (:meth:`put_later`); whether there was one (never: with a writer
        thread, which writes them)."""
        if not self._queue or self._writer is not None:
            return False
        key, tensors, size = self._queue.popleft()
        self._queued -= size
        self.put(key, tensors)
        return True

    # ------------------------------------------------------------------ size cap

    def _scan(self) -> tuple[list[tuple[int, str, int]], list[tuple[int, str, int]], int]:
        """Entries of this format and those of other format versions, each as (last use ns, path, bytes), and
        the bytes of temporary files; temporary files older than :data:`STALE_TEMP_S` are removed."""
        entries: list[tuple[int, str, int]] = []
        others: list[tuple[int, str, int]] = []
        temporary = 0
        if self._remote is not None:
            return self._remote_scan()
        if not isinstance(self.root, Path) or not self.root.is_dir():
            return entries, others, temporary
        now = time.time()
        for top in _scandir(self.root):
            if not (top.name.startswith("reference-v") and top.is_dir(follow_symlinks=False)):
                continue
            current = top.name == self._dir.name
            for sub in _scandir(top.path):
                if not sub.is_dir(follow_symlinks=False):
                    continue
                for e in _scandir(sub.path):
                    try:
                        st = e.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if e.name.endswith(SUFFIX) and not e.name.startswith("."):
                        (entries if current else others).append((st.st_mtime_ns, e.path, st.st_size))
                        continue
                    if e.name.endswith(".tmp") and now - st.st_mtime > STALE_TEMP_S:
                        try:
                            os.unlink(e.path)
                            continue
                        except OSError:
                            pass
                    temporary += st.st_size
        return entries, others, temporary

    def _remote_scan(self) -> tuple[list[tuple[int, str, int]], list[tuple[int, str, int]], int]:
        """:meth:`_scan` on a URL's filesystem: the last use of an entry is its last write there (a hit does
        not rewrite it)."""
        assert self._remote is not None
        entries: list[tuple[int, str, int]] = []
        others: list[tuple[int, str, int]] = []
        temporary = 0
        now = time.time_ns()
        for top in self._remote.tops():
            current = top.rsplit("/", 1)[-1] == self._dir.name
            for f in self._remote.files(top):
                name = f.path.rsplit("/", 1)[-1]
                if name.endswith(SUFFIX) and not name.startswith("."):
                    (entries if current else others).append((f.written_ns, f.path, f.size))
                    continue
                if _stale(name, f) and now - f.written_ns > STALE_TEMP_S * 1e9 and self._remote.remove(f.path):
                    continue
                temporary += f.size
        return entries, others, temporary

    def _unlink(self, path: str) -> bool:
        """Delete one file (gone already counts as deleted); whether it is gone."""
        if self._remote is not None:
            return self._remote.remove(path)
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        except OSError:
            return False
        return True

    def _evict(self) -> None:
        """Delete least-recently-used entries, of any format version, until at most ``EVICT_TO * max_bytes``
        remain (only when the total exceeds ``max_bytes``): entries a previous format left behind count
        against the cap and, unused since, go first."""
        entries, others, _ = self._scan()
        every = entries + others
        total = sum(size for _, _, size in every)
        if total > self.max_bytes:
            target = int(EVICT_TO * self.max_bytes)
            for _, path, size in sorted(every):
                if total <= target:
                    break
                if self._unlink(path):
                    total -= size
        with self._lock:
            self._total = total

    # ------------------------------------------------------------------ info / clear

    def info(self) -> CacheInfo:
        """What is on disk under :attr:`root` and this object's counters."""
        entries, others, temporary = self._scan()
        with self._lock:
            return CacheInfo(
                root=self.root,
                enabled=self.enabled,
                max_bytes=self.max_bytes,
                entries=len(entries),
                bytes=sum(size for _, _, size in entries),
                stale_bytes=sum(size for _, _, size in others) + temporary,
                hits=self._hits,
                misses=self._misses,
                corrupt=self._corrupt,
                write_errors=self._write_errors,
            )

    def clear(self) -> int:
        """Delete every entry of every format version (the ``reference-v*`` folders
        under :attr:`root`; nothing else there is touched). Returns the number of files removed."""
        removed = 0
        if self._remote is not None:
            for top in self._remote.tops():
                removed += sum(self._remote.remove(f.path) for f in self._remote.files(top))
                self._remote.prune(top)
        elif isinstance(self.root, Path):
            removed = _clear_folder(self.root)
        with self._lock:
            self._total = 0 if self._total is not None else None
        return removed


def _clear_folder(root: Path) -> int:
    """:meth:`ReferenceCache.clear` of a folder."""
    removed = 0
    if root.is_dir():
        for top in _scandir(root):
            if not (top.name.startswith("reference-v") and top.is_dir(follow_symlinks=False)):
                continue
            for sub in _scandir(top.path):
                if sub.is_dir(follow_symlinks=False):
                    for e in _scandir(sub.path):
                        try:
                            os.unlink(e.path)
                            removed += 1
                        except OSError:
                            pass
                    _rmdir(sub.path)
                else:
                    try:
                        os.unlink(sub.path)
                        removed += 1
                    except OSError:
                        pass
            _rmdir(top.path)
    return removed


def _stale(name: str, f: Listed) -> bool:
    """Whether a file under a URL root is a temporary file with a known write time."""
    return name.startswith(".") and name.endswith(".tmp") and f.written_ns > 0


def _rebuilt(root: Path | str, max_bytes: int, enabled: bool, read_only: bool) -> ReferenceCache:
    """A :class:`ReferenceCache` unpickled: a new object on the same root."""
    return ReferenceCache(root, max_bytes=max_bytes, enabled=enabled, read_only=read_only)


def _scandir(path: str | Path) -> Iterator[os.DirEntry]:
    try:
        with os.scandir(path) as it:
            yield from list(it)
    except OSError:
        return


def _rmdir(path: str) -> None:
    try:
        os.rmdir(path)
    except OSError:  # not empty: a concurrent writer
        pass


#: This process's stores by (folder, cap), for the recipes unpickled in a worker (:func:`shared`): its recipes
#: share one, so that its count of the bytes on disk (for the cap) is not rebuilt by a scan case after case.
_SHARED: dict[tuple[str, int], ReferenceCache] = {}


if hasattr(os, "register_at_fork"):  # a process forked from one that holds stores starts with none of its own
    os.register_at_fork(after_in_child=_SHARED.clear)


def shared(root: str, max_bytes: int) -> ReferenceCache:
    """This process's store of the folder ``root`` capped at ``max_bytes``: one per folder, its entries written
    by a thread (:meth:`ReferenceCache.write_behind`)."""
    if (root, max_bytes) not in _SHARED:
        _SHARED[root, max_bytes] = ReferenceCache(root, max_bytes=max_bytes)
        _SHARED[root, max_bytes].write_behind()
    return _SHARED[root, max_bytes]


def settle_shared() -> None:
    """Return once every entry queued in this process's :func:`shared` stores is written (a worker, before it
    ends)."""
    for store in _SHARED.values():
        store.settle()
