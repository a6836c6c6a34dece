"""The verdict: every pass/fail decision of the package, made once per case.

:func:`decide` takes a measured case (:class:`~acceptance.records.MeasuredCase`)
and the :class:`~acceptance.spec.defaults.Rules` it is judged by, once every
statistic the decision needs is known (the run's Holm correction of the
dual-delta p-values included), and returns the decided
:class:`~acceptance.records.CaseResult` with its criteria, verdict and reasons:

1. **Fixed thresholds** (:func:`threshold_criteria`): each output's
   worst-over-trials metric against each threshold in force, NaN-proof (a
   NaN never holds), plus NaN/Inf placement (``nan_mismatch == 0``,
   ``inf_mismatch == 0``).
2. **diff4** (:func:`diff4_criterion`), as MLU-OPS's evaluator gates it:
   evaluated only over n >= 100 unequal points (summed over trials), fails
   only when every unequal point lies on one side, skipped when the
   baseline's own diff4 against the oracle is one-sided.
3. **Dual-delta non-inferiority** (:func:`dual_delta_gate`), per record, with
   ``allowed_i = max(factor * delta_2[i], free)`` and trials within the
   accuracy floor counted as within allowance. The impl fails when (a) the
   sign test gives evidence at level ``alpha`` (Holm-adjusted over the run)
   that delta_1 exceeds its allowance in more than half of the trials; (b)
   the worst-trial test (:func:`acceptance.numerics.stats.worst_trial_test`, Holm-
   adjusted) finds its worst trial beyond what n draws of factor x the
   baseline's error reach; or (c) its error is NaN/inf in a trial where the
   baseline's is finite.
4. **Vacuity** (:func:`vacuity_criteria`): under ``--strict`` a case that
   showed nothing (no finite element compared, or a constant answer where the
   oracle varies) fails.
5. **Determinism** (:func:`determinism_criteria`): every category but
   ``atomic_add`` must give the same bits run to run on the same inputs (NaN
   payloads aside) unless the spec says ``deterministic: false``.

A case fails when any criterion fails; a waived failure becomes ``skip``; a
case whose run broke is ``error`` (``skip`` when its waiver covers errors); an
expired waiver waives nothing and is named among the reasons. Reasons list every failed fixed criterion (in
the words of :func:`acceptance.wording.criterion_text`), then every failed
dual-delta gate, then the failed vacuity and determinism rules (in the same words); when the oracle leaves
the test dtype's range that is said first; then where the damage is: the fraction of elements over
tolerance (and where they sit) and the worst element.
"""

from __future__ import annotations

import math
from typing import Literal, TypeVar, cast

import numpy as np

from acceptance.errors import EXIT_FAIL, EXIT_OK
from acceptance.formats import dtypes
from acceptance.numerics.factors import GROSS_FACTOR
from acceptance.numerics.metrics import diff4_value
from acceptance.records import (
    VERDICT_ORDER,
    Bias,
    CaseResult,
    Comparison,
    Criterion,
    Diff4Counts,
    DualDeltaRecord,
    MeasuredCase,
    MetricValue,
    OutputMeasurement,
    Summary,
    UlpStats,
    Verdict,
    WorstElement,
)
from acceptance.spec.defaults import (
    BIAS_BASELINE_FACTOR,
    BIAS_SCALED_CAP_ULP,
    DIFF4_MIN_POINTS,
    Rules,
    default_factor,
)
from acceptance.wording import (
    criterion_text,
    criterion_worst_text,
    fmt,
    fmt_value,
    output_label,
    worst_element_text,
)

_T = TypeVar("_T")

#: Fewest elements per trial for which a trial's mean ULP error is judged as a mean (see :func:`ulp_criteria`):
#: below it the mean of k errors each up to the max allowance can sit anywhere up to it (for k = 1 it is the
#: max), and 32 elements bring the mean's spread down to ~1/sqrt(32) = 0.18 of a single element's.
MEAN_MIN_ELEMENTS = 32

#: A threshold: a float, or one per component of a pair metric.
_Threshold = float | list[float] | tuple[float, ...]
#: A measured value held against a threshold: a float, a pair (list or tuple), or missing.
_Value = _Threshold | None


def _holds(value: _Value, threshold: _Threshold, comparison: str) -> bool:
    """NaN-proof comparison: a NaN (or missing) value never holds; pairs hold component by component."""
    if isinstance(threshold, (list, tuple)):
        return isinstance(value, (list, tuple)) and all(
            _holds(v, t, comparison) for v, t in zip(value, threshold, strict=False)
        )
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return False
    scalar = cast(float, value)  # a scalar threshold is held against a scalar metric
    if comparison == "==":
        return scalar == threshold
    if comparison == ">=":
        return scalar >= threshold
    return scalar <= threshold


