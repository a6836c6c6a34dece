"""The shape every reference to a role's callable has: a hashable, picklable record that resolves itself.

A spec names its callables as ``module:attr`` strings; the runner never imports them. What crosses to a worker
process is a *role reference*: a frozen record naming the callable and the wrappers around it (float64 copies,
an emulation, memory layouts, the timing loop, ...), which the worker turns into the callable with
:meth:`RoleRef.resolve`. Each concrete reference lives with its concern (:class:`acceptance.spec.callables.CallableRef`,
:class:`acceptance.numerics.oracle.Float64Ref`, :class:`acceptance.formats.layouts.LayoutRef`, ...); the
messages that carry them are :mod:`acceptance.isolation.protocol`. The protocol is declared here, at the earliest
stage that holds a concrete reference, so that every stage can name it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Protocol, runtime_checkable

#: What a reference is resolved through: the resolving process's own lookup of a (top-level) reference, e.g. a
#: worker's per-process cache, so that a reference may reach a callable resolved before (an adapter's setup).
Resolver = Callable[["RoleRef"], Callable]


@runtime_checkable
class RoleRef(Hashable, Protocol):
    """A hashable, frozen reference to a role's callable, resolved where the callable runs.

    ``resolve(cached)`` builds the callable; a reference that wraps another resolves the inner one itself
    (``inner.resolve(cached)``, fresh), and only a reference that must reach an object resolved earlier (the
    adapter a setup call prepares) goes through ``cached``.
    """

    def resolve(self, cached: Resolver) -> Callable: ...


def fresh(ref: RoleRef) -> Callable:
    """``ref`` resolved in this process without a cache (a :data:`Resolver` that resolves every time)."""
    return ref.resolve(fresh)
