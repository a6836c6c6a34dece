"""The worst-trial test on outputs of a few elements: a trial's error is then one or a few rounding errors, and
where impl and baseline round independently the log ratio has the heavy tail of a ratio of normals (Cauchy), so
the test uses that tail. Checked against the formula by hand and against a simulation of independent roundings."""

from __future__ import annotations

import math

import numpy as np
import pytest

from acceptance.numerics import stats


def test_p_value_is_the_cauchy_tail_bonferroni_over_the_trials():
    d2 = np.array([1.0, 2.0, 0.5, 1.5, 1.0])
    d1 = np.array([1.2, 2.2, 40.0, 1.4, 1.1])
    factor = 1.5
    r = np.log(d1 / factor) - np.log(d2)
    t = r.max() - max(np.median(r), 0.0)
    expected = min(1.0, 5 * 2 / math.pi * math.atan(math.exp(-t)))
    got = stats.worst_trial_test(d1, d2, factor=factor, elements=1)
    assert got.p_value == pytest.approx(expected, rel=1e-12)
    assert "trial 2" in got.note and "Cauchy" in got.note
    many = stats.worst_trial_test(d1, d2, factor=factor, elements=4096)  # the logistic model: far smaller p
    assert many.p_value < got.p_value


def test_independent_roundings_of_one_element_keep_the_false_alarm_rate_below_alpha():
    """20 trials of one element: impl and baseline errors independent normals of equal spread (an atomic add
    in another order than the baseline's loop). The bound must hold: alarms at alpha 0.05 in at most ~5 %."""
    rng = np.random.default_rng(7)
    n_sets, trials, alpha = 4000, 20, 0.05
    few = many = 0
    for _ in range(n_sets):
        d1 = np.abs(rng.normal(0.0, 1.0, trials))
        d2 = np.abs(rng.normal(0.0, 1.0, trials))
        few += stats.worst_trial_test(d1, d2, factor=1.5, elements=1).p_value < alpha
        many += stats.worst_trial_test(d1, d2, factor=1.5).p_value < alpha
    assert few / n_sets <= alpha
    assert many / n_sets > 2 * alpha  # the logistic model alone would alarm on such ratios


def test_a_lost_update_on_one_element_is_still_found():
    rng = np.random.default_rng(3)
    d2 = np.abs(rng.normal(0.0, 1e-7, 20)) + 1e-9
    d1 = np.abs(rng.normal(0.0, 1e-7, 20)) + 1e-9
    d1[5] = 0.4  # one update of ~0.4 lost: millions of times the rounding error
    assert stats.worst_trial_test(d1, d2, factor=1.5, elements=1).p_value < 1e-3
