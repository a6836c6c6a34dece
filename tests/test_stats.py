"""Dual-delta statistics: wrappers against scipy and hand computations, the gate, Holm, conclusions."""

from __future__ import annotations

import itertools
import json
import math
import re

import numpy as np
import pytest
from scipy import stats as sps

from acceptance.decide import verdict
from acceptance.numerics import factors, stats
from acceptance.records import DualDeltaRecord
from acceptance.spec import defaults


def _test(record: DualDeltaRecord, name: str, alternative: str | None = None):
    found = [t for t in record.tests if t.name == name and (alternative is None or t.alternative == alternative)]
    assert len(found) == 1, (name, alternative, record.tests)
    return found[0]


def gated(delta_impl, delta_baseline, **kwargs) -> DualDeltaRecord:
    """The analysis of one metric with the gate's decision on it, as a run records it."""
    return verdict.dual_delta_gate(stats.analyze(delta_impl, delta_baseline, **kwargs))


def _paired(seed: int, shift: float, n: int = 100, spread: float = 0.1) -> tuple[np.ndarray, np.ndarray]:
    """Baseline errors lognormal (sigma 0.3); impl = shift x baseline x lognormal(0, spread), paired by trial."""
    rng = np.random.default_rng(seed)
    base = 1e-4 * rng.lognormal(0.0, 0.3, n)
    return shift * base * rng.lognormal(0.0, spread, n), base


# ----------------------------------------------------------------------------- describe


def test_describe_by_hand():
    d = stats.describe([1.0, 2.0, 3.0, 4.0, 10.0])
    assert d.n == 5
    assert d.mean == 4.0 and d.median == 3.0 and d.p50 == 3.0
    assert d.std == pytest.approx(math.sqrt((9 + 4 + 1 + 0 + 36) / 4), rel=1e-15)
    # linear interpolation: p90 at position 0.9*4 = 3.6 -> 4 + 0.6*(10-4); p99 at 3.96
    assert d.p90 == pytest.approx(7.6, rel=1e-15)
    assert d.p99 == pytest.approx(9.76, rel=1e-15)
    assert (d.max, d.min) == (10.0, 1.0)


def test_describe_ignores_non_finite_and_counts_the_rest():
    d = stats.describe([1.0, float("nan"), float("inf"), 3.0])
    assert d.n == 2 and d.mean == 2.0 and d.max == 3.0
    one = stats.describe([5.0])
    assert one.std == 0.0 and one.p99 == 5.0
    empty = stats.describe([float("nan")])
    assert empty.n == 0 and math.isnan(empty.mean)


def test_paired_ratios_skip_exact_baseline_trials():
    r = stats.paired_ratios([1.0, 3.0, 2.0, float("nan")], [0.0, 1.0, 2.0, 1.0])
    np.testing.assert_array_equal(r, [3.0, 1.0])


# ----------------------------------------------------------------------------- tests vs scipy

D1, D2 = _paired(7, 1.3, n=40, spread=0.4)


def test_ks_equals_scipy():
    t = stats.ks_test(D1, D2)
    ref = sps.ks_2samp(D1, D2)
    assert (t.statistic, t.p_value) == (ref.statistic, ref.pvalue)
    # D by hand: largest gap between the two empirical CDFs over the pooled sample
    grid = np.concatenate([D1, D2])
    ecdf = lambda s: np.searchsorted(np.sort(s), grid, side="right") / s.size  # noqa: E731
    assert t.statistic == pytest.approx(np.max(np.abs(ecdf(D1) - ecdf(D2))), abs=1e-15)


@pytest.mark.parametrize("alternative", ["greater", "less"])
def test_wilcoxon_equals_scipy_and_drops_zeros(alternative):
    d1, d2 = D1.copy(), D2.copy()
    d1[:5] = d2[:5]  # five bit-identical trials
    t = stats.wilcoxon_test(d1, d2, alternative)
    d = d1 - d2
    ref = sps.wilcoxon(d[d != 0], alternative=alternative)
    assert (t.statistic, t.p_value) == (ref.statistic, ref.pvalue)
    assert "5 zero differences dropped" in t.note


