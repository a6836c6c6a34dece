"""Shared report wording: number format, margins, the deciding criterion, headlines, control characters."""

import math

import pytest

from acceptance.records import CaseResult, Criterion
from acceptance.report.text import deciding_criterion, headline, margin
from acceptance.wording import criterion_text, fmt, fmt_value, one_line, visible_controls


def case(verdict="fail", criteria=(), reasons=(), **kw):
    return CaseResult(
        id="op[x]",
        operator="op",
        category="activation",
        spec_file="s.yaml",
        dtype="float16",
        params={},
        trials=1,
        seed=0,
        verdict=verdict,
        reasons=list(reasons),
        criteria=list(criteria),
        **kw,
    )


@pytest.mark.parametrize(
    "x, text",
    [
        (0.0041, "4.1e-3"),
        (3e-5, "3e-5"),
        (2.0, "2"),
        (4097.0, "4097"),
        (123456.789, "1.23e5"),
        (float("nan"), "nan"),
        (float("-inf"), "-inf"),
        (None, "—"),
        (0.0, "0"),
    ],
)
def test_fmt(x, text):
    assert fmt(x) == text


def test_fmt_value_tuple():
    assert fmt_value([1.5e-6, 0.25]) == "(1.5e-6, 0.25)"


@pytest.mark.parametrize(
    "comparison, value, threshold, expected",
    [
        ("<=", 4.1e-3, 3e-3, 3e-3 / 4.1e-3),
        ("<=", 1e-6, 1e-5, 10.0),
        ("<=", 0.0, 1e-5, math.inf),
        ("<=", 1e-9, 0.0, 0.0),
        (">=", 0.9, 0.6, 1.5),
        ("==", 0.0, 0.0, math.inf),
        ("==", 1e-7, 0.0, 0.0),
        ("<=", math.inf, 1.0, 0.0),
    ],
)
def test_margin(comparison, value, threshold, expected):
    c = Criterion(metric="m", value=value, threshold=threshold, comparison=comparison, passed=True)
    assert margin(c) == pytest.approx(expected, rel=1e-15)


def test_margin_tuple_uses_largest_component_and_nan_poisons():
    c = Criterion(metric="diff3", value=[2e-4, 5e-4], threshold=1e-3, passed=True)
    assert margin(c) == pytest.approx(2.0)
    c = Criterion(metric="diff3", value=[2e-4, math.nan], threshold=1e-3, passed=False)
    assert math.isnan(margin(c))


def test_margin_of_a_dual_delta_gate_is_factor_over_median_ratio():
    gate = Criterion(
        kind="dual_delta", metric="max_hyb", value=1.2, threshold=2.0, comparison="non-inferior", passed=True
    )
    assert margin(gate) == pytest.approx(2.0 / 1.2)
    loose = Criterion(metric="diff1", value=1e-4, threshold=3e-3, passed=True)  # margin 30
    case = CaseResult(
        id="x",
        operator="x",
        category="composite",
        spec_file="x.yaml",
        dtype="float32",
        params={},
        trials=20,
        seed=0,
        verdict="pass",
        criteria=[loose, gate],
    )
    assert deciding_criterion(case) is gate  # the dual-delta gate decided: its margin 1.67 is the tightest


def test_margin_undefined_for_statistical_and_unevaluated():
    assert margin(Criterion(metric="diff4", value=[0.5, 0.5, 40.0], comparison="two-sided", passed=None)) is None
    assert margin(Criterion(metric="diff1", value=1e-3, passed=True)) is None


def test_deciding_is_first_failure_else_tightest_margin():
    loose = Criterion(metric="diff1", value=1e-4, threshold=3e-3, passed=True)  # margin 30
    tight = Criterion(metric="diff2", value=2e-3, threshold=3e-3, passed=True)  # margin 1.5
    failing = Criterion(metric="diff3_2", value=1.0, threshold=0.0, comparison="==", passed=False)
    assert deciding_criterion(case("pass", [loose, tight])) is tight
    assert deciding_criterion(case("fail", [loose, failing, tight])) is failing
    assert deciding_criterion(case("pass", [])) is None
    exact = Criterion(metric="nan_mismatch", value=0.0, threshold=0.0, comparison="==", passed=True)
    graded = Criterion(metric="diff1", value=0.0, threshold=3e-3, passed=True)
    assert deciding_criterion(case("pass", [exact, graded])) is graded  # both infinite margins


