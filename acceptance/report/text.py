"""What every reporter shows of a case: the deciding criterion, its margin, the headline, the full account.

All functions are pure and take pieces of :mod:`acceptance.records`; numbers
and criterion sentences come from :mod:`acceptance.wording`; each reporter
(JUnit, HTML, sign-off, GitHub, console) escapes the output for its own format.
"""

from __future__ import annotations

import math

from acceptance.records import CaseResult, Criterion, Results
from acceptance.wording import (
    counted,
    criterion_text,
    fmt,
    one_line,
    output_label,
    params_text,
    visible_controls,
    worst_element_text,
)


def margin(criterion: Criterion) -> float | None:
    """Headroom of an evaluated threshold criterion, as a factor.

    - ``<=``: threshold / value (2 means the value could double and still
      pass; below 1 fails). A value of 0 has infinite headroom unless the
      threshold is negative.
    - ``>=``: value / threshold.
    - ``==``: ``inf`` when equal, else 0.

    - ``non-inferior`` (a dual-delta gate): factor / median paired ratio
      delta_1/delta_2, the headroom of the ratio the gate is read by.

    Pair values (diff3) use their tightest component (against a pair
    threshold component by component). ``nan`` anywhere gives ``nan``.
    ``None`` for criteria not evaluated, without a threshold or a value, or
    compared two-sided (diff4).
    """
    if criterion.passed is None or criterion.threshold is None or criterion.value is None:
        return None
    if (
        criterion.comparison == "non-inferior"
        and not isinstance(criterion.value, list)
        and not isinstance(criterion.threshold, list)
    ):
        return _margin_of(criterion.value, criterion.threshold, "<=")
    if criterion.comparison not in ("<=", ">=", "=="):
        return None
    values = criterion.value if isinstance(criterion.value, list) else [criterion.value]
    thresholds = criterion.threshold if isinstance(criterion.threshold, list) else [criterion.threshold] * len(values)
    if not values or any(math.isnan(v) for v in values + thresholds):
        return math.nan
    return min(_margin_of(v, t, criterion.comparison) for v, t in zip(values, thresholds, strict=False))


def _margin_of(value: float, threshold: float, comparison: str) -> float:
    if comparison == "==":
        return math.inf if value == threshold else 0.0
    top, bottom = (threshold, value) if comparison == "<=" else (value, threshold)
    if bottom == 0:
        return math.inf if top >= 0 else 0.0
    if math.isinf(bottom):
        return 0.0 if not math.isinf(top) else math.nan
    return top / bottom


def _margin_key(criterion: Criterion) -> tuple[float, bool]:
    """Smallest margin first (``nan`` as the worst); on ties a graded check (``<=``, ``>=``) before an exact one."""
    m = margin(criterion)
    return (-math.inf if m is None or math.isnan(m) else m, criterion.comparison == "==")


def deciding_criterion(case: CaseResult) -> Criterion | None:
    """The criterion that decided the case: the first failing one, else the one with the tightest margin.

    Among equal margins (e.g. every error exactly 0) a graded threshold check
    wins over an exact-equality check. Passing criteria without a margin
    (statistical ones) are chosen only when no passing criterion has one.
    """
    for criterion in case.criteria:
        if criterion.passed is False:
            return criterion
    evaluated = [c for c in case.criteria if c.passed]
    with_margin = [c for c in evaluated if margin(c) is not None]
    if with_margin:
        return min(with_margin, key=_margin_key)
    return evaluated[0] if evaluated else None


def is_note(reason: str) -> bool:
    """Whether a reason is an informational note (the oracle's range, ...), never a case's headline; results
    written before notes said so put the oracle-range note first, reading "... not from the impl"."""
    return reason.startswith("note: ") or reason.endswith("come from the inputs' range, not from the impl")


def headline(case: CaseResult) -> str:
    """Why the case got its verdict, in one line.

    fail: the first reason that is not a note (:func:`is_note`), else the deciding criterion; error: the first
    line of the error message, else the first reason; skip: ``waived: <reason>``
    or the first reason; pass: the deciding criterion. Never empty.
    """
    reasons = [one_line(r) for r in case.reasons if r and r.strip()]
    deciding = deciding_criterion(case)
    if case.verdict == "error":
        lines = [line for line in (case.error or "").splitlines() if line.strip()]
        candidates = [one_line(lines[0])] if lines else []
        candidates += reasons
    elif case.verdict == "skip":
        candidates = [f"waived: {one_line(case.waiver)}"] if case.waiver and case.waiver.strip() else []
        candidates += reasons
    else:
        candidates = [r for r in reasons if not is_note(r)] if case.verdict == "fail" else []
        if case.verdict == "pass" and case.vacuous:
            candidates.append(f"vacuous pass: {one_line(case.vacuous)}")
        if deciding is not None:
            candidates.append(criterion_text(deciding))
        candidates += reasons
    return (
        candidates[0]
        if candidates
        else {"fail": "failed", "error": "error", "skip": "skipped", "pass": "passed"}[case.verdict or ""]
    )


