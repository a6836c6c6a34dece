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
        SHA-256 of everything above (32 bytes)

    No pickle is involved. A read checks the length implied by the header
    before allocating, then the digest; an entry that fails any check is a
    miss, is deleted and counted in :attr:`CacheInfo.corrupt` (and logged on
    the ``acceptance.cache`` logger); it never raises. Writes go to a
    temporary file in the same folder, then ``os.replace``: a reader sees the
    old file, the new one or none, never a partial one, and concurrent
    writers of one key (which write identical bytes) simply replace each
    other. Files of another format version live in another folder and are
    never read; :meth:`ReferenceCache.clear` removes them too.

Size cap and eviction
    The modification time of an entry is its last use: set explicitly (to
    the nanosecond) when written and on every hit, because access times are
    unreliable (``noatime``/``relatime`` mounts). When the bytes on disk exceed
    ``max_bytes``, least-recently-used entries are deleted until at most
    ``EVICT_TO * max_bytes`` remain (the margin keeps a full cache from
    rescanning its folder on every write). Each process tracks the total
    from its last scan plus its own writes, so with several writing
    processes the cap can be overshot by what the others wrote since.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import hashlib
import importlib.metadata
import json
import logging
import math
import os
import platform
import re
import secrets
import struct
import sys
import sysconfig
import threading
import time
import types
from pathlib import Path
from typing import Any, Callable, Iterator, Optional, Sequence

import numpy as np
import torch

import acceptance

log = logging.getLogger("acceptance.cache")

#: Version of the on-disk entry layout; entries of another version are never read.
FORMAT_VERSION = 1
#: Mixed into every key; a change of the key recipe gives new keys.
KEY_SCHEME = "acceptance.reference-cache.key/1"
#: Environment variable naming the cache root (overrides the platform default).
ENV_VAR = "ACCEPTANCE_CACHE_DIR"
#: Default size cap: 2 GiB.
DEFAULT_MAX_BYTES = 2 * 1024**3
#: Eviction brings the total down to this fraction of the cap.
EVICT_TO = 0.9
#: A temporary file older than this (seconds) was left by a crashed writer.
STALE_TEMP_S = 3600.0

_MAGIC = b"ACCREF\r\n"
_PREFIX = struct.Struct("<8sII")  # magic, format version, header length
_DIGEST = 32  # bytes of SHA-256
_SUFFIX = ".ref"
_MAX_HEADER = 1 << 20

#: Dtypes an entry can hold: every plain (non-quantized, byte-addressable) torch dtype
#: present in this torch build, by canonical name (``str(dtype)`` without ``torch.``).
DTYPES: dict[str, torch.dtype] = {
    name: getattr(torch, name)
    for name in (
        "bool", "uint8", "int8", "int16", "int32", "int64", "uint16", "uint32", "uint64",
        "float16", "bfloat16", "float32", "float64", "complex32", "complex64", "complex128",
        "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
        "float4_e2m1fn_x2",
    )
    if isinstance(getattr(torch, name, None), torch.dtype)
}


# --------------------------------------------------------------------------- keys


def environment() -> dict[str, Any]:
    """The installation facts every key includes: versions of torch, NumPy,
    acceptance and Python, the CPU architecture, torch's CPU vector ISA
    (``torch.backends.cpu.get_cpu_capability()``) and intra-op thread count."""
    return {
        "torch": torch.__version__,
        "numpy": np.__version__,
        "acceptance": acceptance.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
    }


def _plain(value: Any, where: str) -> Any:
    """``value`` as JSON data (tuples to lists, NumPy scalars to Python, dtypes to
    ``'torch.float32'``); ``TypeError`` naming ``where`` for anything else."""
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return float(value)
    if isinstance(value, np.generic) and not isinstance(value, np.ndarray):
        return _plain(value.item(), where)
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, dict):
        out = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise TypeError(f"key part {where}: dict keys must be str, got {type(k).__name__} {k!r}")
            out[k] = _plain(v, f"{where}[{k!r}]")
        return out
    if isinstance(value, (torch.Tensor, np.ndarray)):
        raise TypeError(
            f"key part {where} is a {type(value).__name__}; tensors and arrays are not allowed in keys "
            "(key on the seed that produced it, or on a hash of its bytes)"
        )
    raise TypeError(f"key part {where} is a {type(value).__name__}, not JSON data (None, bool, int, float, str, "
                    "list, tuple, str-keyed dict)")


