"""The process-wide state a callable can change behind the next one's back, captured and compared.

A reference worker (the one that runs baselines and oracles, never an impl) captures :func:`capture` once, as
it starts, and compares it after every call (:func:`changes`): a callable that changed it (a baseline whose module
patches ``torch.nn.functional.gelu`` at import, calls ``torch.set_flush_denormal(True)`` or ``os.chdir``) gets
its call answered as broken, and the worker is replaced before it computes another reference. An impl worker is
not checked: it is fresh for every spec and computes nothing but the impl's outputs.

What is compared (each a line of :func:`changes` when it differs):

- torch: the default dtype, the intra-op thread count, flush-to-zero of subnormals (probed: ``1e-40 * 1`` in
  float32 is 0 with denormals flushed, as ``torch`` offers no getter), float32 matmul precision, deterministic
  algorithms, and every ``torch.backends`` flag of :data:`BACKEND_FLAGS`;
- NumPy's floating-point error handling (``numpy.geterr()``);
- the working directory, the environment and ``sys.path``;
- the callables, classes and modules bound in the namespaces of :data:`MODULES` (``torch``,
  ``torch.nn.functional``, ``numpy``, ...), of ``torch.Tensor`` (a method set on the class counts, as it hides
  the one it inherits), and of every ``acceptance`` module loaded at capture time: by identity, so that
  ``torch.nn.functional.silu = fast_silu`` is seen; a name added to a module (a lazily imported submodule) is
  not a change.

The global random generators are not compared: a reference worker sets them back to their captured state before
every batch (:func:`reseed`), so no call sees another spec's draws.
"""

from __future__ import annotations

import operator
import os
import sys
import types
from typing import cast

import numpy as np
import torch

#: Modules whose bound callables, classes and submodules are compared by identity.
MODULES = (
    "torch",
    "torch.nn.functional",
    "torch.linalg",
    "torch.special",
    "torch.fft",
    "torch.nn.init",
    "numpy",
    "numpy.linalg",
    "numpy.fft",
    "math",
)

#: Classes whose own namespace is compared as a whole (a name added there hides an inherited method).
CLASSES = (torch.Tensor, torch.nn.Module)

#: (module, attribute) of the ``torch.backends`` switches compared.
BACKEND_FLAGS = (
    ("torch.backends.cudnn", "enabled"),
    ("torch.backends.cudnn", "benchmark"),
    ("torch.backends.cudnn", "deterministic"),
    ("torch.backends.cudnn", "allow_tf32"),
    ("torch.backends.cuda.matmul", "allow_tf32"),
    ("torch.backends.cuda.matmul", "allow_fp16_reduced_precision_reduction"),
    ("torch.backends.cuda.matmul", "allow_bf16_reduced_precision_reduction"),
    ("torch.backends.mkldnn", "enabled"),
)


def _flushes_denormals() -> bool:
    """Whether float32 subnormals are flushed to zero now: ``1e-40 * 1`` (a subnormal) computes as 0."""
    tiny = torch.tensor([1e-40], dtype=torch.float32)
    return bool((tiny * 1.0).item() == 0.0)


def _flag(path: str, name: str) -> str:
    """``repr`` of the switch ``name`` of the ``torch.backends`` namespace ``path`` (a dotted path under torch)."""
    try:
        found: object = torch
        for part in path.split(".")[1:]:
            found = getattr(found, part)
        return repr(getattr(found, name))
    except Exception as exc:  # a backend that is not built in answers with an error: that is its state
        return f"<{type(exc).__name__}>"


