"""Run cases: measure each one through the trial engine, then decide every verdict after the run's statistics.

Per case, :func:`measure` runs the trials (:mod:`acceptance.engine`) and
keeps, per output, the worst-over-trials metrics of impl against baseline,
the diff4 counts, the per-element diagnostics (:mod:`acceptance.diagnose`)
and, where the case has a dual-delta analysis, the per-trial errors of impl
and baseline against the oracle with their statistics
(:func:`acceptance.stats.analyze`). A case whose run breaks (a callable
raises, returns something unusable or times out) is measured as an error and
the run goes on.

:func:`run` measures every case, corrects the dual-delta p-values for
multiplicity over the whole run (Holm), and only then decides each verdict
(:func:`acceptance.verdict.decide`).
"""

from __future__ import annotations

import math
import platform
import socket
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterable, Optional

import numpy as np
import torch

import acceptance
from acceptance import engine, metrics, stats, verdict
from acceptance.device import device_name
from acceptance.diagnose import Diagnosis, abs_error
from acceptance.errors import CaseError
from acceptance.inputs import generate
from acceptance.metrics import registry
from acceptance.records import CaseResult, Diff4Counts, Environment, Timing
from acceptance.spec import Case, Rules, resolve_roles, rules_for


def now() -> datetime:
    return datetime.now(timezone.utc)


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


# ----------------------------------------------------------------------------- one output over trials


def _worse(metric: str, a: float, b: float) -> float:
    """The worse of two values of ``metric``: the larger, the smaller for a score; NaN wins."""
    if math.isnan(a) or math.isnan(b):
        return math.nan
    known = registry.BY_NAME.get(metric)
    return min(a, b) if known is not None and known.kind == "score" else max(a, b)


@dataclass
class _Output:
    """What one output of one case accumulates over trials."""

    worst: dict[str, Any] = field(default_factory=dict)
    diff4: Diff4Counts = field(default_factory=Diff4Counts)
    diagnosis: Diagnosis = field(default_factory=Diagnosis)
    delta_impl: dict[str, list[float]] = field(default_factory=dict)
    delta_baseline: dict[str, list[float]] = field(default_factory=dict)
    free: dict[str, list[float]] = field(default_factory=dict)

    def add_metrics(self, m: dict[str, Any]) -> None:
        """Fold in one trial's metrics of impl against baseline: worst values, diff4 counts summed."""
        self.diff4.above += m.pop("above")
        self.diff4.below += m.pop("below")
        m.pop("diff4", None)
        for name, value in m.items():
            old = self.worst.get(name)
            if isinstance(value, tuple):
                value = [float(v) for v in value]
                self.worst[name] = value if old is None else [_worse(name, a, b) for a, b in zip(old, value)]
            else:
                value = float(value)
                self.worst[name] = value if old is None else _worse(name, old, value)

    def add_deltas(self, d1: dict[str, float], d2: dict[str, float], free: dict[str, float]) -> None:
        for target, values in ((self.delta_impl, d1), (self.delta_baseline, d2), (self.free, free)):
            for name, value in values.items():
                target.setdefault(name, []).append(value)

    def metrics_record(self) -> dict[str, Any]:
        """The worst metrics, with diff4 from the counts summed over trials."""
        return {**self.worst, "diff4": list(metrics.diff4_value(self.diff4.above, self.diff4.below))}


# ----------------------------------------------------------------------------- one case


def _identity(case: Case, trials: int) -> dict[str, Any]:
    spec = case.spec
    return dict(
        id=case.id, operator=spec.name, category=spec.category, spec_file=str(spec.path), dtype=case.dtype,
        params={**case.symbols, **({"params": case.case_params} if case.case_params else {})},
        trials=trials, seed=spec.seed, waiver=case.waiver,
    )


def trials_of(case: Case, rules: Rules, trials: Optional[int] = None) -> int:
    """Trials of a case: the command line's, else the spec's dual-delta trials, else the spec's trials."""
    return trials or (rules.dual_delta and rules.dual_delta.trials) or case.spec.trials