def _as_close(impl: _Value, base: _Value, comparison: str) -> bool:
    """Whether the impl's value against the oracle is at least as good as the baseline's (NaN never is)."""
    if isinstance(impl, (list, tuple)):
        return isinstance(base, (list, tuple)) and all(
            _as_close(a, b, comparison) for a, b in zip(impl, base, strict=False)
        )
    if impl is None or base is None or math.isnan(impl):
        return False
    scalar = cast(float, base)  # a scalar metric's value against the oracle, as the impl's
    return impl >= scalar if comparison == ">=" else impl <= scalar


def _criterion(
    kind: str,
    metric: str,
    out: int,
    threshold: _Threshold,
    comparison: str,
    source: str,
    against_baseline: _Value,
    impl_oracle: dict[str, MetricValue] | None,
    baseline_oracle: dict[str, MetricValue] | None,
    dtype: str,
) -> Criterion:
    """One fixed criterion, oracle-aware: it holds on impl vs baseline, or, when the impl is at least as close
    to the oracle (rounded once to the dtype) as the baseline is, on impl vs that oracle."""
    value = list(against_baseline) if isinstance(against_baseline, tuple) else against_baseline
    shown = list(threshold) if isinstance(threshold, tuple) else threshold
    crit = dict(kind=kind, metric=metric, output=out, threshold=shown, comparison=comparison, source=source)
    if _holds(value, threshold, comparison):
        return Criterion.model_validate({**crit, "value": value, "passed": True})
    io = impl_oracle.get(metric) if impl_oracle else None
    bo = baseline_oracle.get(metric) if baseline_oracle else None
    io = list(io) if isinstance(io, tuple) else io
    if io is not None and bo is not None and _as_close(io, bo, comparison) and _holds(io, threshold, comparison):
        return Criterion.model_validate(
            {
                **crit,
                "value": io,
                "passed": True,
                "against": "oracle",
                "note": f"against the baseline {fmt_value(value)}; the baseline is further from the oracle "
                f"rounded to {dtype} ({fmt_value(bo)}) than the impl ({fmt_value(io)})",
            }
        )
    note = None
    if io is not None and bo is not None:
        note = f"against the oracle rounded to {dtype}: impl {fmt_value(io)}, baseline {fmt_value(bo)}" + (
            "" if _as_close(io, bo, comparison) else " (the impl is the further one)"
        )
    return Criterion.model_validate({**crit, "value": value, "passed": False, "note": note})


def _count(value: MetricValue) -> float:
    """A scalar count (NaN/Inf mismatches) as a float."""
    return float(value) if isinstance(value, (int, float)) else math.nan


def threshold_criteria(outputs: list[OutputMeasurement], rules: Rules) -> list[Criterion]:
    """Each output's NaN/Inf placement and fixed thresholds, decided oracle-aware (see :func:`_criterion`)."""
    criteria: list[Criterion] = []
    for out, o in enumerate(outputs):
        worst, io, bo = o.metrics, o.impl_oracle, o.baseline_oracle
        for name in ("nan_mismatch", "inf_mismatch"):
            criteria.append(
                _criterion(
                    "placement",
                    name,
                    out,
                    0.0,
                    "==",
                    "NaN/Inf placement must match the baseline",
                    _count(worst.get(name, 0.0)),
                    io,
                    bo,
                    rules.dtype,
                )
            )
        for th in rules.thresholds:
            criteria.append(
                _criterion(
                    "threshold",
                    th.metric,
                    out,
                    th.value,
                    th.comparison,
                    th.source,
                    worst.get(th.metric),
                    io,
                    bo,
                    rules.dtype,
                )
            )
    return criteria


def bits_criteria(outputs: list[OutputMeasurement], rules: Rules) -> list[Criterion]:
    """Bit-exact categories: every element's bits equal the baseline's or the oracle's rounded once to the dtype
    (a fused multiply-add is the correctly rounded result, not a bug); the sign of zero counts, NaNs are equal."""
    return [
        Criterion(
            kind="bits",
            metric="bit_mismatch",
            output=out,
            value=float(count),
            threshold=0.0,
            comparison="==",
            passed=count == 0,
            source=f"{rules.category} default (bit exact: the baseline's or the rounded oracle's bits)",
        )
        for out, count in enumerate(o.bit_mismatches for o in outputs)
        if count is not None
    ]


