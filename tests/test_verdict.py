"""Category thresholds, the diff4 rule and the words of a failure, against the MLU-OPS table."""

import math

import pytest

from acceptance.decide import verdict
from acceptance.records import Bias, Criterion, Determinism, Diff4Counts, MeasuredCase, OutputMeasurement, UlpStats
from acceptance.spec import defaults
from acceptance.wording import criterion_text


def _by_metric(ths):
    return {t.metric: t for t in ths}


@pytest.mark.parametrize(
    "category,dtype,expected",
    [
        ("convolution", "float32", 1e-5),
        ("convolution", "float16", 3e-3),
        ("reduction", "float32", 3e-3),
        ("activation", "float16", 3e-3),
        ("composite", "float32", 3e-3),
        ("atomic_add", "float16", 3e-3),
        # dtypes the table does not name: scaled by the ratio of unit roundoffs 2^-p
        ("convolution", "bfloat16", 3e-3 * 2.0**-8 / 2.0**-11),
        ("reduction", "bfloat16", 3e-3 * 8),
        ("convolution", "float64", 1e-5 * 2.0**-53 / 2.0**-24),
        ("activation", "float64", 3e-3 * 2.0**-29),
    ],
)
def test_category_table(category, dtype, expected):
    ths = _by_metric(defaults.thresholds_for(category, dtype))
    assert set(ths) == {"diff1", "diff2"}
    for metric in ("diff1", "diff2"):
        assert ths[metric].value == pytest.approx(expected, rel=1e-12)
        assert ths[metric].comparison == "<="
        assert dtype in ths[metric].source and category in ths[metric].source


@pytest.mark.parametrize("category", ["arithmetic", "pure_io"])
@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_bit_exact_categories_are_judged_on_bits(category, dtype):
    assert defaults.thresholds_for(category, dtype) == []  # no metric threshold: the bits criterion decides
    assert not defaults.diff4_enabled(category)
    rules = _rules(category=category, dtype=dtype, thresholds=(), bit_exact=True)
    case = verdict.decide(
        _measured(category=category, dtype=dtype, metrics=[{"nan_mismatch": 0, "inf_mismatch": 0}], bit_mismatches=[3]),
        rules,
    )
    assert case.verdict == "fail" and case.reasons[0].startswith("bit_mismatch 3 != 0")
    assert (
        verdict.decide(
            _measured(
                category=category, dtype=dtype, metrics=[{"nan_mismatch": 0, "inf_mismatch": 0}], bit_mismatches=[0]
            ),
            rules,
        ).verdict
        == "pass"
    )


def test_spec_override_replaces_and_adds():
    ths = _by_metric(defaults.thresholds_for("convolution", "float16", {"diff1": 1e-2, "max_ulp": 4, "diff4": False}))
    assert ths["diff1"].value == 1e-2 and ths["diff1"].source == "spec override"
    assert ths["diff2"].value == 3e-3 and "default" in ths["diff2"].source
    assert ths["max_ulp"].value == 4
    assert "diff4" not in ths
    assert not defaults.diff4_enabled("convolution", {"diff4": False})
    assert defaults.diff4_enabled("convolution", {"diff1": 1e-2})


def test_evaluate_boundaries_and_nan():
    worst = [
        {"diff1": 3e-3, "diff2": math.nextafter(3e-3, 1.0), "nan_mismatch": 0.0, "inf_mismatch": 0.0},
        {"diff1": math.nan, "diff2": 0.0, "nan_mismatch": 2.0, "inf_mismatch": 0.0},
    ]
    crit = {(c.output, c.metric): c for c in verdict.threshold_criteria(_measured(metrics=worst).outputs, _rules())}
    assert crit[(0, "diff1")].passed is True  # equal to the threshold passes
    assert crit[(0, "diff2")].passed is False  # one double above fails
    assert crit[(1, "diff1")].passed is False  # NaN never passes
    assert crit[(1, "nan_mismatch")].passed is False
    assert crit[(0, "inf_mismatch")].passed is True


