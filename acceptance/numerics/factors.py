"""The dual-delta gate's defaults: the significance level and the non-inferiority factor per metric.

The gate (:func:`acceptance.decide.verdict.dual_delta_gate`) lets the impl's error be ``factor`` times the
baseline's; :mod:`acceptance.numerics.stats` tests against it, specs override it per metric
(:mod:`acceptance.spec.defaults`).
"""

from __future__ import annotations

#: Significance level of every dual-delta test and of its gate, before Holm correction.
DEFAULT_ALPHA = 0.05

#: Non-inferiority factor for a metric not listed in :data:`DEFAULT_FACTORS`.
DEFAULT_FACTOR = 2.0

#: Non-inferiority factor per metric: impl's error may be this many times the
#: baseline's. Worst-element metrics 2 (peers: <= 2x on max error); averaged and
#: norm metrics 1.5 (peers: <= 1.5x on mean error, msprobe's middle RMSE tier);
#: squared metrics 1.5**2 = 2.25 (the same tolerance on the unsquared error);
#: NaN/Inf mismatch counts 1 (no more mismatches than the baseline, beyond
#: those forced by the output dtype, which ``free`` covers).
DEFAULT_FACTORS: dict[str, float] = {
    "max_hyb": 2.0,
    "max_abs": 2.0,
    "max_rel": 2.0,
    "max_rel_floor": 2.0,
    "max_ulp": 2.0,
    "diff3_1": 2.0,
    "diff3_2": 2.0,
    "mean_hyb": 1.5,
    "mean_abs": 1.5,
    "mean_ulp": 1.5,
    "diff1": 1.5,
    "diff2": 1.5,
    "rms": 1.5,
    "normwise_rel": 1.5,
    "mse": 2.25,
    "nmse": 2.25,
    "nan_mismatch": 1.0,
    "inf_mismatch": 1.0,
}


def default_factor(metric: str) -> float:
    """The non-inferiority factor for ``metric`` (:data:`DEFAULT_FACTOR` if unlisted)."""
    return DEFAULT_FACTORS.get(metric, DEFAULT_FACTOR)


#: Gross-error factor: a trial whose impl error exceeds this many times the largest of the baseline's error over
#: every trial of the case and the free allowance (and, with an accuracy floor, whose ULP error exceeds this many
#: times the floor) fails the case on its own, however many trials are clean. Rounding cannot get there: see
#: docs/dual-delta.md, "Gross errors", for the false-alarm model.
GROSS_FACTOR = 50.0