def ulp_criteria(outputs: list[OutputMeasurement], rules: Rules, per_trial: int | None = None) -> list[Criterion]:
    """ULP error against the oracle (flush to zero forgiven), scaled by the baseline's own, above the floor:

        max:  impl_max  <= max(f_max · baseline_max,   floor_max,  0.5)
        mean: impl_mean <= max(f_mean · baseline_mean, floor_mean, 0.25)

    with the dual-delta factors of max_ulp and mean_ulp (2 and 1.5); 0.5 and 0.25 ulp are the max and mean
    error of the correctly rounded result. Element by element, no impl value may be lost where the baseline
    keeps it (criterion ``ulp_lost_elements``, :func:`_ulp_elements_criterion`). ``per_trial``: elements per
    output per trial; with fewer than ``MEAN_MIN_ELEMENTS`` the mean of a trial is the error of a few elements,
    no evidence of a typical error, and the mean is held to the max's allowance instead (a 1-element mean is
    that element's error).
    """
    criteria = []
    few = per_trial is not None and per_trial < MEAN_MIN_ELEMENTS
    for out, u in enumerate(o.ulp for o in outputs):
        if u is None:
            continue
        for which, impl, base, floor, free in (
            ("max", u.impl_max, u.baseline_max, rules.floor_max, 0.5),
            ("mean", u.impl_mean, u.baseline_mean, rules.floor_mean, 0.25),
        ):
            factor = default_factor(f"{which}_ulp")
            allowed = max(factor * base, floor or 0.0, free)
            why = f"max({fmt(factor)} x baseline's {fmt(base)}, floor {fmt(floor)}, correctly rounded {fmt(free)})"
            if u.subnormal_unit:
                why += (
                    f"; {u.subnormal_unit} impl elements where the oracle rounds to a subnormal or zero are in "
                    "ulp of the smallest subnormal"
                )
            if few and which == "mean":
                allowed = max(allowed, default_factor("max_ulp") * u.baseline_max, rules.floor_max or 0.0, 0.5)
                why += f"; {per_trial} elements per trial < {MEAN_MIN_ELEMENTS}: at least the max's allowance"
            criteria.append(
                Criterion(
                    kind="ulp",
                    metric=f"{which}_ulp",
                    output=out,
                    value=impl,
                    threshold=allowed,
                    comparison="<=",
                    passed=_holds(impl, allowed, "<="),
                    against="oracle",
                    source=f"{rules.category} {rules.dtype} ULP rule",
                    note=f"allowed = {why}",
                )
            )
        criteria.append(_ulp_elements_criterion(out, u, rules))
    return criteria


def _ulp_elements_criterion(out: int, u: UlpStats, rules: Rules) -> Criterion:
    """The ULP rule element by element: value = impl elements (over the trials) with no correct bit where the
    baseline keeps its leading one (|e - o| >= |o| while |b - o| < |o|/2; a flush forgiven), threshold 0. In
    ulp of the oracle a lost value costs about 2^(p-1)..2^p whatever its magnitude, as much as the baseline's
    own losses in a cancelling tail, so the aggregate max and mean cannot tell a lost tail from that."""
    return Criterion(
        kind="ulp",
        metric="ulp_lost_elements",
        output=out,
        value=float(u.elements_over),
        threshold=0.0,
        comparison="<=",
        passed=u.elements_over == 0,
        against="oracle",
        source=f"{rules.category} {rules.dtype} ULP rule, element by element",
        note="elements where the impl has no correct bit (|e-o| >= |o|) and the baseline keeps its leading one",
    )


def invariant_criteria(
    outputs: list[OutputMeasurement], rules: Rules, names: list[str] | None = None
) -> list[Criterion]:
    """The output invariants (:mod:`acceptance.numerics.invariants`), one criterion per forward output when any
    is declared (``names``: the outputs' names, a gradient's ``grad[x]`` has no invariant): value = 1 when the
    impl broke one (``note`` = the first violating element), 0 otherwise. A broken invariant fails the case
    whatever the floors and factors allow: no rounding leaves a function's range."""
    if not rules.invariants.any():
        return []
    names = names or [""] * len(outputs)
    return [
        Criterion(
            kind="invariant",
            metric="invariant",
            output=out,
            value=1.0 if o.invariant else 0.0,
            threshold=0.0,
            comparison="==",
            passed=o.invariant is None,
            source=f"output invariants of {rules.category} ({_invariant_words(rules)})",
            note=o.invariant,
        )
        for out, o in enumerate(outputs)
        if not (names[out] if out < len(names) else "")
    ]


def _invariant_words(rules: Rules) -> str:
    inv = rules.invariants
    words = [f"range [{inv.range[0]:g}, {inv.range[1]:g}]"] if inv.range else []
    words += [name for name in ("nonnegative", "positive") if getattr(inv, name)]
    words += [f"sum to {inv.sum_to:g} over dim {inv.dim}"] if inv.sum_to is not None else []
    words += [f"monotone {inv.monotone}"] if inv.monotone else []
    return ", ".join(words)


def bias_floor_of(bias: Bias | None, bias_floor: float) -> float:
    """The material-bias floor of one output, ulp: ``max(bias_floor, min(K · m_b, C))`` with ``m_b`` the
    baseline's mean |b − o|/ulp(o) (:attr:`acceptance.records.Bias.baseline_abs`), ``K`` =
    ``BIAS_BASELINE_FACTOR`` and ``C`` = ``BIAS_SCALED_CAP_ULP`` (docs/verdicts.md, "Material bias")."""
    scaled = min(BIAS_BASELINE_FACTOR * bias.baseline_abs, BIAS_SCALED_CAP_ULP) if bias is not None else 0.0
    return max(bias_floor, scaled)