def test_wilcoxon_exact_p_by_enumeration():
    d1 = np.array([1.5, 2.0, 0.2, 3.0, 1.1, 2.6])
    d2 = np.array([1.0, 1.0, 0.5, 1.0, 1.0, 1.0])
    d = d1 - d2  # 0.5, 1.0, -0.3, 2.0, 0.1, 1.6: distinct |d|
    ranks = sps.rankdata(np.abs(d))
    w_obs = ranks[d > 0].sum()
    # exact null: every sign pattern equally likely
    ws = [sum(r for r, s in zip(ranks, signs, strict=False) if s) for signs in itertools.product([0, 1], repeat=6)]
    p_exact = np.mean([w >= w_obs for w in ws])
    t = stats.wilcoxon_test(d1, d2, "greater")
    assert t.statistic == w_obs == 19.0
    assert t.p_value == pytest.approx(p_exact, rel=1e-12)


def test_sign_test_equals_binomtest_and_hand_sum():
    d1 = np.array([2.0, 3.0, 1.0, 5.0, 4.0, 4.0, 6.0, 1.0, 9.0, 7.0])
    d2 = np.array([1.0, 1.0, 2.0, 1.0, 1.0, 4.0, 1.0, 1.0, 1.0, 1.0])
    t = stats.sign_test(d1, d2)  # impl worse in 7, better in 1, 2 ties
    assert t.statistic == 7
    assert t.p_value == pytest.approx(sps.binomtest(7, 8, 0.5, alternative="greater").pvalue, rel=1e-14)
    assert t.p_value == pytest.approx((math.comb(8, 7) + math.comb(8, 8)) / 2**8, rel=1e-14)
    assert "2 ties dropped" in t.note


def test_paired_t_runs_only_when_shapiro_allows():
    rng = np.random.default_rng(3)
    base = 1.0 + 0.1 * rng.standard_normal(50)
    normal_impl = base + 0.05 + 0.02 * rng.standard_normal(50)
    sh = stats.shapiro_test(normal_impl, base)
    ref_sh = sps.shapiro(normal_impl - base)
    assert (sh.statistic, sh.p_value) == (ref_sh.statistic, ref_sh.pvalue)
    assert sh.p_value >= 0.05
    t = stats.paired_t_test(normal_impl, base, sh, 0.05)
    ref = sps.ttest_rel(normal_impl, base, alternative="greater")
    assert (t.statistic, t.p_value) == (ref.statistic, ref.pvalue)
    d = normal_impl - base
    assert t.statistic == pytest.approx(d.mean() / (d.std(ddof=1) / math.sqrt(d.size)), rel=1e-12)

    skewed_impl = base + rng.exponential(1.0, 50) ** 3
    sh = stats.shapiro_test(skewed_impl, base)
    assert sh.p_value < 0.05
    t = stats.paired_t_test(skewed_impl, base, sh, 0.05)
    assert t.p_value is None and "Shapiro-Wilk rejects" in t.note


def test_brown_forsythe_equals_levene_median_and_anova_of_deviations():
    t = stats.brown_forsythe_test(D1, D2)
    ref = sps.levene(D1, D2, center="median")
    assert (t.statistic, t.p_value) == (ref.statistic, ref.pvalue)
    anova = sps.f_oneway(np.abs(D1 - np.median(D1)), np.abs(D2 - np.median(D2)))
    assert t.statistic == pytest.approx(anova.statistic, rel=1e-12)
    assert t.p_value == pytest.approx(anova.pvalue, rel=1e-10)


# ----------------------------------------------------------------------------- the gate


