"""The verdict: every pass/fail decision of the package, made once per case.

:func:`decide` takes a measured case (:class:`~acceptance.records.CaseResult`
without a verdict) and the :class:`~acceptance.spec.defaults.Rules` it is
judged by, once every statistic the decision needs is known (the run's Holm
correction of the dual-delta p-values included), and returns it with its
criteria, verdict and reasons:

1. **Fixed thresholds** (:func:`threshold_criteria`): each output's
   worst-over-trials metric against each threshold in force, NaN-proof (a
   NaN never holds), plus NaN/Inf placement (``nan_mismatch == 0``,
   ``inf_mismatch == 0``).
2. **diff4** (:func:`diff4_criterion`), as MLU-OPS's evaluator gates it:
   evaluated only over n >= 100 unequal points (summed over trials), fails
   only when every unequal point lies on one side, skipped when the
   baseline's own diff4 against the oracle is one-sided.
3. **Dual-delta non-inferiority** (:func:`dual_delta_gate`), per record, with
   ``allowed_i = max(factor * delta_2[i], free)``. The impl fails when
   (a) the sign test gives evidence at level ``alpha`` (Holm-adjusted over
   the run) that delta_1 exceeds its allowance in more than half of the
   trials; (b) its worst trial exceeds the baseline's worst with twice the
   log-tolerance: max(delta_1) > max(worst_factor(factor) * max(delta_2),
   free); or (c) its error is NaN/inf in a trial where the baseline's is
   finite.

A case fails when any criterion fails; a waived failure becomes ``skip``; a
case whose run broke is ``error``. Reasons list every failed criterion (in
the words of :func:`acceptance.wording.criterion_text`), then every failed
dual-delta gate, then where the damage is: the fraction of elements over
tolerance (and where they sit) and the worst element.
"""

from __future__ import annotations

import math
from typing import Any, Iterable

import numpy as np

from acceptance.metrics import diff4_value
from acceptance.errors import EXIT_FAIL, EXIT_OK
from acceptance.records import VERDICT_ORDER, CaseResult, Criterion, Diff4Counts, DualDeltaRecord, Summary
from acceptance.spec.defaults import DIFF4_MIN_POINTS, Rules, Threshold
from acceptance.stats import worst_factor
from acceptance.wording import criterion_text, fmt


def _holds(value: Any, threshold: Any, comparison: str) -> bool:
    """NaN-proof comparison: a NaN (or missing) value never holds; pairs hold component by component."""
    if isinstance(threshold, (list, tuple)):
        return isinstance(value, (list, tuple)) and all(_holds(v, t, comparison) for v, t in zip(value, threshold))
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    if comparison == "==":
        return value == threshold
    if comparison == ">=":
        return value >= threshold
    return value <= threshold


def threshold_criteria(worst: list[dict[str, Any]], thresholds: Iterable[Threshold]) -> list[Criterion]:
    """Each output's worst-over-trials metrics against every threshold, after its NaN/Inf placement checks."""
    thresholds = list(thresholds)
    criteria: list[Criterion] = []
    for out, metrics in enumerate(worst):
        for name in ("nan_mismatch", "inf_mismatch"):
            value = float(metrics.get(name, 0))
            criteria.append(Criterion(kind="placement", metric=name, output=out, value=value, threshold=0.0,
                                      comparison="==", passed=value == 0,
                                      source="NaN/Inf placement must match the baseline"))
        for th in thresholds:
            value = metrics.get(th.metric)
            if isinstance(value, tuple):
                value = list(value)
            threshold = list(th.value) if isinstance(th.value, tuple) else th.value
            criteria.append(Criterion(metric=th.metric, output=out, value=value, threshold=threshold,
                                      comparison=th.comparison, passed=_holds(value, th.value, th.comparison),
                                      source=th.source))
    return criteria


def diff4_criterion(out: int, counts: Diff4Counts) -> Criterion:
    """MLU-OPS's diff4 rule over the counts of one output summed across trials."""
    p1, p2, n = diff4_value(counts.above, counts.below)
    crit = dict(kind="diff4", metric="diff4", output=out, value=[p1, p2, float(n)], comparison="two-sided",
                source="MLU-OPS diff4 rule (n >= 100, one-sided fails)")
    if n < DIFF4_MIN_POINTS:
        return Criterion(**crit, passed=None, note=f"not evaluated: n = {n} unequal points < {DIFF4_MIN_POINTS}")
    base_n = counts.baseline_above + counts.baseline_below
    if base_n >= DIFF4_MIN_POINTS and (counts.baseline_above == 0 or counts.baseline_below == 0):
        return Criterion(**crit, passed=None, note="skipped: the baseline's own diff4 against the oracle is one-sided")
    one_sided = counts.above == 0 or counts.below == 0
    return Criterion(**crit, passed=not one_sided,
                     note="every unequal point lies on one side (systematic bias)" if one_sided else None)


def _errors(x: list[float]) -> np.ndarray:
    """Errors as float64 with NaN as +inf (a NaN is the worst error)."""
    a = np.asarray(x, dtype=np.float64)
    return np.where(np.isnan(a), np.inf, a)