def diff4_criterion(out: int, counts: Diff4Counts, bias: Bias | None, bias_floor: float) -> Criterion:
    """The diff4 rule as a material-bias test.

    MLU-OPS's counts (p1, p2, n) of impl against baseline are the value; the case fails only when the impl's
    mean signed error against the oracle (additive or of magnitude, in ulp) exceeds the baseline's by more
    than the floor (:func:`bias_floor_of`: ``bias_floor`` ulp, or the baseline's own mean |error| where that
    is larger). Elements where impl and oracle are both below the smallest normal count as a flush, not a
    bias. Fewer than ``DIFF4_MIN_POINTS`` elements compared decide nothing (``passed`` is ``None``).
    """
    p1, p2, n = diff4_value(counts.above, counts.below)
    floor = bias_floor_of(bias, bias_floor)
    scaled = f" = the baseline's mean |error| {fmt(bias.baseline_abs)} ulp" if bias and floor > bias_floor else ""
    crit = dict(
        kind="diff4",
        metric="diff4",
        output=out,
        value=[p1, p2, float(n)],
        comparison="two-sided",
        source=f"diff4 material-bias rule (floor {fmt(floor)} ulp{scaled})",
    )
    if bias is None or bias.n < DIFF4_MIN_POINTS:
        got = 0 if bias is None else bias.n
        note = f"{got} elements compared with the oracle < {DIFF4_MIN_POINTS}"
        return Criterion.model_validate({**crit, "passed": None, "note": note})
    shifts = {
        "additive": (bias.impl_value, bias.baseline_value),
        "magnitude": (bias.impl_magnitude, bias.baseline_magnitude),
    }
    material = [k for k, (i, b) in shifts.items() if abs(i) > abs(b) + floor]
    one_sided = n >= DIFF4_MIN_POINTS and (counts.above == 0 or counts.below == 0)
    words = [
        f"mean shift against the oracle: impl {fmt(bias.impl_value)} ulp additive, "
        f"{fmt(bias.impl_magnitude)} of magnitude; baseline {fmt(bias.baseline_value)}, "
        f"{fmt(bias.baseline_magnitude)}"
    ]
    if one_sided:
        words.append("every unequal point lies on one side of the baseline")
    if bias.flushed:
        words.append(f"{bias.flushed} elements below the smallest normal on both sides left out as a flush")
    if material:
        words.insert(0, f"material {' and '.join(material)} bias")
    elif one_sided:
        words.insert(0, "one-sided but immaterial")
    return Criterion.model_validate({**crit, "passed": not material, "note": "; ".join(words)})


def _errors(x: list[float]) -> np.ndarray:
    """Errors as float64 with NaN as +inf (a NaN is the worst error)."""
    a = np.asarray(x, dtype=np.float64)
    return np.where(np.isnan(a), np.inf, a)


def gross_error(rec: DualDeltaRecord) -> str | None:
    """The gross-error rule, in words when it fails (``None`` when it holds).

    With ``ref = max(max_j delta_2[j], free)`` over the finite baseline errors of every trial, trial i is gross
    when ``delta_1[i] > GROSS_FACTOR * ref`` and, where the record has an accuracy floor F and the impl's ULP
    error u_i per trial, also ``u_i > GROSS_FACTOR * F``. One gross trial fails the case: a defect that strikes
    a minority of trials (lost updates only where indices collide) fails on every seed that draws one. The rule
    is off when ``ref`` is 0 (a baseline exact in every trial, with nothing free, gives no scale).
    """
    d1, d2 = _errors(rec.delta_impl), _errors(rec.delta_baseline)
    finite = d2[np.isfinite(d2)]
    ref = max(float(finite.max()) if finite.size else 0.0, rec.free)
    if not ref > 0 or not d1.size:
        return None
    gross = np.isfinite(d1) & (d1 > GROSS_FACTOR * ref)
    if rec.floor is not None and len(rec.impl_ulp) == d1.size:
        gross &= np.asarray(rec.impl_ulp, dtype=np.float64) > GROSS_FACTOR * rec.floor
    if not gross.any():
        return None
    i = int(np.flatnonzero(gross)[np.argmax(d1[gross])])
    floor = f" and {GROSS_FACTOR:g} x the {rec.floor:g}-ulp floor" if rec.floor is not None else ""
    return (
        f"gross error in {int(gross.sum())} of {d1.size} trials (worst: trial {i}, impl error {d1[i]:.3g} = "
        f"{d1[i] / ref:.3g} x max(the baseline's worst trial, free) = {ref:.3g}; the limit is "
        f"{GROSS_FACTOR:g} x{floor}): beyond anything rounding explains"
    )


