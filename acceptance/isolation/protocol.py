"""The typed protocol between the runner and a worker process: what a batch asks, what each call answers.

The runner sends one :class:`Request` per trial (:meth:`acceptance.isolation.worker.Worker.submit`): the inputs
(or the :class:`Generate` recipe the worker makes them from) and the :class:`Call` s to make on them, in order.
The worker answers each call with one message, as it finishes: :class:`Answered` (the outputs, or
:data:`SAME` when they are bit for bit the role's previous answer in the batch), :class:`Broke` (the call raised,
returned something that is not tensors, left child processes, ...), :class:`Wrote` (it wrote to the run's
output folder) or, before any call, :class:`InputsFailed` (the inputs could not be made). Every answer carries
``sent_at``, the worker's ``CLOCK_MONOTONIC`` when it was sent: the next call's deadline runs from then.

A call names its callable by a :class:`~acceptance.formats.roleref.RoleRef` (re-exported here), a frozen record
the worker resolves once per process; :class:`ObjectRef` sends a picklable callable itself. Messages are
frozen dataclasses pickled by :mod:`acceptance.isolation.transport`.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, TypeVar

import torch

from acceptance.formats.roleref import Resolver, RoleRef, fresh

if TYPE_CHECKING:
    from acceptance.spec.inputs import Recipe

Tensors = tuple[torch.Tensor, ...]

__all__ = [
    "SAME",
    "Answer",
    "Answered",
    "Broke",
    "Call",
    "Generate",
    "InputsFailed",
    "ObjectRef",
    "Request",
    "Resolver",
    "RoleRef",
    "Same",
    "Which",
    "Wrote",
    "fresh",
]


class Which(enum.IntEnum):
    """Which inputs a :class:`Call` takes: the impl's, the reference's (the baseline's), or float64 copies of the
    reference's made for that call (:func:`acceptance.numerics.oracle.float64_inputs`)."""

    IMPL = 0
    REFERENCE = 1
    FLOAT64 = 2


@dataclass(frozen=True)
class ObjectRef:
    """A picklable callable sent as it is (a probe of the runner's own); a worker caches it by identity."""

    fn: Callable

    def resolve(self, cached: Resolver) -> Callable:
        return self.fn


#: What a :class:`Call` names its callable by: a :class:`RoleRef` for a worker, the callable itself in this process.
R = TypeVar("R")


@dataclass(frozen=True)
class Call(Generic[R]):
    """One call of a batch: ``role`` (for messages), the callable's reference (a :class:`RoleRef` for a worker;
    the callable itself for :class:`acceptance.measure.engine.InProcess`), which inputs, keyword parameters and
    the device it runs on."""

    role: str
    ref: R
    inputs: Which
    params: dict
    device: torch.device


@dataclass(frozen=True)
class Generate:
    """A batch's inputs as the worker makes them: ``recipe(trial)`` (:class:`acceptance.spec.inputs.Recipe`);
    ``recipe`` is ``None`` when the worker holds it from the previous batch."""

    recipe: Recipe | None
    trial: int


@dataclass(frozen=True)
class Request:
    """One batch: its input sets ((impl's,) or (impl's, reference)) or the :class:`Generate` that makes them in
    the worker, and the calls to make on them in order."""

    sets: tuple[Tensors, ...] | Generate
    calls: tuple[Call[RoleRef], ...]


class Same(enum.Enum):
    """The outputs of an :class:`Answered` that are, bit for bit, those of the batch's previous answer of the same
    role (a repeat on the same inputs): the runner uses the outputs it already received."""

    PREVIOUS = "same"


#: An answer's outputs when they repeat the role's previous answer in the batch (see :class:`Same`).
SAME = Same.PREVIOUS


@dataclass(frozen=True)
class Answered:
    """A call that returned tensors: its outputs on the CPU (or :data:`SAME`), ``(i, input i as it is now)`` for
    the inputs it changed, seconds inside the call, the warnings its callable collected (adapters)."""

    outputs: Tensors | Same
    changed: tuple[tuple[int, torch.Tensor], ...]
    seconds: float
    notes: tuple[str, ...]
    sent_at: float = 0.0


@dataclass(frozen=True)
class Broke:
    """A call that broke: ``cause`` completes "<role> ... in trial t" (e.g. "raised ValueError: ... (k.py:3)").
    ``restart``: the worker's process is no longer fit to compute anything (a reference worker whose global
    state changed): the runner replaces it."""

    cause: str
    sent_at: float = 0.0
    ended: bool = False
    """The worker must not take another call (the code under test left threads running in it): the runner
    ends it."""
    restart: bool = False
    """The worker's global state changed (a reference worker no longer pristine): the runner replaces it."""


@dataclass(frozen=True)
class Wrote:
    """A call that wrote to the run's output folder: the files, comma-separated (they were removed)."""

    files: str
    sent_at: float = 0.0


@dataclass(frozen=True)
class InputsFailed:
    """A batch whose inputs the worker could not make from its recipe: the exception, as ``Type: message``."""

    cause: str
    sent_at: float = 0.0


#: What a worker sends back for one call of a batch.
Answer = Answered | Broke | Wrote | InputsFailed
