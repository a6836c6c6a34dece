"""Worker processes: the code under test runs where nothing it does can take the runner down.

A :class:`Worker` is one child process, started from a fork server that has
torch imported (a fresh worker costs milliseconds, not a torch import), and
reused call after call until the code under test breaks it. Per call the
runner sends the role, a picklable :data:`Ref` to the callable (resolved once
per worker), the inputs and the keyword parameters; the worker answers with
the outputs, or with what went wrong. The runner waits with a deadline:

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
  and compared with the runner's copy only when the digest differs).

A fresh worker takes the next call after a crash or a kill. Workers run in
their own session (a terminal's Ctrl-C reaches the runner only), die with the
runner (``PR_SET_PDEATHSIG`` on Linux), and write their stdout and stderr to
the null device, so nothing the code under test prints reaches a CI log.
Tensors cross the boundary as described in :mod:`acceptance.transport` (a
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

import ctypes
import hashlib
import math
import multiprocessing
import multiprocessing.connection
import os
import resource
import signal
import time
import traceback
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, NamedTuple, Optional

import torch

from acceptance.errors import CaseError
from acceptance.transport import dumps, recv, send

#: How a worker finds a callable: ("callable", "module:attr", spec_path) | ("float64", Ref) | ("mpmath", name,
#: dps) | ("object", a picklable callable) | ("emulated", Ref, Emulation, role) | ("layout", Ref, layouts)
#: | ("timed", Ref, TimerOptions.key()) (the callable in the timing loop of :mod:`acceptance.timing`, timed where it runs)
#: | ("adapter", declaration JSON, spec_path, role) | ("setup", Ref): the ``setup`` of the adapter the worker
#: already holds for Ref (see :mod:`acceptance.adapters`)
#: | ("fingerprint", Ref): a call giving the hex SHA-256 of Ref's fingerprint.
Ref = tuple

Tensors = tuple[torch.Tensor, ...]


def resolve(ref: Ref) -> Callable:
    """The callable a :data:`Ref` names (imports the module: run this in a worker)."""
    from acceptance import oracle
    from acceptance.spec.callables import resolve_callable

    kind = ref[0]
    if kind == "callable":
        return resolve_callable(ref[1], Path(ref[2]))
    if kind == "float64":
        return oracle.float64_oracle(resolve(ref[1]))
    if kind == "mpmath":
        return oracle.mpmath_oracle(ref[1], ref[2])
    if kind == "object":
        return ref[1]
    if kind == "emulated":  # ("emulated", Ref, Emulation, role): acceptance.emulation around the callable
        from acceptance import emulation

        return emulation.wrap(ref[3], resolve(ref[1]), ref[2])
    if kind == "layout":  # ("layout", Ref, layouts): inputs in the given memory layouts
        from acceptance.layouts import with_layouts

        return with_layouts(resolve(ref[1]), ref[2])
    if kind == "timed":
        from acceptance import timing

        return timing.Timed(resolve(ref[1]), timing.TimerOptions(**dict(ref[2])))
    if kind == "adapter":
        from acceptance.adapters import resolve_adapter

        return resolve_adapter(ref)
    if kind == "fingerprint":
        return _fingerprinter(resolve(ref[1]))
    raise ValueError(f"unknown callable reference {ref!r}")


def _fingerprinter(fn: Callable) -> Callable[[], torch.Tensor]:
    """A call that returns the SHA-256 of ``fn``'s :func:`acceptance.cache.callable_fingerprint` (hex, as a uint8
    tensor), so that the runner can key cached references without importing the code under test."""
    def fingerprint() -> torch.Tensor:
        from acceptance.cache import callable_fingerprint, canonical_json

        hexdigest = hashlib.sha256(canonical_json(callable_fingerprint(fn)).encode()).hexdigest()
        return torch.frombuffer(bytearray(hexdigest.encode()), dtype=torch.uint8)
    return fingerprint


def _digest(t: torch.Tensor) -> int:
    """A checksum of a tensor's bytes (CRC-32 on the host; an integer weighted sum on a device)."""
    if t.numel() == 0:
        return 0
    width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    bits = t.detach().contiguous().view(width)
    if t.device.type == "cpu":
        return zlib.crc32(bits.numpy().view("u1").data)
    flat = bits.reshape(-1).to(torch.int64)
    weights = torch.arange(1, flat.numel() + 1, device=flat.device, dtype=torch.int64)
    return hash((int(flat.sum()), int((flat * weights).sum())))


def _changed(now: torch.Tensor, before: torch.Tensor) -> int:
    """Elements whose bits differ (every element when the shape changed)."""
    if now.shape != before.shape or now.dtype != before.dtype:
        return max(now.numel(), before.numel())
    if now.is_floating_point():
        width = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[now.element_size()]
        return int((now.contiguous().view(width) != before.contiguous().view(width)).sum())
    return int((now != before).sum())