def _dumps(plain: Any) -> str:
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def canonical_json(value: Any) -> str:
    """Canonical JSON text of plain data: sorted keys, no whitespace, floats by
    ``float.__repr__`` (``NaN``/``Infinity`` as Python's json writes them)."""
    return _dumps(_plain(value, "value"))


def key(**parts: Any) -> str:
    """Cache key of ``parts``: ``sha256(canonical_json({"scheme": KEY_SCHEME,
    "environment": environment(), "parts": parts}))`` as 64 lowercase hex digits.

    The same parts give the same key in every process of the same installation,
    whatever the order of dict entries. ``TypeError`` names a part that is not
    plain data (a tensor, an array, an arbitrary object).
    """
    plain = {name: _plain(value, name) for name, value in parts.items()}
    text = _dumps({"scheme": KEY_SCHEME, "environment": environment(), "parts": plain})
    return hashlib.sha256(text.encode()).hexdigest()


# --------------------------------------------------------------------------- callable fingerprints


class FingerprintError(ValueError):
    """A callable whose identity cannot be established (do not cache its results)."""


_MAX_DEPTH = 24
_MAX_NODES = 200_000
_MAX_REPR = 4096


@functools.lru_cache(maxsize=None)
def _distributions() -> dict[str, tuple[str, ...]]:
    """Top-level import name -> installed distribution names."""
    return {k: tuple(sorted(set(v))) for k, v in importlib.metadata.packages_distributions().items()}


@functools.lru_cache(maxsize=None)
def _site_dirs() -> tuple[str, ...]:
    import site

    dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    dirs.update(getattr(site, "getsitepackages", lambda: [])())
    dirs.add(site.getusersitepackages())
    return tuple(sorted(os.path.realpath(d) for d in dirs if d))


@functools.lru_cache(maxsize=None)
def _stdlib_dirs() -> tuple[str, ...]:
    paths = sysconfig.get_paths()
    return tuple(sorted({os.path.realpath(paths["stdlib"]), os.path.realpath(paths["platstdlib"])}))


def _under(path: str, dirs: Sequence[str]) -> bool:
    return any(path == d or path.startswith(d + os.sep) for d in dirs)


def file_sha256(path: str | os.PathLike) -> str:
    """SHA-256 (hex) of a file's bytes, read now (not memoized: an edit between two
    calls within one timestamp tick must still be seen)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _distribution(top: str) -> Optional[str]:
    names = _distributions().get(top)
    if not names:
        return None
    versions = []
    for name in names:
        try:
            versions.append(f"{name}=={importlib.metadata.version(name)}")
        except importlib.metadata.PackageNotFoundError:
            return None
    return ",".join(versions)


def _source(module_name: str, filename: Optional[str]) -> dict[str, str]:
    """Identity of the code in ``filename`` (of module ``module_name``): the
    distribution version for a file under site-packages, the Python version for
    the standard library and for builtin modules, else the file's SHA-256."""
    top = (module_name or "").split(".")[0]
    if filename and os.path.isfile(filename):
        real = os.path.realpath(filename)
        site_dir = next((d for d in _site_dirs() if _under(real, [d])), None)
        if site_dir is not None:
            # the top-level name from the path: a function's __module__ may be borrowed (functools.wraps)
            dist = _distribution(os.path.relpath(real, site_dir).split(os.sep)[0].split(".")[0])
            if dist:
                return {"distribution": dist}
        elif _under(real, _stdlib_dirs()):
            return {"python": sys.version}
        return {"sha256": file_sha256(real)}
    if top in sys.builtin_module_names or top in getattr(sys, "stdlib_module_names", ()):
        return {"python": sys.version}
    dist = _distribution(top)
    if dist:
        return {"distribution": dist}
    raise FingerprintError(f"no source file and no installed distribution for module {module_name!r}")


def _module_source(module_name: str) -> dict[str, str]:
    module = sys.modules.get(module_name)
    return _source(module_name, getattr(module, "__file__", None))


