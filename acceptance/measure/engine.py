"""The trial engine: inputs → impl on the device | baseline on CPU | oracle in float64, trial after trial.

The one trial loop of the package, shared by the spec runner and the library
call :func:`acceptance.dual_delta`. Per trial ``t``:

1. ``inputs = make_inputs(t)``: CPU tensors in the test dtype (a
   :class:`acceptance.spec.inputs.RoleInputs` pair when the impl gets other tensors
   than the baseline, e.g. quantized blocks), made by the executor when
   ``make_inputs`` is a picklable :class:`acceptance.spec.inputs.Recipe` (a single worker makes them itself;
   :class:`acceptance.isolation.split.RoleWorkers` makes them in the runner, never in the impl's process);
2. impl on copies of the inputs on the impl's device (``repeats`` more runs
   on the same inputs where run-to-run spread is measured);
3. baseline on the CPU inputs;
4. oracle on CPU float64 copies (integer tensors unchanged), when asked;
5. the outputs are checked: tensors, as many as the baseline's, of the
   baseline's shapes, impl in the baseline's dtype, the oracle in its shapes.

Anything wrong raises :class:`~acceptance.errors.CaseError` naming the role
and the trial. :func:`against_oracle` measures one output of one trial against
the oracle: err(impl, oracle), err(baseline, oracle) and free =
err(round(oracle), oracle), the error of the correctly rounded result.
"""

from __future__ import annotations

import contextlib
import math
import signal
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import torch

from acceptance.device import synchronize
from acceptance.errors import CaseError
from acceptance.formats import dtypes
from acceptance.isolation import adapters
from acceptance.isolation.serve import same_outputs
from acceptance.isolation.worker import FLOAT64, IMPL, REFERENCE, Call, call_inputs
from acceptance.numerics import metrics
from acceptance.numerics.oracle import float64_inputs
from acceptance.records import Timing
from acceptance.spec.inputs import Recipe, RoleInputs, input_sets

if TYPE_CHECKING:
    from acceptance.protocols import ReferenceSource

Tensors = tuple[torch.Tensor, ...]

#: One trial's inputs as made (:func:`acceptance.spec.inputs.generate`): the tensors, or a :class:`RoleInputs` pair.
Made = list[torch.Tensor] | RoleInputs

#: What an executor's batch runs on: the trial's input sets ((impl's,) or (impl's, reference)), or the case's
#: :class:`acceptance.spec.inputs.Recipe` for a worker to make them.
InputSets = tuple[Tensors, ...] | Recipe

#: A role as an executor takes it: the callable itself (:class:`InProcess`) or a reference a worker resolves
#: (:class:`acceptance.formats.roleref.RoleRef`). The case's :class:`Roles` and its executor are chosen together.
RoleArg = Any  # a seam: a callable for InProcess, a RoleRef for a Worker


class Answers(Protocol):
    """A batch of calls sent together, answered in order (:class:`acceptance.isolation.worker.Batch`)."""

    def next(
        self, *, timeout: float = ..., limit: float | None = ..., names: list[str] | None = ...
    ) -> tuple[Tensors, float]: ...


class Executes(Protocol):
    """Runs a case's roles: :class:`InProcess`, or a :class:`acceptance.isolation.worker.Worker`."""

    def call(
        self,
        role: str,
        fn: RoleArg,
        trial: int,
        args: Tensors,
        params: dict,
        *,
        device: torch.device,
        timeout: float = ...,
        limit: float | None = ...,
        names: list[str] | None = ...,
    ) -> tuple[Tensors, float]: ...

    def submit(self, trial: int, sets: InputSets, calls: list[Call[RoleArg]]) -> Answers: ...


#: How :class:`Roles` names each callable: a role reference for a worker, the callable itself in this process.
R = TypeVar("R")

#: Where a case's baseline and oracle outputs are kept (:class:`acceptance.protocols.ReferenceSource`).
S = TypeVar("S", bound="ReferenceSource")


@dataclass(frozen=True)
class Roles(Generic[R]):
    """The three callables of a case, each ``fn(*tensors, **params) -> Tensor | tuple[Tensor, ...]``: the
    callables themselves (:class:`InProcess`) or references a worker resolves
    (:class:`acceptance.formats.roleref.RoleRef`)."""

    impl: R
    baseline: R
    oracle: R


