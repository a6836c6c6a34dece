"""Wording shared by every reporter: numbers, criteria, the deciding criterion.

All functions are pure and take pieces of :mod:`acceptance.results`; each
reporter (JUnit, HTML, sign-off, GitHub) escapes their output for its own
format.
"""

from __future__ import annotations

import math
import re
from typing import Optional

from acceptance.results import CaseResult, Criterion, MetricValue, Results

# C0 and C1 control characters other than tab, newline and carriage return,
# lone surrogates (which cannot be encoded as UTF-8) and the two non-characters
# U+FFFE/U+FFFF: XML 1.0 forbids them and terminals interpret some of them.
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufffe\uffff]")


def visible_controls(text: str) -> str:
    r"""Replace control characters with a visible escape (``"\x1b"`` becomes the four characters ``\x1b``).

    Tab, newline and carriage return are kept; callers that need one line use
    :func:`one_line`.
    """
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


def one_line(text: str, limit: Optional[int] = None) -> str:
    """Collapse all whitespace runs (newlines included) to one space; cut to ``limit`` characters with an ellipsis."""
    flat = " ".join(visible_controls(text).split())
    if limit is not None and len(flat) > limit:
        return flat[: max(limit - 1, 0)] + "…"
    return flat


def fmt(x: Optional[float]) -> str:
    """A number for people, the one style of every report and message.

    Integers as integers; otherwise 3 significant digits, plain between 1e-2
    and 1e4 (``0.0625``, ``33.3``) and a compact exponent elsewhere (``4.1e-3``,
    ``1.23e5``). ``None`` is an em dash; ``nan``/``inf`` are spelled out.
    """
    if x is None:
        return "—"
    if isinstance(x, bool):
        return str(x).lower()
    if isinstance(x, int):
        return str(x)
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    if 1e-2 <= abs(x) < 1e4:
        return f"{x:.3g}"
    mantissa, exponent = f"{x:.2e}".split("e")
    return f"{mantissa.rstrip('0').rstrip('.')}e{int(exponent)}"


def fmt_value(value: MetricValue) -> str:
    """A metric value: a number, or a tuple such as diff3 ``(m1, m2)`` written ``(a, b)``."""
    if isinstance(value, (list, tuple)):
        return "(" + ", ".join(fmt(v) for v in value) + ")"
    return fmt(value)


def params_text(params: dict) -> str:
    """Case symbols as ``M=128, K=4097`` (insertion order)."""
    return ", ".join(f"{k}={v}" for k, v in params.items())


def metric_name(criterion: Criterion) -> str:
    """The metric, with ``[output i]`` appended for outputs other than the first."""
    return criterion.metric if criterion.output == 0 else f"{criterion.metric}[output {criterion.output}]"


def margin(criterion: Criterion) -> Optional[float]:
    """Headroom of an evaluated threshold criterion, as a factor.

    - ``<=``: threshold / value (2 means the value could double and still
      pass; below 1 fails). A value of 0 has infinite headroom unless the
      threshold is negative.
    - ``>=``: value / threshold.
    - ``==``: ``inf`` when equal, else 0.

    Tuple values (diff3) use their largest component. ``nan`` anywhere gives
    ``nan``. ``None`` for criteria not evaluated, without a threshold, or
    compared statistically (``two-sided``, ``non-inferior``).
    """
    if criterion.passed is None or criterion.threshold is None or criterion.value is None:
        return None
    if criterion.comparison not in ("<=", ">=", "=="):
        return None
    values = criterion.value if isinstance(criterion.value, list) else [criterion.value]
    if not values or any(math.isnan(v) for v in values) or math.isnan(criterion.threshold):
        return math.nan
    value, threshold = max(values), criterion.threshold
    if criterion.comparison == "==":
        return math.inf if value == threshold else 0.0
    top, bottom = (threshold, value) if criterion.comparison == "<=" else (value, threshold)
    if bottom == 0:
        return math.inf if top >= 0 else 0.0
    if math.isinf(bottom):
        return 0.0 if not math.isinf(top) else math.nan
    return top / bottom


def _margin_key(criterion: Criterion) -> tuple[float, bool]:
    """Smallest margin first (``nan`` as the worst); on ties a graded check (``<=``, ``>=``) before an exact one."""
    m = margin(criterion)
    return (-math.inf if m is None or math.isnan(m) else m, criterion.comparison == "==")


def deciding_criterion(case: CaseResult) -> Optional[Criterion]:
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


_FAILED_OP = {"<=": ">", ">=": "<", "==": "!="}


def criterion_text(criterion: Criterion) -> str:
    """One criterion as a sentence: ``diff1 0.0041 > 0.003 (float16 convolution default)``.

    The operator shown is the comparison when it passed and its negation when
    it failed; statistical comparisons say ``non-inferior`` / ``inferior``.
    """
    name = metric_name(criterion)
    if criterion.passed is None:
        text = f"{name} not evaluated" + (f": {criterion.note}" if criterion.note else "")
        return one_line(text)
    value = fmt_value(criterion.value)
    if criterion.comparison in _FAILED_OP:
        op = criterion.comparison if criterion.passed else _FAILED_OP[criterion.comparison]
        text = f"{name} {value} {op} {fmt(criterion.threshold)}"
    elif criterion.comparison == "non-inferior":
        word = "non-inferior" if criterion.passed else "inferior"
        text = f"{name} {value} {word} (factor {fmt(criterion.threshold)})"
    else:
        text = f"{name} {value} {'passes' if criterion.passed else 'fails'} the two-sided check"
    if criterion.source:
        text += f" ({criterion.source})"
    if criterion.note:
        text += f"; {criterion.note}"
    return one_line(text)


def headline(case: CaseResult) -> str:
    """Why the case got its verdict, in one line.

    fail: the first reason, else the deciding criterion; error: the first
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
        candidates = reasons if case.verdict == "fail" else []
        if deciding is not None:
            candidates.append(criterion_text(deciding))
        candidates += reasons
    return candidates[0] if candidates else {"fail": "failed", "error": "error", "skip": "skipped", "pass": "passed"}[case.verdict]


def case_details(case: CaseResult) -> str:
    """The full plain-text account of a case (JUnit bodies, consoles): criteria, worst element, dual-delta."""
    lines = [
        f"case: {case.id}",
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
    if case.worst is not None:
        w = case.worst
        lines.append(
            f"worst element: output {w.output}, trial {w.trial}, index {w.index}: evaluated {fmt(w.evaluated)},"
            f" baseline {fmt(w.baseline)}, abs error {fmt(w.abs_error)}, rel error {fmt(w.rel_error)}"
        )
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
    for d in case.dual_delta:
        lines.append(
            f"dual-delta {d.metric} (output {d.output}, {d.trials} trials): {'pass' if d.passed else 'FAIL'}"
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