def test_evaluate_diff3_pair():
    rules = _rules(thresholds=tuple(defaults.thresholds_for("activation", "float16", {"diff3": [1e-3, 1e-4]})))
    worst = [{"diff1": 0, "diff2": 0, "diff3": (5e-4, 2e-4), "nan_mismatch": 0, "inf_mismatch": 0}]
    c = next(c for c in verdict.threshold_criteria(_measured(metrics=worst).outputs, rules) if c.metric == "diff3")
    assert c.passed is False  # m2 = 2e-4 > 1e-4
    assert c.threshold == [1e-3, 1e-4]  # the pair itself, not words to parse back
    assert "diff3 (5e-4, 2e-4) > (1e-3, 1e-4)" in criterion_text(c)


def test_a_more_accurate_impl_never_fails_because_of_the_baseline():
    """The baseline is 4e-3 from the oracle; the impl 1e-4 from it and 4.1e-3 from the baseline."""
    worst = [{"diff1": 4.1e-3, "diff2": 1e-3, "nan_mismatch": 0, "inf_mismatch": 0}]
    base_oracle = [{"diff1": 4e-3, "diff2": 1e-3, "nan_mismatch": 0, "inf_mismatch": 0}]
    closer = _measured(
        metrics=worst,
        impl_oracle=[{"diff1": 1e-4, "diff2": 1e-4, "nan_mismatch": 0, "inf_mismatch": 0}],
        baseline_oracle=base_oracle,
    )
    case = verdict.decide(closer, _rules())
    assert case.verdict == "pass"
    d1 = next(c for c in case.criteria if c.metric == "diff1")
    assert (d1.against, d1.value) == ("oracle", 1e-4) and "the baseline is further from the oracle" in d1.note
    # closer to the oracle than a bad baseline, but itself outside the tolerance: still a bug
    worse = _measured(
        metrics=worst,
        impl_oracle=[{"diff1": 3.5e-3, "diff2": 1e-4, "nan_mismatch": 0, "inf_mismatch": 0}],
        baseline_oracle=base_oracle,
    )
    assert verdict.decide(worse, _rules()).verdict == "fail"
    # further from the oracle than the baseline: decided on the baseline
    further = _measured(
        metrics=worst,
        impl_oracle=[{"diff1": 2e-3, "diff2": 1e-4, "nan_mismatch": 0, "inf_mismatch": 0}],
        baseline_oracle=[{"diff1": 1e-3, "diff2": 1e-3, "nan_mismatch": 0, "inf_mismatch": 0}],
    )
    failed = verdict.decide(further, _rules())
    assert failed.verdict == "fail" and "(the impl is the further one)" in failed.reasons[0]


@pytest.mark.parametrize(
    "impl_shift,baseline_shift,floor,passed",
    [
        ((0.52, 0.6), (0.01, 0.04), 1.0, True),  # x*(1/n): a shift below one ulp is immaterial
        ((0.0, 840.0 / 52.5), (0.0, 0.05), 1.0, False),  # a 1e-4 relative scale error (clipped at 16 ulp)
        ((3.0, 0.1), (0.0, 0.0), 1.0, False),  # an additive shift of 3 ulp
        ((1.9, 1.9), (1.2, 1.2), 1.0, True),  # no more biased than the baseline, by less than the floor
    ],
)
def test_diff4_is_a_material_bias_test(impl_shift, baseline_shift, floor, passed):
    bias = Bias(
        n=1000,
        flushed=7,
        impl_value=impl_shift[0],
        impl_magnitude=impl_shift[1],
        baseline_value=baseline_shift[0],
        baseline_magnitude=baseline_shift[1],
    )
    c = verdict.diff4_criterion(0, Diff4Counts(above=500, below=0, baseline_above=250, baseline_below=250), bias, floor)
    assert c.passed is passed
    assert c.value == [1.0, 0.0, 500.0]  # MLU-OPS's counting is kept as the value
    assert "7 elements below the smallest normal" in c.note
    assert verdict.diff4_criterion(0, Diff4Counts(), Bias(n=99), floor).passed is None  # too few to say


