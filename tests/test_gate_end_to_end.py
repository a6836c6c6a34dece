"""The mutation suite through ``acceptance run``: every injected bug fails the gate, every
legitimate variant passes it, with the MLU-OPS criteria, the oracle-aware rules and dual-delta (Holm over the
run) together.

The specs under ``mutation_specs/`` point at the kernels in ``mutants.py`` and ``mutant_kernels.py``; every
case of a spec named ``bug_*`` must fail and every case of one named ``legit_*`` must pass. The run here
uses each spec's own seed (0); ``test_mutation_seeds.py`` repeats it over 20 seeds.
"""

import math
from pathlib import Path

import pytest
import torch
from click.testing import CliRunner

from acceptance.cli import main
from acceptance.session import results as results_mod

SPECS = Path(__file__).parent / "mutation_specs"


@pytest.fixture(scope="module")
def run_results(tmp_path_factory):
    out = tmp_path_factory.mktemp("mutation_run")
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # small tensors: a second OpenMP thread only adds contention
    try:
        result = CliRunner().invoke(main, ["run", str(SPECS), "--out", str(out)], catch_exceptions=False)
    finally:
        torch.set_num_threads(threads)
    return result, results_mod.load(out / "results.json")


def cases_of(res, operator):
    found = [c for c in res.cases if c.operator == operator]
    assert found, operator
    return found


def one_case(res, operator):
    (case,) = cases_of(res, operator)
    return case


def failed_metrics(case):
    return {c.metric for c in case.criteria if c.passed is False}


def test_exit_code_is_1(run_results):
    result, res = run_results
    assert result.exit_code == 1
    assert {c.operator for c in res.cases} == {p.stem for p in SPECS.glob("*.yaml")}
    assert res.summary.total == len(res.cases)


@pytest.mark.parametrize("spec", sorted(p.stem for p in SPECS.glob("*.yaml")))
def test_bug_fails_and_variant_passes(run_results, spec):
    _, res = run_results
    expected = "fail" if spec.startswith("bug_") else "pass"
    for case in cases_of(res, spec):
        assert case.verdict == expected, (case.id, case.reasons)
        if expected == "fail":
            assert case.reasons  # says why
        else:
            assert all(rec.passed for rec in case.dual_delta)
            assert all(c.passed is not False for c in case.criteria)


def test_scale_bias_is_caught_by_dual_delta_not_by_mlu_ops(run_results):
    """A 0.1% bias is ~2 float16 ulps: diff1 ~1e-3 is under the 3e-3 table value, but the
    impl's error against the oracle is consistently larger than the baseline's."""
    _, res = run_results
    case = one_case(res, "bug_scale_bias")
    diff1 = next(c for c in case.criteria if c.metric == "diff1")
    assert diff1.passed and diff1.value == pytest.approx(1e-3, rel=0.3)
    failed = [rec for rec in case.dual_delta if not rec.passed]
    assert failed and all(rec.p_adjusted < rec.alpha for rec in failed)
    assert any(r.startswith("dual-delta mean_hyb: ") and "sign test" in r for r in case.reasons)


def test_wrong_row_is_located(run_results):
    _, res = run_results
    by_op = {c.operator: c for c in res.cases}
    # row M-1 = 63 is the wrong one
    assert by_op["bug_wrong_row"].bad_location == "all 64 in row 63 of dim 0"
    assert by_op["bug_wrong_row"].worst.index[0] == 63


def test_atomic_spread_is_reported(run_results):
    _, res = run_results
    by_op = {c.operator: c for c in res.cases}
    assert by_op["legit_shuffled_atomics"].atomic_spread == 0.0  # deterministic order run to run
    assert by_op["bug_lost_atomic_updates"].atomic_spread is not None
    assert by_op["legit_random_order_atomics"].atomic_spread > 0.0  # a fresh order on every call


# ----------------------------------------------------------------------------- bugs at the edge


