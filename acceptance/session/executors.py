"""Executors: where a run's cases are measured. Each one yields every case with its (undecided) measurement as it
finishes; the case loop around them (:class:`acceptance.session.Session`) is the same for all.

- :class:`InProcess`: the callables run in this process (``--no-isolation``, debugging; a crash ends the run).
- :class:`OneWorker`: the callables run in worker processes (:class:`acceptance.isolation.split.RolePool`): the
  impl in a fresh worker per spec, baseline and oracle in a reference worker that never imports an impl; while a
  case is measured here, the workers already compute the next case's first trial.
- :class:`Jobs`: ``--jobs N``: N job processes, each measuring whole cases with workers of its own, so the CPU
  work of measuring one case overlaps with the callables of the others. A case's inputs depend only on the spec
  seed, its id and the trial, and every metric of a case is computed inside one process, so a case's record is
  the same whichever job measured it (timings aside). A job process that dies (the code under test can kill its
  worker, not the job; an out-of-memory kill can) is that case's error: a fresh job takes the next case.

Jobs ignore SIGINT (a terminal's Ctrl-C reaches the runner only, which stops them) and end when the runner ends,
however it ends. Each job's worker checks the output folder around every call, so a file the code under test
writes there is charged to the call that wrote it.
"""

from __future__ import annotations

import multiprocessing
import multiprocessing.connection
import os
import signal
from collections import deque
from collections.abc import Callable, Generator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch

from acceptance.cache import ReferenceCache
from acceptance.isolation import forkserver
from acceptance.isolation.serve import die_with
from acceptance.isolation.split import RolePool, RoleWorkers
from acceptance.isolation.worker import INHERITED, WORKER_THREADS
from acceptance.measure import case as measuring
from acceptance.measure.references import RunReferences
from acceptance.records import MeasuredCase
from acceptance.session import startup
from acceptance.spec import Case, rules_for

Started = Callable[[Case], None]


@dataclass(frozen=True)
class Settings:
    """What every executor needs to measure a case: the impl's device, the trials (``None``: the spec's),
    torch's intra-op threads in each worker, the output folder the workers guard, the reference cache's folder
    or URL, cap and switch (``None``: no cache), and whether the next case may be sent to a worker while one is measured
    (not under ``--sanitize``, which runs the impl again between cases)."""

    device: torch.device
    trials: int | None = None
    threads: int = WORKER_THREADS
    guard: Path | None = None
    cache: tuple[Path | str, int, bool] | None = None
    ahead: bool = True

    def reference_cache(self, *, read_only: bool = False) -> ReferenceCache | None:
        """The run's reference cache; ``read_only`` where the references are computed in the process that runs
        the code under test (:class:`InProcess`): only a pristine reference worker's references are stored."""
        if self.cache is None:
            return None
        root, max_bytes, enabled = self.cache
        return ReferenceCache(root, max_bytes=max_bytes, enabled=enabled, read_only=read_only)


def workers_for(pool: RolePool, case: Case) -> RoleWorkers:
    """The workers to measure ``case`` with (:meth:`acceptance.isolation.split.RolePool.workers`): its spec's impl
    worker and the reference worker, of the case's memory limit; the impl workers of other specs are ended."""
    found = pool.workers(str(case.spec.path), measuring.worker_limit(case))
    pool.retire(keep=found)
    return found


def cache_settings(cache: ReferenceCache | None) -> tuple[Path | str, int, bool] | None:
    """A reference cache as :attr:`Settings.cache`."""
    return None if cache is None else (cache.root, cache.max_bytes, cache.enabled)


class InProcess:
    """Calls the code under test in this process, case after case: no separation at all (an impl's patch of torch
    reaches the baseline, one spec's global state the next), so the reference cache is only read."""

    def __init__(self, settings: Settings):
        self.settings = settings

    def measure(self, cases: Sequence[Case], started: Started) -> Generator[tuple[Case, MeasuredCase], None, None]:
        s = self.settings
        references = RunReferences(s.reference_cache(read_only=True))
        startup.imported_meanwhile("acceptance.numerics.metrics.many", "acceptance.numerics.stats")
        references.cache.defer()
        try:
            for case in cases:
                started(case)
                yield case, measuring.measure(case, s.device, rules_for(case), trials=s.trials, references=references)
        finally:
            references.cache.defer(False)  # what is still queued is written now


