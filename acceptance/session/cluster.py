"""``--executor ray``: a run's cases measured as Ray tasks on a cluster (:class:`RayExecutor`).

The cases are cut into batches (:func:`batches`): consecutive cases of one spec, at most :data:`MAX_BATCH` of
them, fewer where the run is small, so that every slot of the cluster gets several batches and a batch takes a
few seconds at most (a case of the built-in library takes 0.1-1 s with its own trials). A case with an mpmath
oracle (seconds on its own) is a batch alone. Each batch is one Ray task asking for one GPU when the impl's device
is CUDA (one job per GPU), else one CPU, and the memory of its spec's ``memory_limit_gib``.

Inside the task the cases are measured by exactly the local machinery: :class:`acceptance.session.executors.Jobs`
with one job, a process started from the fork server (the Ray worker process runs threads of its own, and is
never forked itself), measuring whole cases with the impl in a fresh worker and the references in a pristine one.
The records come back to this process, which yields them as their tasks finish; the journal, the decision (Holm
over the whole run) and the reports are the same code as for a local run, and so is every number.

Faults: a task whose Ray worker process or node is lost runs once more (``max_retries=1``); lost again, its
batch runs again one case per task, without retry, so that the case that kills its worker is an ``error`` naming
Ray's error and every other case is measured. Closing :meth:`RayExecutor.measure` early (Ctrl-C, SIGTERM, ``-x``)
cancels the tasks still out (``ray.cancel(force=True)``) and waits until their processes on this node are gone.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import signal
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import dataclass, field, replace
from types import FrameType, ModuleType

import torch

from acceptance.errors import Terminated, UsageError
from acceptance.isolation import forkserver
from acceptance.measure import case as measuring
from acceptance.records import MeasuredCase
from acceptance.session import startup
from acceptance.session.executors import JobPool, Settings, Started, costly
from acceptance.spec import Case, rules_for
from acceptance.spec.load import default_memory_gib

#: What installs Ray with this package.
INSTALL = "pip install 'operator-acceptance[ray]'"

#: Most cases in one task: with the built-in library's cases (0.1-1 s each) a batch takes a few seconds at most,
#: so that a lost worker costs little to measure again; a task's own cost is small (~0.02 s with warm workers,
#: ``benchmarks/ray_overhead.py``), a GPU task's more (a fresh Ray worker, its fork server and job: ~2-5 s).
MAX_BATCH = 8

#: Tasks per slot of the cluster the batches are cut for at least, so that slots finishing early find more work.
TASKS_PER_SLOT = 4

#: Seconds between looks at the progress of the tasks while none finishes.
POLL_S = 0.5


def import_ray() -> ModuleType:
    """The ``ray`` module; a usage error saying how to install it when it is missing."""
    try:
        import ray
    except ImportError:
        raise UsageError(f"--executor ray needs Ray, which is not installed: {INSTALL}") from None
    return ray


def batches(cases: Sequence[Case], slots: int) -> list[list[Case]]:
    """``cases`` cut into batches of consecutive cases of one spec, at most ``ceil(len(cases) / (TASKS_PER_SLOT
    * slots))`` and :data:`MAX_BATCH` cases each (at least one); a case with an mpmath oracle alone."""
    size = max(1, min(MAX_BATCH, math.ceil(len(cases) / (TASKS_PER_SLOT * max(1, slots)))))
    out: list[list[Case]] = []
    for case in cases:
        last = out[-1] if out else None
        if (
            last is not None
            and len(last) < size
            and last[0].spec.path == case.spec.path
            and not costly(case)
            and not costly(last[0])
        ):
            last.append(case)
        else:
            out.append([case])
    return out


def resources(device: torch.device, cases: Sequence[Case]) -> dict[str, float]:
    """What a task measuring ``cases`` asks Ray for: one GPU on CUDA (its job owns it), else one CPU; and the
    largest memory limit its cases' specs declare (``memory_limit_gib``, in bytes). A spec that declares none
    has half of the machine's memory as its worker's ceiling (:func:`acceptance.spec.load.default_memory_gib`):
    a bound, not a need, so it asks for no memory."""
    wanted: dict[str, float] = {"num_gpus": 1} if device.type == "cuda" else {"num_cpus": 1}
    declared = [measuring.worker_limit(case) for case in cases if case.spec.memory_limit_gib != default_memory_gib()]
    if declared:
        wanted["memory"] = max(declared)
    return wanted


#: Ray's resource names of the :func:`resources` keys.
RESOURCE_NAMES = {"num_gpus": "GPU", "num_cpus": "CPU", "memory": "memory"}


def unfit(wanted: dict[str, float], nodes: Sequence[dict[str, float]]) -> str | None:
    """Why no node of the cluster (their total resources, ``nodes``) can ever run a task asking for ``wanted``
    (Ray would keep it waiting forever); ``None`` when one can."""
    for node in nodes:
        if all(node.get(RESOURCE_NAMES[k], 0.0) >= v for k, v in wanted.items()):
            return None
    asked = ", ".join(
        f"memory={v / 2**30:g} GiB" if k == "memory" else f"{RESOURCE_NAMES[k]}={v:g}" for k, v in wanted.items()
    )
    return f"no node of the Ray cluster has the resources this case needs ({asked})"


def lost_message(exc: BaseException) -> str:
    """A case's error when its single-case task failed: Ray's error class and the first line of its message (of
    the exception the task raised, for a ``RayTaskError``)."""
    ray = import_ray()
    if isinstance(exc, ray.exceptions.RayTaskError):
        cause = exc.cause if exc.cause is not None else exc
        return f"the Ray task measuring this case raised {type(cause).__name__}: {_first_line(cause)}"
    return f"the Ray worker measuring this case died: {type(exc).__name__}: {_first_line(exc)}"


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [""])[0]


#: Seconds to wait for the tasks cancelled when a run is stopped, and for the processes below them.
STOP_S = 10.0


def descendants(pid: int) -> list[int]:
    """Every live process below process ``pid`` (from ``/proc``; empty where it cannot be read)."""
    found, todo = [], forkserver.children(pid)
    while todo:
        child = todo.pop()
        found.append(child)
        todo += forkserver.children(child)
    return found


# ----------------------------------------------------------------------------- in the Ray worker


def node_label() -> str:
    """This process's Ray node as progress shows it: its IP and the first 8 hex digits of its node id."""
    import ray

    node = ray.get_runtime_context().get_node_id()
    return f"{ray.util.get_node_ip_address()}/{node[:8]}"


