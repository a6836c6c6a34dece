"""The extension points of a run, declared in one place: a new executor, reference source, observer or reporter is
one class that satisfies one of these Protocols (implementations need not import this module).

- :class:`Executor` measures cases: in this process, with one worker process, with N job processes, on a
  cluster (:mod:`acceptance.session.executors`). The case loop (:meth:`acceptance.session.Session.run`) is the
  same for all of them.
- :class:`CaseObserver` watches the case loop as pytest's ``logstart``/``logreport`` hooks watch a test run:
  progress, the journal, the sanitizer and the output-folder guard (:mod:`acceptance.session.observers`).
- :class:`ReferenceSource` gives the trial engine a trial's baseline and oracle outputs when they are known and
  keeps the ones it computes (:class:`acceptance.measure.references.CaseReferences`).
- :class:`Reporter` renders one output file from the results alone (:mod:`acceptance.report`).
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Sequence
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import torch

    from acceptance.records import MeasuredCase, Results
    from acceptance.spec import Case

    Tensors = tuple[torch.Tensor, ...]


class Executor(Protocol):
    """Measures cases (undecided results), wherever they run."""

    def measure(
        self, cases: Sequence[Case], started: Callable[[Case], None]
    ) -> Generator[tuple[Case, MeasuredCase], None, None]:
        """Each case with its measurement, as it finishes (any order); ``started(case)`` is called as a case
        begins where the case loop can see it. Closing the generator early stops what is in flight."""
        ...


class CaseObserver(Protocol):
    """Watches the case loop; may turn a measurement into an error (the sanitizer, the folder guard)."""

    def case_started(self, case: Case) -> None: ...

    def case_finished(self, case: Case, result: MeasuredCase) -> MeasuredCase: ...


class ReferenceSource(Protocol):
    """A case's baseline and oracle outputs per trial, cached or computed."""

    def get(self, role: str, trial: int) -> Tensors | None: ...

    def put(self, role: str, trial: int, tensors: Tensors) -> Tensors: ...

    def close(self) -> None: ...


class Reporter(Protocol):
    """One output file rendered from :class:`~acceptance.records.Results` alone."""

    name: str
    filename: str
    default: bool

    def render(self, results: Results, context: object) -> str: ...