@dataclass(frozen=True)
class Trial:
    """One trial's tensors: the inputs (CPU, test dtype; the baseline's where the roles' differ; empty when a
    worker made them from the case's :class:`acceptance.spec.inputs.Recipe`) and each
    role's outputs.

    ``impl`` is on the impl's device; ``baseline`` on the CPU; ``oracle`` CPU
    float64, or ``None`` when it did not run; ``repeats`` holds further impl
    runs on the same inputs.
    """

    index: int
    inputs: Tensors
    impl: Tensors
    baseline: Tensors
    oracle: Tensors | None
    repeats: tuple[Tensors, ...] = ()
    baseline_repeats: tuple[Tensors, ...] = ()


@contextlib.contextmanager
def _deadline(seconds: float, role: str, trial: int):
    """Raise :class:`CaseError` in the main thread after ``seconds`` (SIGALRM; a no-op elsewhere)."""
    if seconds <= 0:
        raise CaseError(f"{role} exceeded its timeout in trial {trial}")
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable or math.isinf(seconds):
        yield
        return

    def _alarm(signum, frame):
        raise CaseError(f"{role} exceeded its timeout in trial {trial}")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _outputs(value: object, role: str, trial: int) -> Tensors:
    outs = value if isinstance(value, (tuple, list)) else (value,)
    if not outs:
        raise CaseError(f"{role} returned no output in trial {trial}")
    for i, out in enumerate(outs):
        if not isinstance(out, torch.Tensor):
            raise CaseError(f"{role} returned {type(out).__name__} at output {i} in trial {trial}, expected a Tensor")
    return tuple(outs)


def call(fn: Callable, role: str, trial: int, tensors: Tensors, params: dict) -> Tensors:
    """``fn(*tensors, **params)`` as a tuple of tensors; any exception becomes a :class:`CaseError`
    naming the role, the exception, where it was raised and the trial."""
    try:
        value = fn(*tensors, **params)
    except CaseError:
        raise
    except Exception as exc:  # the callable under test may raise anything
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise CaseError(
            f"{role} raised {type(exc).__name__}: {exc} ({Path(frame.filename).name}:{frame.lineno}) in trial {trial}"
        ) from None
    return _outputs(value, role, trial)


class InProcess:
    """Calls the roles in this process: the library API's executor (no isolation; a SIGALRM deadline in the
    main thread, which native code can ignore). ``notes``: warnings the callables reported, call after call."""

    def __init__(self) -> None:
        self.notes: list[str] = []

    def call(
        self,
        role: str,
        fn: Callable,
        trial: int,
        args: Tensors,
        params: dict,
        *,
        device: torch.device,
        timeout: float = math.inf,
        limit: float | None = None,
        names: list[str] | None = None,
    ) -> tuple[Tensors, float]:
        """(outputs, seconds inside the call)."""
        args = tuple(a.to(device) for a in args)
        synchronize(device)
        started = time.perf_counter()
        with _deadline(timeout, role, trial):
            out = call(fn, role, trial, args, params)
            synchronize(device)
        self.notes += adapters.take_notes(fn)
        return out, time.perf_counter() - started

    def submit(self, trial: int, sets: InputSets, calls: list[Call[Callable]]) -> _Deferred:
        """The calls of one trial, made one by one as their answers are read (see
        :class:`acceptance.isolation.worker.Batch`)."""
        assert not isinstance(sets, Recipe)  # never a recipe: this executor is not concurrent, the engine makes inputs
        return _Deferred(self, trial, sets, calls)

    def close(self) -> None:
        pass


class _Deferred:
    """:class:`acceptance.isolation.worker.Batch` for an executor that calls in this process: each call is made when its
    answer is read."""

    def __init__(self, executor: InProcess, trial: int, sets: tuple[Tensors, ...], calls: list[Call[Callable]]):
        self.executor, self.trial, self.sets, self.calls, self._read = executor, trial, sets, calls, 0

    def next(
        self, *, timeout: float = math.inf, limit: float | None = None, names: list[str] | None = None
    ) -> tuple[Tensors, float]:
        call = self.calls[self._read]
        self._read += 1
        return self.executor.call(
            call.role,
            call.ref,
            self.trial,
            call_inputs(self.sets, call.inputs),
            call.params,
            device=call.device,
            timeout=timeout,
            limit=limit,
            names=names,
        )


