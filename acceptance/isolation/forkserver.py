"""The fork server that worker and job processes start from: torch is imported once, in it.

:func:`start` launches it at once, so that its torch import runs in its own
process while the runner goes on importing and loading specs (on two or more
cores the two overlap; a run's first case no longer waits for it).
"""

from __future__ import annotations

import atexit
import contextlib
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
import time
import warnings
from collections.abc import Iterator
from multiprocessing.context import BaseContext
from multiprocessing.process import BaseProcess

from acceptance.errors import UsageError
from acceptance.isolation import reaper

#: Modules the fork server imports before it forks anything: this one first (it gives the server its quick exit,
#: :func:`_quick_exit`), then the spec package (workers and the import check resolve callables with it), and what
#: a worker's first call imports (the role wrappers, the oracle's and the emulation's references, input
#: generation): a spec's impl gets a fresh worker, which would import them again (~0.4 s of a core each time).
PRELOAD = [
    "acceptance.isolation.forkserver",
    "torch",
    "acceptance.isolation.worker",
    "acceptance.spec",
    "acceptance.isolation.adapters",
    "acceptance.numerics.oracle",
    "acceptance.numerics.emulate.roles",
    "acceptance.formats.layouts",
    "acceptance.spec.inputs",
]


#: What the server preloads (set by the first :func:`start` of this process).
_preload = PRELOAD

#: Whether this process launched its fork server (:func:`start`, :func:`context`).
_launched = False

#: Whether this process starts its workers by forking itself (a job process: :func:`fork_here`).
_forks_itself = False