def dual_delta_gate(rec: DualDeltaRecord) -> DualDeltaRecord:
    """The record with its non-inferiority decision: ``passed`` and the ``reasons`` it fails (empty on a pass).

    Uses the Holm-adjusted p-value when the record has one, else the raw one.
    """
    d1, d2 = _errors(rec.delta_impl), _errors(rec.delta_baseline)
    reasons: list[str] = []
    broken = np.flatnonzero(~np.isfinite(d1) & np.isfinite(d2))
    if broken.size:
        reasons.append(
            f"impl error is NaN/inf in {broken.size} of {d1.size} trials where the baseline's is finite "
            f"(first: trial {int(broken[0])})"
        )
    worst_adjusted = rec.p_worst_adjusted is not None
    p_worst = rec.p_worst_adjusted if worst_adjusted else rec.p_worst
    if p_worst is not None and p_worst < rec.alpha:
        test = next(t for t in rec.tests if t.name == "worst_trial")
        which = "Holm-adjusted p" if worst_adjusted else "p"
        reasons.append(f"worst {test.note} ({which}={p_worst:.2g} < alpha {rec.alpha:g})")
    adjusted = rec.p_adjusted is not None
    p = rec.p_adjusted if adjusted else rec.p_value
    if p is not None and p < rec.alpha:
        which = "Holm-adjusted p" if adjusted else "p"
        reasons.append(
            f"impl error exceeds max({rec.factor:g} x baseline's, free {rec.free:.3g}) in most trials "
            f"(sign test {which}={p:.2g} < alpha {rec.alpha:g})"
        )
    gross = gross_error(rec) if not reasons else None  # said when it alone decides: the others say enough
    if gross is not None:
        reasons.append(gross)
    return rec.model_copy(update={"passed": not reasons, "reasons": reasons})


def dual_delta_criterion(rec: DualDeltaRecord, source: str) -> Criterion:
    """A decided gate as a criterion: the median paired ratio delta_1/delta_2 against the factor."""
    return Criterion(
        kind="dual_delta",
        metric=rec.metric,
        output=rec.output,
        output_name=rec.output_name,
        value=rec.ratio.median if rec.ratio is not None else None,
        threshold=rec.factor,
        comparison="non-inferior",
        passed=rec.passed,
        source=source,
        note=rec.conclusion,
    )


_Named = TypeVar("_Named", Criterion, DualDeltaRecord, WorstElement)


def named(items: list[_Named], names: list[str]) -> list[_Named]:
    """Each record with ``output_name`` set where the case names its output (``names[output]`` non-empty)."""
    return [
        x.model_copy(update={"output_name": names[x.output]}) if x.output < len(names) and names[x.output] else x
        for x in items
    ]


def tolerance_to_pass(criteria: list[Criterion]) -> dict[str, float]:
    """For each failing ``<=``/``==`` threshold, the smallest threshold that would pass: the worst value itself."""
    out: dict[str, float] = {}
    for c in criteria:
        if c.passed is False and c.comparison in ("<=", "==") and isinstance(c.value, (int, float)):
            key = c.metric if not c.output else f"{c.metric}[{c.output_name or c.output}]"
            out[key] = max(out.get(key, 0.0), float(c.value))
    return out


def _where(case: CaseResult, criteria: list[Criterion]) -> list[str]:
    """Where the damage is: the fraction of elements over tolerance (and where they sit) and the worst element:
    the one that decided the first failed criterion that one element decides, else the furthest from the
    oracle."""
    lines = []
    if case.bad_fraction:
        where = f"; {case.bad_location}" if case.bad_location else ""
        lines.append(f"{fmt(case.bad_fraction)} of elements over tolerance{where}")
    first = next((c for c in criteria if c.passed is False and c.worst is not None), None)
    if first is not None and first.worst is not None:
        lines.append(criterion_worst_text(first.metric, first.worst))
    elif case.worst is not None:
        lines.append(worst_element_text(case.worst))
    return lines


def perf_criteria(case: MeasuredCase) -> list[Criterion]:
    """The speed-up gate of ``acceptance bench``: speedup = baseline median / impl median >= perf.min_speedup
    (no criterion when the case was not timed or its spec sets no min_speedup)."""
    perf = case.perf
    if perf is None or perf.min_speedup is None:
        return []
    passed = perf.speedup is not None and perf.speedup >= perf.min_speedup
    note = (
        f"median {perf.median_s:.4g} s against {perf.baseline_median_s:.4g} s for {perf.baseline}"
        if perf.speedup is not None
        else "the perf baseline was not timed"
    )
    return [
        Criterion(
            kind="perf",
            metric="speedup",
            value=perf.speedup,
            threshold=perf.min_speedup,
            comparison=">=",
            passed=passed,
            source="spec perf.min_speedup",
            note=note,
        )
    ]