def _listed_children() -> Optional[list[str]]:
    """This process's children from ``/proc/self/task/*/children`` (one small file per thread, ~0.1 ms in all,
    where scanning all of /proc takes ~20 ms on a busy host); ``None`` where the kernel does not offer it."""
    me = os.getpid()
    try:
        tasks = os.listdir(f"/proc/{me}/task")
        pids: list[str] = []
        for task in tasks:
            try:
                with open(f"/proc/{me}/task/{task}/children") as fh:
                    pids += fh.read().split()
            except FileNotFoundError:
                if task == str(me):
                    return None  # no CONFIG_PROC_CHILDREN
        return pids
    except OSError:
        return None


def _children() -> list[int]:
    """Kill the live child processes of this worker (Linux /proc); their pids."""
    me, found = str(os.getpid()), []
    proc = Path("/proc")
    if not proc.is_dir():
        return found
    listed = _listed_children()
    for entry in (proc / pid for pid in listed) if listed is not None else proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[1] == me and fields[0] != "Z":
            try:
                os.kill(int(entry.name), signal.SIGKILL)
                found.append(int(entry.name))
            except OSError:
                pass
    return found


def _where(exc: BaseException) -> str:
    frames = traceback.extract_tb(exc.__traceback__)
    return f" ({Path(frames[-1].filename).name}:{frames[-1].lineno})" if frames else ""


def _cached(cache: dict, ref: Ref) -> Callable:
    """The callable of ``ref``, resolved once per worker (a setup reference reaches the cached adapter)."""
    if ref[0] == "setup":
        return _cached(cache, ref[1]).setup
    key = ref if ref[0] != "object" else id(ref[1])
    return cache.get(key) or cache.setdefault(key, resolve(ref))


def _serve(conn: multiprocessing.connection.Connection, memory_limit: Optional[int],
           threads: Optional[int] = None) -> None:  # pragma: no cover
    """The worker's loop (runs in the child): each message is one :class:`Batch` of calls, answered call by call."""
    os.setsid()
    if threads:
        torch.set_num_threads(threads)
    if hasattr(ctypes, "CDLL"):
        try:
            ctypes.CDLL(None).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: die with the runner
        except (OSError, AttributeError):
            pass
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    if memory_limit:
        with open("/proc/self/statm") as fh:
            mapped = int(fh.read().split()[0]) * resource.getpagesize()
        resource.setrlimit(resource.RLIMIT_AS, (mapped + memory_limit, resource.RLIM_INFINITY))
    cache: dict[Any, Callable] = {}
    recipe: Any = None
    while True:
        try:
            sets, calls = recv(conn)
        except EOFError:
            os._exit(0)
        if isinstance(sets, Generate):  # the inputs are made here, from the case's recipe
            recipe = sets.recipe if sets.recipe is not None else recipe
            try:
                sets = _input_sets(recipe(sets.trial))
            except Exception as exc:  # a spec whose inputs cannot be made: the batch ends here
                send(conn, dumps(("inputs", f"{type(exc).__name__}: {exc}", time.monotonic())))
                continue
        for role, ref, which, params, device in calls:
            answer = _answer(cache, ref, call_inputs(sets, which), params, device, memory_limit)
            try:
                data = dumps(answer + (time.monotonic(),))
            except Exception as exc:  # an output that cannot be pickled
                answer = ("bad", f"returned outputs that cannot be sent back ({type(exc).__name__}: {exc})")
                data = dumps(answer + (time.monotonic(),))
            stop = answer[0] == "bad" or bool(answer[2])  # the runner stops reading this batch here
            answer = None  # the outputs live on in the message only
            send(conn, data)
            data = None
            if stop:
                break
        sets = calls = None


class Generate(NamedTuple):
    """A batch's inputs as the worker makes them: ``recipe(trial)`` (:class:`acceptance.inputs.Recipe`);
    ``recipe`` is ``None`` when the worker holds it from the previous batch."""

    recipe: Any
    trial: int


def _input_sets(made: Any) -> tuple[Tensors, ...]:
    """:func:`acceptance.inputs.input_sets` (imported when a worker first makes inputs)."""
    from acceptance.inputs import input_sets

    return input_sets(made)


