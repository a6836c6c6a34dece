"""Callable references: ``module:attr`` (an importable module or a ``.py`` file next to the spec), and
:class:`CallableRef`, the reference a worker resolves to one."""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from acceptance.errors import SpecError
from acceptance.formats.roleref import Resolver

_FILE_MODULES: dict[Path, ModuleType] = {}


def _load_file_module(path: Path) -> ModuleType:
    """Import a ``.py`` file once, under a unique module name, without touching ``sys.path``."""
    if path in _FILE_MODULES:
        return _FILE_MODULES[path]
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    name = f"acceptance_specmod_{digest}_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"
    module_spec = importlib.util.spec_from_file_location(name, path)
    # a path ending in .py always gets a spec with a loader (the source file loader)
    assert module_spec is not None and module_spec.loader is not None
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except SystemExit as exc:
        del sys.modules[name]
        raise SpecError(f"cannot import {path.name}: it calls sys.exit({exc.code!r}) at import") from None
    except BaseException as exc:
        del sys.modules[name]
        if not isinstance(exc, Exception):
            raise
        raise SpecError(f"cannot import {path.name}: {type(exc).__name__}: {exc}") from None
    _FILE_MODULES[path] = module
    return module


def resolve_callable(ref: str, spec_path: Path) -> Callable:
    """Resolve ``module:attr`` to a callable.

    ``module`` is an importable dotted name (``torch.nn.functional:gelu``) or a
    ``.py`` file path relative to the spec file's folder (``kernels.py:my_matmul``);
    ``attr`` may be dotted (``pkg.mod:Class.method``). Raises :class:`SpecError`.
    """
    module_part, sep, attr = ref.rpartition(":")
    if not sep or not module_part or not attr:
        raise SpecError(f"{ref!r} is not of the form module:attr (e.g. torch:matmul or kernels.py:my_op)")
    if module_part.endswith(".py"):
        path = (Path(spec_path).parent / module_part).resolve()
        if not path.is_file():
            raise SpecError(f"{ref!r}: no such file {module_part!r} next to the spec ({path})")
        obj: object = _load_file_module(path)
    else:
        try:
            obj = importlib.import_module(module_part)
        except SystemExit as exc:
            raise SpecError(f"{ref!r}: module {module_part!r} calls sys.exit({exc.code!r}) at import") from None
        except Exception as exc:
            raise SpecError(f"{ref!r}: cannot import module {module_part!r}: {type(exc).__name__}: {exc}") from None
    walked = module_part
    for part in attr.split("."):
        if not hasattr(obj, part):
            close = difflib.get_close_matches(part, [n for n in dir(obj) if not n.startswith("_")], n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise SpecError(f"{ref!r}: {walked!r} has no attribute {part!r}{hint}")
        obj = getattr(obj, part)
        walked = f"{walked}:{part}" if walked == module_part else f"{walked}.{part}"
    if not callable(obj):
        raise SpecError(f"{ref!r} is not callable (it is a {type(obj).__name__})")
    return obj


@dataclass(frozen=True)
class CallableRef:
    """A reference (:class:`acceptance.formats.roleref.RoleRef`) to ``module:attr``, resolved next to the spec
    file ``spec_path`` (:func:`resolve_callable`)."""

    ref: str
    spec_path: str

    def resolve(self, cached: Resolver) -> Callable:
        return resolve_callable(self.ref, Path(self.spec_path))
