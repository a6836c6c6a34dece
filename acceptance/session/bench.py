"""Performance mode: time each case's impl (and its perf baseline) on the device, next to its accuracy check.

Statistics (pure functions of the timed call seconds ``t_1 .. t_n``, warm-up
calls never among them):

- median, min, mean, p10 and p90 (percentiles by linear interpolation between
  order statistics, numpy's default);
- GFLOP/s = flops / median / 1e9 and GB/s = bytes / median / 1e9, with
  ``flops`` and ``bytes`` the spec's ``perf.flops`` / ``perf.bytes`` evaluated
  with the case symbols (integers per call);
- copy GB/s = 2 x copied bytes / median copy time / 1e9 (each byte read once
  and written once), from a device copy timed the same way at the start of the
  run; bandwidth fraction = GB/s / copy GB/s, the roofline figure;
- speed-up = baseline median / impl median, the baseline being ``perf.baseline``
  timed on the same device with the impl's inputs; ``perf.min_speedup`` gates it
  (:func:`acceptance.decide.verdict.perf_criteria`).

Timing (:mod:`acceptance.measure.timing`) runs where the callable runs: in the worker
process with isolation (the default), so pickling the inputs and outputs never
enters a time; the inputs are those of trial 0 of the case.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Sequence
from dataclasses import dataclass
from typing import NamedTuple, cast

import numpy as np
import torch

from acceptance.errors import CaseError
from acceptance.formats.roleref import RoleRef, fresh
from acceptance.isolation import grad
from acceptance.isolation.protocol import ObjectRef
from acceptance.isolation.split import RolePool, RoleWorkers
from acceptance.measure import case as measuring
from acceptance.measure import engine
from acceptance.measure.timing import TimedRef, TimerOptions, copy_probe, timer_of
from acceptance.records import MeasuredCase, PerfRecord
from acceptance.spec import CallableRef, Case, rules_for, value_of
from acceptance.spec.inputs import RoleInputs, generate

#: Bytes the copy-bandwidth probe copies: large enough to leave the caches (256 MiB on a GPU, 64 MiB on a CPU).
COPY_BYTES = {"cuda": 256 * 2**20, "cpu": 64 * 2**20}


class SampleStats(NamedTuple):
    """Statistics of timed call seconds (see the module docstring)."""

    runs: int
    median: float
    min: float
    mean: float
    p10: float
    p90: float


def sample_stats(seconds: Iterable[float]) -> SampleStats:
    """Median, min, mean, p10, p90 of per-call seconds (``ValueError`` when there are none)."""
    t = np.asarray(list(seconds), dtype=np.float64)
    if t.size == 0:
        raise ValueError("no timed calls")
    p10, p50, p90 = np.percentile(t, [10, 50, 90])
    return SampleStats(int(t.size), float(p50), float(t.min()), float(t.mean()), float(p10), float(p90))


def rate(work: int | None, seconds: float) -> float | None:
    """work / seconds / 1e9 (GFLOP/s from flops, GB/s from bytes); ``None`` without work or time."""
    if work is None or not seconds > 0:
        return None
    return work / seconds / 1e9


def perf_work(case: Case) -> tuple[int | None, int | None]:
    """(flops, bytes) per call of a case from its spec's ``perf`` section (``None`` where not given)."""
    section = case.spec.perf or {}
    return tuple(
        int(value_of(section[k], case.symbols)) if k in section else None  # type: ignore[return-value]
        for k in ("flops", "bytes")
    )


def perf_record(
    case: Case,
    device: torch.device,
    warm: list[float],
    runs: list[float],
    baseline_runs: list[float] | None = None,
    copy_gbps: float | None = None,
) -> PerfRecord:
    """The :class:`PerfRecord` of a case from its call seconds (impl, and its perf baseline when timed)."""
    s = sample_stats(runs)
    flops, nbytes = perf_work(case)
    gbps = rate(nbytes, s.median)
    section = case.spec.perf or {}
    base = sample_stats(baseline_runs) if baseline_runs else None
    return PerfRecord(
        timer=timer_of(device),
        device=str(device),
        runs=s.runs,
        warmup_runs=len(warm),
        first_call_s=warm[0] if warm else None,
        median_s=s.median,
        min_s=s.min,
        p10_s=s.p10,
        p90_s=s.p90,
        mean_s=s.mean,
        flops=flops,
        bytes=nbytes,
        gflops=rate(flops, s.median),
        gbps=gbps,
        copy_gbps=copy_gbps,
        bandwidth_fraction=gbps / copy_gbps if gbps is not None and copy_gbps else None,
        baseline=section.get("baseline"),
        baseline_runs=base.runs if base else None,
        baseline_median_s=base.median if base else None,
        speedup=base.median / s.median if base and s.median > 0 else None,
        min_speedup=section.get("min_speedup"),
    )


# ----------------------------------------------------------------------------- timing through an executor