#: This Ray worker process's job, kept from task to task as a local ``--jobs`` run keeps its jobs from case to case
#: (a fresh job's first case pays for its workers' start and first calls: measured 2-4 s on a loaded machine),
#: with the settings it measures with. It ends with the Ray worker (a GPU task's, after the task).
_held: tuple[Settings, JobPool] | None = None


def _job(settings: Settings) -> JobPool:
    """The job of this Ray worker process for ``settings`` (started now where there is none, or another's)."""
    global _held
    if _held is None or _held[0] != settings:
        if _held is not None:
            _held[1].close(graceful=True)
        _held = (settings, JobPool(settings, [settings.device]))
    return _held[1]


def measure_batch(settings: Settings, cases: list[Case], tracker: object, batch: int) -> tuple[str, list[MeasuredCase]]:
    """A Ray task: ``cases`` measured by this Ray worker's job (:class:`acceptance.session.executors.Jobs`'s, one
    job: the cases with an mpmath oracle first); each case is reported to ``tracker`` (a :class:`Tracker` actor)
    as it is sent to the job. This node and the records."""
    global _held
    node = node_label()
    if settings.device.type == "cuda":  # Ray makes the GPU it gave this task the only one visible (the fork
        # server is launched now, by this task's fresh Ray worker: it and the job see that GPU alone)
        settings = replace(settings, device=torch.device("cuda"))

    def started(case: Case) -> None:
        tracker.begun.remote(batch, node, os.getpid(), case.id)  # type: ignore[attr-defined]

    # Ray's default_worker.py as the main module: the fork server and each job would import it, and Ray with it
    with forkserver.main_file_hidden():
        startup.launch_workers(2)  # once per Ray worker process: its fork server, preloading what a job needs
        job = _job(settings)
        try:
            measured = [m for _, m in job.run(deque(sorted(cases, key=lambda c: not costly(c))), started)]
        except BaseException:
            _held = None
            job.close(graceful=False)
            raise
    return node, measured


class Tracker:
    """A Ray actor the tasks tell which case they begin, on which node; the runner collects what it was told."""

    def __init__(self) -> None:
        self.events: list[tuple[int, str, int, str]] = []

    def begun(self, batch: int, node: str, pid: int, case_id: str) -> None:
        self.events.append((batch, node, pid, case_id))

    def collect(self) -> list[tuple[int, str, int, str]]:
        events, self.events = self.events, []
        return events


# ----------------------------------------------------------------------------- in the runner


@dataclass
class _Task:
    """One submitted batch: its cases and the node it runs on once known."""

    cases: list[Case]
    node: str | None = None
    pid: int | None = None  # its Ray worker process


