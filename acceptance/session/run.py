"""The one run: specs loaded and checked, cases selected, measured by an executor in one case loop that observers
watch, decided together (Holm over the run), compared with a base run, and written: ``results.json`` first, then
every default report.

:func:`run` is the library call (``acceptance.run``); ``acceptance run``, ``bench``, ``tune`` and the pytest plugin
are thin callers of :class:`Session`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib
import signal
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from functools import partial
from pathlib import Path

import torch

from acceptance.cache import ReferenceCache
from acceptance.decide.limits import MAX_SLOWDOWN, check_max_slowdown
from acceptance.errors import EXIT_FAIL, EXIT_INTERRUPTED, EXIT_TERMINATED, OutputError, Terminated, UsageError
from acceptance.isolation import reaper
from acceptance.isolation.worker import WORKER_THREADS
from acceptance.protocols import CaseObserver, Executor
from acceptance.records import CaseResult, MeasuredCase, Plan, Results
from acceptance.report import REPORTERS, Context
from acceptance.session import resume, startup
from acceptance.session.executors import Settings, cache_settings, default_jobs, executor_for
from acceptance.session.kept import Kept, decided
from acceptance.session.load import load, plan_cases, select_tiers
from acceptance.session.observers import FolderGuard, Journal, Sanitizer
from acceptance.session.options import RunOptions
from acceptance.session.results import OutputFolder, collector_paused
from acceptance.spec import Case, OperatorSpec, Rules, rules_for
from acceptance.wording import counted


def resolved_device(device: str | torch.device, option: str = "--device") -> torch.device:
    """``device`` as a torch device (:func:`acceptance.device.resolve_device`); a usage error naming ``option``."""
    from acceptance.device import resolve_device

    if isinstance(device, torch.device):
        return device
    try:
        return resolve_device(device, option=option)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def jobs_for(jobs: int | None, cases: int, *, isolate: bool, device: torch.device) -> int:
    """``--jobs``, by default the CPU cores on CPU and one per GPU on CUDA (:func:`default_jobs`); one job for a
    single case or without isolation (the code under test then runs in this process)."""
    from acceptance.isolation.forkserver import cores

    if jobs is None:
        jobs = default_jobs(device, cores(), torch.cuda.device_count() if device.type == "cuda" else 0)
    return 1 if not isolate or cases < 2 else min(jobs, cases)


def reference_cache(enabled: bool, root: str | None = None) -> ReferenceCache:
    """The user's reference cache (:class:`acceptance.cache.ReferenceCache`) at ``root``, a folder or a URL
    (``None``: :func:`acceptance.cache.default_root`); a usage error when its setting is bad."""
    try:
        return ReferenceCache(root or None, enabled=enabled)
    except ValueError as exc:
        raise UsageError(f"reference cache: {exc}") from None


class Session:
    """One run of ``options``: :meth:`prepare` (checks the options, loads the specs, selects the cases, holds the
    output folder), then :meth:`run`. ``observers`` watch the case loop after the session's own (sanitizer,
    folder guard, journal)."""

    def __init__(self, options: RunOptions, observers: Sequence[CaseObserver] = ()):
        self.options = options
        self.observers = list(observers)
        self.device = torch.device("cpu")
        self.specs: list[OperatorSpec] = []
        self.cases: list[Case] = []
        self.measured: list[Kept] = []  # journaled ones first, then as the cases finish; compact (session.kept)
        self.plan: Plan | None = None  # what the whole run (every shard) measures
        self.folder: OutputFolder | None = None
        self.base_run: Results | None = None
        self.written: list[Path] = []
        self.messages: list[str] = []  # what went wrong without stopping the run (a reporter that broke)
        self.stopped: int | None = None  # the exit code of an interrupted run
        self._reports_loading = False  # the reports' modules are being imported in a thread
        self.notes: list[str] = []  # what a resumed run says about the journal (cases re-run, lines skipped)

    # ------------------------------------------------------------------ before the loop

    def check(self) -> None:
        """The options, checked before anything loads: dtypes, device, sanitizer, the base run."""
        from acceptance.formats import dtypes

        o = self.options
        unknown = [d for d in o.dtypes if d not in dtypes.TEST_DTYPES]
        if unknown:
            known = ", ".join(dtypes.TEST_DTYPES)
            raise UsageError(*(f"--dtype: unknown dtype {d!r} (known: {known})" for d in unknown))
        self.device = resolved_device(o.device, o.device_option)
        if o.sanitize:
            from acceptance.measure.sanitize import unavailable

            why = unavailable(self.device.type)
            if why:
                raise UsageError(why)
        self.base_run = compare_base(o.compare_to, o.max_slowdown)
        check_executor(o)

    def prepare(
        self,
        specs: Sequence[Path] | Sequence[OperatorSpec] = (),
        meanwhile: Sequence[Callable[[], object]] = (),
    ) -> None:
        """Check the options, hold the output folder, load ``specs`` (paths; or specs already loaded), select the
        cases and read the journal of a resumed run. ``meanwhile``: work for threads while the specs' imports are
        checked (with several jobs, the modules this process needs later: it then waits while the fork server
        preloads theirs)."""
        self.check()
        o = self.options
        if not meanwhile and startup.several_jobs(o.isolate, o.jobs, str(o.device)):
            meanwhile = (partial(importlib.import_module, "acceptance.numerics.stats"), _prepare_reports)
            self._reports_loading = True
        if o.out is not None:
            from acceptance.report import REPORTERS

            self.folder = OutputFolder(o.out, resume=o.resume, stale=tuple(r.filename for r in REPORTERS))
        try:
            loaded = [s for s in specs if not isinstance(s, Path)]
            if loaded:  # specs loaded by the caller: the work meant for the import check's wait starts now
                for work in meanwhile:
                    startup.meanwhile(work)
            else:
                loaded = load([p for p in specs if isinstance(p, Path)], meanwhile)
            self.specs = select_tiers(loaded, o.tiers)
            if loaded and not self.specs:
                tiers = sorted({s.tier for s in loaded})
                raise UsageError(
                    f"no case matches: every spec given is of tier {', '.join(tiers)}; run it with --tier {tiers[0]}"
                )
            everything, self.cases, shards = plan_cases(self.specs, o)
            self.plan = run_plan(everything, self.cases, o.shard, shards)
        except BaseException:
            self.close()
            raise
        if o.resume and self.folder is not None:
            self._resume(self.folder)

    def _resume(self, folder: OutputFolder) -> None:
        """Reuse the journaled cases whose content is unchanged (:func:`acceptance.session.resume.reuse`); say
        why the others run again, and which journal lines were skipped, in :attr:`notes`."""
        entries, bad = folder.journaled()
        if bad:
            shown = ", ".join(map(str, bad[:5])) + (", ..." if len(bad) > 5 else "")
            lines = counted(len(bad), "journal line")
            self.notes.append(
                f"resume: {lines} skipped: not a journal record (cut short, not UTF-8 or corrupt: line {shown})"
            )
        reused, self.notes[len(self.notes) :] = resume.reuse(self.cases, entries, self.keys)
        by_id = {m.id: m for m in reused}
        self.measured = [Kept.of(by_id[c.id], c) for c in self.cases if c.id in by_id]

    @functools.cached_property
    def keys(self) -> resume.Keys:
        """The content keys of this run's cases (:class:`acceptance.session.resume.Keys`), for the journal."""
        return resume.Keys(self.options, self.device)

    @property
    def todo(self) -> list[Case]:
        """The cases still to measure (a resumed run's journaled ones aside)."""
        done = {m.id for m in self.measured}
        return [c for c in self.cases if c.id not in done]

    def executor(self) -> Executor:
        """The executor of this run's options (:func:`acceptance.session.executors.executor_for`)."""
        o = self.options
        settings = Settings(
            device=self.device,
            trials=o.trials,
            threads=o.threads,
            guard=o.out if o.isolate else None,
            cache=cache_settings(reference_cache(o.cache, o.cache_dir)),
            ahead=not o.sanitize,
        )
        if o.executor == "ray":
            from acceptance.isolation.forkserver import cores
            from acceptance.session.cluster import RayExecutor

            cpus = o.jobs or cores()  # a local Ray instance's CPUs
            return RayExecutor(settings, address=o.ray_address, cpus=cpus, status=self._status)
        jobs = jobs_for(o.jobs, len(self.todo), isolate=o.isolate, device=self.device)
        return executor_for(settings, isolate=o.isolate, jobs=jobs)

    def _status(self, line: str) -> None:
        """A line on where the run stands (the Ray tasks per node), for the observers that show one."""
        for observer in self.observers:
            show = getattr(observer, "status", None)
            if callable(show):
                show(line)

    def _observers(self) -> list[CaseObserver]:
        o = self.options
        own: list[CaseObserver] = []
        if o.sanitize:
            own.append(Sanitizer(str(self.device)))
        if not o.isolate and o.out is not None:  # a worker checks the folder around each of its calls itself
            own.append(FolderGuard(o.out))
        if self.folder is not None:
            own.append(Journal(self.folder, self.keys))
        return own + self.observers

    # ------------------------------------------------------------------ the loop

    def measure(
        self, executor: Executor | None = None, around: Callable[[], AbstractContextManager[object]] | None = None
    ) -> None:
        """The case loop: every case still to measure, through ``executor`` (default: :meth:`executor`), each
        result passed through the observers and kept. Ctrl-C or SIGTERM (:class:`acceptance.errors.Terminated`)
        stops it, also while ``around()`` (a context the loop runs in: a progress display, a signal handler) is
        entered or left; the finished cases are kept and :attr:`stopped` holds the exit code. With ``exitfirst``
        (``-x``) the loop ends after the first case that fails or errors decided alone (:func:`failed_alone`); the
        run is then ``interrupted`` with exit code 1 when cases were left."""
        observers = self._observers()

        def started(case: Case) -> None:
            for observer in observers:
                observer.case_started(case)

        executor = executor if executor is not None else self.executor()
        journals = [o for o in observers if isinstance(o, Journal)]
        try:
            with around() if around is not None else contextlib.nullcontext():
                with contextlib.closing(executor.measure(self.todo, started)) as finished:
                    for case, result in finished:
                        for observer in observers:
                            result = observer.case_finished(case, result)
                        compact = next((c for j in journals if (c := j.compact(result)) is not None), None)
                        self.measured.append(Kept.of(result, case, compact))
                        if self.options.exitfirst and failed_alone(result, rules_for(case), strict=self.options.strict):
                            break
        except KeyboardInterrupt as exc:
            self.stopped = EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED
            self._keep_journaled(journals)
        finally:
            reaper.sweep_workers_parent()  # anything the code under test left behind dead workers
        if self.folder is not None:
            self.folder.sync()  # the journal's last group commit: every finished case on disk
        if self.options.exitfirst and self.stopped is None and len(self.measured) < len(self.cases):
            self.stopped = EXIT_FAIL

    def _keep_journaled(self, journals: list[Journal]) -> None:
        """After a stop: every case the journal holds from this run is kept, also one whose observers the signal
        interrupted after its journal line was written (the journal is what ``--resume`` trusts, and the record
        must not hold less)."""
        kept = {m.id for m in self.measured}
        for journal in journals:
            for case, result, compact in journal.recorded:
                if result.id not in kept:
                    self.measured.append(Kept.of(result, case, compact))
                    kept.add(result.id)

    # ------------------------------------------------------------------ after the loop

    def results(self, decided: list[CaseResult], *, start: datetime, end: datetime) -> Results:
        """The run's record: ``decided`` in case order, the summary, provenance, waivers and the comparison."""
        from acceptance.decide.verdict import summarize
        from acceptance.decide.waivers import waiver_records
        from acceptance.session import provenance

        order = {case.id: k for k, case in enumerate(self.cases)}
        cases = sorted(decided, key=lambda c: order.get(c.id, len(order)))
        env = provenance.environment(self.device, command_line=self.options.command_line, start=start, end=end)
        ran = {c.id for c in cases}
        res = Results(
            environment=env,
            summary=summarize(cases, interrupted=self.stopped),
            cases=cases,
            interrupted=self.stopped is not None,
            not_run=[c.id for c in self.cases if c.id not in ran] if self.stopped else [],
            waivers=waiver_records(self.specs, cases),
            plan=self.plan,
        )
        if self.base_run is not None:
            res = with_comparison(res, self.base_run, str(self.options.compare_to), self.options.max_slowdown)
        return res

    def decide(self) -> list[CaseResult]:
        """Every measured case decided together (Holm over the run), in case order, one case's object graph at
        a time (:func:`acceptance.session.kept.decided`)."""
        order = {case.id: k for k, case in enumerate(self.cases)}
        measured = sorted(self.measured, key=lambda m: order.get(m.id, len(order)))
        return list(decided(measured, strict=self.options.strict))

    def write(self, res: Results) -> list[Path]:
        """results.json, then the default reports, into the output folder (none: nothing written)."""
        out = self.options.out
        if out is None:
            return []
        try:
            self.written = write_reports(res, out, on_error=self.messages.append)
        except OSError as exc:
            raise OutputError(f"--out {out}: cannot write the results: {exc.strerror or exc}") from None
        finally:
            self.close()
        return self.written

    def close(self) -> None:
        if self.folder is not None:
            self.folder.close()
            self.folder = None

    def run(
        self, executor: Executor | None = None, around: Callable[[], AbstractContextManager[object]] | None = None
    ) -> Results:
        """Measure (:meth:`measure`), decide, record and write (after :meth:`prepare`); the run's
        :class:`Results`."""
        from acceptance.session import provenance

        start = provenance.now()
        if not self._reports_loading:
            startup.meanwhile(_prepare_reports)  # the reports' modules and template, ready when the run ends
        startup.freeze()
        try:
            with _signals(Terminated):
                self.measure(executor, around)
            with _signals(self._stop_later), collector_paused():  # the finished cases are recorded whatever comes
                res = self.results(self.decide(), start=start, end=provenance.now())
                self.write(res)
        except BaseException:
            self.close()
            raise
        return res

    def _stop_later(self, signum: int) -> None:
        """A SIGINT or SIGTERM once the measuring is over: the run is recorded as stopped (when its record is not
        made yet), and its results and reports are still written."""
        if self.stopped is None:
            self.stopped = EXIT_INTERRUPTED if signum == signal.SIGINT else EXIT_TERMINATED


