"""Dual-delta statistics: compare two paired error distributions, gate on non-inferiority.

Inputs are two arrays paired by trial, both measured against the oracle:

* ``delta_impl``     = delta_1[i] = err(impl(x_i), oracle(x_i))
* ``delta_baseline`` = delta_2[i] = err(baseline(x_i), oracle(x_i))

in the units of the error metric (e.g. hybrid error |e-o|/(1+|o|), dimensionless).

**Describing** (:func:`describe`, :func:`paired_ratios`, the tests below) says how
the two distributions relate. The statistics of the **non-inferiority gate**
are here too (:func:`noninferiority_test`, the sign test of delta_1 against
``allowed_i = max(factor * delta_2[i], free)``; :func:`worst_factor`;
:func:`holm`), and :func:`acceptance.verdict.dual_delta_gate` decides with
them.

NaN errors are treated as +inf (a NaN never makes a check pass). Trials where
both errors are non-finite cannot be compared and are left out of every test.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Callable, Optional, Sequence, Union

import numpy as np
from scipy import stats as sps

from acceptance.records import Describe, DualDeltaRecord, StatTest
from acceptance.spec.defaults import DEFAULT_ALPHA, default_factor

# ----------------------------------------------------------------------------
# Descriptive statistics
# ----------------------------------------------------------------------------


def _as_errors(x: Sequence[float]) -> np.ndarray:
    """Errors as a 1-D float64 array with NaN mapped to +inf (a NaN is the worst error)."""
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    return np.where(np.isnan(a), np.inf, a)


def describe(x: Sequence[float]) -> Describe:
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


def paired_ratios(delta_impl: Sequence[float], delta_baseline: Sequence[float]) -> np.ndarray:
    """delta_1[i] / delta_2[i] over the trials where delta_2[i] > 0 and both are finite.

    A trial with delta_2 == 0 has no ratio (the baseline was exact); it is left
    out here and still counts in the paired tests through delta_1 - delta_2.
    """
    d1, d2 = _as_errors(delta_impl), _as_errors(delta_baseline)
    keep = np.isfinite(d1) & np.isfinite(d2) & (d2 > 0)
    return d1[keep] / d2[keep]


def _comparable(d1: np.ndarray, d2: np.ndarray) -> np.ndarray:
    """Mask of trials where both errors are finite."""
    return np.isfinite(d1) & np.isfinite(d2)


# ----------------------------------------------------------------------------
# Hypothesis tests (each returns a StatTest, as scipy reports it)
# ----------------------------------------------------------------------------


def _left_out(n_total: int, n_used: int, why: str) -> Optional[str]:
    return None if n_used == n_total else f"{n_total - n_used} of {n_total} trials left out ({why})"


def _run_scipy(
    name: str, test: Callable[[], Any], alternative: str = "two-sided", note: Optional[str] = None
) -> StatTest:
    """Run ``test()``, a scipy.stats call; degenerate data (scipy's NaN p-value) gives no p-value and a note."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = test()
    said = sorted({str(w.message).split(". ")[0] for w in caught if not issubclass(w.category, RuntimeWarning)})
    if said:  # scipy's caveats (e.g. a near-zero range) go into the record, not onto stderr
        note = "; ".join(([note] if note else []) + [f"scipy: {s}" for s in said])
    statistic, p = float(res.statistic), float(res.pvalue)
    if not math.isfinite(p):
        why = "not run: degenerate data (no spread to test)"
        return StatTest(name=name, alternative=alternative, note=f"{note}; {why}" if note else why)
    return StatTest(name=name, statistic=statistic, p_value=p, alternative=alternative, note=note)


def ks_test(delta_impl: Sequence[float], delta_baseline: Sequence[float]) -> StatTest:
    """Two-sample Kolmogorov-Smirnov test (scipy.stats.ks_2samp), two-sided.

    Statistic D = sup_x |F_1(x) - F_2(x)| over the finite errors of each role;
    it ignores the pairing and compares the shapes of the two distributions.
    """
    d1, d2 = _as_errors(delta_impl), _as_errors(delta_baseline)
    a, b = d1[np.isfinite(d1)], d2[np.isfinite(d2)]
    if a.size == 0 or b.size == 0:
        return StatTest(name="ks", note="not run: a role has no finite error")
    note = None
    if a.size < d1.size or b.size < d2.size:
        note = f"non-finite errors left out: impl {d1.size - a.size}, baseline {d2.size - b.size}"
    return _run_scipy("ks", lambda: sps.ks_2samp(a, b), note=note)


def wilcoxon_test(
    delta_impl: Sequence[float], delta_baseline: Sequence[float], alternative: str = "greater"
) -> StatTest:
    """Wilcoxon signed-rank test on d = delta_1 - delta_2 (scipy.stats.wilcoxon).

    ``alternative="greater"``: H1 impl's errors are larger (pseudo-median of d
    > 0); ``"less"``: smaller. Statistic W+ = sum of the ranks of |d| over d > 0.
    Zero differences (bit-identical errors in a trial) are dropped before
    ranking and counted in ``note``; with no non-zero difference the test is
    not run. Only trials where both errors are finite are used.
    """
    d1, d2 = _as_errors(delta_impl), _as_errors(delta_baseline)
    keep = _comparable(d1, d2)
    d = d1[keep] - d2[keep]
    nonzero = d[d != 0]
    left_out = _left_out(d1.size, int(keep.sum()), "non-finite error")
    notes = [left_out] if left_out else []
    if d.size - nonzero.size:
        notes.append(f"{d.size - nonzero.size} zero differences dropped")
    if nonzero.size == 0:
        notes.append("not run: no non-zero difference")
        return StatTest(name="wilcoxon", alternative=alternative, note="; ".join(notes))
    return _run_scipy(
        "wilcoxon", lambda: sps.wilcoxon(nonzero, alternative=alternative), alternative, "; ".join(notes) or None
    )


def _sign_p(k: int, n: int) -> float:
    """Exact one-sided sign-test p-value P(Binomial(n, 1/2) >= k); 1 when n == 0."""
    return 1.0 if n == 0 else float(sps.binomtest(k, n, 0.5, alternative="greater").pvalue)


def sign_test(delta_impl: Sequence[float], delta_baseline: Sequence[float]) -> StatTest:
    """Exact sign test, H1: impl's error is larger in more than half of the trials.

    k = #{i: delta_1[i] > delta_2[i]}, n = #{i: delta_1[i] != delta_2[i]};
    p = P(Binomial(n, 1/2) >= k). Ties (bit-identical errors, or both
    non-finite) are dropped and counted in ``note``. Infinite errors keep their
    sign: impl inf against a finite baseline counts as impl worse.
    """
    d1, d2 = _as_errors(delta_impl), _as_errors(delta_baseline)
    both_inf = np.isinf(d1) & np.isinf(d2)
    k = int(np.sum((d1 > d2) & ~both_inf))
    n = int(np.sum((d1 != d2) & ~both_inf))
    ties = d1.size - n
    return StatTest(
        name="sign",
        statistic=float(k),
        p_value=_sign_p(k, n),
        alternative="greater",
        note=f"impl worse in {k} of {n} untied trials" + (f"; {ties} ties dropped" if ties else ""),
    )


def shapiro_test(delta_impl: Sequence[float], delta_baseline: Sequence[float]) -> StatTest:
    """Shapiro-Wilk test of normality of d = delta_1 - delta_2 (scipy.stats.shapiro).

    Not run with fewer than 3 comparable trials or when d is constant.
    """
    d1, d2 = _as_errors(delta_impl), _as_errors(delta_baseline)
    keep = _comparable(d1, d2)
    d = d1[keep] - d2[keep]
    if d.size < 3:
        return StatTest(name="shapiro", note=f"not run: {d.size} comparable trials (needs 3)")
    if np.ptp(d) == 0:
        return StatTest(name="shapiro", note="not run: the differences are constant")
    return _run_scipy("shapiro", lambda: sps.shapiro(d), note=_left_out(d1.size, d.size, "non-finite error"))


def paired_t_test(
    delta_impl: Sequence[float], delta_baseline: Sequence[float], shapiro: StatTest, alpha: float
) -> StatTest:
    """Paired t-test, H1: mean(delta_1 - delta_2) > 0 (scipy.stats.ttest_rel).

    t = mean(d) / (std(d, ddof=1) / sqrt(n)). Run only when the Shapiro-Wilk
    test of d ran and did not reject normality at ``alpha``; otherwise the
    result carries the reason in ``note`` and no p-value.
    """
    if shapiro.p_value is None:
        return StatTest(name="t", alternative="greater", note="not run: normality of d not tested")
    if shapiro.p_value < alpha:
        return StatTest(
            name="t",
            alternative="greater",
            note=f"not run: Shapiro-Wilk rejects normality of d (p={shapiro.p_value:.2g})",
        )
    d1, d2 = _as_errors(delta_impl), _as_errors(delta_baseline)
    keep = _comparable(d1, d2)
    return _run_scipy("t", lambda: sps.ttest_rel(d1[keep], d2[keep], alternative="greater"), "greater")


def brown_forsythe_test(delta_impl: Sequence[float], delta_baseline: Sequence[float]) -> StatTest:
    """Brown-Forsythe test of equal spread (scipy.stats.levene, center='median'), two-sided.

    The statistic is the one-way ANOVA F of |delta_r - median(delta_r)| between
    the two roles r; a small p says the spreads differ (which way: compare the
    stds). Not run with fewer than 2 finite errors per role or no spread at all.
    """
    d1, d2 = _as_errors(delta_impl), _as_errors(delta_baseline)
    a, b = d1[np.isfinite(d1)], d2[np.isfinite(d2)]
    if a.size < 2 or b.size < 2:
        return StatTest(name="brown_forsythe", note="not run: fewer than 2 finite errors in a role")
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return StatTest(name="brown_forsythe", note="not run: both roles have constant errors")
    return _run_scipy("brown_forsythe", lambda: sps.levene(a, b, center="median"))


# ----------------------------------------------------------------------------
# The non-inferiority gate
# ----------------------------------------------------------------------------


def worst_factor(factor: float) -> float:
    """Factor for the worst trial: max(factor, factor**2).

    The maximum over n trials is the most scattered statistic of a run, so the
    worst trial gets twice the typical trial's tolerance on the log scale:
    log max(delta_1) - log max(delta_2) <= 2 log(factor). Simulated with equal
    error distributions over 20-100 trials: when log(delta_1/delta_2) scatters
    with sd 0.6 per trial (worst-element errors of small float32 reductions),
    max(delta_1)/max(delta_2) exceeds 4 in <= 0.02 % of runs but 2 in up to
    2.9 %; with sd 0.3 (mean errors), it exceeds 2.25 in <= 0.02 %, 1.5 in up to 3.2 %.
    """
    return max(factor, factor * factor)


def allowance(delta_baseline: Sequence[float], factor: float, free: float) -> np.ndarray:
    """Error the impl may have in each trial: max(factor * delta_2[i], free)."""
    return np.maximum(factor * _as_errors(delta_baseline), free)


def noninferiority_test(
    delta_impl: Sequence[float], delta_baseline: Sequence[float], *, factor: float, free: float = 0.0
) -> StatTest:
    """Exact one-sided sign test of H0: median(delta_1 - max(factor*delta_2, free)) <= 0.

    k = #{i: delta_1[i] > allowed_i}, n = #{i: delta_1[i] != allowed_i} over
    trials that are not both non-finite; p = P(Binomial(n, 1/2) >= k). A small
    p is evidence that the impl is more than ``factor`` times worse than the
    baseline in a typical trial. The sign test needs no symmetry of the
    (skewed) error differences and is unchanged by taking logs, so it tests the
    ratio delta_1/allowed against 1 as well.
    """
    d1, d2 = _as_errors(delta_impl), _as_errors(delta_baseline)
    usable = ~(np.isinf(d1) & np.isinf(d2))
    allowed = allowance(d2, factor, free)
    k = int(np.sum((d1 > allowed) & usable))
    n = int(np.sum((d1 != allowed) & usable))
    note = f"impl over max({factor:g} x baseline, free) in {k} of {n} untied trials"
    if d1.size - n:
        note += f"; {d1.size - n} ties or non-comparable trials dropped"
    return StatTest(name="non_inferiority", statistic=float(k), p_value=_sign_p(k, n), alternative="greater", note=note)


# ----------------------------------------------------------------------------
# Conclusion in words
# ----------------------------------------------------------------------------


def _fmt_ratio(r: float) -> str:
    """r with 3 significant digits, or as 1 ± d when that would round a ratio != 1 to "1"."""
    if r != 1 and abs(r - 1) < 5e-3:
        return f"(1 {'+' if r > 1 else '-'} {abs(r - 1):.2g})\u00d7"
    return f"{r:.3g}\u00d7"


def mean_ratio(delta_impl: Sequence[float], delta_baseline: Sequence[float]) -> float:
    """mean(delta_1) / mean(delta_2) over the trials where both are finite.

    The size of the shift the tests on d = delta_1 - delta_2 detect, as a
    factor; inf when the baseline's mean error is 0 and the impl's is not,
    NaN when both are 0 or no trial is comparable.
    """
    d1, d2 = _as_errors(delta_impl), _as_errors(delta_baseline)
    keep = _comparable(d1, d2)
    if not keep.any():
        return math.nan
    num, den = float(np.mean(d1[keep])), float(np.mean(d2[keep]))
    if den > 0:
        return num / den
    return math.inf if num > 0 else math.nan


def conclude(
    delta_impl: Sequence[float], delta_baseline: Sequence[float], tests: Sequence[StatTest], alpha: float
) -> str:
    """Plain words on how impl's errors relate to the baseline's.

    ``identical``: delta_1 == delta_2 in every trial. Otherwise location from
    the one-sided Wilcoxon tests, each read at ``alpha``: "impl less accurate
    by R× (p=…)" / "impl more accurate (R× baseline, p=…)" / "equivalent",
    with R = :func:`mean_ratio`; then, when Brown-Forsythe rejects equal
    spread at ``alpha``, "impl less/more stable (std S× baseline, p=…)".
    """
    d1, d2 = _as_errors(delta_impl), _as_errors(delta_baseline)
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


def free_bound(free: Union[float, Sequence[float]]) -> float:
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
    delta_impl: Sequence[float],
    delta_baseline: Sequence[float],
    *,
    metric: str,
    output: int = 0,
    factor: Optional[float] = None,
    alpha: float = DEFAULT_ALPHA,
    free: Union[float, Sequence[float]] = 0.0,
) -> DualDeltaRecord:
    """Full dual-delta analysis of one metric for one output.

    ``factor`` defaults to :func:`default_factor` (metric). ``free`` is the
    error always allowed, in the units of the metric: the output dtype's own
    rounding of the oracle, given as one bound or per trial (reduced by
    :func:`free_bound` to the largest finite value). The record is undecided
    (``passed`` is ``None``): :func:`apply_holm` adds the Holm-adjusted
    p-value over a run and :func:`acceptance.verdict.dual_delta_gate` decides.
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
    gate_test = noninferiority_test(d1, d2, factor=factor, free=free)
    return DualDeltaRecord(
        metric=metric,
        output=output,
        trials=int(d1.size),
        delta_impl=d1.tolist(),
        delta_baseline=d2.tolist(),
        impl=describe(d1),
        baseline=describe(d2),
        ratio=describe(ratios) if ratios.size else None,
        tests=tests + [gate_test],
        conclusion=conclude(d1, d2, tests, alpha),
        factor=factor,
        alpha=alpha,
        free=free,
        p_value=gate_test.p_value,
    )


# ----------------------------------------------------------------------------
# Many operators in one run
# ----------------------------------------------------------------------------


def holm(p_values: Sequence[float]) -> np.ndarray:
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


def apply_holm(records: Sequence[DualDeltaRecord]) -> list[DualDeltaRecord]:
    """New records with ``p_adjusted``: Holm over all records that have a p-value.

    The family is every record given (all cases, metrics and outputs of a run).
    """
    idx = [i for i, r in enumerate(records) if r.p_value is not None]
    adjusted = dict(zip(idx, holm([records[i].p_value for i in idx]))) if idx else {}
    return [rec.model_copy(update={"p_adjusted": float(adjusted[i])}) if i in adjusted else rec.model_copy()
            for i, rec in enumerate(records)]