def test_ulp_rule_scales_with_the_baseline_above_the_floor():
    ulp = UlpStats(impl_max=4.8, impl_mean=0.4, baseline_max=0.5, baseline_mean=0.25)
    rules = _rules(category="activation", dtype="float16", floor_max=1.0, floor_mean=None, ulp_check=True)
    crit = {c.metric: c for c in verdict.ulp_criteria(_measured(ulp=[ulp]).outputs, rules)}
    assert crit["max_ulp"].threshold == 1.0 and crit["max_ulp"].passed is False  # max(2 x 0.5, 1, 0.5)
    assert crit["mean_ulp"].threshold == 0.375 and crit["mean_ulp"].passed is False  # max(1.5 x 0.25, -, 0.25)
    fine = UlpStats(impl_max=2.2, impl_mean=0.47, baseline_max=0.54, baseline_mean=0.25)
    rules32 = _rules(category="activation", dtype="float32", floor_max=4.0, floor_mean=1.0, ulp_check=True)
    assert all(c.passed for c in verdict.ulp_criteria(_measured(ulp=[fine]).outputs, rules32))


def test_failure_words():
    c = Criterion(
        metric="diff1",
        value=4.1e-3,
        threshold=3e-3,
        comparison="<=",
        passed=False,
        source="float16 convolution default",
    )
    assert criterion_text(c) == "diff1 4.1e-3 > 3e-3 (float16 convolution default)"
    c = Criterion(
        metric="diff3_2",
        output=1,
        value=0.5,
        threshold=0.0,
        comparison="==",
        passed=False,
        source="arithmetic default (bit exact)",
    )
    assert criterion_text(c) == "diff3_2[output 1] 0.5 != 0 (arithmetic default (bit exact))"
    c = Criterion(kind="placement", metric="nan_mismatch", value=3.0, threshold=0.0, comparison="==", passed=False)
    assert criterion_text(c) == "NaN placement differs from the baseline at 3 positions"
    c = Criterion(
        kind="diff4",
        metric="diff4",
        value=[1.0, 0.0, 120.0],
        comparison="two-sided",
        passed=False,
        note="material magnitude bias",
    )
    assert criterion_text(c) == "diff4 (1, 0, n=120): material magnitude bias"


def test_a_score_threshold_holds_from_below():
    (snr,) = [t for t in defaults.thresholds_for("activation", "float32", {"snr_db": 30.0}) if t.metric == "snr_db"]
    assert snr.comparison == ">="
    rules = _rules(thresholds=(snr,))
    crit = {c.metric: c for c in verdict.threshold_criteria(_measured(metrics=[{"snr_db": 29.9}]).outputs, rules)}
    assert crit["snr_db"].passed is False and criterion_text(crit["snr_db"]).startswith("snr_db 29.9 < 30")
    crit = {c.metric: c for c in verdict.threshold_criteria(_measured(metrics=[{"snr_db": math.inf}]).outputs, rules)}
    assert crit["snr_db"].passed is True


#: The per-output keywords of :func:`_measured`, as the parallel lists of results.json name them.
_PER_OUTPUT = {
    "metrics": "metrics",
    "impl_oracle": "impl_oracle",
    "baseline_oracle": "baseline_oracle",
    "ulp": "ulp",
    "bias": "bias",
    "bit_mismatches": "bit_mismatches",
    "diff4_counts": "diff4",
}


