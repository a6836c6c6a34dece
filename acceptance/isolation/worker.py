"""Worker processes: the code under test runs where nothing it does can take the runner down.

A :class:`Worker` is one child process, started from a fork server that has
torch imported (a fresh worker costs milliseconds, not a torch import), and
reused call after call until the code under test breaks it. Per call the
runner sends the role, a picklable reference to the callable (a
:class:`~acceptance.isolation.protocol.RoleRef`, resolved once per worker), the
inputs and the keyword parameters; the worker answers with the outputs, or with
what went wrong (the messages are :mod:`acceptance.isolation.protocol`). The runner waits with a deadline:

- a callable that raises (``KeyboardInterrupt`` and ``SystemExit`` included)
  gives "impl raised ValueError: ... (kernels.py:12) in trial 3";
- a worker that dies gives "impl terminated by SIGSEGV in trial 3" or "impl
  ended the worker process with exit status 0 in trial 0" (``os._exit``);
- a call past its deadline gives "impl exceeded the 60 s timeout in trial 7;
  the worker was killed": the worker's whole process group is killed, native
  busy loops and code that ignores signals included;
- an allocation past the worker's memory limit (``RLIMIT_AS`` above what the
  worker had mapped at start) fails inside the worker and is reported as such;
- a callable that modifies its input tensors in place gives "impl modified
  input 1 (`b`) in place (12 elements changed) in trial 0" (a digest of each
  input is compared before and after the call; the changed input is sent back
  and compared with the runner's copy only when the digest differs; the
  oracle's float64 copies are its own, made for that call, and not checked);
- a callable that writes to the run's output folder gives "impl wrote to the
  output folder in trial 0 (results.json); the files were removed" (the
  folder's files are compared before and after each call, so the write is
  charged to the call that made it even while other cases' trials are in flight).

A fresh worker takes the next call after a crash or a kill. Workers run in
their own session (a terminal's Ctrl-C reaches the runner only), die with the
process that started them (:func:`acceptance.isolation.serve.die_with`, ``kill -9``
of it included), and write their stdout and stderr to the null device, so
nothing the code under test prints reaches a CI log.
Tensors cross the boundary as described in :mod:`acceptance.isolation.transport` (a
copy each way, never shared memory the code under test could write back
through); an impl on CUDA gets its inputs moved to the device inside the
worker, and its outputs come back on the CPU.

The calls of one trial travel together (:meth:`Worker.submit`): the inputs
once, the calls in order (impl and its repeats, baseline, oracle on float64
copies the worker makes), and an answer comes back as each call finishes;
each call's deadline runs from when the worker could start it. The worker
stops a batch at the first call that breaks, so the runner reads no answer
after an error.
"""

from __future__ import annotations

import math
import multiprocessing
import multiprocessing.connection
import os
import signal
import time
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, TypeAlias, cast

import torch

from acceptance.errors import CaseError
from acceptance.isolation import WORKER_THREADS, forkserver, reaper
from acceptance.isolation.forkserver import signal_name
from acceptance.isolation.protocol import (
    Answer,
    Answered,
    Broke,
    Call,
    Generate,
    InputsFailed,
    Request,
    RoleRef,
    Same,
    Which,
    Wrote,
)
from acceptance.isolation.serve import RUN_FILES, _changed, _input_sets, call_inputs, remove_written, serve, snapshot
from acceptance.isolation.transport import Refused, dumps, recv, send, size

if TYPE_CHECKING:
    from acceptance.spec.inputs import Recipe

Tensors = tuple[torch.Tensor, ...]
#: A batch's inputs: the input sets ((impl's,) or (impl's, reference)), or the recipe the worker makes them from.
InputSets: TypeAlias = "tuple[Tensors, ...] | Recipe"

#: The inputs a :class:`Call` takes (:class:`acceptance.isolation.protocol.Which`), by name.
IMPL, REFERENCE, FLOAT64 = Which.IMPL, Which.REFERENCE, Which.FLOAT64