@contextlib.contextmanager
def _signals(action: Callable[[int], object] | type[Terminated]) -> Iterator[None]:
    """SIGTERM (what CI sends on cancel) and, but for :class:`Terminated`, SIGINT handled by ``action`` while the
    block runs (``Terminated``: raised, so that the case loop stops as on Ctrl-C); in the main thread only, and
    only where the signal has no handler of the caller's. The handlers before are restored after."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: object) -> None:
        if action is Terminated:
            raise Terminated()
        action(signum)

    previous = {}
    wanted = (signal.SIGTERM,) if action is Terminated else (signal.SIGTERM, signal.SIGINT)
    for sig in wanted:
        current = signal.getsignal(sig)
        if current in (signal.SIG_DFL, signal.default_int_handler) or action is not Terminated:
            previous[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


EXECUTORS = ("local", "ray")


def check_executor(options: RunOptions) -> None:
    """``--executor`` and ``--ray-address`` checked: a known executor; Ray installed and isolation on for ``ray``
    (a task measures its cases in workers, there is no Ray task without them); an address only for ``ray``."""
    if options.executor not in EXECUTORS:
        raise UsageError(f"--executor: unknown executor {options.executor!r} (known: {', '.join(EXECUTORS)})")
    if options.executor != "ray":
        if options.ray_address:
            raise UsageError("--ray-address: only with --executor ray")
        return
    if not options.isolate:
        raise UsageError("--executor ray measures in worker processes: it cannot be used with --no-isolation")
    from acceptance.session.cluster import import_ray

    import_ray()


def run_plan(
    everything: Sequence[Case],
    cases: Sequence[Case],
    shard: tuple[int, int] | None,
    shards: Sequence[int] | None = None,
) -> Plan:
    """The plan of a run: its shard, the whole run's case count and the digests of the whole run's and this
    part's case ids in run order (:func:`acceptance.session.results.ids_digest`); a shard's also the positions of
    its cases in the whole run and every shard's size (``shards``: the shard of each case of the whole run)."""
    from acceptance.session.results import ids_digest

    plan = Plan(
        shard=list(shard) if shard else None,
        cases=len(everything),
        digest=ids_digest([c.id for c in everything]),
        part_digest=ids_digest([c.id for c in cases]),
    )
    if shard is None or shards is None:
        return plan
    mine = {c.id for c in cases}
    return plan.model_copy(
        update={
            "positions": [at for at, c in enumerate(everything) if c.id in mine],
            "shard_cases": [sum(1 for s in shards if s == k) for k in range(1, shard[1] + 1)],
        }
    )