def case_details(case: CaseResult) -> str:
    """The full plain-text account of a case (JUnit bodies, consoles): criteria, worst element, dual-delta."""
    lines = [
        f"case: {case.id}",
        *([f"description: {case.description}"] if case.description else []),
        f"operator: {case.operator} ({case.category}), spec {case.spec_file}",
        f"dtype: {case.dtype}; params: {params_text(case.params) or '-'}; trials: {case.trials}; seed: {case.seed}",
        f"verdict: {case.verdict}",
    ]
    if case.waiver:
        lines.append(f"waiver in force: {case.waiver}")
    if case.error:
        lines += ["error:", *("  " + line for line in case.error.splitlines())]
    if case.reasons:
        lines += ["reasons:", *(f"  - {r}" for r in case.reasons)]
    if case.criteria:
        lines.append("criteria:")
        for c in case.criteria:
            mark = {True: "pass", False: "FAIL", None: "n/a "}[c.passed]
            lines.append(f"  {mark} {criterion_text(c)}")
    if case.vacuous:
        lines.append(f"vacuous: {case.vacuous}")
    lines += [f"warning: {w}" for w in case.warnings]
    if case.worst is not None:
        lines.append(worst_element_text(case.worst))
    for a in case.advisory:
        lines.append(f"advisory {a.name}: {'pass' if a.passed else 'fail'} ({a.detail})")
    if case.bad_fraction is not None:
        lines.append(f"fraction of elements over tolerance (worst trial): {fmt(case.bad_fraction)}")
    if case.bad_location:
        lines.append(f"where they sit: {case.bad_location}")
    if case.tolerance_to_pass:
        lines.append(
            "smallest thresholds that would pass: "
            + ", ".join(f"{k} <= {fmt(v)}" for k, v in case.tolerance_to_pass.items())
        )
    if case.atomic_spread is not None:
        lines.append(f"run-to-run spread of impl (max |run_i - run_j|): {fmt(case.atomic_spread)}")
    if case.emulation:
        lines.append(f"baseline emulation: {case.emulation}")
    if case.oracle_range:
        lines.append(f"oracle range: {case.oracle_range}")
    if case.determinism is not None:
        det = case.determinism
        lines.append(
            f"run to run: impl {det.impl} over {det.runs} runs"
            + (f" ({det.impl_differing} elements differ, spread {fmt(det.impl_spread)})" if det.impl_differing else "")
            + f", baseline {det.baseline}"
        )
    if case.layouts:
        lines.append("impl input layouts: " + ", ".join(f"{k}: {v}" for k, v in case.layouts.items()))
    for d in case.dual_delta:
        lines.append(
            f"dual-delta {d.metric} ({output_label(d.output, d.output_name)}, {counted(d.trials, 'trial')}): "
            f"{'pass' if d.passed else 'FAIL'}"
            f" - {d.conclusion} (factor {fmt(d.factor)}, alpha {fmt(d.alpha)}, p {fmt(d.p_value)},"
            f" Holm-adjusted p {fmt(d.p_adjusted)})"
        )
        lines.append(
            f"  delta_1 impl: mean {fmt(d.impl.mean)}, p99 {fmt(d.impl.p99)}, max {fmt(d.impl.max)};"
            f" delta_2 baseline: mean {fmt(d.baseline.mean)}, p99 {fmt(d.baseline.p99)}, max {fmt(d.baseline.max)}"
        )
        lines += [f"  - {r}" for r in d.reasons]
    t = case.timing
    lines.append(
        f"time: {fmt(t.total)} s (impl {fmt(t.impl)} s, baseline {fmt(t.baseline)} s, oracle {fmt(t.oracle)} s)"
    )
    return visible_controls("\n".join(lines))


def overall_line(results: Results) -> str:
    """``FAIL: 12 cases, 8 passed, 2 failed, 1 error, 1 skipped``."""
    s = results.summary
    return (
        f"{s.verdict.upper()}: {s.total} case{'s' if s.total != 1 else ''}, {s.passed} passed, {s.failed} failed,"
        f" {s.errors} error{'s' if s.errors != 1 else ''}, {s.skipped} skipped"
    )