def _check(trial: int, impl: Tensors, base: Tensors, oracle: Tensors | None) -> None:
    if len(impl) != len(base):
        raise CaseError(f"impl returned {len(impl)} outputs, the baseline {len(base)} (trial {trial})")
    for i, (e, b) in enumerate(zip(impl, base, strict=False)):
        if tuple(e.shape) != tuple(b.shape):
            raise CaseError(
                f"impl output {i} has shape {tuple(e.shape)}, the baseline {tuple(b.shape)} (trial {trial})"
            )
        if e.dtype != b.dtype:
            raise CaseError(f"impl output {i} has dtype {e.dtype}, the baseline {b.dtype} (trial {trial})")
    if oracle is None:
        return
    if len(oracle) != len(base):
        raise CaseError(f"oracle returned {len(oracle)} outputs, the baseline {len(base)} (trial {trial})")
    for i, (o, b) in enumerate(zip(oracle, base, strict=False)):
        if tuple(o.shape) != tuple(b.shape):
            raise CaseError(
                f"oracle output {i} has shape {tuple(o.shape)}, the baseline {tuple(b.shape)} (trial {trial})"
            )


#: Largest trial (input and output bytes) whose next trial is sent to the worker before it is measured, so
#: that the worker computes trial t+1 while the runner measures trial t; larger trials go one at a time, so
#: that two trials' tensors are never held at once.
AHEAD_BYTES = 64 * 2**20

#: Most trials in flight at once when the worker makes the inputs: it runs that far ahead of the measuring,
#: so a run of quick trials measured slowly and a run of slow trials measured quickly even out. Each trial's
#: answers wait in the connection's buffer (the worker holds one trial at a time), so the window costs the
#: runner no memory; it shrinks so that the trials in flight stay within :data:`AHEAD_BYTES`.
WINDOW = 8

#: Largest inputs of one trial (bytes, 8 per element whatever the dtype) for which a case sent ahead (its
#: trials sent while the case before it is measured) starts with :data:`WINDOW` trials instead of one: the
#: worker then answers them back to back while the runner finishes the case before, instead of idling after
#: the first. A larger case starts with one; its first trial's size sets its window.
START_BYTES = 1 << 20


@dataclass
class _Planned:
    """A trial sent to the executor: its reference inputs (empty when the worker makes them), the cached
    references and the batch of calls."""

    index: int
    reference: Tensors
    batch: Answers
    cached_base: Tensors | None
    cached_oracle: Tensors | None
    sets: InputSets = ()