def failed_alone(case: MeasuredCase, rules: Rules, *, strict: bool = False) -> bool:
    """Whether ``case`` fails or errors decided alone (Holm over its own dual-delta records, as the pytest plugin
    decides): what ``-x`` stops on. Holm over the whole run can only raise the adjusted p-values, so a case that
    passes alone passes in the run; one that fails alone on a dual-delta test alone may pass in it."""
    from acceptance.decide.run import decide_all

    (decided,) = decide_all([(case, rules)], strict=strict)
    return decided.verdict in ("fail", "error")


def _prepare_reports() -> None:
    from acceptance.report import prepare

    prepare()


def compare_base(path: Path | None, max_slowdown: float = MAX_SLOWDOWN) -> Results | None:
    """The base run of ``--compare-to``, loaded before anything runs (a bad path or ``--max-slowdown`` is a usage
    error at once)."""
    if path is None:
        return None
    from acceptance.session import results as results_mod

    check_max_slowdown(max_slowdown)
    return results_mod.load_run(path)


def with_comparison(res: Results, base: Results, label: str, max_slowdown: float = MAX_SLOWDOWN) -> Results:
    """The run with its comparison to ``base`` recorded and put into the gate."""
    from acceptance.decide import regression, verdict

    cmp = regression.compare_results(base, res, base_label=label, max_slowdown=max_slowdown)
    return res.model_copy(update={"comparison": cmp, "summary": verdict.gate_comparison(res.summary, cmp)})


