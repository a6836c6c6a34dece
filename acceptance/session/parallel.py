"""``--jobs N``: measure N cases at once, each job a process with its own worker, results as with one job.

Each job process (started from a fork server, like the workers) measures whole
cases with :func:`acceptance.measure.case.measure`: it sends the impl, baseline and
oracle calls to its own :class:`~acceptance.isolation.worker.Worker` and computes the
metrics, diagnostics and statistics itself, so the CPU work of one case
overlaps with the callables of the cases the other jobs run. A case's inputs
depend only on the spec seed, its id and the trial, and every metric of a case
is computed inside one process, so a case's record is the same whichever job
measured it; the caller sorts the records back into case order and decides
them together (Holm over the run) as with one job. The records' timings
(seconds) naturally differ.

Jobs ignore SIGINT (a terminal's Ctrl-C reaches the runner only, which stops
them) and end when the runner ends, however it ends; a job that dies takes
only its in-flight cases down, each recorded as an error. Each job's worker
checks the output folder around every call, so a file the code under test
writes there is charged to the call that wrote it; without isolation the
folder is compared before a case was submitted and when it finished, and with
several cases in flight such a file is charged to the first of them that
finishes.
"""

from __future__ import annotations

import concurrent.futures
import gc
import multiprocessing.util
import os
import signal
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import torch

from acceptance.device import job_devices
from acceptance.isolation import forkserver
from acceptance.records import MeasuredCase
from acceptance.spec import Case, Rules, rules_for

_STATE: dict[str, Any] = {}


def _init(
    device: Any,
    trials: int | None,
    isolate: bool,
    cache: tuple | None,
    threads: int | None = None,
    guard: Path | None = None,
    runner: int | None = None,
    server: tuple | None = None,
) -> None:  # pragma: no cover
    """Set up one job process (runs in it); ``cache``: (root, max_bytes, enabled) of the run's cache;
    ``device``: the impl's device, or a queue of them from which each job takes its own; ``server``: the
    runner's fork server (:func:`acceptance.isolation.forkserver.handle`), which the job's workers start from."""
    if server is not None:
        forkserver.adopt(server)
    if not isinstance(device, torch.device):
        device = device.get()
    from acceptance.cache import ReferenceCache
    from acceptance.measure.references import RunReferences

    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if runner is not None:
        from acceptance.isolation.serve import die_with

        die_with(runner)  # its worker, started by this job, ends with the job
    torch.set_num_threads(1)  # the callables compute in the worker; here only small element-wise passes
    _STATE.update(
        device=device,
        trials=trials,
        isolate=isolate,
        references=RunReferences(ReferenceCache(cache[0], max_bytes=cache[1], enabled=cache[2]) if cache else None),
        worker=None,
        threads=threads,
        guard=guard,
    )
    # as the job ends (the pool shut down), its worker writes the inputs it made for the cache, then exits
    multiprocessing.util.Finalize(None, _finish, exitpriority=10)
    # what the job inherited (torch, the runner's modules, scipy.stats, the metrics engines) lives as long as
    # it: out of the cyclic collector's full passes, which traversed it every time (measured: 0.25-0.36 s of
    # each job's CPU in a run of the library, 0.01-0.02 s frozen)
    gc.freeze()


def _finish() -> None:  # pragma: no cover - runs in a job process
    if _STATE.get("worker") is not None:
        _STATE["worker"].finish()


def _measure(case: Case) -> MeasuredCase:  # pragma: no cover - runs in a job process
    from acceptance.isolation.worker import Worker
    from acceptance.measure import case as runner

    worker = None
    if _STATE["isolate"]:
        limit = runner.worker_limit(case)
        worker = _STATE["worker"]
        if worker is None or worker.memory_limit != limit:
            if worker is not None:
                worker.finish()
            worker = _STATE["worker"] = Worker(memory_limit=limit, threads=_STATE["threads"], guard=_STATE["guard"])
    return runner.measure(
        case, _STATE["device"], rules_for(case), trials=_STATE["trials"], worker=worker, references=_STATE["references"]
    )