__all__ = [
    "FLOAT64",
    "IMPL",
    "REFERENCE",
    "RUN_FILES",
    "Batch",
    "Call",
    "RoleRef",
    "Which",
    "Worker",
    "WORKER_THREADS",
    "call_inputs",
    "remove_written",
    "snapshot",
]

_CONTEXT: multiprocessing.context.ForkServerContext | None = None


def _context() -> multiprocessing.context.ForkServerContext:
    """The fork server's context (:func:`acceptance.isolation.forkserver.context`), launched on first use."""
    global _CONTEXT
    if _CONTEXT is None:
        from acceptance.isolation.forkserver import context

        _CONTEXT = cast(multiprocessing.context.ForkServerContext, context())
    return _CONTEXT


#: Connections of this process that a worker forked from it must close at once (a job's connection to the runner).
INHERITED: list[multiprocessing.connection.Connection] = []

#: This process's ends of its workers' pipes: a worker forked from it closes the other workers' ones too, else a
#: worker started before it saw its pipe closed only once this one exited (a job's :meth:`Worker.finish` then
#: waited its whole timeout, 10 s, for a worker that never saw the end).
_PARENT_ENDS: list[multiprocessing.connection.Connection] = []


class Worker:
    """One worker process, started on first use and replaced after a crash, a kill or a timeout.

    ``memory_limit``: bytes the worker may map beyond what it had at start (``None``: no limit).
    ``threads``: torch's intra-op threads in the worker (``None``: torch's default).
    ``guard``: the run's output folder: a call during which a file there appears or changes (but the run's own
    :data:`RUN_FILES`) is an error naming the role, the trial and the files, which are removed.
    ``reference``: a reference worker, for baselines, oracles and their fingerprints only: its global state is
    checked around its calls (:class:`acceptance.isolation.serve.Pristine`), and it is replaced when one changed it.
    """

    #: the calls run in another process: the engine may send a trial while it measures the previous one
    concurrent = True

    def __init__(
        self,
        memory_limit: int | None = None,
        threads: int | None = None,
        guard: Path | None = None,
        *,
        reference: bool = False,
    ):
        self.memory_limit, self.threads, self.guard, self.reference = memory_limit, threads, guard, reference
        self._proc: multiprocessing.process.BaseProcess | None = None
        self._pending: deque[Batch] = deque()  # submitted batches not finished, in submission order; those sent
        # to the current process are a prefix of it
        self._generation = 0  # bumped when a process starts or is killed: a batch sent to an earlier one is lost
        self._free_at = 0.0  # CLOCK_MONOTONIC: the worker may have started its next call from then on
        self._recipe: Recipe | None = None  # the input recipe the worker holds
        #: work for this process while an answer is not ready (one piece per call; whether there was one)
        self.idle: Callable[[], bool] | None = None
        self._conn: multiprocessing.connection.Connection | None = None
        self._exited: int | None = None  # a pidfd of the process (reaper.exit_fd)
        #: warnings of the code under test (e.g. torch.compile graph breaks), appended call after call
        self.notes: list[str] = []

    def _start(self) -> None:
        ctx = _context()
        parent, child = ctx.Pipe()
        # a worker forked from this process (a job's, :func:`acceptance.isolation.forkserver.fork_here`) holds a copy
        # of every descriptor of it: it closes the ends that are not its own first (its pipe's other end, which
        # would keep it from seeing this process close the pipe, and the job's connection to the runner)
        _PARENT_ENDS[:] = [end for end in _PARENT_ENDS if not end.closed]
        foreign = (parent, *INHERITED, *_PARENT_ENDS) if ctx.get_start_method() == "fork" else ()
        proc = ctx.Process(
            target=serve,
            daemon=True,
            args=(
                child,
                self.memory_limit,
                self.threads,
                str(self.guard) if self.guard is not None else None,
                os.getpid(),
                foreign,
                self.reference,
            ),
        )
        forkserver.start_process(proc)
        child.close()
        _PARENT_ENDS.append(parent)
        self._proc, self._conn = proc, parent
        self._exited = reaper.exit_fd(proc.pid) if proc.pid is not None else None
        self._recipe = None
        self._generation += 1

    def close(self) -> None:
        """Kill the worker and its process group (children it left behind included)."""
        proc, conn = self._proc, self._conn
        if proc is not None:
            try:
                if proc.pid is not None:  # always, once started
                    reaper.kill_descendants(proc.pid)  # what the code under test started, daemons included
                    os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            reaper.wait_exit(self._exited, 5.0)
            reaper.sweep_workers_parent()  # what it left behind if it had died first
            proc.join(5)
        if conn is not None:
            conn.close()
        if self._exited is not None:
            os.close(self._exited)
        self._proc = self._conn = self._exited = None
        self._generation += 1

    def finish(self, timeout: float = 10.0) -> None:
        """End the worker as done with it: with no batch in flight, its connection is closed and it is given
        ``timeout`` seconds to write what it keeps for the reference cache and exit; then, or at once
        otherwise, :meth:`close`."""
        if not self._pending and self._alive():
            proc, conn = self._running()
            conn.close()
            proc.join(timeout)
        self.close()  # closing the connection again does nothing

    def __enter__(self) -> Worker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

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
        """``fn(*args, **params)`` in the worker within ``timeout`` seconds: (outputs, seconds inside the call).

        :class:`CaseError` when it breaks; ``limit`` is the timeout as configured, for the message.
        """
        if self._pending:
            raise RuntimeError(
                f"{role}: a call while {len(self._pending)} batch(es) are in flight would be "
                "answered after them; read or discard them first"
            )
        batch = self.submit(trial, (args,), [Call(role, ref, IMPL, params, device)])
        return batch.next(timeout=timeout, limit=limit, names=names)

    def submit(self, trial: int, sets: InputSets, calls: list[Call[RoleRef]]) -> Batch:
        """Send one trial's calls at once; their answers are read in order with :meth:`Batch.next`.

        ``sets``: the input tensors, (impl's,) or (impl's, reference), which the calls index by
        :data:`IMPL`, :data:`REFERENCE` and :data:`FLOAT64` (the reference inputs in float64, made in the
        worker). ``sets`` may instead be a picklable recipe (:class:`acceptance.spec.inputs.Recipe`): the worker
        makes the trial's inputs itself, and the runner never holds them. The worker runs the calls one after
        the other and stops at the first that breaks or modifies an input.

        Several batches may be in flight: the worker runs them in the order sent, and they are read in that
        order. A batch read while an earlier one still has unread answers means the earlier one was given up:
        the worker is replaced, and the batch is sent again to the fresh one (as is any batch sent to a worker
        that was since killed), so an answer always answers the call it was read for. A message larger than
        :data:`SMALL_MESSAGE` waits to be sent until the batch is read, when nothing else is in flight (two
        processes each blocked writing to the other would wait forever).
        """
        batch = Batch(self, trial, sets, calls)
        if not calls:
            return batch
        first = not self._pending
        follows = first or (self._pending[-1]._here() and self._alive())
        self._pending.append(batch)
        if follows:  # sent in order: now, or when it is read
            batch._send(small_only=not first)
        return batch

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.is_alive()

    def _running(
        self,
    ) -> tuple[multiprocessing.process.BaseProcess, multiprocessing.connection.Connection]:
        """The worker process and the runner's end of its connection (started: batches are sent and read only
        then)."""
        assert self._proc is not None and self._conn is not None, "the worker process is not started"
        return self._proc, self._conn

    @property
    def in_flight(self) -> int:
        """Batches submitted whose answers are not all read."""
        return len(self._pending)