def _code_digest(code: types.CodeType) -> str:
    """SHA-256 of a code object's bytecode, names and constants (nested code included),
    for functions with no source file (``exec``'d strings, the REPL)."""
    h = hashlib.sha256()

    def feed(c: types.CodeType) -> None:
        h.update(c.co_code)
        h.update(repr((c.co_names, c.co_varnames, c.co_freevars, c.co_argcount, c.co_kwonlyargcount)).encode())
        for const in c.co_consts:
            if isinstance(const, types.CodeType):
                feed(const)
            elif isinstance(const, frozenset):  # its repr order follows the per-process string hash
                h.update(repr(sorted(map(repr, const))).encode())
            else:
                h.update(repr(const).encode())

    feed(code)
    return h.hexdigest()


def _code_names(code: types.CodeType) -> set[str]:
    """Global/attribute names used by ``code`` and the code objects nested in it."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


_BUILTIN_CALLABLES = (
    types.BuiltinFunctionType, types.MethodDescriptorType, types.WrapperDescriptorType,
    types.MethodWrapperType, types.ClassMethodDescriptorType,
)


_TORCH_OPS = tuple(
    cls for cls in (getattr(torch._ops, n, None) for n in ("OpOverload", "OpOverloadPacket", "HigherOrderOperator"))
    if isinstance(cls, type)
)


class _Fingerprinter:
    """One traversal: memo of visited objects (shared sub-objects once, cycles cut)."""

    def __init__(self) -> None:
        self.memo: dict[int, Any] = {}
        self.keep: list[Any] = []  # keeps memoized objects alive so their ids stay unique
        self.nodes = 0

    def _type(self, cls: type) -> dict[str, Any]:
        return {"type": f"{cls.__module__}:{cls.__qualname__}", **_module_source(cls.__module__)}

    def callable(self, fn: Any, depth: int = 0) -> Any:
        if isinstance(fn, functools.partial):
            return {"partial": self.callable(fn.func, depth + 1), "args": self.value(fn.args, depth + 1),
                    "keywords": self.value(fn.keywords, depth + 1)}
        if isinstance(fn, types.MethodType):
            return {"method": self.callable(fn.__func__, depth + 1), "self": self.value(fn.__self__, depth + 1)}
        if isinstance(fn, types.FunctionType):
            return self._function(fn, depth)
        if isinstance(fn, _BUILTIN_CALLABLES):
            return self._builtin(fn, depth)
        if isinstance(fn, type):
            return self._type(fn)
        if isinstance(fn, _TORCH_OPS):
            return self.value(fn, depth + 1)
        return {"instance": self.value(fn, depth + 1), "call": self.callable(type(fn).__call__, depth + 1)}

    def _builtin(self, fn: Any, depth: int) -> dict[str, Any]:
        owner = getattr(fn, "__self__", None)
        objclass = getattr(fn, "__objclass__", None)
        if isinstance(owner, types.ModuleType):
            module = owner.__name__
        elif objclass is not None:
            module = objclass.__module__
        elif isinstance(owner, type):
            module = owner.__module__
        elif owner is not None and getattr(fn, "__module__", None) is None:
            module = type(owner).__module__
        else:
            module = getattr(fn, "__module__", None) or "builtins"
        name = getattr(fn, "__qualname__", None) or getattr(fn, "__name__", repr(fn))
        out = {"builtin": f"{module}:{name}", **_module_source(module)}
        if owner is not None and not isinstance(owner, types.ModuleType):
            out["self"] = self.value(owner, depth + 1)
        return out

    def _function(self, fn: types.FunctionType, depth: int) -> dict[str, Any]:
        code = fn.__code__
        filename = code.co_filename
        out: dict[str, Any] = {"function": f"{fn.__module__}:{fn.__qualname__}", "line": code.co_firstlineno}
        if os.path.isfile(filename):
            out.update(_source(fn.__module__, filename))
        else:
            out["code"] = _code_digest(code)
        if fn.__closure__:
            cells = {}
            for name, cell in zip(code.co_freevars, fn.__closure__):
                try:
                    contents = cell.cell_contents
                except ValueError:  # an empty cell
                    cells[name] = "<empty>"
                    continue
                cells[name] = self.value(contents, depth + 1)
            out["closure"] = cells
        if fn.__defaults__:
            out["defaults"] = self.value(fn.__defaults__, depth + 1)
        if fn.__kwdefaults__:
            out["kwdefaults"] = self.value(fn.__kwdefaults__, depth + 1)
        if "sha256" in out or "code" in out:  # code not pinned by a version: what it refers to counts
            refs = {}
            for name in sorted(_code_names(code)):
                if name not in fn.__globals__:
                    continue
                target = fn.__globals__[name]
                if _defined_in(target, filename):  # covered by the file's hash
                    continue
                refs[name] = self.value(target, depth + 1)
            if refs:
                out["globals"] = refs
        return out

    def value(self, obj: Any, depth: int = 0) -> Any:
        self.nodes += 1
        if depth > _MAX_DEPTH or self.nodes > _MAX_NODES:
            raise FingerprintError(f"object graph too deep or too large at a {type(obj).__name__}")
        if obj is None or isinstance(obj, (bool, int, str)):
            return obj
        if isinstance(obj, float):
            return float(obj)
        if isinstance(obj, (bytes, bytearray, memoryview)):
            return {"bytes": hashlib.sha256(bytes(obj)).hexdigest()}
        if isinstance(obj, np.generic) and not isinstance(obj, np.ndarray):
            return {"numpy": str(obj.dtype), "value": self.value(obj.item(), depth + 1)}
        if isinstance(obj, (torch.dtype, torch.device, torch.layout, torch.memory_format, torch.Size)):
            return {type(obj).__name__: str(obj)}
        if isinstance(obj, enum.Enum):
            return {"enum": f"{type(obj).__module__}:{type(obj).__qualname__}", "name": obj.name}
        ident = id(obj)
        if ident in self.memo:
            return self.memo[ident]
        self.memo[ident] = {"cycle": f"{type(obj).__module__}:{type(obj).__qualname__}"}
        self.keep.append(obj)
        result = self._compound(obj, depth)
        self.memo[ident] = result
        return result

    def _compound(self, obj: Any, depth: int) -> Any:
        if isinstance(obj, torch.Tensor):
            return _tensor_digest(obj)
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise FingerprintError("a NumPy array of Python objects has no stable fingerprint")
            data = np.ascontiguousarray(obj)
            return {"ndarray": data.dtype.str, "shape": list(data.shape),
                    "sha256": hashlib.sha256(data.view(np.uint8).reshape(-1)).hexdigest()}
        if isinstance(obj, (list, tuple)):
            return [self.value(v, depth + 1) for v in obj]
        if isinstance(obj, (set, frozenset)):
            items = [self.value(v, depth + 1) for v in obj]
            return {"set": sorted(items, key=canonical_json)}
        if isinstance(obj, dict):
            if all(isinstance(k, str) for k in obj):
                return {"dict": {k: self.value(obj[k], depth + 1) for k in sorted(obj)}}
            pairs = [[self.value(k, depth + 1), self.value(v, depth + 1)] for k, v in obj.items()]
            return {"dict": sorted(pairs, key=canonical_json)}
        if isinstance(obj, types.ModuleType):
            return {"module": obj.__name__, **_module_source(obj.__name__)}
        if isinstance(obj, _TORCH_OPS):  # by name: their dispatch tables fill up as they are called
            return {"op": f"{type(obj).__name__}:{obj}", **_module_source("torch")}
        if isinstance(obj, (types.FunctionType, types.MethodType, functools.partial, type) + _BUILTIN_CALLABLES):
            return self.callable(obj, depth + 1)
        out: dict[str, Any] = {"object": self._type(type(obj))}
        state = {}
        if hasattr(obj, "__dict__") and isinstance(vars(obj), dict):
            state.update({k: self.value(v, depth + 1) for k, v in sorted(vars(obj).items())})
        for cls in type(obj).__mro__:
            for slot in _slots(cls):
                if slot not in ("__dict__", "__weakref__") and hasattr(obj, slot):
                    state[f"{cls.__qualname__}.{slot}"] = self.value(getattr(obj, slot), depth + 1)
        if state or hasattr(obj, "__dict__"):
            out["state"] = state
            return out
        text = repr(obj)
        if " at 0x" in text or len(text) > _MAX_REPR:
            raise FingerprintError(
                f"a {type(obj).__module__}.{type(obj).__qualname__} object has no inspectable state"
            )
        out["repr"] = text
        return out


def _slots(cls: type) -> tuple[str, ...]:
    slots = cls.__dict__.get("__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


def _defined_in(obj: Any, filename: str) -> bool:
    """Whether ``obj`` is a function or class whose code lives in ``filename``."""
    if isinstance(obj, types.FunctionType):
        return obj.__code__.co_filename == filename
    if isinstance(obj, type):
        module = sys.modules.get(obj.__module__)
        return getattr(module, "__file__", None) == filename
    return False


def _tensor_digest(t: torch.Tensor) -> dict[str, Any]:
    if t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
        raise FingerprintError(f"a {t.layout} {t.dtype} tensor on {t.device} has no byte fingerprint")
    data = _contiguous_bytes(t.detach().cpu())
    return {"tensor": str(t.dtype), "shape": list(t.shape),
            "sha256": hashlib.sha256(data if data is not None else b"").hexdigest()}


def callable_fingerprint(fn: Callable) -> dict[str, Any]:
    """JSON-able identity of ``fn``'s code and bound state, for use as a key part.

    - Python function: ``{"function": "module:qualname", "line": first line,
      "sha256": file hash}`` plus ``closure``, ``defaults``, ``kwdefaults`` and
      ``globals`` (referenced names not defined in the same file); a function
      in an installed distribution or the standard library gives
      ``{"distribution": "torch==2.x"}`` / ``{"python": version}`` instead of
      the hash (its code is pinned by that version);
    - builtin / C function (``torch.matmul``): ``{"builtin": "torch:matmul",
      "distribution": "torch==2.x"}``, with ``self`` for a bound one;
    - ``functools.partial``: ``{"partial", "args", "keywords"}``; bound method:
      ``{"method", "self"}``; class: its type identity; callable instance:
      ``{"instance": state, "call": type(fn).__call__}``.

    Tensors and arrays reached are hashed by content. Raises
    :class:`FingerprintError` when some reachable state cannot be identified
    (then do not cache what ``fn`` computes) and ``TypeError`` for a non-callable.
    """
    if not callable(fn):
        raise TypeError(f"callable_fingerprint: expected a callable, got {type(fn).__name__}")
    return _Fingerprinter().callable(fn)


# --------------------------------------------------------------------------- entries


def _contiguous_bytes(t: torch.Tensor) -> Optional[np.ndarray]:
    """The bytes of ``t`` in row-major order as a uint8 NumPy view (``None`` when empty)."""
    t = t.resolve_conj().resolve_neg().contiguous()
    if t.numel() == 0:
        return None
    return t.reshape(-1).view(torch.uint8).numpy()


_KEY_RE = re.compile(r"[0-9a-f]{64}")


def _check_key(key: str) -> str:
    if not (isinstance(key, str) and _KEY_RE.fullmatch(key)):
        raise ValueError(f"cache key must be 64 lowercase hex digits (from acceptance.cache.key), got {key!r}")
    return key


def _prepare(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Validate a put's tensors; ``TypeError``/``ValueError`` naming ``tensors[i]``."""
    if isinstance(tensors, torch.Tensor) or not isinstance(tensors, (tuple, list)):
        raise TypeError(f"tensors: expected a tuple or list of tensors, got {type(tensors).__name__}")
    out = []
    for i, t in enumerate(tensors):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"tensors[{i}]: expected a torch.Tensor, got {type(t).__name__}")
        if t.device.type != "cpu":
            raise ValueError(f"tensors[{i}] is on {t.device}; the reference cache holds CPU tensors")
        if t.layout != torch.strided or t.is_quantized:
            raise TypeError(f"tensors[{i}]: a {t.layout} tensor of {t.dtype} cannot be cached (strided, "
                            "non-quantized tensors only)")
        if _dtype_name(t.dtype) not in DTYPES:
            raise TypeError(f"tensors[{i}]: dtype {t.dtype} cannot be cached (supported: {', '.join(DTYPES)})")
        out.append(t.detach())
    return out