class TrialRun(Generic[S]):
    """The trials of one case, iterated in order (see :func:`run_trials`).

    :meth:`start` sends the first trial's calls before iteration begins (e.g. while the caller is still
    measuring another case on the same worker); ``then``, when set, is called once, as soon as the last
    trial's calls have been sent. Leaving the iteration early (an error, a ``break``) gives up the trials
    still in flight (:meth:`acceptance.isolation.worker.Batch.discard`).
    """

    def __init__(
        self,
        roles: Roles,
        make_inputs: Callable[[int], Made],
        trials: int,
        *,
        device: torch.device,
        params: dict,
        oracle: bool,
        repeats: int,
        timeout: float,
        baseline_timeout: float,
        oracle_timeout: float,
        timing: Timing,
        executor: Executes,
        names: list[str] | None,
        baseline_repeats: int,
        role_params: dict[str, dict],
        references: S | None,
        extendable: bool = False,
    ):
        self.roles, self.make_inputs, self.trials, self.device, self.oracle = roles, make_inputs, trials, device, oracle
        self.repeats, self.baseline_repeats, self.names, self.references = repeats, baseline_repeats, names, references
        self.timeout, self.baseline_timeout, self.oracle_timeout = timeout, baseline_timeout, oracle_timeout
        self.timing, self.executor = timing, executor
        self.kwargs = {role: {**params, **role_params.get(role, {})} for role in ("impl", "baseline", "oracle")}
        self.ahead = getattr(executor, "concurrent", False)
        self.remote = self.ahead and isinstance(make_inputs, Recipe)
        self.then: Callable[[], None] | None = None
        self._planned: deque[_Planned] = deque()
        self._sent = 0  # trials submitted so far
        # more impl runs may be asked for a trial once it is read (:meth:`more`): nothing may be in flight then
        self.extendable = extendable
        self._last: _Planned | None = None  # the trial read last (its inputs, for :meth:`more`)

    def _base_runs(self, t: int) -> int:  # the baseline's run-to-run check: more runs on the first trial's inputs
        return 1 + (self.baseline_repeats if t == 0 else 0)

    def _submit(self) -> None:
        t = self._sent
        roles, references, cpu = self.roles, self.references, torch.device("cpu")
        reference: Tensors = ()
        if self.remote and isinstance(self.make_inputs, Recipe) and not (t == 0 and needs_setup(roles, self.oracle)):
            sets: InputSets = self.make_inputs  # the worker makes the inputs (remote: a recipe)
        else:
            sets = input_sets(self.make_inputs(t))
            reference = sets[-1]
            if t == 0:
                _setup(
                    roles,
                    sets[0],
                    reference,
                    self.executor,
                    self.kwargs,
                    self.device,
                    self.timing,
                    self.oracle,
                    self.names,
                )
        cached_base = references.get("baseline", t) if references is not None else None
        cached_oracle = references.get("oracle", t) if references is not None and self.oracle else None
        calls = [Call("impl", roles.impl, IMPL, self.kwargs["impl"], self.device)] * (1 + self.repeats)
        if cached_base is None:
            calls += [Call("baseline", roles.baseline, REFERENCE, self.kwargs["baseline"], cpu)] * self._base_runs(t)
        if self.oracle and cached_oracle is None:
            calls.append(Call("oracle", roles.oracle, FLOAT64, self.kwargs["oracle"], cpu))
        batch = self.executor.submit(t, sets, calls)
        self._planned.append(_Planned(t, reference, batch, cached_base, cached_oracle, sets if self.extendable else ()))
        self._sent += 1
        if self.sent_all and self.then is not None and not self.extendable:
            then, self.then = self.then, None
            then()

    @property
    def sent_all(self) -> bool:
        """Whether every trial's calls have been sent."""
        return self._sent >= self.trials

    def after_sent(self, then: Callable[[], None]) -> None:
        """Call ``then`` once every trial's calls have been sent: now when they have, else from the submit of
        the last (for an :attr:`extendable` run: once its last trial has been read and extended)."""
        if self.sent_all and not self.extendable:
            then()
        else:
            self.then = then

    def start(self) -> None:
        """Send the first trials' calls now (nothing when some are already sent): :data:`WINDOW` of them when
        the worker makes the inputs and they are small (:data:`START_BYTES`), else one."""
        if self._sent:
            return
        recipe = self.make_inputs if self.remote and isinstance(self.make_inputs, Recipe) else None
        small = recipe is not None and 8 * sum(math.prod(s) for s in recipe.case.shapes) <= START_BYTES
        for _ in range(min(self.trials, WINDOW if small and not self.extendable else 1)):
            self._submit()

    def _collect(self, plan: _Planned) -> Trial:
        t, batch, references, timing = plan.index, plan.batch, self.references, self.timing
        runs = []
        for _ in range(1 + self.repeats):
            out, seconds = batch.next(timeout=self.timeout - timing.impl, limit=self.timeout, names=self.names)
            runs.append(out)
            timing.impl += seconds
        bases = [plan.cached_base] * self._base_runs(t) if plan.cached_base is not None else []
        while len(bases) < self._base_runs(t):
            base, seconds = batch.next(timeout=self.baseline_timeout, limit=self.baseline_timeout, names=self.names)
            bases.append(base)
            timing.baseline += seconds
        if plan.cached_base is None and references is not None and all(same_outputs(bases[0], b) for b in bases[1:]):
            bases[0] = references.put("baseline", t, bases[0])  # a varying baseline is an error, never stored
        ref = plan.cached_oracle
        if self.oracle and ref is None:
            out, seconds = batch.next(timeout=self.oracle_timeout, limit=self.oracle_timeout, names=self.names)
            ref = tuple(o.to(torch.float64) if o.is_floating_point() else o for o in out)
            timing.oracle += seconds
            ref = references.put("oracle", t, ref) if references is not None else ref
        _check(t, runs[0], bases[0], ref)
        self._last = plan if self.extendable else None
        return Trial(t, plan.reference, runs[0], bases[0], ref, tuple(runs[1:]), tuple(bases[1:]))

    def more(self, trial: Trial, runs: int) -> tuple[Tensors, ...]:
        """``runs`` more impl runs on the inputs of ``trial``, the trial read last of an :attr:`extendable` run
        (no other trial is in flight then), each checked against the trial's baseline like the first."""
        plan = self._last
        assert self.extendable and plan is not None and plan.index == trial.index and not self._planned
        call = Call("impl", self.roles.impl, IMPL, self.kwargs["impl"], self.device)
        batch = self.executor.submit(trial.index, plan.sets, [call] * runs)
        out = []
        for _ in range(runs):
            got, seconds = batch.next(timeout=self.timeout - self.timing.impl, limit=self.timeout, names=self.names)
            self.timing.impl += seconds
            _check(trial.index, got, trial.baseline, None)
            out.append(got)
        return tuple(out)

    def _window(self, trial: Trial) -> int:
        """Trials to keep in flight after ``trial`` (see :data:`WINDOW`, :data:`AHEAD_BYTES`); none in an
        :attr:`extendable` run, whose trial may take more runs once read."""
        if not self.ahead or self.extendable:
            return 0
        # the runner holds the inputs of each trial it makes: one ahead at most unless the worker makes them
        return min(WINDOW if self.remote else 1, AHEAD_BYTES // max(_nbytes(trial), 1))

    def __iter__(self) -> Iterator[Trial]:
        trials = self.trials
        try:
            for _t in range(trials):
                if not self._planned:
                    self._submit()
                trial = self._collect(self._planned.popleft())
                window = self._window(trial)
                while self._sent < trials and len(self._planned) < window:
                    self._submit()
                yield trial
            if self.then is not None:  # an extendable run sends the next case's trials once its own are read
                then, self.then = self.then, None
                then()
        finally:
            while self._planned:  # given up: an error, or the caller stopped early
                batch = self._planned.popleft().batch
                getattr(batch, "discard", lambda: None)()
            getattr(self.references, "close", lambda: None)()  # what was computed is kept, however it ended


def run_trials(
    roles: Roles,
    make_inputs: Callable[[int], Made],
    trials: int,
    *,
    device: torch.device,
    params: dict,
    oracle: bool,
    repeats: int = 0,
    timeout: float = math.inf,
    baseline_timeout: float = math.inf,
    oracle_timeout: float = math.inf,
    timing: Timing | None = None,
    executor: Executes | None = None,
    names: list[str] | None = None,
    baseline_repeats: int = 0,
    role_params: dict[str, dict] | None = None,
    references: S | None = None,
    extendable: bool = False,
) -> TrialRun[S]:
    """The ``trials`` trials of a case, each one's tensors in turn when iterated (see the module docstring).

    ``executor`` calls the roles (:class:`InProcess`, the default, or a
    :class:`acceptance.isolation.worker.Worker`, for which ``roles`` holds references);
    ``timeout`` is the impl's budget in seconds over all its calls of the case,
    ``baseline_timeout`` and ``oracle_timeout`` bound each of their calls;
    ``timing`` collects seconds per role; ``names`` are the inputs' names;
    ``baseline_repeats`` more baseline runs on the first trial's inputs (its run-to-run check; the
    reference is trusted, so one trial shows a varying one).
    ``role_params`` maps a role to keyword arguments merged over ``params`` for it. Roles declared as mappings
    (:mod:`acceptance.isolation.adapters`) are set up on trial 0's inputs before it, each under its own timeout,
    in ``timing.setup``.
    ``references`` (e.g. :class:`acceptance.measure.references.CaseReferences`) may hold the baseline and oracle
    outputs of a trial: ``get(role, trial)`` gives them (or ``None``: the role runs),
    ``put(role, trial, outputs)`` stores fresh ones and returns what the trial then uses, and ``close()``
    (when it has one) is called once the trials end.
    ``extendable``: the caller may ask for more impl runs of the trial it has just read (:meth:`TrialRun.more`,
    the sequential reruns of :mod:`acceptance.measure.determinism`); no later trial is then sent before it.

    A trial's calls go to the executor together (:meth:`acceptance.isolation.worker.Worker.submit`). With a worker,
    later trials are sent before a trial is yielded, so the callables run while the caller measures: up to
    :data:`WINDOW` trials when the worker makes the inputs, one otherwise, within :data:`AHEAD_BYTES`.
    Every trial's inputs and results are the same either way.
    """
    return TrialRun(
        roles,
        make_inputs,
        trials,
        device=device,
        params=params,
        oracle=oracle,
        repeats=repeats,
        timeout=timeout,
        baseline_timeout=baseline_timeout,
        oracle_timeout=oracle_timeout,
        timing=timing if timing is not None else Timing(),
        executor=executor if executor is not None else InProcess(),
        names=names,
        baseline_repeats=baseline_repeats,
        role_params=role_params or {},
        references=references,
        extendable=extendable,
    )


def needs_setup(roles: Roles, oracle: bool) -> bool:
    """Whether a role is set up on trial 0's inputs before it (they are then made here)."""
    return any(
        adapters.setup_of(fn) is not None for fn in (roles.impl, roles.baseline, roles.oracle if oracle else None)
    )


def _nbytes(trial: Trial) -> int:
    """Bytes of a trial's inputs and outputs."""
    tensors = [*trial.inputs, *trial.impl, *trial.baseline, *(trial.oracle or ())]
    return sum(x.numel() * x.element_size() for x in tensors if isinstance(x, torch.Tensor))


def _setup(
    roles: Roles,
    inputs: Tensors,
    reference: Tensors,
    executor: Executes,
    kwargs: dict[str, dict],
    device: torch.device,
    timing: Timing,
    oracle: bool,
    names: list[str] | None,
) -> None:
    """Set up each declared role once, on trial 0's inputs (float64 for the oracle), not timed as the role."""
    for role, fn, where, args in (
        ("impl", roles.impl, device, inputs),
        ("baseline", roles.baseline, torch.device("cpu"), reference),
        ("oracle", roles.oracle if oracle else None, torch.device("cpu"), float64_inputs(reference)),
    ):
        found = adapters.setup_of(fn)
        if found is None:
            continue
        target, timeout = found
        _, seconds = executor.call(
            f"{role} setup", target, 0, args, kwargs[role], device=where, timeout=timeout, limit=timeout, names=names
        )
        timing.setup += seconds


def against_oracle(
    e: torch.Tensor,
    b: torch.Tensor,
    o: torch.Tensor,
    names: list[str] | None = None,
    *,
    batch: metrics.Batch | None = None,
    free: bool = True,
) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any], torch.Tensor]:  # values as metrics.Batch gives them
    """One output of one trial against the float64 oracle ``o``: (err(e, o), err(b, o), err(round(o), o), round(o)).

    Errors are the metrics ``names`` (all when ``None``) with ULP counted in
    the baseline's dtype; round(o) is the oracle correctly rounded once to
    that dtype (``o`` itself for float64 and integer outputs), and err(round(o), o)
    the error any result in the dtype must have ("free"). err(e, o) is
    computed on e's device. ``batch``: the :class:`acceptance.numerics.metrics.Batch` the caller measures the trial's
    other pairs with (its operands are then read once for all); ``free=False`` leaves err(round(o), o) out
    (an empty dict) where nothing reads it.
    """
    o = o.to(torch.float64)
    rounded = dtypes.rounded(o, b.dtype)
    rounded = o if rounded is None else rounded
    compute = (batch if batch is not None else metrics.Batch()).compute
    eo = compute(e, o.to(e.device), dtype=b.dtype, names=names)
    bo = compute(b, o, dtype=b.dtype, names=names)
    free_error = compute(rounded, o, dtype=b.dtype, names=names) if free else {}
    return eo, bo, free_error, rounded
