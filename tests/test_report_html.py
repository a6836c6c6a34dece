"""The HTML report: self-contained, escaped, failures first, charts where the method calls for them."""

import base64
import hashlib
import re
from html.parser import HTMLParser

import pytest
from fixtures.report_results import hostile_results, mixed_results, results_of

from acceptance.report import html as html_report
from acceptance.report.html import render_html


class Page(HTMLParser):
    """Collects what the tests look at: tags with attributes, style/script bodies, table rows, text."""

    def __init__(self, text: str):
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict]] = []
        self.raw: dict[str, list[str]] = {"style": [], "script": []}
        self.rows: list[dict] = []
        self.text: list[str] = []
        self._raw_tag = None
        self._in_tbody = False
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        self.tags.append((tag, attrs))
        if tag in self.raw:
            self._raw_tag = tag
            self.raw[tag].append("")
        if tag == "tr" and "data-verdict" in attrs:
            self.rows.append(attrs)

    def handle_endtag(self, tag):
        if tag == self._raw_tag:
            self._raw_tag = None

    def handle_data(self, data):
        if self._raw_tag:
            self.raw[self._raw_tag][-1] += data
        else:
            self.text.append(data)


@pytest.fixture(scope="module")
def mixed():
    results = mixed_results()
    text = render_html(results, results_sha256="ab" * 32)
    return results, text, Page(text)


def _csp_hash(body: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(body.encode("utf-8")).digest()).decode() + "'"


def test_self_contained_with_a_policy_that_forbids_fetching(mixed):
    _, text, page = mixed
    (csp,) = [a["content"] for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert "default-src 'none'" in csp
    (style,), (script,) = page.raw["style"], page.raw["script"]
    assert f"style-src {_csp_hash(style)}" in csp
    assert f"script-src {_csp_hash(script)}" in csp
    for tag, attrs in page.tags:
        assert "src" not in attrs, tag
        assert tag != "link"
        assert attrs.get("href", "#").startswith("#"), attrs  # in-page anchors only
    assert "@import" not in style and "url(" not in style
    assert "prefers-color-scheme: dark" in style
    assert not re.search(r"https?://", text.replace("http://www.w3.org/2000/svg", ""))


def test_provenance_block(mixed):
    results, _, page = mixed
    words = " ".join(page.text)
    env = results.environment
    for value in (env.git_commit, env.device_name, env.torch, env.command_line, env.start_time, "ab" * 32):
        assert value in words


def test_table_lists_every_case_failures_first(mixed):
    results, _, page = mixed
    assert len(page.rows) == len(results.cases)
    verdicts = [r["data-verdict"] for r in page.rows]
    assert verdicts == ["fail", "fail", "error", "skip", "skip", "pass", "pass", "pass"]
    counts = {v: verdicts.count(v) for v in set(verdicts)}
    assert counts == {
        "fail": results.summary.failed,
        "error": results.summary.errors,
        "skip": results.summary.skipped,
        "pass": results.summary.passed,
    }


def test_deciding_metric_and_margin_in_table(mixed):
    _, text, _ = mixed
    row = re.search(r'<tr data-verdict="fail" data-case="c0"[^>]*>(.*?)</tr>', text, re.S).group(1)
    assert "diff1 4.1e-3 &gt; 3e-3 (float16 convolution default)" in row
    assert f"×{3e-3 / 4.1e-3:.3g}" in row  # margin = threshold / value
    passing = re.search(r'data-case="c5"[^>]*>(.*?)</tr>', text, re.S).group(1)  # matmul: tightest is diff2 (×2.5)
    assert "diff2 4e-6 &lt;= 1e-5 (spec override)" in passing and "×2.5" in passing


def test_failures_open_passes_closed(mixed):
    _, _, page = mixed
    details = {a["id"]: ("open" in a) for t, a in page.tags if t == "details" and "id" in a}
    assert details["c0"] and details["c1"] and details["c2"]  # fail, fail, error
    assert not details["c3"] and not details["c7"]


def test_dual_delta_case_has_the_four_pictures_and_buckets(mixed):
    _, text, _ = mixed
    section = re.search(r'<details id="c1".*?</details>\s*(?=<details id="c2")', text, re.S).group(0)
    titles = re.findall(r'<svg class="chart".*?<title>(.*?)</title>', section)
    assert titles == [
        "relative error |e−b|/|b|, all elements",
        "max_abs: δ1 and δ2 per trial",
        "max_abs: distribution",
        "max_abs: Q-Q δ1 vs δ2",
        "max_abs: δ1 vs δ2 by trial",
    ]
    assert 'class="factor"' in section  # the y = factor·x line
    for word in ("ks", "wilcoxon", "Holm-adjusted p", "1.2e-7", "impl is inferior"):
        assert word in section


def test_charts_capped_for_large_runs(monkeypatch):
    monkeypatch.setattr(html_report, "MAX_PLOTTED_CASES", 3)
    dual = mixed_results().cases[2]
    cases = [dual.model_copy(update={"id": f"softmax[{i}]"}) for i in range(6)]
    text = render_html(results_of(cases))
    assert text.count('<svg class="chart"') == 3 * 5
    assert "Charts are drawn for the first 3 cases" in text and "3 more show their numbers only" in text


def test_hostile_strings_render_as_text():
    text = render_html(hostile_results(), results_sha256="0" * 64)
    page = Page(text)
    assert len(page.raw["script"]) == 1  # only the report's own script
    assert "<script>alert" not in text and "<img" not in text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in text
    assert "float16&#34;&gt;&lt;img src=x onerror=alert(2)&gt;" in text
    assert not any(ch in text for ch in "\x00\x07\x1b\ud800")
    assert "\\x1b[31m" in text
    text.encode("utf-8")
    for tag, attrs in page.tags:
        assert not any(k.startswith("on") for k in attrs), (tag, attrs)
    # the hostile operator name survives, as text, in the table
    words = "".join(page.text)
    assert "<script>alert(1)</script>" in words


def test_all_pass_run():
    results = results_of([c for c in mixed_results().cases if c.verdict == "pass"])
    text = render_html(results)
    assert "PASS: 3 cases, 3 passed, 0 failed, 0 errors, 0 skipped" in text
    assert '<tr data-verdict="fail"' not in text


def test_waiver_labels_and_bad_location(mixed):
    _, text, _ = mixed
    assert "<strong>Waived:</strong> tanh approximation" in text  # the skipped gelu case
    assert "<strong>Waiver in force:</strong> bf16 rounding" in text  # the passing add case
    assert "where they sit <code>last row of every image (index 30 of H): a dropped tail</code>" in text


def test_a_prepared_report_renders_without_compiling_its_template(monkeypatch):
    """``acceptance run`` compiles the templates while it measures (``acceptance.report.prepare``, in a thread):
    the page rendered afterwards compiles nothing, and is the page a fresh environment renders."""
    import jinja2

    from acceptance import report

    results = mixed_results()
    html_report.environment.cache_clear()
    fresh = render_html(results, results_sha256="cd" * 32)
    html_report.environment.cache_clear()
    compiled: list[str] = []
    original = jinja2.Environment.compile

    def counting(self, source, name=None, filename=None, raw=False, defer_init=False):
        compiled.append(name)
        return original(self, source, name, filename, raw, defer_init)

    monkeypatch.setattr(jinja2.Environment, "compile", counting)
    report.prepare()
    assert {"report.html.j2", "base.html.j2"} <= set(compiled)
    compiled.clear()
    page = render_html(results, results_sha256="cd" * 32)
    assert compiled == []
    assert page == fresh