def _answer(cache: dict, ref: Ref, args: tuple, params: dict, device: torch.device,
            memory_limit: Optional[int]) -> tuple:  # pragma: no cover - runs in the worker
    """One call in the worker: ("ok", outputs on the CPU, [(i, input i as it is now)] for the inputs it changed,
    seconds, notes) or ("bad", what went wrong)."""
    try:
        from acceptance.adapters import take_notes

        fn = _cached(cache, ref)
        args = tuple(a.to(device) if isinstance(a, torch.Tensor) else a for a in args)
        before = [_digest(a) for a in args]
        started = time.perf_counter()
        value = fn(*args, **params)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        seconds = time.perf_counter() - started
        outs = value if isinstance(value, (tuple, list)) else (value,)
        if not outs:
            answer: tuple = ("bad", "returned no output")
        elif not all(isinstance(o, torch.Tensor) for o in outs):
            k = next(i for i, o in enumerate(outs) if not isinstance(o, torch.Tensor))
            answer = ("bad", f"returned {type(outs[k]).__name__} at output {k}")
        else:
            changed = [(i, a.detach().cpu()) for i, (a, d) in enumerate(zip(args, before)) if _digest(a) != d]
            answer = ("ok", tuple(o.detach().cpu() for o in outs), changed, seconds, take_notes(fn))
    except SystemExit as exc:
        answer = ("bad", f"called sys.exit({exc.code!r})")
    except BaseException as exc:  # the code under test may raise anything, KeyboardInterrupt included
        text = f"{type(exc).__name__}: {exc}{_where(exc)}"
        if memory_limit and (isinstance(exc, MemoryError) or "allocate memory" in str(exc)):
            answer = ("bad", f"exceeded the worker's memory limit of {memory_limit / 2**30:.3g} GiB ({text})")
        else:
            answer = ("bad", f"raised {text}")
    left = _children()
    if left and answer[0] == "ok":
        answer = ("bad", f"left {len(left)} child process(es) running (pid {', '.join(map(str, left))}); "
                         "they were killed")
    return answer


_CONTEXT: Optional[multiprocessing.context.BaseContext] = None


def _context() -> multiprocessing.context.BaseContext:
    global _CONTEXT
    if _CONTEXT is None:
        from acceptance.forkserver import context

        _CONTEXT = context()
    return _CONTEXT


def _signal_name(code: int) -> str:
    try:
        return signal.Signals(-code).name
    except ValueError:
        return f"signal {-code}"