@dataclass
class _Board:
    """The tasks queued, running and done per node, as progress shows them."""

    queued: int = 0
    running: dict[str, int] = field(default_factory=dict)
    done: dict[str, int] = field(default_factory=dict)

    def line(self) -> str:
        nodes = sorted(set(self.running) | set(self.done))
        per = "; ".join(f"{n}: {self.running.get(n, 0)} running, {self.done.get(n, 0)} done" for n in nodes)
        return f"ray tasks: {self.queued} queued" + (f"; {per}" if per else "")


def connect(ray: ModuleType, address: str | None, cpus: int) -> bool:
    """Connect to the Ray cluster at ``address`` (else ``$RAY_ADDRESS``), or start a local instance of ``cpus``
    CPUs; whether this process started it (and shuts it down). A Ray already initialized here is used as it is.
    The workers' output is not forwarded here: what the code under test prints must not reach the run's log."""
    if ray.is_initialized():
        return False
    address = address or os.environ.get("RAY_ADDRESS") or None
    common = {"log_to_driver": False, "logging_level": logging.WARNING, "configure_logging": False}
    try:
        with _own_signals():
            if address:
                ray.init(address=address, **common)
                return False
            ray.init(address="local", num_cpus=cpus, include_dashboard=False, **common)
    except (ConnectionError, ValueError, RuntimeError) as exc:
        raise UsageError(f"--ray-address {address or 'local'}: cannot connect to Ray: {exc}") from None
    return True


