"""The fork server that worker and job processes start from: torch is imported once, in it.

:func:`start` launches it at once, so that its torch import runs in its own
process while the runner goes on importing and loading specs (on two or more
cores the two overlap; a run's first case no longer waits for it).
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.forkserver
import os
import signal
from multiprocessing.context import BaseContext

#: Modules the fork server imports before it forks anything (the spec package: workers and the import check
#: resolve callables with it).
PRELOAD = ["torch", "acceptance.workers", "acceptance.spec"]


def context() -> BaseContext:
    """The ``forkserver`` multiprocessing context with :data:`PRELOAD` (one server per process), launched."""
    found = multiprocessing.get_context("forkserver")
    found.set_forkserver_preload(PRELOAD)
    _launch()
    return found


def start() -> None:
    """Launch the fork server now (a no-op when it runs); it preloads in the background."""
    context()


#: The OpenMP settings the fork server starts with, unless the environment sets them: workers and jobs set
#: their own intra-op thread count (``torch.set_num_threads``), and a pool thread waits asleep, not spinning.
OPENMP = {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"}


def _launch() -> None:
    """Launch the fork server (a no-op when it runs) with :data:`OPENMP` in its environment.

    Without them, an OpenMP pool thread of torch's runtime spun between calls in a worker, taking a core from
    the runner (measured: 2.5 s of CPU in a 10 s run, and a run on two cores no faster than on one).
    """
    added = {k: v for k, v in OPENMP.items() if k not in os.environ}
    os.environ.update(added)
    try:
        multiprocessing.forkserver.ensure_running()
    finally:
        for k in added:
            del os.environ[k]


def signal_name(exitcode: int) -> str:
    """The signal that ended a child process, from its negative ``exitcode``: ``SIGSEGV``, or ``signal 99``."""
    try:
        return signal.Signals(-exitcode).name
    except ValueError:
        return f"signal {-exitcode}"
