"""Reference cache keys and callable fingerprints (see :mod:`acceptance.cache` for the recipe)."""

from __future__ import annotations

import enum
import functools
import hashlib
import importlib.metadata
import json
import os
import platform
import sys
import sysconfig
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import torch

from acceptance import version
from acceptance.formats.roleref import Resolver, RoleRef

if TYPE_CHECKING:
    from acceptance.spec.kinds import JSONValue

#: Mixed into every key; a change of the key recipe gives new keys. Scheme 2: references are computed in a
#: reference worker that never imports an impl (scheme 1's could have run an impl's patch of torch, so none of
#: its entries is read).
KEY_SCHEME = "acceptance.reference-cache.key/2"

# --------------------------------------------------------------------------- keys


def environment() -> dict[str, JSONValue]:
    """The installation facts every key includes: versions of torch, NumPy,
    acceptance and Python, the CPU architecture, torch's CPU vector ISA
    (``torch.backends.cpu.get_cpu_capability()``) and intra-op thread count."""
    return {
        "torch": torch.__version__,
        "numpy": np.__version__,
        "acceptance": version.__version__,
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
    }


def _plain(value: object, where: str) -> JSONValue:
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
    raise TypeError(
        f"key part {where} is a {type(value).__name__}, not JSON data (None, bool, int, float, str, "
        "list, tuple, str-keyed dict)"
    )


def _dumps(plain: JSONValue) -> str:
    return json.dumps(plain, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=True)


def canonical_json(value: object) -> str:
    """Canonical JSON text of plain data: sorted keys, no whitespace, floats by
    ``float.__repr__`` (``NaN``/``Infinity`` as Python's json writes them)."""
    return _dumps(_plain(value, "value"))


def key(**parts: object) -> str:
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


@functools.cache
def _distributions() -> dict[str, tuple[str, ...]]:
    """Top-level import name -> installed distribution names."""
    return {k: tuple(sorted(set(v))) for k, v in importlib.metadata.packages_distributions().items()}


@functools.cache
def _site_dirs() -> tuple[str, ...]:
    import site

    dirs = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    dirs.update(getattr(site, "getsitepackages", lambda: [])())
    dirs.add(site.getusersitepackages())
    return tuple(sorted(os.path.realpath(d) for d in dirs if d))


@functools.cache
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


@functools.cache
def _distribution(top: str) -> str | None:
    """ "name==version" of the distributions that install the top-level module ``top`` (comma-separated), or
    ``None``. Memoized like :func:`_distributions`: reading a distribution's METADATA costs ~5 ms, and every
    fingerprint of a callable that reaches numpy or torch asks again."""
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


def _source(module_name: str, filename: str | None) -> dict[str, str]:
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
    types.BuiltinFunctionType,
    types.MethodDescriptorType,
    types.WrapperDescriptorType,
    types.MethodWrapperType,
    types.ClassMethodDescriptorType,
)


_TORCH_OPS = tuple(
    cls
    for cls in (getattr(torch._ops, n, None) for n in ("OpOverload", "OpOverloadPacket", "HigherOrderOperator"))
    if isinstance(cls, type)
)