def vacuity_criteria(case: MeasuredCase, *, strict: bool) -> list[Criterion]:
    """The vacuity rule, present only for a case that showed nothing (no finite element compared, or a constant
    answer where the oracle varies): metric ``vacuous``, no value or threshold, ``note`` = why; ``passed`` is
    ``False`` under ``--strict`` and ``None`` (not failing) otherwise."""
    if not case.vacuous:
        return []
    return [
        Criterion(
            kind="vacuity",
            metric="vacuous",
            comparison="==",
            passed=False if strict else None,
            source="--strict" if strict else "fails only with --strict",
            note=case.vacuous,
        )
    ]


def determinism_criteria(case: MeasuredCase) -> list[Criterion]:
    """The determinism rule, present when determinism was measured: value = elements whose bits differ between
    runs of the impl on the same inputs (summed over trials), threshold 0, comparison ``==``. It holds when the
    impl is bitwise or differs only in NaN payloads; ``passed`` is ``None`` when run-to-run variation is allowed
    (category atomic_add, or the spec's ``deterministic: false``)."""
    d = case.determinism
    if d is None:
        return []
    if d.impl == "varying" and d.impl_spread_ulp is not None:
        note = (
            f"{d.impl_varying} elements vary over {d.runs} runs on the same inputs, spread up to "
            f"{d.impl_spread_ulp:.4g} ulp of the oracle; dual-delta on the median error of up to {d.chosen_from} "
            "runs of each trial (the worst where gross), the other criteria on the run of median error"
        )
    elif d.impl == "varying":
        note = (
            f"{d.impl_differing} elements differ between {d.runs} runs on the same inputs "
            f"(max |run_i - run_1| = {d.impl_spread:.6g})"
        )
    else:
        same = "bitwise identical" if d.impl == "bitwise" else "identical but for NaN payloads"
        note = f"{same} over {d.runs} runs on the same inputs"
    if d.required:
        source, passed = f"category {case.category} must be bitwise deterministic", d.impl != "varying"
    else:
        allowed = f"category {case.category}" if case.category == "atomic_add" else "spec `deterministic: false`"
        source, passed = f"{allowed} allows run-to-run variation", None
    return [
        Criterion(
            kind="determinism",
            metric="run_to_run_differing",
            value=float(d.impl_differing),
            threshold=0.0,
            comparison="==",
            passed=passed,
            source=source,
            note=note,
        )
    ]


def _flat(case: MeasuredCase) -> dict[str, object]:
    """The measurement as :class:`CaseResult`'s fields: the per-output records flattened into its parallel
    lists (a list empty when some output lacks that measurement)."""

    def every(values: list[_T | None]) -> list[_T]:
        present = [v for v in values if v is not None]
        return present if len(present) == len(values) else []

    outs = case.outputs
    return {
        **{name: getattr(case, name) for name in MeasuredCase.model_fields if name != "outputs"},
        "metrics": [o.metrics for o in outs],
        "impl_oracle": every([o.impl_oracle for o in outs]),
        "baseline_oracle": every([o.baseline_oracle for o in outs]),
        "ulp": every([o.ulp for o in outs]),
        "bias": every([o.bias for o in outs]),
        "bit_mismatches": every([o.bit_mismatches for o in outs]),
        "diff4_counts": [o.diff4 for o in outs],
    }


#: The element measure (:attr:`CriterionWorst.measure`) of a metric's per-element error; 'abs' for the rest.
_MEASURE = {
    "max_ulp": "ulp",
    "mean_ulp": "ulp",
    "ulp_lost_elements": "ulp_over",
    "max_hyb": "hyb",
    "mean_hyb": "hyb",
    "max_rel": "rel",
    "max_rel_floor": "rel",
    "diff3_1": "rel",
    "diff3": "rel",
}


def _with_worst(c: Criterion, outputs: list[OutputMeasurement]) -> Criterion:
    """``c`` with the element that decided it (its output's worst element in the criterion's measure, against
    the oracle where ``c`` was decided against it); unchanged where no one element decides (bits, diff4, ...)."""
    if c.kind not in ("threshold", "placement", "ulp", "dual_delta") or c.output >= len(outputs):
        return c
    measure = _MEASURE.get(c.metric, "abs")
    if c.kind == "threshold" and c.against == "oracle" and measure in ("abs", "rel"):
        measure += "_oracle"
    found = outputs[c.output].worst.get(measure)
    return c.model_copy(update={"worst": found}) if found is not None else c


def _holds_in(o: float, dtype: str) -> bool:
    """Whether ``dtype`` holds the float64 value ``o``: rounded to it, finite and nonzero unless ``o`` is 0."""
    if not math.isfinite(o):
        return False
    r = float(dtypes.round_to(np.array([o]), dtype)[0])
    return math.isfinite(r) and abs(r) <= dtypes.lookup(dtype).max and (r != 0 or o == 0)