@dataclass
class Bencher:
    """Times callables on ``device`` through an executor: worker processes (``isolate``: a spec's impl in its own,
    see :class:`acceptance.isolation.split.RolePool`) or this process."""

    device: torch.device
    options: TimerOptions
    isolate: bool = True
    memory_limit: int | None = None

    def __post_init__(self) -> None:
        self.pool = RolePool() if self.isolate else None
        self.worker: RoleWorkers | None = self.pool.workers("", self.memory_limit) if self.pool is not None else None
        self.executor: engine.Executes = self.worker if self.worker is not None else engine.InProcess()

    def for_case(self, case: Case) -> None:
        """Time (and measure) ``case`` with its spec's impl worker from now on."""
        if self.pool is not None:
            self.worker = self.executor = self.pool.workers(str(case.spec.path), self.memory_limit)
            self.pool.retire(keep=self.worker)

    def close(self) -> None:
        if self.pool is not None:
            self.pool.close()

    def time(
        self, role: str, ref: RoleRef, args: tuple, params: dict, *, timeout: float
    ) -> tuple[list[float], list[float]]:
        """(warm-up seconds, timed seconds) of ``ref``'s callable in the timing loop, where it runs."""
        timed = TimedRef(ref, self.options.key())
        fn: TimedRef | Callable = timed if self.isolate else fresh(timed)
        outs, _ = self.executor.call(role, fn, 0, args, params, device=self.device, timeout=timeout, limit=timeout)
        if len(outs) < 2:
            raise CaseError(f"{role} returned no timings")
        return outs[-2].tolist(), outs[-1].tolist()

    def copy_gbps(self) -> float:
        """The device's copy bandwidth in GB/s: 2 x bytes / median copy time / 1e9 (see the module docstring)."""
        n = COPY_BYTES["cuda" if self.device.type == "cuda" else "cpu"]
        _, runs = self.time("copy probe", ObjectRef(copy_probe), (torch.tensor([n]),), {}, timeout=600.0)
        return 2 * n / sample_stats(runs).median / 1e9


def _budget(case: Case, options: TimerOptions) -> float:
    """Seconds a timing loop of the case may take before it is killed: the spec's per-call timeout for every
    call the loop must make, plus the loop's own minimum times."""
    calls = options.warmup + options.min_runs + 1
    return case.spec.timeout * calls + options.warmup_time + options.min_time


def _with_gradients(ref: CallableRef, case: Case, role: str) -> RoleRef:
    """``ref`` as a ``backward`` spec's role runs (forward and gradients: what is timed); ``ref`` otherwise."""
    impl, baseline, _ = grad.wrap_roles(ref, ref, ref, case)
    return impl if role == "impl" else baseline


def time_case(case: Case, bencher: Bencher, copy_gbps: float | None) -> PerfRecord:
    """Time the impl of a case (and its ``perf.baseline``) on the impl's inputs of trial 0."""
    made = generate(case, 0)
    args = tuple(made.impl if isinstance(made, RoleInputs) else made)
    spec = case.spec
    budget = _budget(case, bencher.options)
    # the timing loop takes a module:attr impl; a declared one fails where the worker resolves it (the case's error)
    impl = _with_gradients(CallableRef(cast(str, spec.impl), str(spec.path)), case, "impl")
    warm, runs = bencher.time("impl", impl, args, case.params_for("impl"), timeout=budget)
    baseline_runs = None
    if spec.perf and spec.perf.get("baseline"):
        perf_baseline = _with_gradients(CallableRef(spec.perf["baseline"], str(spec.path)), case, "baseline")
        _, baseline_runs = bencher.time("perf baseline", perf_baseline, args, case.params, timeout=budget)
    return perf_record(case, bencher.device, warm, runs, baseline_runs, copy_gbps)


class Bench:
    """The executor of ``acceptance bench`` (:class:`acceptance.protocols.Executor`): each case measured (its
    accuracy trials, usually one), then, unless that errored, timed in the same worker (:func:`time_case`). The copy
    bandwidth is measured once, first (``copy_gbps``; ``None`` when the probe broke). Cases run one at a time, so
    that no two timings share the device."""

    def __init__(self, device: torch.device, options: TimerOptions, *, trials: int = 1, isolate: bool = True):
        self.device, self.options, self.trials, self.isolate = device, options, trials, isolate
        self.copy_gbps: float | None = None

    def measure(
        self, cases: Sequence[Case], started: Callable[[Case], None]
    ) -> Generator[tuple[Case, MeasuredCase], None, None]:
        limit = max((int(c.spec.memory_limit_gib * 2**30) for c in cases), default=None)
        bencher = Bencher(self.device, self.options, isolate=self.isolate, memory_limit=limit)
        try:
            try:
                self.copy_gbps = bencher.copy_gbps()
            except CaseError:
                self.copy_gbps = None
            for case in cases:
                started(case)
                bencher.for_case(case)
                result = measuring.measure(
                    case, self.device, rules_for(case), trials=self.trials, worker=bencher.worker
                )
                if result.error is None:
                    try:
                        result = result.model_copy(update={"perf": time_case(case, bencher, self.copy_gbps)})
                    except CaseError as exc:
                        result = result.model_copy(update={"error": f"timing: {exc}"})
                yield case, result
        finally:
            bencher.close()