def measure(case: Case, device: torch.device, rules: Rules, *, trials: Optional[int] = None) -> CaseResult:
    """Run every trial of one case and measure it (a :class:`CaseResult` without a verdict). Never raises
    for a broken impl: the result then carries ``error``."""
    n_trials = trials_of(case, rules, trials)
    identity = _identity(case, n_trials)
    timing = Timing()
    started = time.perf_counter()
    dd = rules.dual_delta
    atomic = case.spec.category == "atomic_add"
    outputs: list[_Output] = []
    spread = 0.0 if atomic else None
    try:
        roles = engine.Roles(*resolve_roles(case.spec))
    except Exception as exc:
        return CaseResult(**identity, error=f"cannot resolve callables: {exc}")
    try:
        for t in engine.run_trials(roles, lambda k: generate(case, k), n_trials, device=device, params=case.params,
                                   oracle=rules.needs_oracle, repeats=max(case.spec.atomic_runs, 2) - 1 if atomic else 0,
                                   timeout=case.spec.timeout, timing=timing):
            if not outputs:
                outputs = [_Output() for _ in t.impl]
            for again in t.repeats:
                for a, e in zip(again, t.impl):
                    spread = max(spread, float(abs_error(a, e).max()) if a.numel() else 0.0)
            for out, (e, b) in enumerate(zip(t.impl, t.baseline)):
                acc = outputs[out]
                acc.add_metrics(metrics.compute(e, b, dtype=case.dtype))
                acc.diagnosis.add(t.index, out, e, b, rules.element_tolerance)
                if t.oracle is None:
                    continue
                o = t.oracle[out]
                if rules.diff4:
                    against = metrics.compute(b, o.to(torch.float64), dtype=case.dtype, names=[])
                    acc.diff4.baseline_above += against["above"]
                    acc.diff4.baseline_below += against["below"]
                if dd:
                    acc.add_deltas(*engine.oracle_errors(e, b, o, list(dd.metrics)))
    except CaseError as exc:
        timing.total = time.perf_counter() - started
        return CaseResult(**identity, error=str(exc), timing=timing)
    except Exception as exc:  # input generation or metrics on a malformed output
        timing.total = time.perf_counter() - started
        return CaseResult(**identity, error=f"{type(exc).__name__}: {exc}", timing=timing)

    records = []
    if dd:
        records = [stats.analyze(np.asarray(acc.delta_impl[name]), np.asarray(acc.delta_baseline[name]),
                                 metric=name, output=out, factor=dd.factors[name], alpha=dd.alpha,
                                 free=np.asarray(acc.free[name]))
                   for out, acc in enumerate(outputs) for name in dd.metrics]
    diagnoses = [acc.diagnosis for acc in outputs]
    worst = max((d.worst for d in diagnoses if d.worst), key=lambda w: w.abs_error, default=None)
    bad = max(diagnoses, key=lambda d: d.bad_fraction) if diagnoses else None
    buckets: dict[str, int] = {}
    for d in diagnoses:
        for k, v in d.buckets.items():
            buckets[k] = buckets.get(k, 0) + v
    timing.total = time.perf_counter() - started
    return CaseResult(
        **identity, metrics=[acc.metrics_record() for acc in outputs], worst=worst,
        bad_fraction=bad.bad_fraction if bad else None, bad_location=bad.bad_where if bad else None,
        rel_error_buckets=buckets, atomic_spread=spread, diff4_counts=[acc.diff4 for acc in outputs],
        dual_delta=records, timing=timing,
    )


# ----------------------------------------------------------------------------- the run


def decide_all(measured: list[tuple[CaseResult, Rules]]) -> list[CaseResult]:
    """Holm over every dual-delta record of the run, then each case's verdict (:func:`acceptance.verdict.decide`)."""
    adjusted = iter(stats.apply_holm([rec for case, _ in measured for rec in case.dual_delta]))
    out = []
    for case, rules in measured:
        if case.dual_delta:
            case = case.model_copy(update={"dual_delta": [next(adjusted) for _ in case.dual_delta]})
        out.append(verdict.decide(case, rules))
    return out


def run(cases: Iterable[Case], device: torch.device, *, trials: Optional[int] = None,
        on_case: Optional[Callable[[Case, CaseResult], None]] = None,
        measured: Optional[list[tuple[CaseResult, Rules]]] = None) -> list[CaseResult]:
    """Measure every case (``on_case`` is told of each, undecided, as it finishes), then decide them all.

    ``measured`` collects (measurement, rules) as they finish, so a caller
    interrupted mid-run can still decide the finished part with :func:`decide_all`.
    """
    measured = measured if measured is not None else []
    for case in cases:
        rules = rules_for(case)
        result = measure(case, device, rules, trials=trials)
        measured.append((result, rules))
        if on_case:
            on_case(case, result)
    return decide_all(measured)


def underpowered(results: list[CaseResult]) -> tuple[list[str], int, int]:
    """Cases whose dual-delta sign test cannot reach significance after Holm over the run.

    The smallest p-value of an exact one-sided sign test on n trials is 2^-n;
    Holm compares the smallest of m p-values with alpha/m, so a record can fail
    the sign test only when 2^-n < alpha/m, i.e. n > log2(m/alpha). Returns
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