class Worker:
    """One worker process, started on first use and replaced after a crash, a kill or a timeout.

    ``memory_limit``: bytes the worker may map beyond what it had at start (``None``: no limit).
    ``threads``: torch's intra-op threads in the worker (``None``: torch's default).
    """

    #: the calls run in another process: the engine may send a trial while it measures the previous one
    concurrent = True

    def __init__(self, memory_limit: Optional[int] = None, threads: Optional[int] = None):
        self.memory_limit, self.threads = memory_limit, threads
        self._proc: Optional[multiprocessing.process.BaseProcess] = None
        self._batch: Optional[Batch] = None
        self._recipe: Any = None  # the input recipe the worker holds
        self._conn: Optional[multiprocessing.connection.Connection] = None
        #: warnings of the code under test (e.g. torch.compile graph breaks), appended call after call
        self.notes: list[str] = []

    def _start(self) -> None:
        parent, child = _context().Pipe()
        proc = _context().Process(target=_serve, args=(child, self.memory_limit, self.threads), daemon=True)
        proc.start()
        child.close()
        self._proc, self._conn = proc, parent
        self._recipe = None

    def close(self) -> None:
        """Kill the worker and its process group (children it left behind included)."""
        if self._proc is not None:
            try:
                os.killpg(self._proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
            self._proc.join(5)
            self._conn.close()
        self._proc = self._conn = None

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def call(self, role: str, ref: Ref, trial: int, args: Tensors, params: dict, *, device: torch.device,
             timeout: float = math.inf, limit: Optional[float] = None,
             names: Optional[list[str]] = None) -> tuple[Tensors, float]:
        """``fn(*args, **params)`` in the worker within ``timeout`` seconds: (outputs, seconds inside the call).

        :class:`CaseError` when it breaks; ``limit`` is the timeout as configured, for the message.
        """
        batch = self.submit(trial, (args,), [Call(role, ref, IMPL, params, device)])
        return batch.next(timeout=timeout, limit=limit, names=names)

    def submit(self, trial: int, sets: Any, calls: list["Call"]) -> "Batch":
        """Send one trial's calls at once; their answers are read in order with :meth:`Batch.next`.

        ``sets``: the input tensors, (impl's,) or (impl's, reference), which the calls index by
        :data:`IMPL`, :data:`REFERENCE` and :data:`FLOAT64` (the reference inputs in float64, made in the
        worker). ``sets`` may instead be a picklable recipe (:class:`acceptance.inputs.Recipe`): the worker
        makes the trial's inputs itself, and the runner never holds them. The worker runs the calls one after
        the other and stops at the first that breaks or modifies an input. A batch whose answers were not all read (the runner gave up on it) costs the worker: the next
        submit starts a fresh one.
        """
        if self._batch is not None and not self._batch.done:
            self.close()
        if self._proc is None or not self._proc.is_alive():
            self.close()
            self._start()
        sent: Any = sets
        if not isinstance(sets, tuple):  # a recipe, sent once per case to each worker
            sent = Generate(sets if self._recipe is not sets else None, trial)
            self._recipe = sets
        # plain pickle, never torch's shared-memory reductions: the worker gets a copy it cannot write back through
        send(self._conn, dumps((sent, [(c.role, c.ref, c.inputs, c.params, c.device) for c in calls])))
        self._batch = Batch(self, trial, sets, calls, time.monotonic())
        return self._batch


#: torch's intra-op threads in a worker unless told otherwise: one, so that a CPU callable's result (a
#: reduction's order can follow the thread count) is the same on every machine and for any ``--jobs``, and N
#: jobs on N cores do not oversubscribe them.
WORKER_THREADS = 1

#: Which inputs a :class:`Call` takes: the impl's, the reference's (the baseline's), the reference's in float64.
IMPL, REFERENCE, FLOAT64 = 0, 1, 2


def call_inputs(sets: tuple[Tensors, ...], which: int) -> Tensors:
    """The inputs a call takes from a batch's ``sets`` ((impl's,) or (impl's, reference)): :data:`IMPL` the
    impl's, :data:`REFERENCE` the reference's, :data:`FLOAT64` float64 copies of the reference's
    (:func:`acceptance.oracle.float64_inputs`)."""
    if which == FLOAT64:
        from acceptance.oracle import float64_inputs

        return float64_inputs(sets[-1])
    return sets[min(which, len(sets) - 1)]


@dataclass(frozen=True)
class Call:
    """One call of a batch: ``role`` (for messages), the callable's :data:`Ref`, which inputs
    (:data:`IMPL` | :data:`REFERENCE` | :data:`FLOAT64`), keyword parameters and the device it runs on."""

    role: str
    ref: Ref
    inputs: int
    params: dict
    device: torch.device


class Batch:
    """The answers of one :meth:`Worker.submit`, read in call order."""

    def __init__(self, worker: Worker, trial: int, sets: tuple[Tensors, ...], calls: list[Call], sent: float):
        self.worker, self.trial, self.sets, self.calls = worker, trial, sets, calls
        self._started = sent  # CLOCK_MONOTONIC, shared by the processes: when the next call could start
        self._read = 0
        self.done = not calls

    def next(self, *, timeout: float = math.inf, limit: Optional[float] = None,
             names: Optional[list[str]] = None) -> tuple[Tensors, float]:
        """The next call's (outputs, seconds inside it); ``timeout`` seconds from when the worker could start it
        (the previous answer, or the submit), so a runner busy elsewhere meanwhile never shortens it."""
        call = self.calls[self._read]
        self._read += 1
        self.done = self._read == len(self.calls)
        role, trial, w = call.role, self.trial, self.worker
        wait = None if math.isinf(timeout) else max(self._started + max(timeout, 0.0) - time.monotonic(), 0.0)
        ready = multiprocessing.connection.wait([w._conn, w._proc.sentinel], wait)
        if not ready:
            self.done = True
            w.close()
            shown = limit if limit is not None else timeout
            raise CaseError(f"{role} exceeded the {shown:g} s timeout in trial {trial}; the worker was killed")
        try:
            answer = recv(w._conn) if w._conn in ready or w._conn.poll() else None
        except (EOFError, OSError):
            answer = None
        if answer is None:
            self.done = True
            w._proc.join(5)
            code = w._proc.exitcode
            w.close()
            if code is not None and code < 0:
                raise CaseError(f"{role} terminated by {_signal_name(code)} in trial {trial}")
            raise CaseError(f"{role} ended the worker process with exit status {code} in trial {trial}")
        self._started = answer[-1]
        if answer[0] == "inputs":
            self.done = True
            raise CaseError(answer[1])
        if answer[0] == "bad":
            self.done = True
            raise CaseError(f"{role} {answer[1]} in trial {trial}")
        _, outs, changed, seconds, notes, _ = answer
        w.notes += notes
        for i, now in changed:
            self.done = True
            name = f" (`{names[i]}`)" if names and i < len(names) else ""
            differs = _changed(now, self._args(call)[i])
            raise CaseError(f"{role} modified input {i}{name} in place ({differs} elements changed) in trial {trial}")
        return outs, seconds

    def _args(self, call: Call) -> Tensors:
        """The inputs ``call`` was given, as the runner holds them (made again from a recipe)."""
        return call_inputs(self.sets if isinstance(self.sets, tuple) else _input_sets(self.sets(self.trial)),
                           call.inputs)