class _Names:
    """The identities of some names of one namespace, compared in one C-level pass (``operator.itemgetter``)."""

    def __init__(self, namespace: dict[str, object], names: list[str], whole: bool):
        self.namespace, self.names, self.whole = namespace, names, whole
        self._get = operator.itemgetter(*names) if names else None
        self.ids = self._ids()
        self.size = len(namespace)
        self.keep = [namespace[k] for k in names]  # alive: an id compared is never reused by a new object

    def _ids(self) -> tuple[int, ...] | None:
        if self._get is None:
            return ()
        try:
            found = self._get(self.namespace)
        except KeyError:  # a name was deleted
            return None
        return tuple(map(id, found if len(self.names) > 1 else (found,)))

    def changed(self) -> list[str]:
        """The names bound to another object now, or deleted (with ``whole``, also those added); sorted."""
        if self._ids() == self.ids and (not self.whole or len(self.namespace) == self.size):
            return []
        ns = self.namespace
        found = {k for k, v in zip(self.names, self.keep, strict=True) if ns.get(k, _GONE) is not v}
        if self.whole:
            found |= set(ns) - set(self.names)
        return sorted(found)


_GONE = object()


def _bound(namespace: dict[str, object]) -> list[str]:
    """The names of the callables, classes and modules of a module's namespace."""
    return [
        k
        for k, v in list(namespace.items())
        if callable(v) or isinstance(v, (type, types.ModuleType, staticmethod, classmethod, property))
    ]


class Snapshot:
    """The state :func:`capture` saw (compare it with now with :func:`changes`)."""

    def __init__(self) -> None:
        self.scalars = _scalars()
        self.environ = dict(os.environ)
        self.path = list(sys.path)
        names = [m for m in MODULES if m in sys.modules] + sorted(
            m for m in list(sys.modules) if m == "acceptance" or m.startswith("acceptance.")
        )
        self.spaces: dict[str, _Names] = {}
        for m in names:
            module = sys.modules.get(m)
            if module is not None:
                self.spaces[m] = _Names(vars(module), _bound(vars(module)), whole=False)
        for c in CLASSES:
            ns = cast(dict[str, object], c.__dict__)  # a mappingproxy: read like a dict
            self.spaces[f"{c.__module__}.{c.__qualname__}"] = _Names(ns, list(ns), whole=True)


def _scalars() -> dict[str, str]:
    try:
        cwd = os.getcwd()
    except OSError as exc:  # the folder was removed
        cwd = f"<{exc}>"
    found = {
        "torch default dtype": repr(torch.get_default_dtype()),
        "torch intra-op threads": repr(torch.get_num_threads()),
        "torch flush-denormal": repr(_flushes_denormals()),
        "torch float32 matmul precision": torch.get_float32_matmul_precision(),
        "torch deterministic algorithms": repr(torch.are_deterministic_algorithms_enabled()),
        "torch grad mode": repr(torch.is_grad_enabled()),
        "numpy error handling": repr(sorted(np.geterr().items())),
        "working directory": cwd,
    }
    found.update({f"{module}.{name}": _flag(module, name) for module, name in BACKEND_FLAGS})
    return found


def capture() -> Snapshot:
    """The state now (see the module docstring)."""
    return Snapshot()


def changes(before: Snapshot) -> list[str]:
    """What differs now from ``before``, one short phrase each (empty: nothing); at most three names per kind."""
    now = _scalars()
    found = [f"{k} {v} -> {now[k]}" for k, v in before.scalars.items() if now[k] != v]
    if os.environ != before.environ:
        env = {k for k in set(before.environ) | set(os.environ) if before.environ.get(k) != os.environ.get(k)}
        found.append(f"environment variable(s) {', '.join(sorted(env)[:3])}")
    if sys.path != before.path:
        found.append("sys.path")
    for where, names in before.spaces.items():
        replaced = names.changed()
        if replaced:
            found.append(f"{where}.{', '.join(replaced[:3])} replaced")
    return found


#: The global random states a reference worker starts every batch from (:func:`reseed`), set by :func:`remember`.
_RANDOM: tuple[torch.Tensor, object] | None = None


def remember() -> None:
    """Keep the global random states of torch and NumPy as they are now, for :func:`reseed`."""
    global _RANDOM
    _RANDOM = (torch.random.get_rng_state(), np.random.get_state())


def reseed() -> None:
    """Set torch's and NumPy's global random states back to those :func:`remember` kept."""
    if _RANDOM is not None:
        torch.random.set_rng_state(_RANDOM[0])
        np.random.set_state(_RANDOM[1])  # type: ignore[arg-type]  # the state get_state gave
