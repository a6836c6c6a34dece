"""Dual-delta statistics: compare two paired error distributions, gate on non-inferiority.

Inputs are two arrays paired by trial, both measured against the oracle:

* ``delta_impl``     = delta_1[i] = err(impl(x_i), oracle(x_i))
* ``delta_baseline`` = delta_2[i] = err(baseline(x_i), oracle(x_i))

in the units of the error metric (e.g. hybrid error |e-o|/(1+|o|), dimensionless).

**Describing** (:func:`describe`, :func:`paired_ratios`, the tests below) says how
the two distributions relate. The statistics of the **non-inferiority gate**
are here too (:func:`noninferiority_test`, the sign test of delta_1 against
``allowed_i = max(factor * delta_2[i], free)``; :func:`worst_trial_test`;
:func:`holm`), and :func:`acceptance.decide.verdict.dual_delta_gate` decides with
them.

NaN errors are treated as +inf (a NaN never makes a check pass). Trials where
both errors are non-finite cannot be compared and are left out of every test.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from acceptance.numerics.factors import DEFAULT_ALPHA, default_factor
from acceptance.numerics.stats.hypothesis import (
    Errors,
    Float64s,
    as_errors,
    brown_forsythe_test,
    comparable,
    ks_test,
    paired_t_test,
    shapiro_test,
    sign_p,
    sign_test,
    wilcoxon_test,
)
from acceptance.records import Describe, DualDeltaRecord, StatTest

__all__ = [
    "analyze",
    "apply_holm",
    "holm_pairs",
    "with_adjusted",
    "brown_forsythe_test",
    "conclude",
    "describe",
    "free_bound",
    "holm",
    "ks_test",
    "mean_ratio",
    "noninferiority_test",
    "paired_ratios",
    "paired_t_test",
    "shapiro_test",
    "sign_test",
    "wilcoxon_test",
    "worst_trial_test",
]

# ----------------------------------------------------------------------------
# Descriptive statistics
# ----------------------------------------------------------------------------


def describe(x: Errors) -> Describe:
    """Mean, median, sample std (ddof=1; 0 for one value), p50/p90/p99, max, min.

    Computed over the finite values only; ``n`` counts them, so ``n`` below the
    number of trials says some errors were NaN or inf. Percentiles interpolate
    linearly (numpy's default). All fields are NaN when no value is finite.
    """
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    a = a[np.isfinite(a)]
    if a.size == 0:
        nan = math.nan
        return Describe(n=0, mean=nan, median=nan, std=nan, p50=nan, p90=nan, p99=nan, max=nan, min=nan)
    p50, p90, p99 = np.percentile(a, [50, 90, 99])
    return Describe(
        n=int(a.size),
        mean=float(np.mean(a)),
        median=float(np.median(a)),
        std=float(np.std(a, ddof=1)) if a.size > 1 else 0.0,
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        max=float(np.max(a)),
        min=float(np.min(a)),
    )


def paired_ratios(delta_impl: Errors, delta_baseline: Errors) -> Float64s:
    """delta_1[i] / delta_2[i] over the trials where delta_2[i] > 0 and both are finite.

    A trial with delta_2 == 0 has no ratio (the baseline was exact); it is left
    out here and still counts in the paired tests through delta_1 - delta_2.
    """
    d1, d2 = as_errors(delta_impl), as_errors(delta_baseline)
    keep = np.isfinite(d1) & np.isfinite(d2) & (d2 > 0)
    return d1[keep] / d2[keep]


# ----------------------------------------------------------------------------
# The non-inferiority gate
# ----------------------------------------------------------------------------


#: The worst-trial test's spread never drops below this, in natural log (about 10 %): errors that repeat
#: almost exactly from trial to trial do not make a tiny excess look like an outlier.
MIN_LOG_SCALE = 0.1

#: Below this many elements per output and trial, a trial's error is that of a few elements, not a maximum or
#: mean over many: the worst-trial test then uses the tail of the log ratio of two independent rounding errors
#: (:func:`worst_trial_test`) instead of a scale fitted to the trials.
FEW_ELEMENTS = 32


def worst_trial_test(
    delta_impl: Errors,
    delta_baseline: Errors,
    *,
    factor: float,
    free: float = 0.0,
    within: Sequence[bool] | npt.NDArray[np.bool_] | None = None,
    elements: int | None = None,
) -> StatTest:
    """Is the impl's worst trial an outlier beyond ``factor`` x the baseline's error in the same trial?

    Over the n trials where both errors are finite (and the impl's is not
    within the accuracy floor), with t = the smallest positive float64, the
    paired log ratio of each trial

        r_i = ln(max(delta_1[i], free, t) / factor) - ln(max(delta_2[i], free, t))

    is modelled as logistic with centre m = max(median(r), 0) and scale
    s = max(MAD(r) / ln 3, MIN_LOG_SCALE) (a logistic's median absolute
    deviation is s ln 3), so

        T = (max r - m) / s,   p = min(1, n / (1 + e^T))

    bounds the chance that the largest of n trials reaches T (Bonferroni over
    the trials). The difference of two Gumbel variables of equal scale is
    logistic, so the model fits worst-element errors (maxima over many
    elements) as well as the near-normal mean errors; pairing by trial takes
    out what impl and baseline share (the difficulty of that trial's inputs).
    The false-alarm rates this gives are measured in ``docs/dual-delta.md``.

    With fewer than :data:`FEW_ELEMENTS` ``elements`` per trial, a trial's error is a few rounding errors, and
    where impl and baseline round independently (another summation order, an atomic add) the ratio of two such
    errors is heavy-tailed: for one element each, |N(0, s1)| / |N(0, s2)| with s1 <= factor s2 exceeds
    factor e^T with probability at most (2/pi) arctan(e^-T) (a ratio of normals is Cauchy), far above the
    logistic tail when a baseline error is small by chance. There

        T = max r - m,   p = min(1, n (2/pi) arctan(e^-T)),

    exact for one element and conservative for a few.
    """
    d1, d2 = as_errors(delta_impl), as_errors(delta_baseline)
    ok = np.isfinite(d1) & np.isfinite(d2)
    if within is not None:
        ok &= ~np.asarray(within, dtype=bool)
    if not ok.any():
        return StatTest(name="worst_trial", alternative="greater", note="not run: no comparable trial above the floor")
    tiny = np.finfo(np.float64).tiny
    r = np.log(np.maximum(np.maximum(d1[ok], free), tiny) / factor) - np.log(np.maximum(np.maximum(d2[ok], free), tiny))
    centre = max(float(np.median(r)), 0.0)
    trial = int(np.flatnonzero(ok)[np.argmax(r)])
    head = (
        f"trial {trial}: impl error {float(d1[trial]):.3g} = {math.exp(float(np.max(r))):.3g} x "
        f"({factor:g} x the baseline's {float(d2[trial]):.3g}), "
    )
    if elements is not None and elements < FEW_ELEMENTS:
        t = float(np.max(r)) - centre
        p = min(1.0, r.size * 2.0 / math.pi * math.atan(math.exp(-min(t, 700.0))))
        note = f"{head}{t:.2g} in ln above the trials' typical ratio ({elements} elements per trial: Cauchy tail)"
        return StatTest(name="worst_trial", statistic=t, p_value=p, alternative="greater", note=note)
    scale = max(float(np.median(np.abs(r - np.median(r)))) / math.log(3.0), MIN_LOG_SCALE)
    t = (float(np.max(r)) - centre) / scale
    p = min(1.0, r.size / (1.0 + math.exp(min(t, 700.0))))
    note = f"{head}{t:.2g} scales (s = {scale:.2g} in ln) above the trials' typical ratio"
    return StatTest(name="worst_trial", statistic=t, p_value=p, alternative="greater", note=note)


def allowance(delta_baseline: Errors, factor: float, free: float) -> Float64s:
    """Error the impl may have in each trial: max(factor * delta_2[i], free)."""
    return np.maximum(factor * as_errors(delta_baseline), free)


def noninferiority_test(
    delta_impl: Errors,
    delta_baseline: Errors,
    *,
    factor: float,
    free: float = 0.0,
    within: Sequence[bool] | npt.NDArray[np.bool_] | None = None,
) -> StatTest:
    """Exact one-sided sign test of H0: median(delta_1 - max(factor*delta_2, free)) <= 0.

    k = #{i: delta_1[i] > allowed_i}, n = #{i: delta_1[i] != allowed_i} over
    trials that are not both non-finite, a trial ``within`` the accuracy floor
    counting as not over (and untied); p = P(Binomial(n, 1/2) >= k). A small
    p is evidence that the impl is more than ``factor`` times worse than the
    baseline in a typical trial. The sign test needs no symmetry of the
    (skewed) error differences and is unchanged by taking logs, so it tests the
    ratio delta_1/allowed against 1 as well.
    """
    d1, d2 = as_errors(delta_impl), as_errors(delta_baseline)
    usable = ~(np.isinf(d1) & np.isinf(d2))
    floor = np.zeros(d1.size, dtype=bool) if within is None else np.asarray(within, dtype=bool) & np.isfinite(d1)
    allowed = allowance(d2, factor, free)
    k = int(np.sum((d1 > allowed) & usable & ~floor))
    n = int(np.sum(((d1 != allowed) | floor) & usable))
    note = f"impl over max({factor:g} x baseline, free) in {k} of {n} untied trials"
    if floor.any():
        note += f"; {int(floor.sum())} trials within the accuracy floor"
    if d1.size - n:
        note += f"; {d1.size - n} ties or non-comparable trials dropped"
    return StatTest(name="non_inferiority", statistic=float(k), p_value=sign_p(k, n), alternative="greater", note=note)


# ----------------------------------------------------------------------------
# Conclusion in words
# ----------------------------------------------------------------------------


def _fmt_ratio(r: float) -> str:
    """r with 3 significant digits, or as 1 ± d when that would round a ratio != 1 to "1"."""
    if r != 1 and abs(r - 1) < 5e-3:
        return f"(1 {'+' if r > 1 else '-'} {abs(r - 1):.2g})\u00d7"
    return f"{r:.3g}\u00d7"


def mean_ratio(delta_impl: Errors, delta_baseline: Errors) -> float:
    """mean(delta_1) / mean(delta_2) over the trials where both are finite.

    The size of the shift the tests on d = delta_1 - delta_2 detect, as a
    factor; inf when the baseline's mean error is 0 and the impl's is not,
    NaN when both are 0 or no trial is comparable.
    """
    d1, d2 = as_errors(delta_impl), as_errors(delta_baseline)
    keep = comparable(d1, d2)
    if not keep.any():
        return math.nan
    num, den = float(np.mean(d1[keep])), float(np.mean(d2[keep]))
    if den > 0:
        return num / den
    return math.inf if num > 0 else math.nan


def conclude(delta_impl: Errors, delta_baseline: Errors, tests: Sequence[StatTest], alpha: float) -> str:
    """Plain words on how impl's errors relate to the baseline's.

    ``identical``: delta_1 == delta_2 in every trial. Otherwise location from
    the one-sided Wilcoxon tests, each read at ``alpha``: "impl less accurate
    by R× (p=…)" / "impl more accurate (R× baseline, p=…)" / "equivalent",
    with R = :func:`mean_ratio`; then, when Brown-Forsythe rejects equal
    spread at ``alpha``, "impl less/more stable (std S× baseline, p=…)".
    """
    d1, d2 = as_errors(delta_impl), as_errors(delta_baseline)
    if np.array_equal(d1, d2):
        return "identical"
    found = {(t.name, t.alternative): t for t in tests}
    worse, better = found.get(("wilcoxon", "greater")), found.get(("wilcoxon", "less"))
    r = mean_ratio(d1, d2)
    if worse is not None and worse.p_value is not None and worse.p_value < alpha:
        by = f"by {_fmt_ratio(r)}" if math.isfinite(r) else "than an exact baseline"
        words = [f"impl less accurate {by} (p={worse.p_value:.2g})"]
    elif better is not None and better.p_value is not None and better.p_value < alpha:
        words = [f"impl more accurate ({_fmt_ratio(r)} baseline, p={better.p_value:.2g})"]
    else:
        words = ["equivalent"]
    spread = found.get(("brown_forsythe", "two-sided"))
    if spread is not None and spread.p_value is not None and spread.p_value < alpha:
        s1, s2 = describe(d1).std, describe(d2).std
        if s2 > 0:
            kind = "less" if s1 > s2 else "more"
            words.append(f"impl {kind} stable (std {_fmt_ratio(s1 / s2)} baseline, p={spread.p_value:.2g})")
    return "; ".join(words)


# ----------------------------------------------------------------------------
# The record the results file stores
# ----------------------------------------------------------------------------


def free_bound(free: float | Errors) -> float:
    """The error always allowed, as one bound: a number as is, or the maximum of
    per-trial values err(round(oracle_i), oracle_i) over the finite ones (0 when
    none is finite). A non-finite value means the output dtype cannot hold the
    oracle in that trial (overflow); such a trial is excluded by the gate as
    non-comparable, so it must not widen the allowance of the others.
    """
    a = np.asarray(free, dtype=np.float64).reshape(-1)
    if a.size == 1 and np.ndim(free) == 0:
        return float(a[0])
    a = a[np.isfinite(a)]
    return float(np.max(a)) if a.size else 0.0


def _check_params(metric: str, n1: int, n2: int, factor: float, alpha: float, free: float) -> None:
    where = f"dual-delta analysis of {metric!r}"
    if n1 != n2:
        raise ValueError(f"{where}: {n1} impl errors but {n2} baseline errors (they are paired by trial)")
    if n1 == 0:
        raise ValueError(f"{where}: no trials")
    if not (math.isfinite(factor) and factor > 0):
        raise ValueError(f"{where}: factor must be a finite number > 0, got {factor!r}")
    if not (0 < alpha < 1):
        raise ValueError(f"{where}: alpha must lie in (0, 1), got {alpha!r}")
    if not (math.isfinite(free) and free >= 0):
        raise ValueError(f"{where}: free must be a finite number >= 0, got {free!r}")


def analyze(
    delta_impl: Errors,
    delta_baseline: Errors,
    *,
    metric: str,
    output: int = 0,
    factor: float | None = None,
    alpha: float = DEFAULT_ALPHA,
    free: float | Errors = 0.0,
    floor: float | None = None,
    impl_ulp: Errors = (),
    elements: int | None = None,
) -> DualDeltaRecord:
    """Full dual-delta analysis of one metric for one output.

    ``factor`` defaults to :func:`default_factor` (metric). ``free`` is the
    error always allowed, in the units of the metric: the output dtype's own
    rounding of the oracle, given as one bound or per trial (reduced by
    :func:`free_bound` to the largest finite value). ``floor`` (ulp) with
    ``impl_ulp`` (the impl's ULP error against the oracle per trial): a trial
    whose impl error is within the floor counts as within allowance. ``elements``: the fewest elements of the
    output in a trial (:func:`worst_trial_test`; ``None``: many). The record is undecided
    (``passed`` is ``None``): :func:`apply_holm` adds the Holm-adjusted
    p-value over a run and :func:`acceptance.decide.verdict.dual_delta_gate` decides.
    Raises ``ValueError`` naming the metric on unpaired arrays or bad parameters.
    """
    d1 = np.asarray(delta_impl, dtype=np.float64).reshape(-1)
    d2 = np.asarray(delta_baseline, dtype=np.float64).reshape(-1)
    factor = default_factor(metric) if factor is None else float(factor)
    free = free_bound(free)
    _check_params(metric, d1.size, d2.size, factor, float(alpha), free)
    ratios = paired_ratios(d1, d2)
    shapiro = shapiro_test(d1, d2)
    tests = [
        ks_test(d1, d2),
        wilcoxon_test(d1, d2, "greater"),
        wilcoxon_test(d1, d2, "less"),
        sign_test(d1, d2),
        shapiro,
        paired_t_test(d1, d2, shapiro, alpha),
        brown_forsythe_test(d1, d2),
    ]
    within = np.asarray(impl_ulp, dtype=np.float64) <= floor if floor is not None and len(impl_ulp) else None
    gate_test = noninferiority_test(d1, d2, factor=factor, free=free, within=within)
    worst = worst_trial_test(d1, d2, factor=factor, free=free, within=within, elements=elements)
    return DualDeltaRecord(
        metric=metric,
        output=output,
        trials=int(d1.size),
        delta_impl=d1.tolist(),
        delta_baseline=d2.tolist(),
        impl=describe(d1),
        baseline=describe(d2),
        ratio=describe(ratios) if ratios.size else None,
        tests=tests + [gate_test, worst],
        conclusion=conclude(d1, d2, tests, alpha),
        factor=factor,
        alpha=alpha,
        free=free,
        p_value=gate_test.p_value,
        p_worst=worst.p_value,
        floor=floor,
        impl_ulp=list(map(float, impl_ulp)) if floor is not None else [],
    )


# ----------------------------------------------------------------------------
# Many operators in one run
# ----------------------------------------------------------------------------


def holm(p_values: Sequence[float]) -> Float64s:
    """Holm-Bonferroni step-down adjusted p-values, in the input order.

    With p_(1) <= ... <= p_(m) sorted ascending,
    adj_(i) = min(1, max_{j <= i} (m - j + 1) * p_(j)).
    Rejecting where adj < alpha controls the family-wise error rate at alpha
    under any dependence between the tests.
    """
    p = np.asarray(p_values, dtype=np.float64).reshape(-1)
    if np.any(~np.isfinite(p)) or np.any((p < 0) | (p > 1)):
        raise ValueError(f"holm: p-values must lie in [0, 1], got {p.tolist()}")
    m = p.size
    order = np.argsort(p, kind="stable")
    adjusted_sorted = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adjusted_sorted
    return out


def holm_pairs(pairs: Sequence[tuple[float | None, float | None]]) -> list[tuple[float | None, float | None]]:
    """Holm over every p-value of ``pairs`` (per dual-delta record its sign test's and worst-trial test's
    p-value; ``None``: not tested), as pairs of adjusted p-values in the same places (``None`` stays)."""
    family = [p for pair in pairs for p in pair if p is not None]
    adjusted = iter(holm(family).tolist() if family else [])
    return [
        (None if a is None else float(next(adjusted)), None if b is None else float(next(adjusted))) for a, b in pairs
    ]


def apply_holm(records: Sequence[DualDeltaRecord]) -> list[DualDeltaRecord]:
    """New records with ``p_adjusted`` and ``p_worst_adjusted``: Holm over every p-value of the records given
    (the sign test's and the worst-trial test's of all cases, metrics and outputs of a run, :func:`holm_pairs`)."""
    pairs = holm_pairs([(r.p_value, r.p_worst) for r in records])
    return [with_adjusted(rec, pair) for rec, pair in zip(records, pairs, strict=True)]


def with_adjusted(rec: DualDeltaRecord, pair: tuple[float | None, float | None]) -> DualDeltaRecord:
    """``rec`` with its adjusted p-values (``p_adjusted``, ``p_worst_adjusted``) where they are not ``None``."""
    update = {name: p for name, p in zip(("p_adjusted", "p_worst_adjusted"), pair, strict=True) if p is not None}
    return rec.model_copy(update=update)