class _Fingerprinter:
    """One traversal: memo of visited objects (shared sub-objects once, cycles cut)."""

    def __init__(self) -> None:
        self.memo: dict[int, JSONValue] = {}
        self.keep: list[object] = []  # keeps memoized objects alive so their ids stay unique
        self.nodes = 0

    def _type(self, cls: type) -> dict[str, JSONValue]:
        return {"type": f"{cls.__module__}:{cls.__qualname__}", **_module_source(cls.__module__)}

    def callable(self, fn: object, depth: int = 0) -> JSONValue:
        if isinstance(fn, functools.partial):
            return {
                "partial": self.callable(fn.func, depth + 1),
                "args": self.value(fn.args, depth + 1),
                "keywords": self.value(fn.keywords, depth + 1),
            }
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

    def _builtin(self, fn: object, depth: int) -> dict[str, JSONValue]:
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
        out: dict[str, JSONValue] = {"builtin": f"{module}:{name}", **_module_source(module)}
        if owner is not None and not isinstance(owner, types.ModuleType):
            out["self"] = self.value(owner, depth + 1)
        return out

    def _function(self, fn: types.FunctionType, depth: int) -> dict[str, JSONValue]:
        code = fn.__code__
        filename = code.co_filename
        out: dict[str, JSONValue] = {"function": f"{fn.__module__}:{fn.__qualname__}", "line": code.co_firstlineno}
        if os.path.isfile(filename):
            out.update(_source(fn.__module__, filename))
        else:
            out["code"] = _code_digest(code)
        if fn.__closure__:
            cells: dict[str, JSONValue] = {}
            for name, cell in zip(code.co_freevars, fn.__closure__, strict=False):
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
            refs: dict[str, JSONValue] = {}
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

    def value(self, obj: object, depth: int = 0) -> JSONValue:
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

    def _compound(self, obj: object, depth: int) -> JSONValue:
        if isinstance(obj, torch.Tensor):
            return _tensor_digest(obj)
        if isinstance(obj, np.ndarray):
            if obj.dtype.hasobject:
                raise FingerprintError("a NumPy array of Python objects has no stable fingerprint")
            data = np.ascontiguousarray(obj)
            return {
                "ndarray": data.dtype.str,
                "shape": list(data.shape),
                "sha256": hashlib.sha256(data.view(np.uint8).reshape(-1).data).hexdigest(),
            }
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
        out: dict[str, JSONValue] = {"object": self._type(type(obj))}
        state: dict[str, JSONValue] = {}
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
            raise FingerprintError(f"a {type(obj).__module__}.{type(obj).__qualname__} object has no inspectable state")
        out["repr"] = text
        return out


def _slots(cls: type) -> tuple[str, ...]:
    slots = cls.__dict__.get("__slots__", ())
    return (slots,) if isinstance(slots, str) else tuple(slots)


def _defined_in(obj: object, filename: str) -> bool:
    """Whether ``obj`` is a function or class whose code lives in ``filename``."""
    if isinstance(obj, types.FunctionType):
        return obj.__code__.co_filename == filename
    if isinstance(obj, type):
        module = sys.modules.get(obj.__module__)
        return getattr(module, "__file__", None) == filename
    return False


def _tensor_digest(t: torch.Tensor) -> dict[str, JSONValue]:
    if t.layout != torch.strided or t.is_quantized or t.device.type == "meta":
        raise FingerprintError(f"a {t.layout} {t.dtype} tensor on {t.device} has no byte fingerprint")
    data = _contiguous_bytes(t.detach().cpu())
    return {
        "tensor": str(t.dtype),
        "shape": list(t.shape),
        "sha256": hashlib.sha256(data if data is not None else b"").hexdigest(),
    }


def callable_fingerprint(fn: Callable[..., object]) -> JSONValue:
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


@dataclass(frozen=True)
class FingerprintRef:
    """A reference (:class:`acceptance.formats.roleref.RoleRef`) to a call that returns the SHA-256 of the
    :func:`callable_fingerprint` of ``inner``'s callable, as the hex digest's ASCII bytes in a uint8 tensor: the
    runner keys cached references without importing the code under test (``inner`` resolved afresh)."""

    inner: RoleRef

    def resolve(self, cached: Resolver) -> Callable[[], torch.Tensor]:
        fn = self.inner.resolve(cached)

        def fingerprint() -> torch.Tensor:
            hexdigest = hashlib.sha256(canonical_json(callable_fingerprint(fn)).encode()).hexdigest()
            return torch.frombuffer(bytearray(hexdigest.encode()), dtype=torch.uint8)

        return fingerprint


def _contiguous_bytes(t: torch.Tensor) -> memoryview | None:
    """The bytes of ``t`` in row-major order, a view of its memory (``None`` when empty)."""
    t = t.resolve_conj().resolve_neg().contiguous()
    if t.numel() == 0:
        return None
    return t.reshape(-1).view(torch.uint8).numpy().data