def test_criterion_text_negates_a_failed_comparison():
    c = Criterion(metric="diff1", value=4.1e-3, threshold=3e-3, passed=False, source="float16 convolution default")
    assert criterion_text(c) == "diff1 4.1e-3 > 3e-3 (float16 convolution default)"
    c = Criterion(metric="diff3_2", output=1, value=0.0, threshold=0.0, comparison="==", passed=True)
    assert criterion_text(c) == "diff3_2[output 1] 0 == 0"
    c = Criterion(metric="diff4", comparison="two-sided", passed=None, note="fewer than 100 unequal points")
    assert criterion_text(c) == "diff4 not evaluated: fewer than 100 unequal points"


def test_headline_per_verdict():
    failing = Criterion(metric="diff1", value=4.1e-3, threshold=3e-3, passed=False)
    assert headline(case("fail", [failing], ["diff1 4.1e-3 > 3e-3"])) == "diff1 4.1e-3 > 3e-3"
    assert headline(case("fail", [failing])) == "diff1 4.1e-3 > 3e-3"
    assert headline(case("fail")) == "failed"
    assert headline(case("error", error="\n  RuntimeError: boom\n trace")) == "RuntimeError: boom"
    assert headline(case("skip", reasons=["x"], waiver="accepted")) == "waived: accepted"
    assert headline(case("skip", reasons=["not supported"])) == "not supported"


def test_visible_controls_and_one_line():
    assert visible_controls("a\x1bb\x00c\td\ne\ud800\x85") == "a\\x1bb\\x00c\td\ne\\ud800\\x85"
    assert one_line("a\n  b\r\nc", None) == "a b c"
    assert one_line("abcdef", 4) == "abc…"


def test_the_vacuity_and_determinism_rules_read_in_every_report_as_the_rule_s_words():
    from acceptance.report.html import _criterion_row
    from acceptance.report.text import case_details

    varying = Criterion(
        kind="determinism",
        metric="run_to_run_differing",
        value=3.0,
        threshold=0.0,
        comparison="==",
        passed=False,
        source="category activation must be bitwise deterministic",
        note="3 elements differ between 2 runs on the same inputs (max |run_i - run_1| = 0.5)",
    )
    said = (
        "impl is not deterministic: 3 elements differ between 2 runs on the same inputs (max |run_i - run_1| = "
        "0.5); category activation must be bitwise deterministic (spec `deterministic: false` allows run-to-run "
        "variation)"
    )
    vacuous = Criterion(
        kind="vacuity", metric="vacuous", comparison="==", source="fails only with --strict", note="why"
    )
    fine = Criterion(metric="diff1", value=1e-4, threshold=3e-3, passed=True)
    c = case(criteria=[fine, vacuous, varying], reasons=[said])
    assert criterion_text(varying) == said and deciding_criterion(c) is varying and headline(c) == said
    assert margin(varying) == 0.0
    assert criterion_text(vacuous) == "vacuous: why (fails only with --strict)"
    assert criterion_text(vacuous.model_copy(update={"passed": False})) == "vacuous (--strict): why"
    assert f"FAIL {said}" in case_details(c) and "n/a  vacuous: why" in case_details(c)
    assert _criterion_row(varying)["result"] == "fail" and _criterion_row(vacuous)["value"] == "—"
    bitwise = varying.model_copy(update={"value": 0.0, "passed": True, "note": "bitwise identical over 2 runs"})
    assert criterion_text(bitwise).startswith("impl deterministic: bitwise identical over 2 runs (category")
    assert margin(bitwise) == math.inf
