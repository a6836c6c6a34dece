"""The fork server that worker and job processes start from: torch is imported once, in it.

:func:`start` launches it at once, so that its torch import runs in its own
process while the runner goes on importing and loading specs (on two or more
cores the two overlap; a run's first case no longer waits for it).
"""

from __future__ import annotations

import atexit
import multiprocessing
import multiprocessing.forkserver
import os
import signal
import sys
import time
from multiprocessing.context import BaseContext

from acceptance.errors import UsageError

#: Modules the fork server imports before it forks anything: this one first (it gives the server its quick exit,
#: :func:`_quick_exit`), then the spec package (workers and the import check resolve callables with it).
PRELOAD = ["acceptance.isolation.forkserver", "torch", "acceptance.isolation.worker", "acceptance.spec"]

#: Modules it imports as well when a run will have several jobs: each job measures with the runner and decides
#: dual-delta records with scipy.stats, which every job would otherwise import again (measured with two jobs:
#: 2-3 core-seconds and ~1 s of a 30 s run saved), and computes metrics with the numba kernels of
#: :mod:`acceptance.numerics.metrics.many` (loaded from numba's disk cache: ~0.7 s of a core in each job). A run of one job
#: leaves them out: its worker needs none of them.
JOB_PRELOAD = ["acceptance.measure.case", "acceptance.numerics.stats", "acceptance.numerics.metrics.many"]


#: Whether this process starts its processes from a fork server another process launched (see :func:`adopt`).
_adopted = False


#: What the server preloads (set by the first :func:`start` of this process).
_preload = PRELOAD


def cores() -> int:
    """CPU cores this process may run on (``os.sched_getaffinity``, else ``os.cpu_count()``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def context() -> BaseContext:
    """The ``forkserver`` multiprocessing context with its preload (:data:`PRELOAD`, and :data:`JOB_PRELOAD` when
    :func:`start` was told of several jobs), launched (one server per process, unless it adopted its parent's:
    :func:`adopt`)."""
    found = multiprocessing.get_context("forkserver")
    found.set_forkserver_preload(_preload)
    if not _adopted:
        _launch()
    return found


def handle() -> tuple:
    """What a process started from this process's fork server needs to start its own processes from it too:
    (the server's socket address, its authentication key where the Python version has one)."""
    server = multiprocessing.forkserver._forkserver
    return server._forkserver_address, getattr(server, "_forkserver_authkey", None)


def adopt(found: tuple) -> bool:
    """In a process started from a fork server (a job of ``--jobs``): start processes from that server
    (``found``: its :func:`handle`) instead of launching one of its own, which would import torch and the
    preloaded modules again (~1.7 s of a core per job, which its first worker waited for). Whether it was
    adopted: not when this process launched a server itself, was not started from one (it then holds no end
    of the server's liveness pipe), or ``found`` names none.

    The server outlives a job as it did before: it ends when the last process holding that pipe ends.
    """
    global _adopted
    server = multiprocessing.forkserver._forkserver
    address, key = found
    if address is None or getattr(server, "_forkserver_pid", None) is not None or server._forkserver_alive_fd is None:
        return False
    server._forkserver_address = address
    if key is not None:
        server._forkserver_authkey = key
    server.ensure_running = lambda: None  # it runs: the process that launched it holds it
    _adopted = True
    return True


def start(jobs: int = 1) -> None:
    """Launch the fork server now (a no-op when it runs); it preloads in the background. ``jobs``: how many jobs
    the run will likely have (more than one adds :data:`JOB_PRELOAD`; only a server not yet launched takes it)."""
    global _preload
    if multiprocessing.forkserver._forkserver._forkserver_pid is None and not _adopted:
        _preload = PRELOAD + JOB_PRELOAD if jobs > 1 else PRELOAD
    context()


def settle(timeout: float = 10.0) -> bool:
    """Wait until no process forked from the fork server this process launched is left (jobs, their workers),
    at most ``timeout`` seconds; whether none is. Workers end on their own once their job is killed
    (:func:`acceptance.isolation.serve.die_with`), a few milliseconds later: until then one may still be in a call,
    watching the run's output folder, and would remove a file the runner writes there as one the call wrote.
    Read from ``/proc/<server>/task/*/children`` (Linux); elsewhere ``False`` at once."""
    pid = getattr(multiprocessing.forkserver._forkserver, "_forkserver_pid", None)
    if pid is None:
        return True
    deadline = time.monotonic() + timeout
    while True:
        try:
            left = any(
                open(f"/proc/{pid}/task/{task}/children").read().split() for task in os.listdir(f"/proc/{pid}/task")
            )
        except OSError:  # the server is gone (nothing is left), or there is no /proc to tell
            return os.path.isdir("/proc/self") and not os.path.isdir(f"/proc/{pid}")
        if not left:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.005)


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


#: The OpenMP settings the fork server starts with, unless the environment sets them: workers and jobs set
#: their own intra-op thread count (``torch.set_num_threads``), and a pool thread waits asleep, not spinning.
OPENMP = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def _launch() -> None:
    """Launch the fork server (a no-op when it runs) with :data:`OPENMP` and :data:`SERVER_MARK` in its
    environment.

    Without them, an OpenMP pool thread of torch's runtime spun between calls in a worker, taking a core from
    the runner (measured: 2.5 s of CPU in a 10 s run, and a run on two cores no faster than on one).
    """
    added = {k: v for k, v in OPENMP.items() if k not in os.environ}
    os.environ.update(added)
    mark = os.environ.get(SERVER_MARK)
    os.environ[SERVER_MARK] = str(os.getpid())
    try:
        multiprocessing.forkserver.ensure_running()
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