def test_fp32_scale_bias_is_below_mlu_ops_and_caught_as_a_magnitude_bias(run_results):
    """x 1.0001 on outputs of both signs: diff1 = 1e-4 passes MLU-OPS's 3e-3; the additive shift cancels over
    the signs, the shift of magnitude is 1e-4 / 2^-23 > 800 ulp, clipped to 16 in the bias test."""
    _, res = run_results
    case = one_case(res, "bug_scale_bias_fp32")
    diff1 = next(c for c in case.criteria if c.metric == "diff1")
    assert diff1.passed and diff1.value == pytest.approx(1e-4, rel=1e-3)
    (bias,) = case.bias
    assert abs(bias.impl_value) < 0.5 and bias.impl_magnitude == pytest.approx(16.0, abs=0.5)
    assert {"diff4", "max_hyb", "mean_hyb"} <= failed_metrics(case)
    assert {"diff1", "diff2"}.isdisjoint(failed_metrics(case))


def test_lost_sign_of_zero_is_a_bit_mismatch(run_results):
    """5% of the inputs are specials, half of them -0.0: about 0.025 x 33 x 17 per trial, each turned into
    +0.0; numerically every element is still equal."""
    _, res = run_results
    for case in cases_of(res, "bug_signed_zero_transpose"):
        assert failed_metrics(case) == {"bit_mismatch"}
        (count,) = case.bit_mismatches
        expected = 0.025 * 33 * 17 * case.trials
        assert abs(count - expected) < 5 * math.sqrt(expected)
        assert case.metrics[0]["max_abs"] == 0.0


def test_exp_zeroing_tiny_normal_results_is_caught_by_ulp_and_bias_not_by_hybrid_error(run_results):
    """exp(x) < 1e-30 for x < ln 1e-30 = -69.08: errors of 1e-30 are invisible to diff1 and the hybrid error,
    not to the ULP rule. Of the inputs in [-100, 0), 12.66% give subnormal results (x < ln 2^-126 = -87.34,
    left out as a flush) and 18.26% normal results below 1e-30, each -16 ulp (clipped) in the bias test:
    mean shift -16 x 18.26 / 87.34 = -3.34 ulp."""
    _, res = run_results
    case = one_case(res, "bug_exp_zero_tiny")
    assert {"max_ulp", "mean_ulp", "diff4"} <= failed_metrics(case)
    assert {"diff1", "diff2", "max_hyb", "mean_hyb"}.isdisjoint(failed_metrics(case))
    lo, hi = math.log(2.0**-126), math.log(1e-30)
    (bias,) = case.bias
    assert bias.impl_magnitude == pytest.approx(-16 * (hi - lo) / -lo, abs=0.1)


def test_truncating_exp_is_faithful_but_biased(run_results):
    """Round toward zero: every error below 1 ulp (the max ULP rule holds), 0.5 ulp on average where the
    correctly rounded baseline has 0.25: the mean ULP rule and dual-delta's mean error fail it. The diff4
    rule's 1-ulp materiality floor lets the -0.5 ulp shift through."""
    _, res = run_results
    case = one_case(res, "bug_exp_truncating_fp16")
    assert failed_metrics(case) == {"mean_ulp", "mean_hyb"}
    (ulp,) = case.ulp
    assert ulp.impl_max < 1.0 and ulp.impl_mean == pytest.approx(0.5, abs=0.03)
    (bias,) = case.bias
    assert bias.impl_magnitude == pytest.approx(-0.5, abs=0.03)


def test_one_wrong_element_is_located(run_results):
    _, res = run_results
    for case in cases_of(res, "bug_one_wrong_element"):
        assert case.worst.index == [3, 5]
        assert {"diff2", "max_hyb"} <= failed_metrics(case)
    # diluted over 4096 elements, one wrong value stays under float16's 3e-3 on diff1
    (f16,) = [c for c in cases_of(res, "bug_one_wrong_element") if c.dtype == "float16"]
    assert "diff1" not in failed_metrics(f16)