def _costly(case: Case) -> bool:
    """Whether ``case`` has an mpmath oracle: arbitrary precision, element by element, the costliest calls of a
    run when its references are not cached (seconds per case where the others take milliseconds)."""
    return isinstance(case.spec.oracle, dict) and "mpmath" in case.spec.oracle


def measure_all(
    cases: Iterable[Case],
    device: torch.device,
    *,
    jobs: int,
    trials: int | None = None,
    on_case: Callable[[Case, MeasuredCase], None] | None = None,
    measured: list[tuple[MeasuredCase, Rules]],
    isolate: bool = True,
    guard: Path | None = None,
    cache: Any = None,
    sanitize: bool = False,
    threads: int | None = None,
) -> None:
    """Measure ``cases`` (but those already in ``measured``) in ``jobs`` processes; append (result, rules) to
    ``measured`` in case order once all finished (``on_case`` hears of each as it finishes). ``sanitize``: each
    measured impl runs once more under compute-sanitizer, from this process (:mod:`acceptance.measure.sanitize`).
    ``threads``: torch's intra-op threads of each job's worker."""
    from acceptance.measure import case as runner

    done = {m.id for m, _ in measured}
    todo = [case for case in cases if case.id not in done]
    if not todo:
        return
    context = forkserver.context()  # the workers' fork server: torch loaded once
    count = min(jobs, len(todo))
    devices = job_devices(device, count, torch.cuda.device_count() if device.type == "cuda" else 0)
    given: Any = device
    if len(set(devices)) > 1:  # one GPU per job: each job process takes its own from the queue
        given = context.Queue()
        for d in devices:
            given.put(d)
    pool = concurrent.futures.ProcessPoolExecutor(
        max_workers=count,
        mp_context=context,
        initializer=_init,
        initargs=(
            given,
            trials,
            isolate,
            (cache.root, cache.max_bytes, cache.enabled) if cache else None,
            threads,
            guard,
            os.getpid(),
            forkserver.handle(),
        ),
    )
    folder = None if isolate else guard  # each job's worker checks its calls itself
    finished: dict[str, tuple[MeasuredCase, Rules]] = {}
    complete = False
    try:
        pending: dict[concurrent.futures.Future, tuple[Case, dict]] = {}
        # the costliest cases go first, so that no job is left measuring one of them while the others idle
        # at the end (the records are put back in case order below)
        queue = iter(sorted(todo, key=lambda case: not _costly(case)))

        def submit() -> None:
            case = next(queue, None)
            if case is not None:
                pending[pool.submit(_measure, case)] = (case, runner.snapshot(folder))

        for _ in range(2 * jobs):  # a little ahead of the jobs, so none waits for the next case
            submit()
        while pending:
            ready, _ = concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
            for future in ready:
                case, before = pending.pop(future)
                try:
                    result = future.result()
                except Exception as exc:  # the job process died (a worker is what the code under test can kill)
                    result = MeasuredCase(
                        **runner._identity(case, runner.trials_of(case, rules_for(case), trials)),
                        error=f"the job measuring this case failed: {type(exc).__name__}: {exc}",
                    )
                if sanitize:
                    from acceptance.measure import sanitize as sanitizer

                    result = sanitizer.check(case.id, case.spec.path, result, str(device))
                result = runner.guarded(result, folder, before)
                finished[case.id] = (result, rules_for(case))
                if on_case:
                    on_case(case, result)
                submit()
        complete = True
    finally:
        if not complete:  # interrupted: do not wait for the cases in flight
            for proc in list((getattr(pool, "_processes", None) or {}).values()):
                proc.kill()
        pool.shutdown(wait=complete, cancel_futures=True)
        if not complete:  # and write nothing to the folder the jobs' workers watch until they are gone
            forkserver.settle()
        measured.extend(finished[case.id] for case in todo if case.id in finished)