def _plain_tensors(value: object) -> bool:
    return isinstance(value, tuple) and all(type(t) is torch.Tensor for t in value)


def malformed(answer: object) -> str | None:
    """What is wrong with an answer as decoded (the types its fields must have; its decoder allowed only the
    protocol's records, builtin values and plain tensors), or ``None``."""
    if isinstance(answer, Answered):
        if not (isinstance(answer.outputs, Same) or _plain_tensors(answer.outputs)):
            return f"outputs of type {type(answer.outputs).__name__}"
        changed = answer.changed
        if not isinstance(changed, tuple) or not all(
            isinstance(c, tuple) and len(c) == 2 and type(c[0]) is int and type(c[1]) is torch.Tensor for c in changed
        ):
            return "a malformed list of changed inputs"
        if not isinstance(answer.notes, tuple) or not all(isinstance(n, str) for n in answer.notes):
            return "malformed notes"
        numbers: tuple[object, ...] = (answer.seconds, answer.sent_at)
    elif isinstance(answer, (Broke, Wrote, InputsFailed)):
        text = answer.cause if isinstance(answer, (Broke, InputsFailed)) else answer.files
        if not isinstance(text, str):
            return f"a message of type {type(text).__name__}"
        numbers = (answer.sent_at,)
    else:
        return f"a {type(answer).__name__} where an answer was expected"
    if not all(type(x) in (int, float) for x in numbers):
        return "a malformed time"
    return None


