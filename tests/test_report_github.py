"""GitHub job summary and workflow-command annotations: size cap, truncation, escaping, the 10 limit."""

import re

import pytest
from fixtures.report_results import hostile_results, many_failures, mixed_results, results_of

from acceptance.records.waivers import WaiverRecord
from acceptance.report.github import annotations, escape_data, escape_property, md_code, md_escape, render_summary

UNESCAPED_PIPE = re.compile(r"(?<!\\)\|")


def table_rows(summary: str) -> list[str]:
    return [line for line in summary.splitlines() if line.startswith("| ") and not line.startswith("| Verdict")]


def test_summary_lists_failures_and_errors_first():
    text = render_summary(mixed_results(), artifact_url="https://github.com/o/r/actions/runs/1/artifacts/9")
    assert text.startswith("## ❌ Operator accuracy: FAIL\n")
    assert "FAIL: 8 cases, 3 passed, 2 failed, 1 error, 2 skipped" in text
    assert "[artifact](<https://github.com/o/r/actions/runs/1/artifacts/9>)" in text
    rows = table_rows(text)
    assert [r.split(" | ")[0] for r in rows] == ["| ❌ fail", "| ❌ fail", "| 💥 error"]
    assert rows[0] == (
        "| ❌ fail | conv2d | float16 | conv2d\\[float16-N=1-C=3-H=31-W=31\\] "
        "| diff1 4.1e-3 &gt; 3e-3 (float16 convolution default) |"
    )
    assert "illegal memory access" in rows[2]
    assert "more case" not in text


def test_summary_of_a_passing_run_has_no_table():
    results = results_of([c for c in mixed_results().cases if c.verdict == "pass"])
    text = render_summary(results)
    assert text.startswith("## ✅ Operator accuracy: PASS") and "|" not in text


MORE = r"… (\d+) more failures and errors: see report\.html in "


def test_summary_cap_with_20000_failures():
    n = 20_000
    text = render_summary(many_failures(n), artifact_url="https://example.invalid/a")
    size = len(text.encode("utf-8"))
    assert size < 1024 * 1024  # GitHub's limit per step
    rows = table_rows(text)
    assert len(rows) == 1000  # the row cap
    assert rows[0].startswith("| ❌ fail | matmul\\_0 | float16 | matmul\\[float16-M=0-N=64-K=4096\\] ")
    more = re.search(MORE + r"\[the artifact\]\(<https://example.invalid/a>\)\n$", text)
    assert more, text[-200:]
    assert int(more.group(1)) == n - 1000
    assert "FAIL: 20000 cases, 0 passed, 20000 failed, 0 errors, 0 skipped" in text


@pytest.mark.parametrize("cap", [1_500, 5_000, 50_000])
def test_summary_respects_any_cap(cap):
    text = render_summary(many_failures(500), max_bytes=cap)
    assert len(text.encode("utf-8")) <= cap
    rows = table_rows(text)
    assert len(rows) + int(re.search(MORE, text).group(1)) == 500


@pytest.mark.parametrize("max_rows", [1, 7])
def test_summary_row_cap(max_rows):
    text = render_summary(many_failures(20), max_rows=max_rows)
    assert len(table_rows(text)) == max_rows
    tail = re.search(r"… (\d+) more (failures and errors|failure or error): see report\.html in the artifact\n$", text)
    assert tail and int(tail.group(1)) == 20 - max_rows


def test_summary_escapes_hostile_strings():
    text = render_summary(hostile_results())
    assert "<" not in text and "@" not in text
    rows = table_rows(text)
    assert len(rows) == 2
    for row in rows:
        assert len(UNESCAPED_PIPE.findall(row)) == 6  # 5 cells, nothing leaks out
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in rows[0]
    assert "\\\\x1b\\[31m" in rows[0]  # the control character made visible, its backslash and [ escaped
    assert not any(ch in text for ch in "\x00\x1b\r\ud800")


def test_md_escape():
    assert md_escape("a|b*c_d`e[f]~g$h\\i") == "a\\|b\\*c\\_d\\`e\\[f\\]\\~g\\$h\\\\i"
    assert md_escape("<b>&@x") == "&lt;b&gt;&amp;&#64;x"
    assert md_escape("line\nbreak") == "line break"
    assert md_escape("x" * 400) == "x" * 299 + "…"


def test_escaping_as_github_documents():
    assert escape_data("50% done\r\nnext") == "50%25 done%0D%0Anext"
    assert escape_property("a:b,c%d\n") == "a%3Ab%2Cc%25d%0A"
    assert escape_data("a:b,c") == "a:b,c"


def test_annotations_point_at_spec_files():
    lines = annotations(mixed_results())
    assert lines == [
        "::error file=operator_specs/conv2d.yaml,title=conv2d float16%3A fail::"
        "conv2d[float16-N=1-C=3-H=31-W=31]: diff1 4.1e-3 > 3e-3 (float16 convolution default)",
        "::error file=operator_specs/softmax.yaml,title=softmax bfloat16%3A fail::"
        "softmax[bfloat16-N=64-D=1000]: dual-delta max_abs: impl error exceeds 2x the baseline's"
        " (p = 1.2e-7 after Holm)",
        "::error file=operator_specs/layer_norm.yaml,title=layer_norm float16%3A error::"
        "layer_norm[float16-N=8-D=4096]: RuntimeError: CUDA error: an illegal memory access was encountered",
    ]


def test_annotations_limit_and_how_many_more():
    lines = annotations(many_failures(25))
    assert len(lines) == 10
    assert all(line.startswith("::error file=operator_specs/matmul_") for line in lines)
    assert (
        "title=16 more failing cases::16 more cases failed or errored, starting with matmul[float16-M=9-" in lines[-1]
    )
    assert len(annotations(many_failures(10))) == 10 and "more" not in annotations(many_failures(10))[-1]
    assert len(annotations(many_failures(25), limit=3)) == 3
    assert annotations(many_failures(2), limit=1)[0].startswith(
        "::error file=operator_specs/matmul_0.yaml,title=2 more"
    )
    assert annotations(results_of([c for c in mixed_results().cases if c.verdict == "pass"])) == []


def test_annotations_escape_hostile_strings():
    lines = annotations(hostile_results())
    assert len(lines) == 2
    for line in lines:
        assert "\n" not in line and "\r" not in line and "\x1b" not in line
        head, message = line.split("::", 2)[1:]
        props = head[len("error ") :]
        assert props.startswith("file=operator_specs/we%2Cird%3Ana%25me%0A.yaml,title=")
        title = props.split(",title=", 1)[1]
        assert ":" not in title and "," not in title  # escaped in the property
        assert "%250A" in message  # the literal text "%0A" in a name stays text
    assert "\\x1b[31m" in lines[0]


def test_waiver_patterns_are_literal_code_spans():
    stale = WaiverRecord(
        spec_file="s.yaml", operator="gelu", match="gelu[float16-*_N=1]", reason="r", status="unmatched"
    )
    text = render_summary(mixed_results().model_copy(update={"waivers": [stale]}))
    assert "gelu `gelu[float16-*_N=1]` unmatched" in text  # no backslash inside the code span
    assert md_code("a`b") == "``a`b``" and md_code("`x") == "`` `x ``"
