"""Run trials: inputs -> impl on the device | baseline on CPU | oracle in float64 -> metrics -> verdicts.

Per case and trial the runner generates the inputs (CPU, test dtype), runs the
impl on the test device, the baseline on CPU in the test dtype and, where the
case needs it, the oracle on float64 copies of the inputs (integer tensors
unchanged). It keeps the worst-over-trials metrics of impl vs baseline, the
worst element, the relative-error buckets and the diff4 counts, and hands the
per-trial oracle errors to the dual-delta statistics.

An impl that raises, returns the wrong number of outputs, shape or dtype, or
runs past the case's timeout gives verdict ``error`` with the message; the run
goes on with the next case.
"""

from __future__ import annotations

import contextlib
import math
import platform
import signal
import socket
import subprocess
import threading
import time
import traceback
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch

import acceptance
from acceptance import metrics, stats, verdict
from acceptance import oracle as oracle_mod
from acceptance.inputs import generate
from acceptance.results import CaseResult, Criterion, DualDeltaRecord, Environment, Timing, WorstElement
from acceptance.spec import Case, resolve_callable

#: Relative-error buckets, as rocMLIR prints them: label -> upper bound (exclusive).
REL_ERROR_BUCKETS: tuple[tuple[str, float], ...] = (
    ("<1e-6", 1e-6), ("1e-6..1e-5", 1e-5), ("1e-5..1e-4", 1e-4), ("1e-4..1e-3", 1e-3),
    ("1e-3..1e-2", 1e-2), ("1e-2..1e-1", 1e-1), ("1e-1..1", 1.0),
)


class CaseError(Exception):
    """The run of a case broke (impl raised, wrong output, timeout): verdict ``error``."""


class CaseTimeout(CaseError):
    pass


# ----------------------------------------------------------------------------- devices


def resolve_device(name: str = "auto") -> torch.device:
    """``auto`` = the first CUDA device when present, else CPU; ``cuda[:i]`` must exist."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except (RuntimeError, ValueError):
        raise ValueError(f"--device: '{name}' is not a device (auto, cpu, cuda, cuda:N)") from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise ValueError(f"--device: '{name}' asked for, but torch sees no CUDA device")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise ValueError(f"--device: '{name}': only {torch.cuda.device_count()} CUDA device(s)")
    elif device.type != "cpu":
        raise ValueError(f"--device: '{name}' is not supported (auto, cpu, cuda, cuda:N)")
    return device


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def _git_commit(cwd: Path) -> Optional[str]:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None


def environment(device: torch.device, *, command_line: str, start: datetime, end: datetime,
                cwd: Path = Path.cwd()) -> Environment:
    """Provenance of a run: versions, device, commit, host, times (UTC, ISO 8601)."""
    return Environment(
        acceptance=acceptance.__version__,
        python=platform.python_version(),
        torch=torch.__version__,
        numpy=np.__version__,
        platform=platform.platform(),
        host=socket.gethostname(),
        device=str(device),
        device_name=device_name(device),
        cuda_version=torch.version.cuda if device.type == "cuda" else None,
        git_commit=_git_commit(cwd),
        command_line=command_line,
        start_time=start.isoformat(timespec="seconds"),
        end_time=end.isoformat(timespec="seconds"),
    )


def now() -> datetime:
    return datetime.now(timezone.utc)


# ----------------------------------------------------------------------------- calling


@contextlib.contextmanager
def _deadline(seconds: float, what: str):
    """Raise :class:`CaseTimeout` in the main thread after ``seconds`` (SIGALRM; no-op elsewhere)."""
    usable = hasattr(signal, "setitimer") and threading.current_thread() is threading.main_thread()
    if not usable or seconds <= 0 or math.isinf(seconds):
        yield
        return

    def _alarm(signum, frame):
        raise CaseTimeout(f"{what} exceeded the case timeout")

    previous = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _outputs(value: Any, role: str) -> tuple[torch.Tensor, ...]:
    outs = value if isinstance(value, (tuple, list)) else (value,)
    for i, out in enumerate(outs):
        if not isinstance(out, torch.Tensor):
            raise CaseError(f"{role} returned {type(out).__name__} at output {i}, expected a Tensor")
    if not outs:
        raise CaseError(f"{role} returned no output")
    return tuple(outs)


def _call(fn: Callable, role: str, tensors: list[torch.Tensor], params: dict) -> tuple[torch.Tensor, ...]:
    try:
        value = fn(*tensors, **params)
    except CaseError:
        raise
    except Exception as exc:  # the callable under test may raise anything
        frame = traceback.extract_tb(exc.__traceback__)[-1]
        raise CaseError(f"{role} raised {type(exc).__name__}: {exc} ({Path(frame.filename).name}:{frame.lineno})") from None
    return _outputs(value, role)


def _check_like(impl: tuple[torch.Tensor, ...], base: tuple[torch.Tensor, ...]) -> None:
    if len(impl) != len(base):
        raise CaseError(f"impl returned {len(impl)} outputs, the baseline {len(base)}")
    for i, (e, b) in enumerate(zip(impl, base)):
        if tuple(e.shape) != tuple(b.shape):
            raise CaseError(f"impl output {i} has shape {tuple(e.shape)}, the baseline {tuple(b.shape)}")
        if e.dtype != b.dtype:
            raise CaseError(f"impl output {i} has dtype {e.dtype}, the baseline {b.dtype}")


# ----------------------------------------------------------------------------- per-element diagnostics


def _abs_error(e: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|e - b| in float64 on e's device; matched NaN/Inf -> 0, mismatched -> inf."""
    e64, b64 = e.to(torch.float64), b.to(device=e.device, dtype=torch.float64)
    err = (e64 - b64).abs()
    matched = (torch.isnan(e64) & torch.isnan(b64)) | (torch.isinf(e64) & (e64 == b64))
    err = torch.where(matched, torch.zeros_like(err), err)
    return torch.nan_to_num(err, nan=math.inf, posinf=math.inf)