def write_reports(res: Results, out_dir: Path, on_error: Callable[[str], None] | None = None) -> list[Path]:
    """results.json first (atomically), then every default reporter rendered from it; a reporter that breaks is
    reported to ``on_error`` and the others are still written (the results are never lost to a reporter bug)."""
    from acceptance.session import results as results_mod

    results_path = out_dir / "results.json"
    try:
        sha256 = results_mod.write_chunks(results_path, results_mod.chunks(res), prefix=".results-")
    except OSError as exc:
        raise results_mod.cannot_write(results_path, exc) from None
    context = Context(results_sha256=sha256)
    written = [results_path]
    for reporter in REPORTERS:
        if not reporter.default:
            continue
        path = out_dir / reporter.filename
        try:
            results_mod.write_text(path, reporter.render(res, context))
        except OSError as exc:  # a full disk: the files written so far stay, and the others are still tried
            if on_error is not None:
                on_error(f"{path}: cannot write: {exc.strerror or exc}; results.json is intact")
            continue
        except Exception as exc:  # a reporter bug must not lose the results
            if on_error is not None:
                on_error(f"{path}: could not render ({type(exc).__name__}: {exc}); results.json is intact")
            continue
        written.append(path)
    return written


def run_cases(
    cases: Sequence[Case],
    device: torch.device,
    *,
    trials: int | None = None,
    isolate: bool = True,
    jobs: int = 1,
    strict: bool = False,
    cache: bool = False,
    threads: int = WORKER_THREADS,
    observers: Sequence[CaseObserver] = (),
    executor: Executor | None = None,
) -> list[CaseResult]:
    """The case loop and the decision over ``cases`` already expanded (no spec loading, no files): their decided
    results in case order. The library call behind :func:`acceptance.session.tune.run_seeds` and the pytest
    plugin (which holds its ``executor`` across cases)."""
    options = RunOptions(
        device=device, trials=trials, isolate=isolate, jobs=jobs, strict=strict, cache=cache, threads=threads
    )
    session = Session(options, observers)
    session.device, session.cases = device, list(cases)
    session.specs = list({id(c.spec): c.spec for c in cases}.values())
    session.measure(executor)
    if session.stopped:
        raise KeyboardInterrupt
    return session.decide()