def _dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


class _Corrupt(Exception):
    """An entry that fails a check (internal; turned into a miss)."""


def _nbytes(dtype: torch.dtype, shape: Sequence[int]) -> int:
    return math.prod(shape) * dtype.itemsize


def _parse_header(raw: bytes, key: str) -> list[tuple[torch.dtype, tuple[int, ...]]]:
    try:
        header = json.loads(raw.decode())
        if header["key"] != key:
            raise _Corrupt(f"header names key {header['key']!r}")
        out = []
        for name, shape in header["tensors"]:
            if name not in DTYPES:
                raise _Corrupt(f"unknown dtype {name!r}")
            if not (isinstance(shape, list) and all(isinstance(d, int) and d >= 0 for d in shape)):
                raise _Corrupt(f"bad shape {shape!r}")
            out.append((DTYPES[name], tuple(shape)))
        return out
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise _Corrupt(f"unreadable header: {exc}") from None


def _read_exact(f: Any, view: memoryview) -> None:
    got = 0
    while got < len(view):
        n = f.readinto(view[got:])
        if not n:
            raise _Corrupt("file shorter than its header says")
        got += n


def _read_entry(f: Any, size: int, key: str) -> tuple[torch.Tensor, ...]:
    """Read and verify one entry from the open binary file ``f`` of ``size`` bytes."""
    prefix = f.read(_PREFIX.size)
    if len(prefix) != _PREFIX.size:
        raise _Corrupt("shorter than the fixed prefix")
    magic, version, header_len = _PREFIX.unpack(prefix)
    if magic != _MAGIC:
        raise _Corrupt("bad magic bytes")
    if version != FORMAT_VERSION:
        raise _Corrupt(f"format version {version} in the folder of version {FORMAT_VERSION}")
    if header_len > _MAX_HEADER or _PREFIX.size + header_len + _DIGEST > size:
        raise _Corrupt("bad header length")
    raw = f.read(header_len)
    if len(raw) != header_len:
        raise _Corrupt("truncated header")
    layout = _parse_header(raw, key)
    if _PREFIX.size + header_len + sum(_nbytes(d, s) for d, s in layout) + _DIGEST != size:
        raise _Corrupt("file size does not match its header")  # checked before any allocation
    h = hashlib.sha256(prefix)
    h.update(raw)
    tensors = []
    for dtype, shape in layout:
        t = torch.empty(shape, dtype=dtype)
        if t.numel():
            buf = memoryview(t.reshape(-1).view(torch.uint8).numpy())
            _read_exact(f, buf)
            h.update(buf)
        tensors.append(t)
    digest = f.read(_DIGEST + 1)
    if digest != h.digest():
        raise _Corrupt("checksum mismatch")
    return tuple(tensors)


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

    root: Path
    enabled: bool
    max_bytes: int
    entries: int
    bytes: int
    stale_bytes: int
    hits: int
    misses: int
    corrupt: int
    write_errors: int