class OneWorker:
    """Measures in this process, the callables in worker processes (:class:`acceptance.isolation.split.RolePool`):
    each spec's impl in a fresh worker of its own, baselines and oracles in one reference worker (replaced when a
    case needs another memory limit, or after the code under test broke it); the next case's first trial is sent
    once every trial of the case being measured is sent (:func:`acceptance.measure.case.begin` with ``ahead``).
    ``keep``: the workers outlive a :meth:`measure` call (the pytest plugin measures one case per call) until
    :meth:`close`."""

    def __init__(self, settings: Settings, *, keep: bool = False):
        self.settings, self.keep = settings, keep
        self._held: _WorkerRun | None = None

    def measure(self, cases: Sequence[Case], started: Started) -> Generator[tuple[Case, MeasuredCase], None, None]:
        s = self.settings
        todo = list(cases)
        if self._held is None:
            self._held = _WorkerRun(s, RunReferences(s.reference_cache()))
        run, references = self._held, self._held.references
        run.todo = todo
        own_threads = torch.get_num_threads()
        # the callables compute in the worker; here only small element-wise passes, which extra intra-op
        # threads slow down on a busy machine (7x on 2 loaded cores)
        torch.set_num_threads(1)
        references.cache.defer()  # the cache's writes wait for moments spent waiting on the worker
        done = False
        try:
            for i, case in enumerate(todo):
                started(case)
                yield case, run.measure(i)
            done = True
        finally:
            torch.set_num_threads(own_threads)
            if not self.keep:
                self.close(graceful=done)
            references.cache.defer(False)  # what is still queued is written now

    def close(self, *, graceful: bool = True) -> None:
        """End the worker: done with it (it writes the inputs it made for the cache, then exits), or at once."""
        if self._held is not None:
            if graceful:
                self._held.finish()
            self._held.close()
            self._held = None


class _WorkerRun:
    """The workers of a :class:`OneWorker` run and the case sent ahead to them."""

    def __init__(self, settings: Settings, references: RunReferences):
        self.settings, self.references = settings, references
        self.todo: list[Case] = []
        self.pool = RolePool(settings.threads, settings.guard)
        self.pool.idle = references.cache.write_next  # a worker waited on writes queued cache entries meanwhile
        self.prefetched = False
        self.ahead: measuring.Begun | None = None  # the next case, its first trial sent while this one is measured
        # the metrics engines (numba kernels loaded, ~1 s) and scipy.stats (~1 s) are needed only where a case is
        # measured in full (and to decide): imported while the worker starts and while this process waits on it
        startup.imported_meanwhile("acceptance.numerics.metrics.many", "acceptance.numerics.stats")

    def _ready_for(self, i: int) -> RoleWorkers:
        reference = self.pool.reference
        workers = workers_for(self.pool, self.todo[i])
        if workers.reference is not reference:  # a fresh reference worker: the fingerprints in one batch
            self.references.prefetch(measuring.known_roles(self.todo[i:]), workers)
        return workers

    def measure(self, i: int) -> MeasuredCase:
        case, s = self.todo[i], self.settings
        worker = self._ready_for(i)
        begun, self.ahead = self.ahead, None
        following = self.todo[i + 1] if i + 1 < len(self.todo) else None
        return measuring.measure(
            case,
            s.device,
            rules_for(case),
            trials=s.trials,
            worker=worker,
            references=self.references,
            begun=begun,
            then=lambda: self._send_ahead(following, worker),
        )

    def _send_ahead(self, following: Case | None, worker: RoleWorkers) -> None:
        """Send the next case's first trial to its workers once every trial of this one is sent (a case of another
        spec gets its impl worker now)."""
        s = self.settings
        if following is None or not s.ahead or not self.pool.fits(measuring.worker_limit(following)):
            return
        try:
            started = measuring.begin(
                following,
                s.device,
                rules_for(following),
                trials=s.trials,
                worker=self.pool.workers(str(following.spec.path), measuring.worker_limit(following)),
                references=self.references,
                ahead=True,
            )
        except Exception:  # it gets ready in its turn, where its own error is reported
            return
        if isinstance(started, measuring.Begun):
            self.ahead = started

    def finish(self) -> None:
        self.pool.finish()

    def close(self) -> None:
        self.pool.close()


