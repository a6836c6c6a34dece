"""The hypothesis tests of a dual-delta analysis, each a :class:`~acceptance.records.StatTest` as scipy reports it.

Inputs are two error arrays paired by trial: delta_1 = err(impl, oracle),
delta_2 = err(baseline, oracle). NaN errors are treated as +inf (a NaN never
makes a check pass); trials where both are non-finite are left out.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt
from scipy import stats as sps

from acceptance.records import StatTest

#: Errors per trial: a list of floats or a float64 array.
Errors = Sequence[float] | npt.NDArray[np.float64]
Float64s = npt.NDArray[np.float64]


class ScipyResult(Protocol):
    """What a scipy.stats test returns: a statistic and a p-value."""

    @property
    def statistic(self) -> float: ...

    @property
    def pvalue(self) -> float: ...


def as_errors(x: Errors) -> Float64s:
    """Errors as a 1-D float64 array with NaN mapped to +inf (a NaN is the worst error)."""
    a = np.asarray(x, dtype=np.float64).reshape(-1)
    return np.where(np.isnan(a), np.inf, a)


def comparable(d1: Float64s, d2: Float64s) -> npt.NDArray[np.bool_]:
    """Mask of trials where both errors are finite."""
    return np.isfinite(d1) & np.isfinite(d2)


def _left_out(n_total: int, n_used: int, why: str) -> str | None:
    return None if n_used == n_total else f"{n_total - n_used} of {n_total} trials left out ({why})"


def _run_scipy(
    name: str, test: Callable[[], ScipyResult], alternative: str = "two-sided", note: str | None = None
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


def ks_test(delta_impl: Errors, delta_baseline: Errors) -> StatTest:
    """Two-sample Kolmogorov-Smirnov test (scipy.stats.ks_2samp), two-sided.

    Statistic D = sup_x |F_1(x) - F_2(x)| over the finite errors of each role;
    it ignores the pairing and compares the shapes of the two distributions.
    """
    d1, d2 = as_errors(delta_impl), as_errors(delta_baseline)
    a, b = d1[np.isfinite(d1)], d2[np.isfinite(d2)]
    if a.size == 0 or b.size == 0:
        return StatTest(name="ks", note="not run: a role has no finite error")
    note = None
    if a.size < d1.size or b.size < d2.size:
        note = f"non-finite errors left out: impl {d1.size - a.size}, baseline {d2.size - b.size}"
    return _run_scipy("ks", lambda: sps.ks_2samp(a, b), note=note)


def wilcoxon_test(delta_impl: Errors, delta_baseline: Errors, alternative: str = "greater") -> StatTest:
    """Wilcoxon signed-rank test on d = delta_1 - delta_2 (scipy.stats.wilcoxon).

    ``alternative="greater"``: H1 impl's errors are larger (pseudo-median of d
    > 0); ``"less"``: smaller. Statistic W+ = sum of the ranks of |d| over d > 0.
    Zero differences (bit-identical errors in a trial) are dropped before
    ranking and counted in ``note``; with no non-zero difference the test is
    not run. Only trials where both errors are finite are used.
    """
    d1, d2 = as_errors(delta_impl), as_errors(delta_baseline)
    keep = comparable(d1, d2)
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


def sign_p(k: int, n: int) -> float:
    """Exact one-sided sign-test p-value P(Binomial(n, 1/2) >= k); 1 when n == 0."""
    return 1.0 if n == 0 else float(sps.binomtest(k, n, 0.5, alternative="greater").pvalue)


def sign_test(delta_impl: Errors, delta_baseline: Errors) -> StatTest:
    """Exact sign test, H1: impl's error is larger in more than half of the trials.

    k = #{i: delta_1[i] > delta_2[i]}, n = #{i: delta_1[i] != delta_2[i]};
    p = P(Binomial(n, 1/2) >= k). Ties (bit-identical errors, or both
    non-finite) are dropped and counted in ``note``. Infinite errors keep their
    sign: impl inf against a finite baseline counts as impl worse.
    """
    d1, d2 = as_errors(delta_impl), as_errors(delta_baseline)
    both_inf = np.isinf(d1) & np.isinf(d2)
    k = int(np.sum((d1 > d2) & ~both_inf))
    n = int(np.sum((d1 != d2) & ~both_inf))
    ties = d1.size - n
    return StatTest(
        name="sign",
        statistic=float(k),
        p_value=sign_p(k, n),
        alternative="greater",
        note=f"impl worse in {k} of {n} untied trials" + (f"; {ties} ties dropped" if ties else ""),
    )


def shapiro_test(delta_impl: Errors, delta_baseline: Errors) -> StatTest:
    """Shapiro-Wilk test of normality of d = delta_1 - delta_2 (scipy.stats.shapiro).

    Not run with fewer than 3 comparable trials or when d is constant.
    """
    d1, d2 = as_errors(delta_impl), as_errors(delta_baseline)
    keep = comparable(d1, d2)
    d = d1[keep] - d2[keep]
    if d.size < 3:
        return StatTest(name="shapiro", note=f"not run: {d.size} comparable trials (needs 3)")
    if np.ptp(d) == 0:
        return StatTest(name="shapiro", note="not run: the differences are constant")
    return _run_scipy("shapiro", lambda: sps.shapiro(d), note=_left_out(d1.size, d.size, "non-finite error"))


def paired_t_test(delta_impl: Errors, delta_baseline: Errors, shapiro: StatTest, alpha: float) -> StatTest:
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
    d1, d2 = as_errors(delta_impl), as_errors(delta_baseline)
    keep = comparable(d1, d2)
    return _run_scipy("t", lambda: sps.ttest_rel(d1[keep], d2[keep], alternative="greater"), "greater")


def brown_forsythe_test(delta_impl: Errors, delta_baseline: Errors) -> StatTest:
    """Brown-Forsythe test of equal spread (scipy.stats.levene, center='median'), two-sided.

    The statistic is the one-way ANOVA F of |delta_r - median(delta_r)| between
    the two roles r; a small p says the spreads differ (which way: compare the
    stds). Not run with fewer than 2 finite errors per role or no spread at all.
    """
    d1, d2 = as_errors(delta_impl), as_errors(delta_baseline)
    a, b = d1[np.isfinite(d1)], d2[np.isfinite(d2)]
    if a.size < 2 or b.size < 2:
        return StatTest(name="brown_forsythe", note="not run: fewer than 2 finite errors in a role")
    if np.ptp(a) == 0 and np.ptp(b) == 0:
        return StatTest(name="brown_forsythe", note="not run: both roles have constant errors")
    return _run_scipy("brown_forsythe", lambda: sps.levene(a, b, center="median"))