def default_root() -> Path:
    """``$ACCEPTANCE_CACHE_DIR`` when set and non-empty, else
    ``platformdirs.user_cache_dir("acceptance")`` (``~/.cache/acceptance`` on Linux)."""
    env = os.environ.get(ENV_VAR)
    if env:
        return Path(env).expanduser()
    import platformdirs

    return Path(platformdirs.user_cache_dir("acceptance"))


class ReferenceCache:
    """Disk cache of reference tensors (inputs, baseline and oracle outputs) by :func:`key`.

    ``root``: cache folder (default :func:`default_root`); nothing is created
    until the first write. ``max_bytes``: size cap in bytes, enforced by
    least-recently-used eviction (see the module docstring). ``enabled=False``:
    :meth:`get` always misses and :meth:`put` writes nothing (``info``/``clear``
    still work on the folder). Safe to share between threads and processes.
    """

    def __init__(self, root: Path | str | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES,
                 enabled: bool = True) -> None:
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise ValueError(f"max_bytes: expected a positive integer number of bytes, got {max_bytes!r}")
        self.root = Path(root).expanduser() if root is not None else default_root()
        self.max_bytes = max_bytes
        self.enabled = bool(enabled)
        self._dir = self.root / f"reference-v{FORMAT_VERSION}"
        self._lock = threading.Lock()
        self._total: Optional[int] = None  # bytes on disk: last scan plus own writes since
        self._stamp = 0
        self._hits = self._misses = self._corrupt = self._write_errors = 0

    # ------------------------------------------------------------------ paths and time

    def path(self, key: str) -> Path:
        """File of the entry for ``key``."""
        _check_key(key)
        return self._dir / key[:2] / f"{key}{_SUFFIX}"

    def _now(self) -> int:
        """Strictly increasing nanosecond stamps within this object (last-use times)."""
        with self._lock:
            self._stamp = max(time.time_ns(), self._stamp + 1)
            return self._stamp

    def _count(self, field: str) -> None:
        with self._lock:
            setattr(self, field, getattr(self, field) + 1)

    # ------------------------------------------------------------------ get / put

    def get(self, key: str) -> Optional[tuple[torch.Tensor, ...]]:
        """The tensors stored under ``key`` (fresh, contiguous CPU tensors), or
        ``None`` on a miss. A corrupt entry is deleted, counted, and is a miss."""
        path = self.path(key)
        if not self.enabled:
            self._count("_misses")
            return None
        try:
            f = open(path, "rb", buffering=0)
        except OSError:
            self._count("_misses")
            return None
        with f:
            st = os.fstat(f.fileno())
            try:
                tensors = _read_entry(f, st.st_size, key)
            except _Corrupt as exc:
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
        path = self.path(key)
        tensors = _prepare(tensors)
        if not self.enabled:
            return False
        header = json.dumps({"key": key, "tensors": [[_dtype_name(t.dtype), list(t.shape)] for t in tensors]},
                            separators=(",", ":")).encode()
        size = _PREFIX.size + len(header) + sum(_nbytes(t.dtype, t.shape) for t in tensors) + _DIGEST
        if size > self.max_bytes:
            return False
        tmp = path.parent / f".{key}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
        try:
            flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_BINARY", 0)
            try:
                fd = os.open(tmp, flags, 0o644)
            except FileNotFoundError:  # first entry in this folder
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(tmp, flags, 0o644)
            with os.fdopen(fd, "wb") as f:
                prefix = _PREFIX.pack(_MAGIC, FORMAT_VERSION, len(header))
                h = hashlib.sha256(prefix)
                h.update(header)
                f.write(prefix)
                f.write(header)
                for t in tensors:
                    data = _contiguous_bytes(t)
                    if data is not None:
                        h.update(data)
                        f.write(memoryview(data))
                f.write(h.digest())
            stamp = self._now()
            os.utime(tmp, ns=(stamp, stamp))
            os.replace(tmp, path)
        except OSError as exc:
            self._count("_write_errors")
            log.warning("reference cache: cannot write %s: %s", path, exc)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
        with self._lock:
            grown = None if self._total is None else self._total + size
            self._total = grown
        if grown is None or grown > self.max_bytes:
            self._evict()
        return True

    # ------------------------------------------------------------------ size cap

    def _scan(self) -> tuple[list[tuple[int, str, int]], int]:
        """Entries of this format as (last use ns, path, bytes), and the bytes of
        stale files (other formats, temporary files); old temporary files are removed."""
        entries: list[tuple[int, str, int]] = []
        stale = 0
        if not self.root.is_dir():
            return entries, stale
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
                    if current and e.name.endswith(_SUFFIX) and not e.name.startswith("."):
                        entries.append((st.st_mtime_ns, e.path, st.st_size))
                        continue
                    if e.name.endswith(".tmp") and now - st.st_mtime > STALE_TEMP_S:
                        try:
                            os.unlink(e.path)
                            continue
                        except OSError:
                            pass
                    stale += st.st_size
        return entries, stale

    def _evict(self) -> None:
        """Delete least-recently-used entries until at most ``EVICT_TO * max_bytes`` remain
        (only when the total exceeds ``max_bytes``)."""
        entries, _ = self._scan()
        total = sum(size for _, _, size in entries)
        if total > self.max_bytes:
            target = int(EVICT_TO * self.max_bytes)
            for _, path, size in sorted(entries):
                if total <= target:
                    break
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
                except OSError:
                    continue
                total -= size
        with self._lock:
            self._total = total

    # ------------------------------------------------------------------ info / clear

    def info(self) -> CacheInfo:
        """What is on disk under :attr:`root` and this object's counters."""
        entries, stale = self._scan()
        with self._lock:
            return CacheInfo(
                root=self.root, enabled=self.enabled, max_bytes=self.max_bytes, entries=len(entries),
                bytes=sum(size for _, _, size in entries), stale_bytes=stale, hits=self._hits,
                misses=self._misses, corrupt=self._corrupt, write_errors=self._write_errors,
            )

    def clear(self) -> int:
        """Delete every entry of every format version (the ``reference-v*`` folders
        under :attr:`root`; nothing else there is touched). Returns the number of files removed."""
        removed = 0
        if self.root.is_dir():
            for top in _scandir(self.root):
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
        with self._lock:
            self._total = 0 if self._total is not None else None
        return removed


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