def _measured(**fields) -> MeasuredCase:
    """A measured case; per-output measurements given as results.json's parallel lists (``metrics=[...]``)."""
    lists = {key: fields.pop(key) for key in list(fields) if key in _PER_OUTPUT}
    n = max((len(v) for v in lists.values()), default=0)
    outputs = [
        OutputMeasurement(**{_PER_OUTPUT[key]: values[k] for key, values in lists.items() if k < len(values)})
        for k in range(n)
    ]
    base = dict(
        id="op[float32]",
        operator="op",
        category="reduction",
        spec_file="op.yaml",
        dtype="float32",
        params={},
        trials=3,
        seed=0,
    )
    return MeasuredCase(**(base | fields), outputs=outputs)


def _rules(**fields) -> defaults.Rules:
    base = dict(
        category="reduction",
        dtype="float32",
        thresholds=tuple(defaults.thresholds_for("reduction", "float32")),
        diff4=False,
        dual_delta=None,
        element_tolerance=3e-3,
        bit_exact=False,
    )
    return defaults.Rules(**(base | fields))


def test_decide_fails_on_a_threshold_and_says_where():
    worst = {"diff1": 4e-3, "diff2": 1e-3, "nan_mismatch": 0, "inf_mismatch": 0}
    case = verdict.decide(
        _measured(metrics=[worst], bad_fraction=0.25, bad_location="all 4 in row 2 of dim 0"), _rules()
    )
    assert case.verdict == "fail"
    assert case.reasons == [
        "diff1 4e-3 > 3e-3 (float32 reduction default)",
        "0.25 of elements over tolerance; all 4 in row 2 of dim 0",
    ]
    assert case.tolerance_to_pass == {"diff1": 4e-3}


def test_decide_waives_a_failure_and_reports_an_error():
    worst = {"diff1": 4e-3, "diff2": 1e-3, "nan_mismatch": 0, "inf_mismatch": 0}
    waived = verdict.decide(_measured(metrics=[worst]), _rules(waiver="known issue #12"))
    assert waived.verdict == "skip" and waived.reasons[0] == "waived: known issue #12"
    broken = verdict.decide(_measured(error="impl raised ValueError: boom (k.py:3) in trial 0"), _rules())
    assert (broken.verdict, broken.reasons, broken.criteria) == ("error", [broken.error], [])
    passing = verdict.decide(_measured(metrics=[worst | {"diff1": 1e-3}]), _rules())
    assert passing.verdict == "pass" and passing.reasons == []


def test_tolerance_to_pass_is_the_worst_value():
    crits = [
        Criterion(metric="diff1", value=4e-3, threshold=3e-3, passed=False),
        Criterion(metric="diff2", value=1e-3, threshold=3e-3, passed=True),
    ]
    assert verdict.tolerance_to_pass(crits) == {"diff1": 4e-3}


_FINE = {"diff1": 1e-4, "diff2": 1e-4, "nan_mismatch": 0, "inf_mismatch": 0}


def _varying(required: bool = True) -> Determinism:
    return Determinism(impl="varying", impl_spread=0.125, impl_differing=7, runs=2, required=required)


def test_a_nondeterministic_impl_fails_the_determinism_criterion_with_the_rule_s_words():
    from acceptance.report.text import deciding_criterion

    case = verdict.decide(_measured(metrics=[_FINE], determinism=_varying()), _rules())
    assert case.verdict == "fail"
    assert case.reasons == [
        "impl is not deterministic: 7 elements differ between 2 runs on the same inputs "
        "(max |run_i - run_1| = 0.125); category reduction must be bitwise deterministic "
        "(spec `deterministic: false` allows run-to-run variation)"
    ]
    crit = case.criteria[-1]
    assert (crit.kind, crit.metric, crit.value, crit.threshold, crit.comparison, crit.passed) == (
        "determinism",
        "run_to_run_differing",
        7.0,
        0.0,
        "==",
        False,
    )
    assert case.tolerance_to_pass == {"run_to_run_differing": 7.0}
    assert deciding_criterion(case) == crit