def _ready(conn: multiprocessing.connection.Connection) -> bool:
    """Whether ``conn`` has something to read (an answer, or the worker's end), without waiting."""
    try:
        return conn.poll()
    except (OSError, EOFError):
        return True


#: Bytes of a batch message that may be sent while other batches are in flight (a socket buffer holds many).
SMALL_MESSAGE = 8 * 1024


class Batch:
    """The answers of one :meth:`Worker.submit`, read in call order."""

    def __init__(self, worker: Worker, trial: int, sets: InputSets, calls: list[Call[RoleRef]]):
        self.worker, self.trial, self.sets, self.calls = worker, trial, sets, calls
        self._generation = -1  # the worker process it was sent to (-1: not sent)
        self._sent = 0.0
        self._started = 0.0  # CLOCK_MONOTONIC: when the call to read next could start
        self._read = 0
        self._last: dict[str, Tensors] = {}  # role -> the outputs of this batch's previous answer of that role
        self.done = not calls

    def _here(self) -> bool:
        """Whether this batch was sent to the worker process now running."""
        return self._generation == self.worker._generation

    def _send(self, small_only: bool = False) -> bool:
        """Send this batch (starting the worker when it is not running); with ``small_only``, only a message of
        at most :data:`SMALL_MESSAGE` bytes. Whether it was sent."""
        w = self.worker
        if not w._alive():
            w.close()
            w._start()
        sets: tuple[Tensors, ...] | Generate
        if isinstance(self.sets, tuple):
            sets = self.sets
        else:  # a recipe, sent once per case to each worker
            sets = Generate(self.sets if w._recipe is not self.sets else None, self.trial)
        # plain pickle, never torch's shared-memory reductions: the worker gets a copy it cannot write back through
        message = dumps(Request(sets, tuple(self.calls)))
        if small_only and size(message) > SMALL_MESSAGE:
            return False
        send(w._running()[1], message)
        if not isinstance(self.sets, tuple):
            w._recipe = self.sets
        self._generation, self._sent, self._read = w._generation, time.monotonic(), 0
        return True

    def _finish(self) -> None:
        self.done = True
        pending = self.worker._pending
        if pending and pending[0] is self:
            pending.popleft()

    def discard(self) -> None:
        """Give this batch up: its answers will not be read. A batch the worker may still be answering costs
        the worker (it is killed; the batches after this one are sent again to a fresh one when read)."""
        if self.done:
            return
        w = self.worker
        self.done = True
        if self in w._pending:
            w._pending.remove(self)
            if self._here() and w._alive():
                w.close()

    def _first(self) -> None:
        """Make this batch the first one the worker answers: batches submitted before it were given up by their
        reader (the worker is replaced when one of them was sent to it); then send it, and the batches after it
        that are not sent yet, in order."""
        w = self.worker
        given_up = []
        while w._pending and w._pending[0] is not self:
            given_up.append(w._pending.popleft())
        for b in given_up:
            b.done = True
        if any(b._here() for b in given_up) and w._alive():
            w.close()  # their answers would come first
        if not self._here():
            self._send()
            for b in list(w._pending)[1:]:
                if b._here() or not b._send(small_only=True):
                    break

    def next(
        self, *, timeout: float = math.inf, limit: float | None = None, names: list[str] | None = None
    ) -> tuple[Tensors, float]:
        """The next call's (outputs, seconds inside it); ``timeout`` seconds from when the worker could start it
        (the submit, or when the previous answer was read), so a runner busy elsewhere meanwhile never
        shortens it."""
        w = self.worker
        if self.done:
            raise RuntimeError(f"trial {self.trial}: every answer of this batch was read (or it was discarded)")
        if not (w._pending and w._pending[0] is self and self._here()):
            self._first()
        if self._read == 0:
            self._started = max(self._sent, w._free_at)
        call = self.calls[self._read]
        self._read += 1
        role, trial = call.role, self.trial
        while w.idle is not None and not _ready(w._running()[1]) and w.idle():
            pass
        proc, conn = w._running()
        wait = None if math.isinf(timeout) else max(self._started + max(timeout, 0.0) - time.monotonic(), 0.0)
        # the pidfd tells a worker's end even while a process it left holds its pipe and sentinel open
        exited = [w._exited] if w._exited is not None else []
        ready = multiprocessing.connection.wait([conn, proc.sentinel, *exited], wait)
        if not ready:
            self._finish()
            w.close()
            shown = limit if limit is not None else timeout
            raise CaseError(f"{role} exceeded the {shown:g} s timeout in trial {trial}; the worker was killed")
        problem: str | None = None
        try:
            answer = recv(conn) if conn in ready or conn.poll() else None
        except (EOFError, OSError):
            answer = None
        except (Refused, MemoryError) as exc:  # what the code under test sent back is not plain tensors
            answer, problem = None, str(exc)
        else:
            problem = malformed(answer) if answer is not None else None
        if problem is not None:
            self._finish()
            w.close()
            raise CaseError(f"{role} sent back something that is not plain tensors in trial {trial}: {problem}")
        if answer is None:
            self._finish()
            reaper.sweep_workers_parent()  # what it left behind (which may hold its sentinel open), first
            proc.join(5)
            code = proc.exitcode
            w.close()
            if code is not None and code < 0:
                raise CaseError(f"{role} terminated by {signal_name(code)} in trial {trial}")
            raise CaseError(f"{role} ended the worker process with exit status {code} in trial {trial}")
        # the next call started when this answer was sent, or later if sending it had to wait for this read
        w._free_at = self._started = max(answer.sent_at, time.monotonic())
        if self._read == len(self.calls):
            self._finish()
        return self._read_answer(answer, call, names)

    def _read_answer(self, answer: Answer, call: Call[RoleRef], names: list[str] | None) -> tuple[Tensors, float]:
        """The outputs and seconds of an :class:`Answered`; the :class:`CaseError` any other answer means (then
        the batch is finished: the worker sends nothing after it)."""
        role, trial = call.role, self.trial
        if not isinstance(answer, Answered):
            self._finish()
            if isinstance(answer, InputsFailed):
                raise CaseError(answer.cause)
            if isinstance(answer, Broke):
                if answer.ended or answer.restart:
                    self.worker.close()
                raise CaseError(f"{role} {answer.cause} in trial {trial}")
            if isinstance(answer, Wrote):
                files = answer.files
                raise CaseError(f"{role} wrote to the output folder in trial {trial} ({files}); the files were removed")
            raise TypeError(f"{role}: not an answer: {type(answer).__name__}")
        outs = answer.outputs
        if isinstance(outs, Same):  # a repeat: bit for bit the role's previous answer
            outs = tuple(o.clone() for o in self._last[role])
        self._last[role] = outs
        self.worker.notes += answer.notes
        for i, now in answer.changed:
            self._finish()
            name = f" (`{names[i]}`)" if names and i < len(names) else ""
            differs = _changed(now, self._args(call)[i])
            raise CaseError(f"{role} modified input {i}{name} in place ({differs} elements changed) in trial {trial}")
        return outs, answer.seconds

    def _args(self, call: Call[RoleRef]) -> Tensors:
        """The inputs ``call`` was given, as the runner holds them (made again from a recipe)."""
        return call_inputs(
            self.sets if isinstance(self.sets, tuple) else _input_sets(self.sets(self.trial)), call.inputs
        )