def cores() -> int:
    """CPU cores this process may run on (``os.sched_getaffinity``, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def context() -> BaseContext:
    """The context worker processes start from: the ``forkserver`` context with its preload (:data:`PRELOAD`, and
    what :func:`start` added), launched; in a job process (:func:`fork_here`), the ``fork`` context."""
    if _forks_itself:
        return multiprocessing.get_context("fork")
    found = multiprocessing.get_context("forkserver")
    found.set_forkserver_preload(_preload)
    _launch()
    return found


def start_process(proc: BaseProcess) -> None:
    """``proc.start()``, also when the caller's ``__main__`` came from no file (``python - < script``, an
    embedding host): multiprocessing then asks each new process to import the main module from its path
    (``'<stdin>'``), which fails there; such a main module holds nothing a worker could need."""
    with main_file_hidden(only_missing=True):
        proc.start()


@contextlib.contextmanager
def main_file_hidden(*, only_missing: bool = False) -> Iterator[None]:
    """The main module without its ``__file__`` meanwhile (``only_missing``: only where no such file exists), so
    that processes started meanwhile do not import it to prepare themselves; a main module run as ``-m`` (with a
    ``__spec__``) or with no file is left as it is."""
    main = sys.modules.get("__main__")
    path = getattr(main, "__file__", None)
    if main is None or not isinstance(path, str) or getattr(main, "__spec__", None) is not None:
        yield
        return
    if only_missing and os.path.exists(path):
        yield
        return
    del main.__file__
    try:
        yield
    finally:
        main.__file__ = path


def fork_here() -> None:
    """In a job process of ``--jobs`` (itself started from the fork server, torch and the runner's modules
    already imported, one thread measuring): start this process's workers by forking it, as the fork server
    forks its own processes. Launching a fork server of its own would import torch and the preloaded modules
    again (~1.7 s of a core per job, which its first worker waited for). Only where ``fork`` is safe to use
    (Linux); elsewhere the job launches its own server."""
    global _forks_itself
    _forks_itself = sys.platform.startswith("linux")
    reaper.become_subreaper(workers_here=_forks_itself)  # what its dead workers leave is handed up here


def start(more: tuple[str, ...] = ()) -> None:
    """Launch the fork server now (a no-op when it runs); it preloads :data:`PRELOAD` and the modules ``more`` in
    the background (only a server not yet launched takes them)."""
    global _preload
    if not _launched and not _forks_itself:
        _preload = PRELOAD + list(more)
    context()


def children(pid: int) -> list[int]:
    """Live children of process ``pid`` (``/proc/<pid>/task/*/children``); empty when it cannot be read."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as fh:
                found += [int(c) for c in fh.read().split()]
    except OSError:
        pass
    return found


def _running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie (``/proc/<pid>/stat``)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def settle(pids: list[int], timeout: float = 10.0) -> bool:
    """Wait until none of the processes ``pids`` runs any more (the workers of killed jobs), at most ``timeout``
    seconds; whether none does. Workers end on their own once their job is killed
    (:func:`acceptance.isolation.serve.die_with`), a few milliseconds later: until then one may still be in a call,
    watching the run's output folder, and would remove a file the runner writes there as one the call wrote.
    Read from ``/proc`` (Linux); elsewhere ``False`` at once."""
    if not os.path.isdir("/proc/self"):
        return False
    deadline = time.monotonic() + timeout
    while any(_running(pid) for pid in pids):
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)
    return True


#: Set in the fork server's environment as it is launched, to the launching process's id: the process that
#: imports this module with it naming its parent is the fork server.
SERVER_MARK = "ACCEPTANCE_FORK_SERVER_OF"


def _quick_exit() -> None:  # pragma: no cover - runs in the fork server
    """The fork server's last exit handler: flush its streams and end the process, without the interpreter's
    teardown.

    The server ends when the last process holding its liveness pipe ends (the runner, as it exits). A normal
    exit then frees torch and the other preloaded modules one by one (0.5-1 s), holding the runner's standard
    output and error open all the while: whoever reads them to their end (a pipe, a CI log,
    ``subprocess.run(capture_output=True)``) waited that long after the runner had exited (measured: 0.7 s
    after a 12 s run). :func:`acceptance.__main__.entry` ends the runner the same way. The processes forked
    from the server end with ``os._exit`` and never run it.
    """
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(0)


if os.environ.get(SERVER_MARK) == str(os.getppid()):  # imported by the fork server (first of its preload)
    del os.environ[SERVER_MARK]  # not for the processes it forks
    atexit.register(_quick_exit)  # registered first, run last: after every other exit handler
    reaper.become_subreaper()  # what a dead worker leaves behind is handed up here, where reaper.sweep finds it
    warnings.filterwarnings("ignore", "forkserver: waitpid returned unexpected pid")  # those orphans, reaped


#: The OpenMP settings the fork server starts with, unless the environment sets them: workers and jobs set
#: their own intra-op thread count (``torch.set_num_threads``), and a pool thread waits asleep, not spinning.
OPENMP = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def _launch() -> None:
    """Launch the fork server (a no-op when it runs) with :data:`OPENMP` and :data:`SERVER_MARK` in its
    environment.

    Without them, an OpenMP pool thread of torch's runtime spun between calls in a worker, taking a core from
    the runner (measured: 2.5 s of CPU in a 10 s run, and a run on two cores no faster than on one).
    """
    global _launched
    added = {k: v for k, v in OPENMP.items() if k not in os.environ}
    os.environ.update(added)
    mark = os.environ.get(SERVER_MARK)
    os.environ[SERVER_MARK] = str(os.getpid())
    try:
        multiprocessing.forkserver.ensure_running()
        _launched = True
    except OSError as exc:  # its socket lives in the temporary folder, whose path a socket address can outgrow
        import tempfile

        raise UsageError(
            f"cannot start the worker processes' fork server: {exc} (its socket goes in "
            f"{tempfile.gettempdir()}: set TMPDIR to a shorter folder)"
        ) from None
    finally:
        for k in added:
            del os.environ[k]
        if mark is None:
            del os.environ[SERVER_MARK]
        else:
            os.environ[SERVER_MARK] = mark


def signal_name(exitcode: int) -> str:
    """The signal that ended a child process, from its negative ``exitcode``: ``SIGSEGV``, or ``signal 99``."""
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"