def test_the_oracle_range_note_follows_the_determinism_reason():
    case = verdict.decide(
        _measured(
            metrics=[_FINE],
            determinism=_varying(),
            oracle_range="1 element overflows float32",
            bad_fraction=0.5,
        ),
        _rules(),
    )
    assert case.reasons[0].startswith("impl is not deterministic: 7 elements")  # the failed rule first
    assert case.reasons[1] == (
        "note: 1 element overflows float32 (the dtype cannot hold the true result at those elements)"
    )
    assert case.reasons[2] == "0.5 of elements over tolerance"


def test_variation_allowed_passes_and_a_bitwise_impl_holds_the_determinism_criterion():
    allowed = verdict.decide(_measured(metrics=[_FINE], determinism=_varying(required=False)), _rules())
    assert allowed.verdict == "pass" and allowed.reasons == []
    crit = allowed.criteria[-1]
    assert (crit.kind, crit.passed) == ("determinism", None)
    assert "spec `deterministic: false` allows run-to-run variation" in crit.source
    bitwise = verdict.decide(_measured(metrics=[_FINE], determinism=Determinism(impl="bitwise", runs=2)), _rules())
    assert bitwise.verdict == "pass" and bitwise.criteria[-1].passed is True
    assert verdict.decide(_measured(metrics=[_FINE]), _rules()).criteria[-1].kind == "threshold"  # not measured


def test_strict_fails_a_vacuous_case_and_a_plain_run_passes_it():
    from acceptance.report.text import deciding_criterion

    why = "no finite element was compared (every output empty or non-finite on both sides)"
    measured = _measured(metrics=[_FINE], vacuous=why)
    plain = verdict.decide(measured, _rules())
    assert plain.verdict == "pass" and plain.reasons == []
    assert (plain.criteria[-1].kind, plain.criteria[-1].passed, plain.criteria[-1].note) == ("vacuity", None, why)
    strict = verdict.decide(measured, _rules(), strict=True)
    assert strict.verdict == "fail" and strict.reasons == [f"vacuous (--strict): {why}"]
    assert deciding_criterion(strict) == strict.criteria[-1] and strict.criteria[-1].passed is False
    assert strict.tolerance_to_pass == {}  # no threshold would make a vacuous case say something


def test_a_decided_case_keeps_the_per_output_lists_and_reads_them_back():
    measured = _measured(
        metrics=[_FINE, _FINE],
        impl_oracle=[_FINE, _FINE],
        baseline_oracle=[_FINE, _FINE],
        bias=[Bias(n=3), Bias(n=4)],
        diff4_counts=[Diff4Counts(above=1), Diff4Counts(below=2)],
    )
    case = verdict.decide(measured, _rules())
    assert case.metrics == [_FINE, _FINE] and case.ulp == [] and case.bit_mismatches == []
    assert [b.n for b in case.bias] == [3, 4] and case.diff4_counts[1].below == 2
    assert case.outputs == measured.outputs


def test_a_one_element_mean_is_held_to_the_max_allowance():
    # CUDA expf on one element: 1.7 ulp in the max and (the same element) in the mean
    ulp = UlpStats(impl_max=1.7, impl_mean=1.7, baseline_max=0.5, baseline_mean=0.5)
    rules = _rules(category="activation", dtype="float32", floor_max=6.0, floor_mean=1.5, ulp_check=True)
    outputs = _measured(ulp=[ulp]).outputs
    mean = {c.metric: c for c in verdict.ulp_criteria(outputs, rules)}["mean_ulp"]
    assert mean.threshold == 1.5 and mean.passed is False  # max(1.5 x 0.5, 1.5, 0.25): judged as a mean
    one = {c.metric: c for c in verdict.ulp_criteria(outputs, rules, per_trial=1)}["mean_ulp"]
    assert one.threshold == 6.0 and one.passed is True  # max(0.75, 1.5, 0.25, 2 x 0.5, 6, 0.5)
    many = {c.metric: c for c in verdict.ulp_criteria(outputs, rules, per_trial=verdict.MEAN_MIN_ELEMENTS)}
    assert many["mean_ulp"].threshold == 1.5