def _range_note(case: CaseResult, criteria: list[Criterion]) -> str:
    """The oracle-range note of a failed case: which elements the dtype cannot hold, and whether the element
    that decided the first failed criterion is one of them."""
    text = f"note: {case.oracle_range} (the dtype cannot hold the true result at those elements)"
    first = next((c for c in criteria if c.passed is False and c.worst is not None), None)
    w = first.worst if first is not None else None
    if first is None or w is None or w.oracle is None or not dtypes.lookup(case.dtype).is_float:
        return text
    at = f"the element deciding {first.metric}, at {tuple(w.index)} (oracle {fmt(w.oracle)}),"
    if _holds_in(w.oracle, case.dtype):
        return f"{text}; {at} is within the dtype's range: the inputs' range does not explain that failure"
    return f"{text}; {at} is one of them"


def decide(case: MeasuredCase, rules: Rules, *, strict: bool = False) -> CaseResult:
    """The decided case: its criteria (:func:`case_criteria`), then its verdict and reasons from the record alone
    (:func:`conclude`; see the module docstring). ``strict``: a vacuous case (nothing compared, or a constant
    answer where the oracle varies) fails."""
    waiver = {  # the rules' waiver facts, recorded so that the verdict is a function of the record
        "waiver": rules.waiver,
        "waiver_covers": list(rules.waiver_covers) if rules.waiver else [],
        "expired_waiver": rules.expired_waiver,
    }
    if case.error is not None:
        return conclude(CaseResult.model_validate({**_flat(case), **waiver, "verdict": "error"}))
    if case.worst is not None and case.output_names:
        case = case.model_copy(update={"worst": named([case.worst], case.output_names)[0]})
    records = named([dual_delta_gate(rec) for rec in case.dual_delta], case.output_names)
    criteria = case_criteria(case, rules, records, strict=strict)
    measured = {**_flat(case), **waiver, "dual_delta": records, "criteria": criteria}
    return conclude(CaseResult.model_validate({**measured, "verdict": "pass"}))


def case_criteria(
    case: MeasuredCase, rules: Rules, records: list[DualDeltaRecord], *, strict: bool = False
) -> list[Criterion]:
    """Every criterion of a measured case, in the order its reasons are said: the fixed ones (thresholds, bits,
    perf, ULP, invariants, diff4), one per decided dual-delta record (``records``, gated and named, in order),
    then the vacuity and determinism rules; each with the element that decided it (:func:`_with_worst`)."""
    outputs = case.outputs
    criteria = threshold_criteria(outputs, rules) + bits_criteria(outputs, rules) + perf_criteria(case)
    if rules.ulp_check:
        per_trial = case.compared // max(case.trials * len(outputs), 1) if case.compared is not None else None
        criteria += ulp_criteria(outputs, rules, per_trial)
    criteria += invariant_criteria(outputs, rules, case.output_names)
    if rules.diff4:
        criteria += [diff4_criterion(out, o.diff4, o.bias, rules.bias_floor) for out, o in enumerate(outputs)]
    criteria = named(criteria, case.output_names)
    defaults = rules.dual_delta.default_factors if rules.dual_delta else frozenset()
    for rec in records:
        source = f"{rules.category} default" if rec.metric in defaults else "spec override"
        source = rules.dual_delta.sources.get(rec.metric, source) if rules.dual_delta else source
        criteria.append(dual_delta_criterion(rec, source))
    criteria += vacuity_criteria(case, strict=strict) + determinism_criteria(case)
    return [_with_worst(c, outputs) for c in criteria]


def conclude(result: CaseResult) -> CaseResult:
    """``result`` with its verdict, reasons and ``tolerance_to_pass``, from its own fields alone: its error, its
    criteria, its decided dual-delta records (the k-th ``dual_delta`` criterion is ``dual_delta[k]``), where
    the damage is and its waiver (``waiver``, ``waiver_covers``, ``expired_waiver``). :func:`decide` ends with
    it, and a merge of shards (:func:`regate`) re-decides with it.

    Reasons: every failed criterion in order (a failed dual-delta gate by its record's reasons); the
    oracle-range note when the oracle leaves the dtype's range; then where the damage is (:func:`_where`). A
    case fails when any is given; ``skip`` when its waiver covers that verdict (else an expired waiver is
    named last)."""
    waived = result.waiver
    if result.error is not None:
        if waived and "error" in result.waiver_covers:
            return result.model_copy(update={"verdict": "skip", "reasons": [f"waived: {waived}", result.error]})
        expired = [result.expired_waiver] if result.expired_waiver else []
        return result.model_copy(update={"verdict": "error", "reasons": [result.error, *expired]})
    criteria = result.criteria
    reasons = _failed(criteria, result.dual_delta)
    if reasons and result.oracle_range:  # after the failed criteria: a note on some elements, never the headline
        reasons.append(_range_note(result, criteria))
    verdict: Verdict = "fail" if reasons else "pass"
    if reasons:
        reasons += _where(result, criteria)
    if verdict == "fail" and waived and "fail" in result.waiver_covers:
        verdict, reasons = "skip", [f"waived: {waived}"] + reasons
    elif verdict == "fail" and result.expired_waiver:
        reasons.append(result.expired_waiver)
    return result.model_copy(
        update={"verdict": verdict, "reasons": reasons, "tolerance_to_pass": tolerance_to_pass(criteria)}
    )


