"""Start-up work, in one place: what a run does early or in the background so that it starts sooner, each with
its measurement in ``docs/performance.md`` ("Start-up").

- :func:`launch_workers`: the workers' fork server is launched before the runner's own heavy imports, so its torch
  import runs in its own process meanwhile (on two or more cores the two overlap); with several jobs it also
  preloads their modules (:data:`JOB_PRELOAD`), which each job would otherwise import again.
- :func:`meanwhile` / :func:`imported_meanwhile`: work the runner would otherwise do later itself (the reports'
  modules and template; scipy.stats and the metrics engines) done in a thread while it waits on the import check
  or on a worker.
- :func:`freeze`: the modules and specs loaded so far live as long as the run: moved out of the cyclic garbage
  collector's full passes, which traversed them every time (0.3 s of the runner's CPU on the built-in library,
  0.25-0.36 s of each job's).
"""

from __future__ import annotations

import gc
import importlib
import threading
from collections.abc import Callable

from acceptance.isolation import forkserver

#: Modules the fork server imports as well when a run will have several jobs: each job runs the executor's job loop
#: (:mod:`acceptance.session.executors`, which measures with :mod:`acceptance.measure.case`) and decides dual-delta
#: records with scipy.stats, which every job would otherwise import again (measured with two jobs: 2-3 core-seconds
#: and ~1 s of a 30 s run saved), and computes metrics with the numba kernels of
#: :mod:`acceptance.numerics.metrics.many` (loaded from numba's disk cache: ~0.7 s of a core in each job). A run
#: of one job leaves them out: its worker needs none of them.
JOB_PRELOAD = ["acceptance.session.executors", "acceptance.numerics.stats", "acceptance.numerics.metrics.many"]


def launch_workers(jobs: int = 1) -> None:
    """Launch the fork server now (see :func:`acceptance.isolation.forkserver.start`); ``jobs``: how many jobs the
    run will likely have (more than one adds :data:`JOB_PRELOAD`)."""
    forkserver.start(tuple(JOB_PRELOAD) if jobs > 1 else ())


def several_jobs(isolate: bool, jobs: int | None, device: str) -> bool:
    """Whether a run will likely have several job processes (before its device or cases are known): isolated,
    and ``--jobs`` above one, or by default the CPU cores on the CPU (one job per GPU otherwise)."""
    return isolate and (jobs or (forkserver.cores() if device in ("auto", "cpu") else 1)) > 1


def meanwhile(work: Callable[[], object]) -> threading.Thread:
    """Run ``work()`` in a daemon thread, its errors ignored: work done ahead that the caller would otherwise do
    later itself (an error then surfaces there)."""

    def run() -> None:
        try:
            work()
        except Exception:
            pass

    thread = threading.Thread(target=run, name=getattr(work, "__name__", "meanwhile"), daemon=True)
    thread.start()
    return thread


def imported_meanwhile(*names: str) -> threading.Thread:
    """A thread importing modules ``names`` in turn (:func:`meanwhile`). An import of the same module elsewhere
    waits for this one (CPython's per-module import locks); the two threads share one core's worth of the GIL
    while both run Python."""

    def load() -> None:
        for name in names:
            try:
                importlib.import_module(name)
            except Exception:  # it surfaces where the module is next imported
                pass

    thread = threading.Thread(target=load, name=f"import {', '.join(names)}", daemon=True)
    thread.start()
    return thread


def freeze() -> None:
    """Move every object alive now out of the cyclic collector's full passes (``gc.freeze``)."""
    gc.freeze()