def test_noninferiority_counts_by_hand():
    d2 = np.array([1.0, 1.0, 1.0, 0.0, 0.0, 2.0, 1.0, 1.0])
    d1 = np.array([2.5, 3.0, 1.5, 0.1, 0.5, 3.9, 2.0, 2.5])
    # allowance max(2*d2, 0.2) = 2, 2, 2, 0.2, 0.2, 4, 2, 2 -> over: 2.5, 3.0, 0.5, 2.5 = 4; tie: 2.0
    t = stats.noninferiority_test(d1, d2, factor=2.0, free=0.2)
    assert t.statistic == 4
    assert t.p_value == pytest.approx(sum(math.comb(7, j) for j in range(4, 8)) / 2**7, rel=1e-14)
    np.testing.assert_array_equal(stats.allowance(d2, 2.0, 0.2), [2, 2, 2, 0.2, 0.2, 4, 2, 2])


def test_sign_gate_size_at_most_alpha_under_exchangeable_errors():
    """At the boundary of H0 (factor 1, exchangeable impl/baseline) the false-alarm rate is <= alpha."""
    rng = np.random.default_rng(11)
    alarms = 0
    runs = 400
    for _ in range(runs):
        a, b = rng.lognormal(0, 0.5, (2, 50))
        alarms += stats.noninferiority_test(a, b, factor=1.0).p_value < 0.05
    # exact size of the n=50 sign test at 0.05 is P(Bin(50,1/2) >= 32) = 0.032
    assert alarms / runs <= 0.05


def _exchangeable(seed: int, n: int = 100) -> tuple[np.ndarray, np.ndarray]:
    """Equal error distributions: a common per-trial scale times independent, identical noise."""
    rng = np.random.default_rng(seed)
    common = 1e-4 * rng.lognormal(0.0, 0.3, n)
    return common * rng.lognormal(0.0, 0.1, n), common * rng.lognormal(0.0, 0.1, n)


@pytest.mark.parametrize("seed", range(5))
def test_equal_distributions_pass_as_equivalent(seed):
    d1, d2 = _exchangeable(seed)
    rec = gated(d1, d2, metric="mean_hyb", factor=1.5)
    assert rec.passed and rec.reasons == []
    assert rec.conclusion == "equivalent"
    assert rec.p_value == 1.0


def test_equal_distributions_rarely_concluded_different():
    """Each direction of the location claim is a level-alpha test: at most ~2 alpha wrong claims."""
    claims = sum(
        not gated(*_exchangeable(1000 + i, n=50), metric="mean_hyb").conclusion.startswith("equivalent")
        for i in range(300)
    )
    assert claims / 300 <= 0.1


@pytest.mark.parametrize("seed", range(5))
def test_harmless_significant_shift_passes(seed):
    """impl 1.2x worse in every trial: clearly significant, within factor 1.5, so it must pass."""
    d1, d2 = _paired(seed, 1.2, spread=0.03)
    rec = gated(d1, d2, metric="mean_hyb", factor=1.5)
    assert _test(rec, "wilcoxon", "greater").p_value < 1e-10
    assert rec.conclusion.startswith("impl less accurate by 1.2")
    assert rec.passed


@pytest.mark.parametrize("seed", range(5))
def test_two_fold_shift_fails_factor_1_5(seed):
    d1, d2 = _paired(seed, 2.0)
    rec = gated(d1, d2, metric="mean_hyb", factor=1.5)
    assert not rec.passed
    assert rec.p_value < 1e-15
    assert any("in most trials" in r for r in rec.reasons)
    assert re.match(r"impl less accurate by (\d+\.?\d*)×", rec.conclusion)


@pytest.mark.parametrize("seed", range(5))
def test_ten_fold_shift_fails_and_says_about_ten(seed):
    d1, d2 = _paired(seed, 10.0, spread=0.3)
    rec = gated(d1, d2, metric="max_hyb")
    assert rec.factor == 2.0 and not rec.passed
    by = float(re.match(r"impl less accurate by (\d+\.?\d*)×", rec.conclusion).group(1))
    assert 8.0 < by < 12.0
    assert rec.ratio.median == pytest.approx(10.0, rel=0.2)