def run(specs: Sequence[Path | str] | Sequence[OperatorSpec] = (), **options: object) -> Results:
    """Run operator specs and return the decided :class:`~acceptance.records.Results` (``acceptance.run``).

    ``specs``: spec files or folders (default ``operator_specs``), or specs already loaded. ``options``: the
    fields of :class:`RunOptions` (``out=`` writes results.json and the reports there, as ``acceptance run
    --out`` does; without it nothing is written). Example::

        res = acceptance.run(["operator_specs/gelu.yaml"], dtypes=("float16",), jobs=2)
        res.summary.verdict, [c.id for c in res.cases if c.verdict == "fail"]
    """
    fields = {f.name for f in dataclasses.fields(RunOptions)}
    unknown = sorted(set(options) - fields)
    if unknown:
        raise TypeError(f"run() got unexpected option(s) {', '.join(unknown)}; known: {', '.join(sorted(fields))}")
    if "out" in options and options["out"] is not None:
        options["out"] = Path(str(options["out"]))
    for name in ("dtypes", "tiers"):
        if isinstance(options.get(name), str):
            options[name] = (options[name],)
        elif name in options:
            options[name] = tuple(options[name])  # type: ignore[arg-type]
    session = Session(RunOptions(**options))  # type: ignore[arg-type]
    chosen = [Path(p) if isinstance(p, str) else p for p in specs]
    session.prepare(chosen)  # type: ignore[arg-type]
    return session.run()
