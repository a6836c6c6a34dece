"""Reference cache: generated inputs, CPU baseline outputs and float64 oracle outputs on disk.

None of these change from one run to the next unless the spec, the callables
or the installed libraries change, so a run can read them back instead of
recomputing them. The implementation's outputs are never cached: they are what
is under test.

Keys
    :func:`key` is ``sha256(canonical_json({"scheme": KEY_SCHEME,
    "environment": environment(), "parts": parts}))`` in lowercase hex, where
    the canonical JSON has sorted keys, no whitespace, floats written by
    ``float.__repr__`` (so ``1`` and ``1.0``, ``0.0`` and ``-0.0`` differ, NaN is
    ``NaN``) and tuples written as lists. Parts are plain data: ``None``, bool,
    int, float, str, lists/tuples and str-keyed dicts of those, NumPy scalars
    and ``torch.dtype``; a tensor or array is refused (hash its contents, or
    key on the seed that produced it). A typical key::

        key(role="baseline", fn=callable_fingerprint(baseline), spec=spec_fields,
            dtype="bfloat16", case="matmul/bfloat16/M=1,N=7", trial=3, seed=1234,
            emulation={...})

    What invalidates an entry (gives a different key): any part the caller
    passes (role, callable fingerprint, spec fields, dtype, case id, trial,
    seed, emulation settings, ...); a change of :func:`environment` (torch,
    NumPy and acceptance versions, Python version, CPU architecture, torch's
    CPU vector ISA and its intra-op thread count, which sets the reduction
    order of CPU kernels); a new :data:`KEY_SCHEME` or :data:`FORMAT_VERSION`.

Callable fingerprints
    :func:`callable_fingerprint` identifies a callable's code and bound state
    as JSON-able data. A Python function is its module, qualified name, first
    line and the SHA-256 of its source file's bytes (any edit of the file, a
    comment included, changes it), plus the values of its closure cells,
    defaults and the globals its code names (functions, classes and modules
    from *other* files are fingerprinted in turn, so an edited helper module
    is seen). Code from an installed distribution (a file under
    site-packages) is identified by the distribution's name and version, the
    standard library and C builtins by the Python version; ``torch.matmul`` is
    therefore ``torch==<version>``. ``functools.partial``, bound methods,
    classes and callable instances are taken apart; tensors and arrays bound
    in them are hashed by content; other objects by their type and their
    ``__dict__``/``__slots__`` state (an object with neither, by its
    ``repr`` when that shows no memory address).

    Not seen: files or environment variables the code reads at run time,
    global random state, a rebuilt native extension or an installed package
    changed in place without a new version. After such a change run
    ``ReferenceCache().clear()``.

Entries
    One file per key, ``<root>/reference-v<FORMAT_VERSION>/<key[:2]>/<key>.ref``::

        b"ACCREF\\r\\n"  u32 LE format version  u32 LE header length
        header: UTF-8 JSON {"key": key, "tensors": [[dtype name, shape], ...]}
        payload: each tensor's bytes, row-major, in order
        XXH3-128 checksum of everything above (16 bytes, canonical big-endian)

    No pickle is involved. A read checks the length implied by the header
    before allocating, then the digest; an entry that fails any check is a
    miss, is deleted and counted in :attr:`CacheInfo.corrupt` (and logged on
    the ``acceptance.cache`` logger); it never raises. Writes go to a
    temporary file in the same folder, then ``os.replace``: a reader sees the
    old file, the new one or none, never a partial one, and concurrent
    writers of one key (which write identical bytes) simply replace each
    other. Files of another format version live in another folder and are
    never read; they count against the size cap, and eviction and
    :meth:`ReferenceCache.clear` remove them too.

Storage
    The root is a folder, or a URL of any fsspec filesystem (``s3://bucket/prefix``,
    ``gs://…``, ``file:///nfs/cache``, ``memory://…`` for tests) that the
    machines of a cluster share (:mod:`acceptance.cache.remote`; fsspec is
    imported only for a URL, and a URL without it is a ``ValueError`` naming
    the ``fsspec`` extra). Entries there have the same names and bytes. A
    ``file://`` URL writes a temporary file and renames it, an object store
    takes the whole entry in one put; a read takes the whole entry and checks
    it: a torn or foreign entry is a miss (counted in ``corrupt``, logged,
    left for the next write of the key to replace). A case looks for a
    missing entry again before each trial would compute it (on a URL at most
    every :data:`acceptance.cache.store.RELOOK_S` seconds), so an entry
    another machine stored meanwhile is read. A :class:`ReferenceCache`
    pickles as its settings.

Size cap and eviction
    The modification time of an entry is its last use: set explicitly (to
    the nanosecond) when written and on every hit, because access times are
    unreliable (``noatime``/``relatime`` mounts). When the bytes of entries on
    disk, of every format version, exceed ``max_bytes``, least-recently-used
    entries of any version are deleted until at most ``EVICT_TO * max_bytes``
    remain: what an older format left, unused since, goes first. The margin
    keeps a full cache from rescanning its folder on every write. Each
    process tracks the total from its last scan plus its own writes, so with
    several writing processes the cap can be overshot by what the others
    wrote since. On a URL the last use is the last write (a hit does not
    rewrite the entry). An entry deleted while another process reads it is a
    miss there.
"""

from acceptance.cache.entry import DTYPES, FORMAT_VERSION
from acceptance.cache.keys import (
    KEY_SCHEME,
    FingerprintError,
    FingerprintRef,
    callable_fingerprint,
    canonical_json,
    environment,
    file_sha256,
    key,
)
from acceptance.cache.store import (
    DEFAULT_MAX_BYTES,
    ENV_VAR,
    EVICT_TO,
    STALE_TEMP_S,
    CacheInfo,
    ReferenceCache,
    default_root,
)

__all__ = [
    "KEY_SCHEME",
    "FingerprintError",
    "FingerprintRef",
    "callable_fingerprint",
    "canonical_json",
    "environment",
    "file_sha256",
    "key",
    "DEFAULT_MAX_BYTES",
    "DTYPES",
    "ENV_VAR",
    "EVICT_TO",
    "FORMAT_VERSION",
    "STALE_TEMP_S",
    "CacheInfo",
    "ReferenceCache",
    "default_root",
]
