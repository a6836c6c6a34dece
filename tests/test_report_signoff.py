"""Release sign-off: one line per operator and dtype, thresholds with their source, waivers, provenance."""

import html
import re

from fixtures.report_results import hostile_results, mixed_results, results_of

from acceptance.records import Criterion
from acceptance.report.signoff import render_signoff, signoff_lines, thresholds_in_force, waiver_effect


def test_one_line_per_operator_and_dtype():
    lines = signoff_lines(mixed_results())
    got = [(x.operator, x.dtype, x.verdict, x.passed, x.failed, x.errors, x.skipped, x.waived) for x in lines]
    assert got == [
        ("add", "bfloat16", "skip", 0, 0, 0, 1, 0),
        ("add", "float32", "pass", 1, 0, 0, 0, 0),
        ("conv2d", "float16", "fail", 0, 1, 0, 0, 0),
        ("gelu", "float16", "waived", 0, 0, 0, 1, 1),
        ("layer_norm", "float16", "fail", 0, 0, 1, 0, 0),
        ("matmul", "float32", "pass", 1, 0, 0, 0, 0),
        ("softmax", "bfloat16", "fail", 0, 1, 0, 0, 0),
        ("sum", "float32", "pass", 1, 0, 0, 0, 0),
    ]
    conv = lines[2]
    assert conv.failing == ["conv2d[float16-N=1-C=3-H=31-W=31]"]


def test_thresholds_with_their_source():
    matmul = next(x for x in signoff_lines(mixed_results()) if x.operator == "matmul")
    assert [(t.text(), t.source) for t in matmul.thresholds] == [
        ("diff1 <= 3e-3", "float32 composite default"),
        ("diff2 <= 1e-5", "spec override"),
    ]


def test_threshold_that_varies_across_cases_is_shown_as_a_range():
    base = mixed_results().cases[0]
    scaled = [
        base.model_copy(
            update={
                "id": f"matmul[K={k}]",
                "criteria": [Criterion(metric="diff1", value=1e-7, threshold=t, passed=True, source="scaled with K")],
            }
        )
        for k, t in ((64, 1e-4), (4096, 8e-4), (512, 3e-4))
    ]
    (t,) = thresholds_in_force(scaled)
    assert t.text() == "diff1 <= 1e-4 … 8e-4" and t.source == "scaled with K"


def test_page_has_verdict_lines_waivers_and_provenance():
    text = render_signoff(mixed_results(), results_sha256="cd" * 32)
    operators, waivers = text.split('aria-label="Waivers"')
    rows = re.findall(r'<tr class="(pass|fail|skip|waived)">', operators)
    assert rows == ["skip", "pass", "fail", "waived", "fail", "pass", "fail", "pass"]
    assert re.findall(r'<tr class="(\w+)"><td><code>(.*?)</code>', waivers) == [
        ("skip", "gelu[float16-N=4096]"),
        ("pass", "add[float32-N=17]"),
    ]
    assert "tanh approximation in the fused kernel; accepted for release 2.4" in waivers
    assert "waived a failure: diff1 5.2e-3 &gt; 3e-3 (activation default)" in waivers
    assert "not needed: the case passes" in waivers
    assert "cd" * 32 in text and "0123456789abcdef0123456789abcdef01234567" in text
    assert "<script" not in text and "script-src 'none'" in html.unescape(text)


def test_no_waivers_said_plainly():
    results = results_of([c for c in mixed_results().cases if c.waiver is None])
    assert "No waivers." in render_signoff(results)


def test_hostile_strings_escaped():
    text = render_signoff(hostile_results())
    assert "<script" not in text and "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert not any(ch in text for ch in "\x00\x1b\ud800")


def test_waiver_effect():
    gelu = next(c for c in mixed_results().cases if c.operator == "gelu")
    assert waiver_effect(gelu) == "waived a failure: diff1 5.2e-3 > 3e-3 (activation default)"
    still = gelu.model_copy(update={"verdict": "fail"})
    assert waiver_effect(still) == "does not cover this failure: diff1 5.2e-3 > 3e-3 (activation default)"
    assert waiver_effect(gelu.model_copy(update={"verdict": "pass", "reasons": []})) == "not needed: the case passes"
    # as a run writes it: the waiver first, then the failure it waived
    run = gelu.model_copy(update={"reasons": ["waived: known issue", *gelu.reasons]})
    assert waiver_effect(run) == "waived a failure: diff1 5.2e-3 > 3e-3 (activation default)"
