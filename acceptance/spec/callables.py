"""Callable references: ``module:attr`` (an importable module or a ``.py`` file next to the spec)."""

from __future__ import annotations

import difflib
import hashlib
import importlib
import importlib.util
import re
import sys
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

from acceptance.errors import SpecError

_FILE_MODULES: dict[Path, ModuleType] = {}


def _load_file_module(path: Path) -> ModuleType:
    """Import a ``.py`` file once, under a unique module name, without touching ``sys.path``."""
    if path in _FILE_MODULES:
        return _FILE_MODULES[path]
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:12]
    name = f"acceptance_specmod_{digest}_{re.sub(r'[^0-9A-Za-z_]', '_', path.stem)}"
    module_spec = importlib.util.spec_from_file_location(name, path)
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
        obj: Any = _load_file_module(path)
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


def _declared(spec: Any) -> bool:
    """Whether a role of the spec is a declaration (a mapping run by :mod:`acceptance.isolation.adapters`)."""
    return any(isinstance(r, dict) and "mpmath" not in r for r in (spec.impl, spec.baseline, spec.oracle))


def resolve_roles(spec: Any) -> tuple[Callable, Callable, Callable]:
    """(impl, baseline, oracle) of an :class:`~acceptance.spec.model.OperatorSpec`.

    The baseline defaults to the impl callable (run on the CPU), the oracle to
    the baseline on float64 copies of the inputs; an ``oracle:`` mapping
    selects an mpmath oracle. A role declared as a mapping becomes an
    :class:`acceptance.isolation.adapters.Adapter` (defaults: :func:`acceptance.isolation.adapters.default_roles`).
    Raises :class:`SpecError` or ``ValueError``.
    """
    from acceptance.numerics import oracle  # here, so that loading and listing specs starts without torch

    if _declared(spec):
        from acceptance.isolation import adapters

        decls = adapters.default_roles(spec.impl, spec.baseline, spec.oracle)
        made = [
            adapters.Adapter(d, spec.path, role)
            if isinstance(d, dict) and "mpmath" not in d
            else oracle.oracle_from_spec(d)
            if isinstance(d, dict)
            else resolve_callable(d, spec.path)
            if d is not None
            else None
            for role, d in zip(("impl", "baseline", "oracle"), decls, strict=False)
        ]
        return made[0], made[1], made[2] if made[2] is not None else oracle.float64_oracle(made[1])
    impl = resolve_callable(spec.impl, spec.path)
    baseline = resolve_callable(spec.baseline, spec.path) if spec.baseline else impl
    if isinstance(spec.oracle, dict):
        ref = oracle.oracle_from_spec(spec.oracle)
    else:
        ref = resolve_callable(spec.oracle, spec.path) if spec.oracle else oracle.float64_oracle(baseline)
    return impl, baseline, ref


def role_refs(spec: Any) -> tuple[tuple, tuple, tuple]:
    """(impl, baseline, oracle) of a spec as picklable references a worker process resolves
    (:data:`acceptance.isolation.worker.Ref`), with the defaults of :func:`resolve_roles`."""
    from acceptance.numerics import oracle

    path = str(spec.path)
    if _declared(spec):
        from acceptance.isolation import adapters

        decls = adapters.default_roles(spec.impl, spec.baseline, spec.oracle)
        refs = [
            adapters.ref_of(d, spec.path, role)
            if isinstance(d, dict) and "mpmath" not in d
            else ("mpmath", d["mpmath"], d.get("dps", oracle.DEFAULT_DPS))
            if isinstance(d, dict)
            else ("callable", d, path)
            if d is not None
            else None
            for role, d in zip(("impl", "baseline", "oracle"), decls, strict=False)
        ]
        return refs[0], refs[1], refs[2] if refs[2] is not None else ("float64", refs[1])
    impl = ("callable", spec.impl, path)
    baseline = ("callable", spec.baseline, path) if spec.baseline else impl
    if isinstance(spec.oracle, dict):
        ref = ("mpmath", spec.oracle["mpmath"], spec.oracle.get("dps", oracle.DEFAULT_DPS))
    else:
        ref = ("callable", spec.oracle, path) if spec.oracle else ("float64", baseline)
    return impl, baseline, ref