@pytest.mark.parametrize("seed", range(5))
def test_better_impl_passes_as_more_accurate(seed):
    d1, d2 = _paired(seed, 0.5)
    rec = gated(d1, d2, metric="max_hyb")
    assert rec.passed and rec.p_value == 1.0
    ratio = float(re.match(r"impl more accurate \((\d+\.?\d*)× baseline", rec.conclusion).group(1))
    assert ratio == pytest.approx(0.5, rel=0.05)


def test_bit_identical_is_identical_and_not_tested():
    d = _paired(0, 1.0)[1]
    rec = gated(d, d.copy(), metric="max_hyb")
    assert rec.conclusion == "identical" and rec.passed
    assert _test(rec, "wilcoxon", "greater").p_value is None
    assert "100 zero differences dropped" in _test(rec, "wilcoxon", "greater").note
    assert _test(rec, "sign").note.endswith("100 ties dropped")


def test_less_stable_impl_is_reported():
    rng = np.random.default_rng(5)
    base = 1e-4 * rng.lognormal(0, 0.1, 100)
    impl = base * rng.lognormal(0, 0.1, 100)
    impl[::2] *= 1.35  # same location range, three times the spread
    rec = gated(impl, base, metric="mean_hyb", factor=2.0)
    std_ratio = np.std(impl, ddof=1) / np.std(base, ddof=1)
    assert f"impl less stable (std {std_ratio:.3g}× baseline" in rec.conclusion
    assert rec.passed


def test_rare_outlier_fails_the_worst_trial_check():
    d1, d2 = _paired(1, 1.0)
    d1[37] = 50 * d2.max()  # one trial out of 100: invisible to the sign test
    rec = gated(d1, d2, metric="max_hyb")
    assert rec.p_value > 0.5 and not rec.passed
    assert rec.reasons[0].startswith("worst trial 37: impl error")


def test_worst_trial_statistic_by_hand():
    """r_i = ln(d1/f) - ln(d2); centre max(median r, 0); scale MAD/ln 3; p = n / (1 + e^T)."""
    d2 = np.ones(9)
    ratios = np.array([1.0, 1.2, 0.8, 1.1, 0.9, 1.05, 0.95, 1.0, 30.0])  # d1/d2 per trial
    d1 = ratios * d2
    r = np.log(ratios / 2.0)
    centre = max(np.median(r), 0.0)  # the median ratio is below the factor: centred at the boundary
    scale = max(np.median(np.abs(r - np.median(r))) / math.log(3), 0.1)
    t = (r.max() - centre) / scale
    test = stats.worst_trial_test(d1, d2, factor=2.0)
    assert test.statistic == pytest.approx(t, rel=1e-12)
    assert test.p_value == pytest.approx(min(1.0, 9 / (1 + math.exp(t))), rel=1e-9)
    # impl identical to the baseline: the worst trial is no outlier at all
    same = stats.worst_trial_test(d2 * np.linspace(1, 3, 9), d2 * np.linspace(1, 3, 9), factor=2.0)
    assert same.p_value == 1.0
    # trials within the accuracy floor are left out
    assert stats.worst_trial_test(d1, d2, factor=2.0, within=[True] * 9).p_value is None


def test_worst_trial_false_alarm_rate_on_equal_distributions():
    """Impl and baseline errors drawn alike (worst-element-like Gumbel log errors, a shared per-trial part):
    the test rejects at level 0.05 in at most ~10 % of runs and at 1e-3 in well under 1 %."""
    rng = np.random.default_rng(7)
    p = []
    for _ in range(400):
        shared = rng.normal(0, 0.4, 30)
        d1 = np.exp(shared + rng.gumbel(0, 0.3, 30))
        d2 = np.exp(shared + rng.gumbel(0, 0.3, 30))
        p.append(stats.worst_trial_test(d1, d2, factor=1.0).p_value)
    p = np.array(p)
    assert np.mean(p < 0.05) <= 0.12 and np.mean(p < 1e-3) <= 0.01