def _failed(criteria: list[Criterion], records: list[DualDeltaRecord]) -> list[str]:
    """The failed criteria in words, in order (:func:`acceptance.wording.criterion_text`); a failed dual-delta
    gate is said by its record's reasons (``records[k]`` is the k-th dual-delta criterion's record)."""
    reasons: list[str] = []
    gates = iter(records)
    for c in criteria:
        if c.kind != "dual_delta":
            reasons += [criterion_text(c)] if c.passed is False else []
            continue
        rec = next(gates, None)
        if rec is None:  # a record without its gate's record (an edited file): the criterion says it
            reasons += [criterion_text(c)] if c.passed is False else []
            continue
        where = f" [{output_label(rec.output, rec.output_name)}]" if rec.output or rec.output_name else ""
        reasons += [f"dual-delta {rec.metric}{where}: {r}" for r in rec.reasons] if not rec.passed else []
    return reasons


def regate(result: CaseResult) -> CaseResult:
    """A decided case decided again after its dual-delta records' Holm-adjusted p-values changed (a merge of
    shards, Holm over the whole run): each record gated again (:func:`dual_delta_gate`), its criterion made
    again (same source, same deciding element), then :func:`conclude`. Gives what :func:`decide` gives with
    those adjusted p-values: the other criteria do not depend on them. A case whose run broke keeps its records
    ungated, as :func:`decide` leaves them; so does a record whose dual-delta criteria are not one per record
    (not written by :func:`decide`)."""
    gated = sum(1 for c in result.criteria if c.kind == "dual_delta") == len(result.dual_delta)
    if result.error is not None or not gated:
        return conclude(result)
    records = [dual_delta_gate(rec) for rec in result.dual_delta]
    gates = iter(records)
    criteria = [
        dual_delta_criterion(next(gates), c.source).model_copy(update={"worst": c.worst})
        if c.kind == "dual_delta"
        else c
        for c in result.criteria
    ]
    return conclude(result.model_copy(update={"dual_delta": records, "criteria": criteria}))


def allowed_verdicts(case: CaseResult) -> frozenset[str]:
    """The verdicts :func:`decide` can give a case with this record: ``error`` when its run broke (or ``skip``
    under a waiver), else ``fail`` when a criterion failed (``passed`` false; or ``skip`` under a waiver), else
    ``pass``. A record whose verdict is not among them was not written by :func:`decide` (an edited file)."""
    waived = {"skip"} if case.waiver else set()
    if case.error is not None:
        return frozenset({"error", *waived})
    if any(c.passed is False for c in case.criteria):
        return frozenset({"fail", *waived})
    return frozenset({"pass"})


def contradiction(case: CaseResult) -> str | None:
    """Why ``case``'s verdict contradicts its own record (:func:`allowed_verdicts`), in words; ``None`` when
    it does not."""
    allowed = allowed_verdicts(case)
    if case.verdict in allowed:
        return None
    failed = [c.metric if not c.output else f"{c.metric}[{c.output}]" for c in case.criteria if c.passed is False]
    if case.error is not None:
        why = "its run broke (error recorded)"
    elif failed:
        why = f"criteria failed: {', '.join(failed[:5])}" + (", ..." if len(failed) > 5 else "")
    else:
        why = "no criterion failed and no error is recorded"
    return f"verdict {case.verdict!r} contradicts its record ({why}; expected {' or '.join(sorted(allowed))})"


def summarize(cases: list[CaseResult], *, interrupted: int | None = None) -> Summary:
    """The run's verdict: counts per verdict; the run fails (exit code 1) on any fail or error. A run that did
    not finish is ``interrupted``, never a pass, with the signal's exit code (130 SIGINT, 143 SIGTERM)."""
    counts = {v: 0 for v in VERDICT_ORDER}
    for case in cases:
        counts[case.verdict] += 1
    bad = counts["fail"] + counts["error"]
    verdict: Literal["pass", "fail", "interrupted"] = "interrupted" if interrupted else "fail" if bad else "pass"
    return Summary(
        total=len(cases),
        passed=counts["pass"],
        failed=counts["fail"],
        errors=counts["error"],
        skipped=counts["skip"],
        verdict=verdict,
        exit_code=interrupted if interrupted else EXIT_FAIL if bad else EXIT_OK,
    )


def gate_comparison(summary: Summary, comparison: Comparison) -> Summary:
    """The run's outcome with a comparison in the gate: a regression against the base run (a worse verdict, or
    an error grown past the allowed factor) fails a run that would otherwise pass (exit code 1)."""
    if comparison.passed or summary.verdict != "pass":
        return summary
    return summary.model_copy(update={"verdict": "fail", "exit_code": EXIT_FAIL})
