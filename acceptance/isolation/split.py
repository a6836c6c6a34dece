"""The roles of a case in separate processes: the impl in a worker of its spec's own, baseline and oracle in a
reference worker that never imports an impl.

A kernel library installs itself by monkeypatching (``torch.nn.functional.silu = fast_silu`` at import), and a
callable can change process-wide state (``torch.set_flush_denormal(True)``, ``os.chdir``, the default dtype):
in one shared process the baseline would then run the impl's code, and one spec would change the next one's
verdict. So:

- :class:`RoleWorkers` sends a batch's impl calls to the impl's worker and its baseline, oracle (and their
  setup and fingerprint) calls to the reference worker, and reads the answers back in the batch's order; the two
  run side by side. The trial's inputs are made in the runner (from the case's recipe, or the cache), never in
  the impl's process, and each worker gets the set its calls take.
- :class:`RolePool` holds one reference worker (reused from spec to spec: it checks its own global state after
  its calls and is replaced when one changed it, see :class:`acceptance.isolation.serve.Pristine`) and one impl
  worker per spec, forked from the fork server (which imports torch and this package, never the code under
  test) when the spec's first case begins and ended once the next spec's case is measured: a spec's impl can
  leave nothing behind for another spec.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias

import torch

from acceptance.isolation.protocol import Call, RoleRef
from acceptance.isolation.worker import Batch, Worker

if TYPE_CHECKING:
    from acceptance.spec.inputs import Recipe

Tensors = tuple[torch.Tensor, ...]
InputSets: TypeAlias = "tuple[Tensors, ...] | Recipe"

#: The first word of the roles that run in the reference worker (a trial's call, a setup, a fingerprint).
REFERENCE_ROLES = frozenset({"baseline", "oracle"})


def is_reference(role: str) -> bool:
    """Whether a call of ``role`` ("baseline", "oracle setup", "baseline fingerprint", ...) runs in the reference
    worker; every other one ("impl", "impl setup", a timing probe) runs in the impl's."""
    return role.split(" ", 1)[0] in REFERENCE_ROLES


class RoleWorkers:
    """A case's executor (:class:`acceptance.measure.engine.Executes`): the impl's worker and the reference
    worker, each call routed by its role (:func:`is_reference`). Both share one list of notes."""

    concurrent = True

    def __init__(self, impl: Worker, reference: Worker):
        self.impl, self.reference = impl, reference
        self.notes: list[str] = reference.notes
        impl.notes = self.notes

    @property
    def memory_limit(self) -> int | None:
        return self.impl.memory_limit

    @property
    def threads(self) -> int | None:
        return self.reference.threads

    @property
    def in_flight(self) -> int:
        return max(self.impl.in_flight, self.reference.in_flight)

    def _for(self, role: str) -> Worker:
        return self.reference if is_reference(role) else self.impl

    def call(
        self,
        role: str,
        ref: RoleRef,
        trial: int,
        args: Tensors,
        params: dict,
        *,
        device: torch.device,
        timeout: float = math.inf,
        limit: float | None = None,
        names: list[str] | None = None,
    ) -> tuple[Tensors, float]:
        """One call in the worker of its role (:meth:`acceptance.isolation.worker.Worker.call`)."""
        return self._for(role).call(
            role, ref, trial, args, params, device=device, timeout=timeout, limit=limit, names=names
        )

    def submit(self, trial: int, sets: InputSets, calls: list[Call[RoleRef]]) -> SplitBatch:
        """A trial's calls (the impl's first, as the trial engine orders them), each sent to its worker; a recipe
        is made into the trial's input sets here."""
        if not isinstance(sets, tuple):
            from acceptance.spec.inputs import input_sets

            sets = input_sets(sets(trial))
        impl = [c for c in calls if not is_reference(c.role)]
        reference = [c for c in calls if is_reference(c.role)]
        assert calls == impl + reference, "a batch's impl calls come before its reference calls"
        # each worker gets one set, which every Which of its calls indexes (float64 copies are made from it)
        own, theirs = (sets[0],), (sets[-1],)
        return SplitBatch(self.impl.submit(trial, own, impl), self.reference.submit(trial, theirs, reference))


class SplitBatch:
    """The answers of a :meth:`RoleWorkers.submit`: the impl worker's, then the reference worker's, in order. An
    impl call that breaks gives the reference calls up too (their worker is replaced if it may still answer
    them: nothing else may be asked of it before)."""

    def __init__(self, impl: Batch, reference: Batch):
        self.impl, self.reference = impl, reference

    def next(
        self, *, timeout: float = math.inf, limit: float | None = None, names: list[str] | None = None
    ) -> tuple[Tensors, float]:
        if self.impl.done:
            return self.reference.next(timeout=timeout, limit=limit, names=names)
        try:
            return self.impl.next(timeout=timeout, limit=limit, names=names)
        except BaseException:
            self.reference.discard()
            raise

    def discard(self) -> None:
        self.impl.discard()
        self.reference.discard()


class RolePool:
    """The workers of one measuring process: a reference worker and an impl worker per spec (see the module
    docstring). ``threads`` and ``guard`` as :class:`acceptance.isolation.worker.Worker` takes them."""

    def __init__(self, threads: int | None = None, guard: Path | None = None):
        self.threads, self.guard = threads, guard
        self.reference: Worker | None = None
        self.views: dict[str, RoleWorkers] = {}  # spec -> its workers (the spec measured now, and one begun ahead)
        #: work for this process while an answer is not ready (given to every worker started)
        self.idle: Callable[[], bool] | None = None

    def _worker(self, limit: int | None, reference: bool) -> Worker:
        worker = Worker(memory_limit=limit, threads=self.threads, guard=self.guard, reference=reference)
        worker.idle = self.idle
        return worker

    def fits(self, limit: int | None) -> bool:
        """Whether the reference worker running now has memory limit ``limit`` (a case may be begun ahead)."""
        return self.reference is not None and self.reference.memory_limit == limit

    def workers(self, spec: str, limit: int | None) -> RoleWorkers:
        """The workers of spec ``spec`` whose worker processes may map ``limit`` bytes beyond their start: its
        impl worker (started now for a spec not seen last) and the reference worker (replaced, and every impl
        worker with it, when its limit is another)."""
        if self.reference is not None and self.reference.memory_limit != limit:
            self.finish()
        if self.reference is None:
            self.reference = self._worker(limit, reference=True)
        found = self.views.get(spec)
        if found is not None and found.impl.memory_limit != limit:
            found.impl.close()
            found = None
        if found is None:
            found = self.views[spec] = RoleWorkers(self._worker(limit, reference=False), self.reference)
        return found

    def retire(self, keep: RoleWorkers) -> None:
        """End the impl workers of every spec but ``keep``'s (their cases are measured: nothing is in flight)."""
        for spec, view in list(self.views.items()):
            if view is not keep:
                view.impl.close()
                del self.views[spec]

    def finish(self) -> None:
        """Done with every worker: each given its time to end as done (:meth:`Worker.finish`)."""
        for view in self.views.values():
            view.impl.finish()
        if self.reference is not None:
            self.reference.finish()
        self.views, self.reference = {}, None

    def close(self) -> None:
        """Kill every worker now."""
        for view in self.views.values():
            view.impl.close()
        if self.reference is not None:
            self.reference.close()
        self.views, self.reference = {}, None