def test_tiny_significant_shift_is_written_as_one_plus():
    d1, d2 = _paired(4, 1.0 + 1e-6, spread=0.0)
    rec = gated(d1, d2, metric="mean_hyb")
    assert rec.conclusion.startswith("impl less accurate by (1 + 1e-06)×") and rec.passed


def test_degenerate_spread_gives_no_p_value():
    t = stats.brown_forsythe_test([1.0, 1.0, 2.0, 2.0], [3.0, 3.0, 4.0, 4.0])  # |x - median| all equal
    assert t.p_value is None and "degenerate" in t.note
    assert stats.brown_forsythe_test([1.0, 1.0], [2.0, 2.0]).note == "not run: both roles have constant errors"


def test_free_covers_errors_up_to_the_rounding_bound():
    zeros = np.zeros(50)
    below = np.full(50, 3e-4)
    assert gated(below, zeros, metric="max_hyb", free=4.9e-4).passed
    rec = gated(below, zeros, metric="max_hyb", free=0.0)
    assert not rec.passed and "than an exact baseline" in rec.conclusion
    # per-trial values reduce to the largest finite one
    per_trial = np.full(50, 1e-4)
    per_trial[3], per_trial[4] = 4.9e-4, np.inf
    assert stats.free_bound(per_trial) == 4.9e-4
    assert gated(below, zeros, metric="max_hyb", free=per_trial).free == 4.9e-4


def test_nan_impl_error_fails_and_both_nan_is_not_compared():
    d1, d2 = _paired(2, 1.0, n=30)
    d1[4] = np.nan
    rec = gated(d1, d2, metric="max_hyb")
    assert not rec.passed
    assert rec.reasons[0].startswith("impl error is NaN/inf in 1 of 30 trials")
    assert rec.impl.n == 29
    d2[4] = np.nan
    rec = gated(d1, d2, metric="max_hyb")
    assert rec.passed
    assert "1 of 30 trials left out" in _test(rec, "wilcoxon", "greater").note


def test_record_round_trips_through_json_with_nan():
    d1, d2 = _paired(2, 1.0, n=10)
    d1[0] = np.nan
    rec = gated(d1, d2, metric="max_hyb", free=1e-5)
    back = DualDeltaRecord.model_validate(json.loads(rec.model_dump_json()))
    assert math.isnan(back.delta_impl[0]) and back.delta_impl[1:] == rec.delta_impl[1:]
    assert back == rec.model_copy(update={"delta_impl": back.delta_impl})


def test_non_finite_floats_are_strict_json_strings_and_read_back_as_floats():
    d1, d2 = _paired(2, 1.0, n=10)
    d1[0], d1[1], d1[2] = np.nan, np.inf, -np.inf
    rec = gated(d1, d2, metric="max_hyb", free=1e-5)
    text = rec.model_dump_json(indent=1)  # as results.json is written

    def not_strict(constant):
        raise AssertionError(f"{constant} is not strict JSON")

    assert json.loads(text, parse_constant=not_strict)["delta_impl"][:3] == ["nan", "inf", "-inf"]
    back = DualDeltaRecord.model_validate_json(text)
    assert math.isnan(back.delta_impl[0]) and back.delta_impl[1:3] == [math.inf, -math.inf]
    assert back.delta_impl[3:] == rec.delta_impl[3:]


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(delta_impl=[1.0, 2.0], delta_baseline=[1.0]), "paired by trial"),
        (dict(delta_impl=[], delta_baseline=[]), "no trials"),
        (dict(factor=0.0), "factor must be"),
        (dict(alpha=1.0), "alpha must lie in"),
        (dict(free=-1.0), "free must be"),
    ],
)
def test_analyze_rejects_bad_input_naming_the_metric(kwargs, message):
    args = dict(delta_impl=[1.0, 2.0], delta_baseline=[1.0, 2.0], metric="mean_hyb") | kwargs
    with pytest.raises(ValueError, match=rf"'mean_hyb'.*{message}"):
        stats.analyze(args.pop("delta_impl"), args.pop("delta_baseline"), **args)