def test_gelu_zero_tail_is_caught_by_ulp_and_max_error(run_results):
    """The lost tail fails the ULP rule element by element: in ulp of the oracle a zero costs |o|/ulp(o) ~ 2^23,
    as much as the baseline's own zeros further out in its cancelling tail, so the aggregate max and mean (2x
    and 1.5x the baseline's) do not separate them; at the elements where the baseline still has its bits
    (x between -5.54 and -5.1) the impl's values are lost (zero) while the baseline keeps its leading bit.
    Whether the dual-delta max_hyb also fails depends on the baseline:
    torch's float32 GELU cancels in the same tail, by an amount that differs from one x86 machine to
    another; the rule fails exactly when the impl's per-trial error exceeds twice the baseline's (and the
    free error) in every trial, and the zero tail never makes the impl more accurate than the baseline."""
    _, res = run_results
    case = one_case(res, "bug_gelu_zero_tail")
    failed = failed_metrics(case)
    assert "ulp_lost_elements" in failed
    assert "diff1" not in failed
    (crit,) = [c for c in case.criteria if c.metric == "ulp_lost_elements"]
    assert crit.worst is not None and crit.worst.impl == 0.0 and crit.worst.baseline != 0.0
    (rec,) = [r for r in case.dual_delta if r.metric == "max_hyb"]
    assert all(e >= b for e, b in zip(rec.delta_impl, rec.delta_baseline, strict=False))
    beyond = sum(e > rec.factor * max(b, rec.free) for e, b in zip(rec.delta_impl, rec.delta_baseline, strict=False))
    if beyond == rec.trials:  # 2^-20 one-sided sign-test p-value: significant after Holm over this run
        assert "max_hyb" in failed
    elif beyond <= rec.trials // 2:  # no majority: the sign test cannot reject
        assert "max_hyb" not in failed


# ----------------------------------------------------------------------------- legitimate variants


def test_fused_multiply_add_is_bit_exact_against_the_rounded_oracle(run_results):
    """The fused result differs from the two-rounding baseline in some elements, and each such element has
    the bits of the oracle rounded once."""
    _, res = run_results
    for case in cases_of(res, "legit_fma_muladd"):
        assert case.bit_mismatches == [0]
        assert case.metrics[0]["max_abs"] > 0


def test_bf16_scatter_in_fp32_is_more_accurate_than_the_baseline(run_results):
    _, res = run_results
    case = one_case(res, "legit_bf16_index_add_fp32")
    assert all(rec.conclusion.startswith("impl more accurate") for rec in case.dual_delta)


def test_exp_flush_to_zero_is_forgiven(run_results):
    """12.66% of the inputs (x < ln 2^-126) give subnormal results: the flush is counted, not held against it."""
    _, res = run_results
    case = one_case(res, "legit_exp_flush_to_zero")
    (bias,) = case.bias
    n = 4096 * case.trials
    p = (math.log(2.0**-126) + 100) / 100
    assert abs(bias.flushed - n * p) < 5 * math.sqrt(n * p * (1 - p))


def test_mean_by_reciprocal_shift_is_below_the_materiality_floor(run_results):
    """sum x (1/n): fl(1/7) and fl(1/1000) are 0.75 and 0.80 x 2^-24 above 1/n; on means near 3 (significand
    1.5) that is a shift of 0.75 x 1.5 / 2 = 0.56 and 0.60 ulp, every element on the same side, under the
    1-ulp floor of the diff4 rule."""
    _, res = run_results
    for case in cases_of(res, "legit_mean_reciprocal"):
        if case.dtype != "float32":
            continue
        n = case.params["N"]
        shift = {7: 0.75, 1000: 0.796875}[n] * 1.5 / 2
        (bias,) = case.bias
        assert bias.impl_value == pytest.approx(shift, abs=0.08)
        diff4 = next(c for c in case.criteria if c.metric == "diff4")
        assert diff4.passed and "every unequal point lies on one side" in diff4.note