def _rel_error(err: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|e - b| / |b| with 0/0 = 0, x/0 = inf, and inf where the error is inf (a NaN/Inf mismatch)."""
    babs = b.to(device=err.device, dtype=torch.float64).abs()
    rel = torch.nan_to_num(err / babs, nan=math.inf, posinf=math.inf)
    return torch.where(err == 0, torch.zeros_like(rel), rel)


def _buckets(rel: torch.Tensor) -> dict[str, int]:
    """Counts of relative errors: exactly 0, then [0, 1e-6), [1e-6, 1e-5), ..., [0.1, 1), and >= 1 (labelled '>1')."""
    edges = torch.tensor([upper for _, upper in REL_ERROR_BUCKETS], dtype=torch.float64, device=rel.device)
    nonzero = rel[rel != 0]
    counts = torch.bincount(torch.bucketize(nonzero, edges, right=True), minlength=len(edges) + 1).tolist()
    labels = [label for label, _ in REL_ERROR_BUCKETS] + [">1"]
    return {"=0": int(rel.numel() - nonzero.numel()), **dict(zip(labels, counts))}


def _locate(bad: torch.Tensor) -> Optional[str]:
    """Where the bad elements sit, in words: one row, one column, the tail of the last dim, everywhere."""
    if bad.dim() == 0 or not bool(bad.any()):
        return None
    idx = bad.nonzero()
    count, total = idx.shape[0], bad.numel()
    if bad.dim() >= 2:
        rows = torch.unique(idx[:, 0])
        if rows.numel() == 1 and bad.shape[0] > 1:
            return f"all {count} in row {int(rows[0])} of dim 0"
        cols = torch.unique(idx[:, -1])
        if cols.numel() == 1 and bad.shape[-1] > 1:
            return f"all {count} in index {int(cols[0])} of the last dim"
    last = bad.shape[-1]
    cols = torch.unique(idx[:, -1])
    first_bad = int(cols[0])
    if first_bad > 0 and cols.numel() == last - first_bad:  # exactly the columns first_bad..last-1
        return f"all {count} in the tail of the last dim (indices >= {first_bad} of {last})"
    if count == total:
        return "everywhere"
    return None


# ----------------------------------------------------------------------------- accumulation


@dataclass
class _OutputAccumulator:
    """Worst-over-trials state of one output of one case."""

    worst_metrics: dict[str, Any] = field(default_factory=dict)
    above: int = 0
    below: int = 0
    base_above: int = 0
    base_below: int = 0
    worst: Optional[WorstElement] = None
    bad_fraction: float = 0.0
    bad_where: Optional[str] = None
    buckets: dict[str, int] = field(default_factory=dict)
    delta_impl: dict[str, list[float]] = field(default_factory=dict)
    delta_baseline: dict[str, list[float]] = field(default_factory=dict)
    free: dict[str, list[float]] = field(default_factory=dict)

    def add_metrics(self, m: dict[str, Any]) -> None:
        for name, value in m.items():
            if name == "diff4":
                p1, p2, n = value
                self.above += int(round(p1 * n))
                self.below += int(round(p2 * n))
                continue
            old = self.worst_metrics.get(name)
            if isinstance(value, tuple):
                value = [float(v) for v in value]
                self.worst_metrics[name] = value if old is None else [_worse(a, b) for a, b in zip(old, value)]
            else:
                value = float(value)
                self.worst_metrics[name] = value if old is None else _worse(old, value)

    def metrics_record(self) -> dict[str, Any]:
        record = dict(self.worst_metrics)
        n = self.above + self.below
        record["diff4"] = [self.above / n if n else 0.0, self.below / n if n else 0.0, float(n)]
        return record


def _worse(a: float, b: float) -> float:
    if math.isnan(a) or math.isnan(b):
        return math.nan
    return max(a, b)


# ----------------------------------------------------------------------------- the case


@dataclass
class _Callables:
    impl: Callable
    baseline: Callable
    oracle: Callable


def _callables(case: Case) -> _Callables:
    spec = case.spec
    impl = resolve_callable(spec.impl, spec.path)
    baseline = resolve_callable(spec.baseline, spec.path) if spec.baseline else impl
    if isinstance(spec.oracle, dict):
        from acceptance.oracle import oracle_from_spec

        oracle = oracle_from_spec(spec.oracle)
    else:
        oracle = resolve_callable(spec.oracle, spec.path) if spec.oracle else baseline
    return _Callables(impl, baseline, oracle)


def _dual_delta_settings(case: Case) -> Optional[dict[str, Any]]:
    """The dual-delta settings in force for a case, or ``None`` when off."""
    section = dict(case.spec.dual_delta or {})
    enabled = section.get("enabled", case.spec.category in stats.DEFAULT_CATEGORIES)
    if not enabled:
        return None
    metric_names = list(section.get("metrics") or stats.DEFAULT_METRICS)
    factor = section.get("factor")
    factors = {m: (factor.get(m) if isinstance(factor, dict) else factor) or stats.default_factor(m)
               for m in metric_names}
    return {
        "metrics": metric_names,
        "factors": factors,
        "alpha": float(section.get("alpha", stats.DEFAULT_ALPHA)),
        "trials": section.get("trials"),
    }


def run_case(case: Case, device: torch.device, *, trials: Optional[int] = None) -> CaseResult:
    """Run every trial of one case and decide its verdict. Never raises for a broken impl."""
    spec = case.spec
    dd = _dual_delta_settings(case)
    n_trials = trials or (dd and dd["trials"]) or spec.trials
    base = dict(
        id=case.id, operator=spec.name, category=spec.category, spec_file=str(spec.path), dtype=case.dtype,
        params={**case.symbols, **({"params": case.case_params} if case.case_params else {})},
        trials=n_trials, seed=spec.seed,
    )
    timing = Timing()
    started = time.perf_counter()
    try:
        fns = _callables(case)
    except Exception as exc:
        return CaseResult(**base, verdict="error", reasons=[f"cannot resolve callables: {exc}"], error=str(exc))
    overrides = spec.thresholds.get(case.dtype, {})
    thresholds = verdict.thresholds_for(spec.category, case.dtype, overrides)
    use_diff4 = verdict.diff4_enabled(spec.category, overrides)
    elem_tol = 0.0 if spec.category in verdict.BIT_EXACT_CATEGORIES else min(
        (float(t.value) for t in thresholds if t.metric in ("diff1", "diff2")), default=0.0)
    accs: list[_OutputAccumulator] = []
    atomic_spread = 0.0 if spec.category == "atomic_add" else None
    impl_budget = spec.timeout
    try:
        for trial in range(n_trials):
            inputs = generate(case, trial)
            impl_inputs = [t.to(device) for t in inputs]

            t0 = time.perf_counter()
            with _deadline(impl_budget - timing.impl, f"impl ({spec.timeout:g} s)"):
                impl_out = _call(fns.impl, "impl", impl_inputs, case.params)
                _sync(device)
            timing.impl += time.perf_counter() - t0

            t0 = time.perf_counter()
            base_out = _call(fns.baseline, "baseline", inputs, case.params)
            timing.baseline += time.perf_counter() - t0
            _check_like(impl_out, base_out)
            if not accs:
                accs = [_OutputAccumulator() for _ in impl_out]

            if atomic_spread is not None:
                for _ in range(max(spec.atomic_runs, 2) - 1):
                    t0 = time.perf_counter()
                    with _deadline(impl_budget - timing.impl, f"impl ({spec.timeout:g} s)"):
                        again = _call(fns.impl, "impl", impl_inputs, case.params)
                        _sync(device)
                    timing.impl += time.perf_counter() - t0
                    for a, b in zip(again, impl_out):
                        atomic_spread = max(atomic_spread, float(_abs_error(a, b).max()) if a.numel() else 0.0)

            oracle_out = None
            if dd or use_diff4:
                t0 = time.perf_counter()
                oracle_out = _call(fns.oracle, "oracle", list(oracle_mod.float64_inputs(inputs)), case.params)
                timing.oracle += time.perf_counter() - t0
                if len(oracle_out) != len(base_out):
                    raise CaseError(f"oracle returned {len(oracle_out)} outputs, the baseline {len(base_out)}")

            for out, (e, b) in enumerate(zip(impl_out, base_out)):
                acc = accs[out]
                acc.add_metrics(metrics.compute(e, b, dtype=case.dtype))
                _diagnose(acc, trial, out, e, b, elem_tol)
                if oracle_out is None:
                    continue
                o = oracle_out[out]
                if use_diff4:
                    p1, p2, n = metrics.compute(b, o.to(torch.float64), dtype=case.dtype, names=["diff4"])["diff4"]
                    acc.base_above += int(round(p1 * n))
                    acc.base_below += int(round(p2 * n))
                if dd:
                    _collect_deltas(acc, e, b, o, case.dtype, dd["metrics"])
    except CaseError as exc:
        timing.total = time.perf_counter() - started
        return CaseResult(**base, verdict="error", reasons=[str(exc)], error=str(exc), timing=timing)
    except Exception as exc:  # input generation or metrics on a malformed output
        timing.total = time.perf_counter() - started
        message = f"{type(exc).__name__}: {exc}"
        return CaseResult(**base, verdict="error", reasons=[message], error=message, timing=timing)

    worst_metrics = [acc.metrics_record() for acc in accs]
    criteria = verdict.evaluate([{k: v for k, v in m.items() if k != "diff4"} for m in worst_metrics], thresholds)
    if use_diff4:
        for out, acc in enumerate(accs):
            criteria.append(verdict.diff4_criterion(out, acc.above, acc.below, acc.base_above, acc.base_below))
    records: list[DualDeltaRecord] = []
    if dd:
        for out, acc in enumerate(accs):
            for name in dd["metrics"]:
                records.append(stats.analyze(
                    np.asarray(acc.delta_impl[name]), np.asarray(acc.delta_baseline[name]),
                    metric=name, output=out, factor=dd["factors"][name], alpha=dd["alpha"],
                    free=np.asarray(acc.free[name]),
                ))
    worst = max((acc.worst for acc in accs if acc.worst), key=lambda w: w.abs_error, default=None)
    bad = max(accs, key=lambda acc: acc.bad_fraction) if accs else None
    buckets: dict[str, int] = {}
    for acc in accs:
        for k, v in acc.buckets.items():
            buckets[k] = buckets.get(k, 0) + v
    timing.total = time.perf_counter() - started
    result = CaseResult(
        **base, verdict="pass", reasons=[], criteria=criteria, metrics=worst_metrics, worst=worst,
        bad_fraction=bad.bad_fraction if bad else None, bad_location=bad.bad_where if bad else None,
        tolerance_to_pass=verdict.tolerance_to_pass(criteria), rel_error_buckets=buckets,
        atomic_spread=atomic_spread, dual_delta=records, timing=timing, waiver=case.waiver,
    )
    return conclude(result)


def conclude(result: CaseResult) -> CaseResult:
    """Verdict and reasons from the criteria and dual-delta records; a waiver turns a failure into ``skip``.

    Reasons list every failed criterion, then every failed dual-delta gate,
    then where the damage is: the fraction of elements over tolerance (and
    where they sit) and the worst element.
    """
    if result.error is not None:
        return result
    criteria = [c for c in result.criteria if not c.metric.startswith(DUAL_DELTA_PREFIX)]
    reasons = [verdict.describe_failure(c) for c in criteria if c.passed is False]
    criteria += [_dual_delta_criterion(rec, result.category) for rec in result.dual_delta]
    reasons += [f"dual-delta {rec.metric}{f' [output {rec.output}]' if rec.output else ''}: {r}"
                for rec in result.dual_delta if not rec.passed for r in (rec.reasons or [rec.conclusion])]
    outcome = "fail" if reasons else "pass"
    if reasons and result.bad_fraction:
        where = f"; {result.bad_location}" if result.bad_location else ""
        reasons.append(f"{result.bad_fraction:.3g} of elements over tolerance{where}")
    if reasons and result.worst is not None:
        w = result.worst
        out = f" of output {w.output}" if w.output else ""
        reasons.append(f"worst element{out} at {tuple(w.index)} (trial {w.trial}): impl {verdict.fmt(w.evaluated)}, "
                       f"baseline {verdict.fmt(w.baseline)}, |e-b| = {verdict.fmt(w.abs_error)}")
    if outcome == "fail" and result.waiver:
        outcome, reasons = "skip", [f"waived: {result.waiver}"] + reasons
    return result.model_copy(update={"verdict": outcome, "reasons": reasons, "criteria": criteria})


DUAL_DELTA_PREFIX = "dual_delta "


def _dual_delta_criterion(rec: DualDeltaRecord, category: str) -> Criterion:
    """The non-inferiority gate of one record as a criterion: the median paired ratio delta_1/delta_2
    against the factor (the gate itself is the sign test and worst-trial check in :mod:`acceptance.stats`)."""
    default = rec.factor == stats.default_factor(rec.metric)
    return Criterion(
        metric=f"{DUAL_DELTA_PREFIX}{rec.metric}", output=rec.output,
        value=rec.ratio.median if rec.ratio is not None else None, threshold=rec.factor,
        comparison="non-inferior", passed=rec.passed,
        source=f"{category} default" if default else "spec override", note=rec.conclusion,
    )


def _diagnose(acc: _OutputAccumulator, trial: int, out: int, e: torch.Tensor, b: torch.Tensor, tol: float) -> None:
    """Worst element, buckets and the fraction (and place) of elements over tolerance, for one trial."""
    if e.numel() == 0:
        return
    err = _abs_error(e, b)
    b_dev = b.to(err.device)
    rel = _rel_error(err, b_dev)
    for k, v in _buckets(rel).items():
        acc.buckets[k] = acc.buckets.get(k, 0) + v
    flat = int(torch.argmax(err))
    abs_err = float(err.reshape(-1)[flat])
    if acc.worst is None or abs_err > acc.worst.abs_error:
        index = [int(i) for i in np.unravel_index(flat, tuple(e.shape))] if e.dim() else []
        acc.worst = WorstElement(
            output=out, trial=trial, index=index, evaluated=float(e.reshape(-1)[flat]),
            baseline=float(b.reshape(-1)[flat]), abs_error=abs_err, rel_error=float(rel.reshape(-1)[flat]),
        )
    hyb = err / (1.0 + b_dev.to(torch.float64).abs())
    bad = hyb > tol
    fraction = float(bad.sum()) / bad.numel()
    if fraction > acc.bad_fraction:
        acc.bad_fraction = fraction
        acc.bad_where = _locate(bad.cpu())


def _collect_deltas(acc: _OutputAccumulator, e: torch.Tensor, b: torch.Tensor, o: torch.Tensor, dtype: str,
                    names: list[str]) -> None:
    """delta_1 = err(impl, oracle), delta_2 = err(baseline, oracle), and the free error err(round(oracle), oracle)."""
    o = o.to(torch.float64)
    rounded = oracle_mod.rounded(o, e.dtype)
    rounded = o if rounded is None else rounded
    d1 = metrics.compute(e, o.to(e.device), dtype=dtype, names=names)
    d2 = metrics.compute(b, o, dtype=dtype, names=names)
    fr = metrics.compute(rounded, o, dtype=dtype, names=names)
    for name in names:
        acc.delta_impl.setdefault(name, []).append(float(d1[name]))
        acc.delta_baseline.setdefault(name, []).append(float(d2[name]))
        acc.free.setdefault(name, []).append(float(fr[name]))


def run(cases: Iterable[Case], device: torch.device, *, trials: Optional[int] = None,
        on_case: Optional[Callable[[Case, CaseResult], None]] = None) -> list[CaseResult]:
    """Run every case, then correct the dual-delta p-values for multiplicity over the whole run (Holm)."""
    results = []
    for case in cases:
        result = run_case(case, device, trials=trials)
        results.append(result)
        if on_case:
            on_case(case, result)
    return finalize(results)


def underpowered(results: list[CaseResult]) -> tuple[list[str], int, int]:
    """Cases whose dual-delta sign test cannot reach significance after Holm over the run.

    The smallest p-value of an exact one-sided sign test on n trials is 2^-n;
    Holm compares the smallest of m p-values with alpha/m, so a record can fail
    check 1 only when 2^-n < alpha/m, i.e. n > log2(m/alpha). Returns
    (case ids, m, the smallest sufficient n); such cases can still fail the
    deterministic worst-trial check.
    """
    records = [rec for r in results for rec in r.dual_delta]
    if not records:
        return [], 0, 0
    m = len(records)
    alpha = min(rec.alpha for rec in records)
    needed = math.floor(math.log2(m / alpha)) + 1
    ids = [r.id for r in results if any(rec.trials < needed for rec in r.dual_delta)]
    return ids, m, needed


def finalize(results: list[CaseResult]) -> list[CaseResult]:
    """Apply Holm's step-down correction to every dual-delta record of the run and re-conclude those cases.

    Called by :func:`run` on the whole run, and on the finished part of an interrupted one.
    """
    records = [rec for r in results for rec in r.dual_delta]
    if not records:
        return results
    adjusted = iter(stats.apply_holm(records))
    out = []
    for r in results:
        if r.dual_delta:
            r = conclude(r.model_copy(update={"dual_delta": [next(adjusted) for _ in r.dual_delta]}))
        out.append(r)
    return out