def test_default_factors_follow_the_peer_rules():
    assert factors.default_factor("max_hyb") == 2.0 and factors.default_factor("mean_hyb") == 1.5
    assert factors.DEFAULT_FACTORS["mse"] == pytest.approx(factors.DEFAULT_FACTORS["rms"] ** 2)
    assert factors.default_factor("my_metric") == factors.DEFAULT_FACTOR
    assert set(defaults.DEFAULT_METRICS) <= set(factors.DEFAULT_FACTORS)


# ----------------------------------------------------------------------------- Holm


def _holm_by_definition(p: list[float]) -> list[float]:
    """statsmodels' 'holm': sort, multiply the i-th smallest by (m - i), running max, clip at 1."""
    m = len(p)
    order = sorted(range(m), key=lambda i: p[i])
    out, running = [0.0] * m, 0.0
    for rank, i in enumerate(order):
        running = max(running, (m - rank) * p[i])
        out[i] = min(1.0, running)
    return out


def test_holm_by_hand():
    # sorted: 0.005*4 = 0.02, 0.01*3 = 0.03, 0.03*2 = 0.06, 0.04*1 = 0.04 -> running max 0.06
    np.testing.assert_allclose(stats.holm([0.01, 0.04, 0.03, 0.005]), [0.03, 0.06, 0.06, 0.02], rtol=1e-15)
    np.testing.assert_array_equal(stats.holm([0.5, 0.9]), [1.0, 1.0])
    assert stats.holm([]).size == 0


def test_holm_matches_the_definition_and_statsmodels_when_present():
    rng = np.random.default_rng(0)
    p = np.concatenate([rng.uniform(0, 0.02, 5), rng.uniform(0, 1, 20), [0.01, 0.01]])
    np.testing.assert_allclose(stats.holm(p), _holm_by_definition(list(p)), rtol=1e-15)
    multitest = pytest.importorskip("statsmodels.stats.multitest")
    np.testing.assert_allclose(stats.holm(p), multitest.multipletests(p, method="holm")[1], rtol=1e-12)


def test_holm_rejects_invalid_p_values():
    with pytest.raises(ValueError, match="holm"):
        stats.holm([0.1, float("nan")])


def test_the_gate_decides_on_the_holm_adjusted_p():
    # baseline worst 10 keeps the worst-trial check quiet; impl over 1.5x in 9 of 10 trials
    d2 = np.array([1.0] * 9 + [10.0])
    d1 = np.array([1.6] * 9 + [2.0])
    suspect = gated(d1, d2, metric="mean_hyb", factor=1.5)
    assert suspect.p_value == pytest.approx(11 / 1024) and not suspect.passed
    fine = [gated(d2, d2, metric="mean_hyb", factor=1.5) for _ in range(4)]
    records = [suspect] + fine
    adjusted = [verdict.dual_delta_gate(r) for r in stats.apply_holm(records)]
    # the family is both tests of every record: the sign test's p and the worst-trial test's p
    family = [r.p_value for r in records] + [r.p_worst for r in records]
    expected = _holm_by_definition(family)
    assert [r.p_adjusted for r in adjusted] == pytest.approx(expected[:5], rel=1e-12)
    assert [r.p_worst_adjusted for r in adjusted] == pytest.approx(expected[5:], rel=1e-12)
    assert adjusted[0].p_adjusted == pytest.approx(10 * 11 / 1024)
    assert adjusted[0].passed and adjusted[0].reasons == []
    assert suspect.p_adjusted is None and not suspect.passed  # inputs untouched
    assert all(r.p_adjusted == 1.0 and r.passed for r in adjusted[1:])
    # alone, the same record still fails: 2 p-values in its family, the sign test's adjusted to 2 x 11/1024
    alone = verdict.dual_delta_gate(stats.apply_holm([suspect])[0])
    assert not alone.passed and "Holm-adjusted p=0.021" in alone.reasons[-1]