# ----------------------------------------------------------------------------- --jobs N


def job_devices(device: torch.device, jobs: int, gpus: int) -> list[torch.device]:
    """The device each of ``jobs`` job processes gives its worker: ``cuda`` (no index) spreads the jobs over
    the ``gpus`` visible GPUs in turn (job k on ``cuda:(k mod gpus)``), so that with one job per GPU each GPU
    has one worker of its own; ``cuda:i`` and ``cpu`` are kept for every job."""
    if device.type == "cuda" and device.index is None and gpus > 0:
        return [torch.device("cuda", k % gpus) for k in range(jobs)]
    return [device] * jobs


def default_jobs(device: torch.device, cores: int, gpus: int) -> int:
    """Jobs when ``--jobs`` is not given: one per GPU the device names (all visible GPUs for ``cuda``, one for
    ``cuda:i``), so that no two workers share a GPU; the CPU cores for ``cpu``."""
    if device.type == "cuda":
        return max(1, gpus) if device.index is None else 1
    return max(1, cores)


def costly(case: Case) -> bool:
    """Whether ``case`` has an mpmath oracle: arbitrary precision, element by element, the costliest calls of a
    run when its references are not cached (seconds per case where the others take milliseconds)."""
    return isinstance(case.spec.oracle, dict) and "mpmath" in case.spec.oracle


class Jobs:
    """``jobs`` job processes (started from the fork server), each measuring whole cases with its own worker."""

    #: Cases sent to a job before its first answer: the next one waits in its pipe, so no job idles between cases.
    QUEUED = 2

    def __init__(self, settings: Settings, jobs: int):
        self.settings, self.jobs = settings, jobs

    def measure(self, cases: Sequence[Case], started: Started) -> Generator[tuple[Case, MeasuredCase], None, None]:
        todo = list(cases)
        if not todo:
            return
        s = self.settings
        count = min(self.jobs, len(todo))
        gpus = torch.cuda.device_count() if s.device.type == "cuda" else 0
        pool = JobPool(s, job_devices(s.device, count, gpus))
        # the costliest cases go first, so that no job is left measuring one of them while the others idle at the
        # end (the session puts the records back in case order)
        queue = deque(sorted(todo, key=lambda case: not costly(case)))
        complete = False
        try:
            yield from pool.run(queue, started)
            complete = True
        finally:
            pool.close(graceful=complete)


class _Job:
    """One job process and the cases sent to it, oldest first."""

    def __init__(self, process: multiprocessing.process.BaseProcess, conn: multiprocessing.connection.Connection):
        self.process, self.conn = process, conn
        self.sent: deque[Case] = deque()