def dual_delta_gate(rec: DualDeltaRecord) -> DualDeltaRecord:
    """The record with its non-inferiority decision: ``passed`` and the ``reasons`` it fails (empty on a pass).

    Uses the Holm-adjusted p-value when the record has one, else the raw one.
    """
    d1, d2 = _errors(rec.delta_impl), _errors(rec.delta_baseline)
    reasons: list[str] = []
    broken = np.flatnonzero(~np.isfinite(d1) & np.isfinite(d2))
    if broken.size:
        reasons.append(f"impl error is NaN/inf in {broken.size} of {d1.size} trials where the baseline's is finite "
                       f"(first: trial {int(broken[0])})")
    keep = np.isfinite(d1) & np.isfinite(d2)
    if keep.any():
        worst_impl, worst_base = float(np.max(d1[keep])), float(np.max(d2[keep]))
        wf = worst_factor(rec.factor)
        limit = max(wf * worst_base, rec.free)
        if worst_impl > limit:
            trial = int(np.flatnonzero(keep)[np.argmax(d1[keep])])
            reasons.append(f"worst trial {trial}: impl error {worst_impl:.3g} > {limit:.3g} allowed "
                           f"= max({wf:g} x baseline's worst {worst_base:.3g}, free {rec.free:.3g})")
    adjusted = rec.p_adjusted is not None
    p = rec.p_adjusted if adjusted else rec.p_value
    if p is not None and p < rec.alpha:
        which = "Holm-adjusted p" if adjusted else "p"
        reasons.append(f"impl error exceeds max({rec.factor:g} x baseline's, free {rec.free:.3g}) in most trials "
                       f"(sign test {which}={p:.2g} < alpha {rec.alpha:g})")
    return rec.model_copy(update={"passed": not reasons, "reasons": reasons})


def dual_delta_criterion(rec: DualDeltaRecord, source: str) -> Criterion:
    """A decided gate as a criterion: the median paired ratio delta_1/delta_2 against the factor."""
    return Criterion(kind="dual_delta", metric=rec.metric, output=rec.output,
                     value=rec.ratio.median if rec.ratio is not None else None, threshold=rec.factor,
                     comparison="non-inferior", passed=rec.passed, source=source, note=rec.conclusion)


def tolerance_to_pass(criteria: list[Criterion]) -> dict[str, float]:
    """For each failing ``<=``/``==`` threshold, the smallest threshold that would pass: the worst value itself."""
    out: dict[str, float] = {}
    for c in criteria:
        if c.passed is False and c.comparison in ("<=", "==") and isinstance(c.value, (int, float)):
            key = c.metric if not c.output else f"{c.metric}[{c.output}]"
            out[key] = max(out.get(key, 0.0), float(c.value))
    return out


def _where(case: CaseResult) -> list[str]:
    """Where the damage is: the fraction of elements over tolerance (and where they sit) and the worst element."""
    lines = []
    if case.bad_fraction:
        where = f"; {case.bad_location}" if case.bad_location else ""
        lines.append(f"{fmt(case.bad_fraction)} of elements over tolerance{where}")
    if case.worst is not None:
        w = case.worst
        out = f" of output {w.output}" if w.output else ""
        lines.append(f"worst element{out} at {tuple(w.index)} (trial {w.trial}): impl {fmt(w.evaluated)}, "
                     f"baseline {fmt(w.baseline)}, |e-b| = {fmt(w.abs_error)}")
    return lines


def decide(case: CaseResult, rules: Rules) -> CaseResult:
    """The case with its criteria, verdict and reasons (see the module docstring)."""
    if case.error is not None:
        return case.model_copy(update={"verdict": "error", "reasons": [case.error], "criteria": []})
    criteria = threshold_criteria(case.metrics, rules.thresholds)
    if rules.diff4:
        criteria += [diff4_criterion(out, counts) for out, counts in enumerate(case.diff4_counts)]
    reasons = [criterion_text(c) for c in criteria if c.passed is False]
    records = [dual_delta_gate(rec) for rec in case.dual_delta]
    defaults = rules.dual_delta.default_factors if rules.dual_delta else frozenset()
    for rec in records:
        source = f"{rules.category} default" if rec.metric in defaults else "spec override"
        criteria.append(dual_delta_criterion(rec, source))
        where = f" [output {rec.output}]" if rec.output else ""
        reasons += [f"dual-delta {rec.metric}{where}: {r}" for r in rec.reasons] if not rec.passed else []
    verdict = "fail" if reasons else "pass"
    if reasons:
        reasons += _where(case)
    if verdict == "fail" and rules.waiver:
        verdict, reasons = "skip", [f"waived: {rules.waiver}"] + reasons
    return case.model_copy(update={"verdict": verdict, "reasons": reasons, "criteria": criteria,
                                   "dual_delta": records, "tolerance_to_pass": tolerance_to_pass(criteria)})


def summarize(cases: list[CaseResult]) -> Summary:
    """The run's verdict: counts per verdict; the run fails (exit code 1) on any fail or error."""
    counts = {v: 0 for v in VERDICT_ORDER}
    for case in cases:
        counts[case.verdict] += 1
    bad = counts["fail"] + counts["error"]
    return Summary(
        total=len(cases),
        passed=counts["pass"],
        failed=counts["fail"],
        errors=counts["error"],
        skipped=counts["skip"],
        verdict="fail" if bad else "pass",
        exit_code=EXIT_FAIL if bad else EXIT_OK,
    )