@contextlib.contextmanager
def _own_signals() -> Iterator[None]:
    """The SIGTERM and SIGINT handlers of this process as they were before the block: ``ray.init`` installs its
    own, which ended the process at once on SIGTERM (status 15) where the run records its finished cases as
    interrupted (exit 143)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            if handler is not None:
                signal.signal(sig, handler)


@contextlib.contextmanager
def _terminated_stays_terminated() -> Iterator[None]:
    """A SIGTERM during the block leaves it as :class:`acceptance.errors.Terminated` (exit 143), as the run's
    handler raises it: Ray's blocking calls turn an exception a signal handler raised into a plain
    ``KeyboardInterrupt`` (exit 130, what Ctrl-C means)."""
    seen: list[int] = []
    previous = signal.getsignal(signal.SIGTERM)
    if not callable(previous) or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        seen.append(signum)
        previous(signum, frame)

    signal.signal(signal.SIGTERM, handler)
    try:
        yield
    except KeyboardInterrupt:
        if seen:
            raise Terminated() from None
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)


class RayExecutor:
    """Measures a run's cases as Ray tasks (:func:`measure_batch`), one batch of one spec's cases per task.
    ``address``: the cluster (default ``$RAY_ADDRESS``, else a local instance of ``cpus`` CPUs, shut down at the
    end); ``status``: told a line on the tasks queued, running and done per node as it changes."""

    def __init__(
        self,
        settings: Settings,
        *,
        address: str | None = None,
        cpus: int = 1,
        status: Callable[[str], None] | None = None,
    ):
        self.settings, self.address, self.cpus, self.status = settings, address, cpus, status

    def measure(self, cases: Sequence[Case], started: Started) -> Generator[tuple[Case, MeasuredCase], None, None]:
        todo = list(cases)
        if not todo:
            return
        ray = import_ray()
        own = connect(ray, self.address, self.cpus)
        try:
            yield from _RayRun(ray, self.settings, started, self.status).run(todo)
        finally:
            if own:
                ray.shutdown()


class _RayRun:
    """The tasks of one :meth:`RayExecutor.measure` call."""

    def __init__(self, ray: ModuleType, settings: Settings, started: Started, status: Callable[[str], None] | None):
        self.ray, self.settings, self.started, self.status = ray, settings, started, status
        # a GPU task's Ray worker exits after it (Ray's default where the function asks for a GPU, not where
        # .options() does): the fork server it launches keeps the CUDA_VISIBLE_DEVICES of its first task, and the
        # next task on that worker may be given another GPU
        cuda = settings.device.type == "cuda"
        self.task = ray.remote(num_gpus=1, max_calls=1)(measure_batch) if cuda else ray.remote(measure_batch)
        self.tracker = ray.remote(Tracker).options(num_cpus=0).remote()
        self.pending: dict[object, _Task] = {}
        self.batches: dict[int, object] = {}  # batch number -> its task's reference
        self.begun: set[str] = set()
        self.board = _Board()
        self.shown = ""
        self.nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]

    def slots(self) -> int:
        key = "GPU" if self.settings.device.type == "cuda" else "CPU"
        return max(1, int(sum(node.get(key, 0.0) for node in self.nodes)))

    def run(self, todo: list[Case]) -> Generator[tuple[Case, MeasuredCase], None, None]:
        finished = False
        try:
            with _terminated_stays_terminated():
                for batch in batches(todo, self.slots()):
                    yield from self._submit(batch, retries=1)
                while self.pending:
                    ready, _ = self.ray.wait(list(self.pending), num_returns=1, timeout=POLL_S)
                    self._follow()
                    for ref in ready:
                        yield from self._finished(ref)
            finished = True
        finally:
            if not finished:
                self._stop()

    def _stop(self) -> None:
        """Cancel the tasks still out (``ray.cancel(force=True)``: their Ray workers are killed, their jobs and
        workers end with them) and wait until they are gone: on this node, until no process below their Ray
        workers runs any more, since a worker still in a call watches the output folder the run writes next
        (:func:`acceptance.isolation.forkserver.settle`, as a local run waits for the workers of its jobs)."""
        with contextlib.suppress(Exception):
            self._follow()  # the Ray workers of the tasks begun since the last look
        me = node_label()
        below = [p for t in self.pending.values() if t.node == me and t.pid for p in descendants(t.pid)]
        refs = list(self.pending)
        for ref in refs:
            self.ray.cancel(ref, force=True)
        with contextlib.suppress(Exception):
            self.ray.wait(refs, num_returns=len(refs), timeout=STOP_S)
        forkserver.settle(below, STOP_S)

    def _submit(self, cases: list[Case], *, retries: int) -> Generator[tuple[Case, MeasuredCase], None, None]:
        """Submit ``cases`` as one task, run again ``retries`` times where its worker or node is lost; cases no
        node can run are errors at once."""
        wanted = resources(self.settings.device, cases)
        why = unfit(wanted, self.nodes)
        if why is not None:
            for case in cases:
                yield self._error(case, why)
            return
        number = len(self.batches)
        options = {**wanted, "max_retries": retries, "retry_exceptions": False}
        ref = self.task.options(**options).remote(self.settings, cases, self.tracker, number)
        self.batches[number] = ref
        self.pending[ref] = _Task(cases)
        self.board.queued += 1
        self._show()

    def _follow(self) -> None:
        """The cases the tasks began since the last look: ``started`` for each (once), and the board."""
        for number, node, pid, case_id in self.ray.get(self.tracker.collect.remote()):
            task = self.pending.get(self.batches.get(number))
            if task is None:
                continue
            if task.node is None:
                task.node, task.pid = node, pid
                self.board.queued -= 1
                self.board.running[node] = self.board.running.get(node, 0) + 1
            for case in task.cases:
                if case.id == case_id and case.id not in self.begun:
                    self.begun.add(case.id)
                    self.started(case)
        self._show()

    def _finished(self, ref: object) -> Generator[tuple[Case, MeasuredCase], None, None]:
        task = self.pending.pop(ref)
        try:
            node, measured = self.ray.get(ref)
        except self.ray.exceptions.RayError as exc:
            self._settle(task, task.node)
            if len(task.cases) > 1:  # lost twice: each case alone, so that only the one that kills its worker is lost
                for case in task.cases:
                    yield from self._submit([case], retries=0)
            else:
                yield from (self._error(case, lost_message(exc)) for case in task.cases)
            return
        self._settle(task, node)
        by_id = {m.id: m for m in measured}
        for case in task.cases:
            self._begin(case)
            yield case, by_id[case.id]

    def _settle(self, task: _Task, node: str | None) -> None:
        """The board after ``task`` ended on ``node``."""
        if task.node is None:
            self.board.queued -= 1
        else:
            self.board.running[task.node] -= 1
        if node is not None:
            self.board.done[node] = self.board.done.get(node, 0) + 1
        self._show()

    def _begin(self, case: Case) -> None:
        if case.id not in self.begun:  # finished before its task's word arrived
            self.begun.add(case.id)
            self.started(case)

    def _error(self, case: Case, message: str) -> tuple[Case, MeasuredCase]:
        self._begin(case)
        return case, measuring.error_result(case, rules_for(case), self.settings.trials, message)

    def _show(self) -> None:
        line = self.board.line()
        if self.status is not None and line != self.shown:
            self.shown = line
            self.status(line)


__all__ = ["INSTALL", "MAX_BATCH", "RayExecutor", "batches", "import_ray", "resources", "unfit"]