class JobPool:
    """The job processes of a :class:`Jobs` run; a job that dies is replaced (its cases are errors)."""

    def __init__(self, settings: Settings, devices: list[torch.device]):
        self.settings, self.devices = settings, devices
        self.context = forkserver.context()  # the fork server: torch loaded once
        self.jobs = [self._start(device) for device in devices]
        self.begun: set[str] = set()

    def _start(self, device: torch.device) -> _Job:
        """A job process (not daemonic: it starts a worker of its own; it ends with this process, see
        :func:`acceptance.isolation.serve.die_with`)."""
        mine, theirs = self.context.Pipe()
        s = self.settings
        process = self.context.Process(  # type: ignore[attr-defined]  # BaseContext's stub omits it
            target=_job_main,
            args=(theirs, device, s.trials, s.cache, s.threads, s.guard, os.getpid()),
            daemon=False,
        )
        forkserver.start_process(process)
        theirs.close()
        return _Job(process, mine)

    def run(self, queue: deque[Case], started: Started) -> Generator[tuple[Case, MeasuredCase], None, None]:
        for job in self.jobs:
            self._fill(job, queue, started)
        while any(job.sent for job in self.jobs):
            waiting: dict[object, _Job] = {job.conn: job for job in self.jobs if job.sent}
            waiting.update({job.process.sentinel: job for job in self.jobs if job.sent})
            for ready in multiprocessing.connection.wait(list(waiting)):  # type: ignore[arg-type]
                job = waiting[ready]
                if not job.sent:
                    continue
                answer = self._answer(job)
                if answer is None:  # the job died: its cases are errors, a fresh job takes the next ones
                    yield from self._lost(job, queue)
                    job = self._replace(job)
                else:
                    yield job.sent.popleft(), answer
                self._fill(job, queue, started)

    def _fill(self, job: _Job, queue: deque[Case], started: Started) -> None:
        while queue and len(job.sent) < Jobs.QUEUED:
            case = queue.popleft()
            if case.id not in self.begun:  # a case sent back from a job that died has begun already
                self.begun.add(case.id)
                started(case)
            job.conn.send(case)
            job.sent.append(case)

    @staticmethod
    def _answer(job: _Job) -> MeasuredCase | None:
        try:
            if job.conn.poll():
                answer = job.conn.recv()
                return answer if isinstance(answer, MeasuredCase) else None
        except (EOFError, OSError):
            pass
        return None

    def _lost(self, job: _Job, queue: deque[Case]) -> Generator[tuple[Case, MeasuredCase], None, None]:
        """A job that died: the case it was measuring (the oldest sent) is an error naming how it ended; the cases
        waiting in its pipe go back to the front of the queue, for another job."""
        job.process.join(5)
        code = job.process.exitcode
        how = forkserver.signal_name(code) if code is not None and code < 0 else f"exit status {code}"
        case = job.sent.popleft()
        queue.extendleft(reversed(job.sent))
        job.sent.clear()
        message = f"the job process measuring this case ended ({how})"
        yield case, measuring.error_result(case, rules_for(case), self.settings.trials, message)

    def _replace(self, job: _Job) -> _Job:
        k = self.jobs.index(job)
        job.conn.close()
        self.jobs[k] = self._start(self.devices[k])
        return self.jobs[k]

    def close(self, *, graceful: bool) -> None:
        """End the jobs: done (each finishes its worker, which writes what it made for the cache), or interrupted
        (killed at once, and nothing written to the folder the workers watch until they are gone)."""
        pids = [job.process.pid for job in self.jobs if job.process.pid is not None]  # every job is started
        workers = [] if graceful else [child for pid in pids for child in forkserver.children(pid)]
        for job in self.jobs:
            if graceful:
                job.conn.close()
            else:
                job.process.kill()
        for job in self.jobs:
            job.process.join(None if graceful else 5)
            if not graceful:
                job.conn.close()
        if not graceful:
            forkserver.settle(workers)


def job_setup(runner: int) -> None:
    """Set a job process up: Ctrl-C is the runner's to handle; its workers fork from it
    (:func:`acceptance.isolation.forkserver.fork_here`) and end with it, and it with the runner; what it inherited
    leaves the cyclic collector's passes (:func:`acceptance.session.startup.freeze`); one intra-op thread (the
    callables compute in the worker; here only small element-wise passes)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    forkserver.fork_here()
    die_with(runner)
    startup.freeze()
    torch.set_num_threads(1)


def _job_main(  # pragma: no cover - runs in a job process
    conn: multiprocessing.connection.Connection,
    device: torch.device,
    trials: int | None,
    cache: tuple[Path | str, int, bool] | None,
    threads: int,
    guard: Path | None,
    runner: int,
) -> None:
    """A job: receive cases, answer each one's measurement, until the runner closes the connection."""
    job_setup(runner)
    INHERITED.append(conn)  # not for its workers: only the job answers the runner
    settings = Settings(device, trials, threads, guard, cache)
    references = RunReferences(settings.reference_cache())
    pool = RolePool(threads, guard)
    while True:
        try:
            case = conn.recv()
        except (EOFError, OSError):
            break
        workers = workers_for(pool, case)
        conn.send(
            measuring.measure(case, device, rules_for(case), trials=trials, worker=workers, references=references)
        )
    pool.finish()
    os._exit(0)


def executor_for(settings: Settings, *, isolate: bool, jobs: int) -> InProcess | OneWorker | Jobs:
    """The executor of a run: in this process without isolation, else one worker, else ``jobs`` job processes."""
    if not isolate:
        return InProcess(settings)
    return Jobs(settings, jobs) if jobs > 1 else OneWorker(settings)


__all__ = ["InProcess", "JobPool", "Jobs", "OneWorker", "Settings", "cache_settings", "costly", "executor_for"]
