"""The HTML report in headless Chromium: no console error, no network request, failures first, filter, sort.

Uses the system Chromium (``/usr/bin/chromium``, or ``$ACCEPTANCE_CHROMIUM``), never a downloaded
browser, and skips when it or the ``playwright`` package is absent. Screenshots go to
``reports/screenshots/``.
"""

from pathlib import Path

import pytest
from fixtures.report_results import hostile_results, many_failures, mixed_results

from acceptance.report.html import render_html
from acceptance.report.signoff import render_signoff

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "reports" / "screenshots"


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    folder = tmp_path_factory.mktemp("html")
    results = mixed_results()
    report, signoff = folder / "report.html", folder / "signoff.html"
    report.write_text(render_html(results, results_sha256="ab" * 32), encoding="utf-8")
    signoff.write_text(render_signoff(results, results_sha256="ab" * 32), encoding="utf-8")
    return results, report, signoff


def open_page(browser, path: Path, scheme: str = "light"):
    page = browser.new_page(viewport={"width": 1300, "height": 900}, color_scheme=scheme)
    log = {"errors": [], "requests": []}
    page.on("console", lambda m: m.type == "error" and log["errors"].append(m.text))
    page.on("pageerror", lambda e: log["errors"].append(str(e)))
    page.on("request", lambda r: log["requests"].append(r.url))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, log


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_report_loads_offline_without_errors(browser, pages, scheme):
    _, report, signoff = pages
    for path, name in ((report, "summary"), (signoff, "signoff")):
        page, log = open_page(browser, path, scheme)
        SHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SHOTS / f"{name}{'-dark' if scheme == 'dark' else ''}.png"))
        assert log["errors"] == []  # a CSP violation (script or style blocked) would be reported here
        assert log["requests"] == [path.as_uri()]
        page.close()


def visible_verdicts(page) -> list[str]:
    return page.eval_on_selector_all(
        "#cases-table tbody tr:not([hidden])", "rows => rows.map(r => r.getAttribute('data-verdict'))"
    )


def test_failing_case_listed_first(browser, pages):
    page, _ = open_page(browser, pages[1])
    first = page.locator("#cases-table tbody tr").first
    assert first.get_attribute("data-verdict") == "fail"
    assert "conv2d[float16-N=1-C=3-H=31-W=31]" in first.inner_text()
    page.close()


def test_filter_box_and_verdict_select(browser, pages):
    results, report, _ = pages
    page, log = open_page(browser, report)
    assert page.inner_text("#shown") == f"{len(results.cases)} of {len(results.cases)} cases shown"
    page.fill("#filter", "softmax")
    assert visible_verdicts(page) == ["fail"]
    assert page.inner_text("#shown") == f"1 of {len(results.cases)} cases shown"
    # the details of filtered-out cases are hidden too
    assert page.locator("details.case:not([hidden])").count() == 1
    page.fill("#filter", "float32 add")  # every term must match
    assert page.eval_on_selector_all("#cases-table tbody tr:not([hidden]) td.id", "c => c.map(x => x.textContent)") == [
        "add[float32-N=17]"
    ]
    page.fill("#filter", "")
    page.select_option("#verdict-filter", "pass")
    assert visible_verdicts(page) == ["pass"] * results.summary.passed
    assert log["errors"] == []
    page.close()


def test_sort_by_time_column(browser, pages):
    results, report, _ = pages
    page, _ = open_page(browser, report)
    header = page.locator("#cases-table th", has_text="Time (s)")
    header.click()
    ids = page.eval_on_selector_all("#cases-table tbody td.id", "c => c.map(x => x.textContent)")
    time_of = {c.id: c.timing.total for c in results.cases}
    assert sorted(ids) == sorted(time_of)
    assert [time_of[i] for i in ids] == sorted(time_of.values())
    header.click()  # descending
    ids = page.eval_on_selector_all("#cases-table tbody td.id", "c => c.map(x => x.textContent)")
    assert ids[0] == "softmax[bfloat16-N=64-D=1000]"  # 3.2 s, the slowest
    page.close()


def test_failing_dual_delta_case_screenshot(browser, pages):
    _, report, _ = pages
    for scheme in ("light", "dark"):
        page, log = open_page(browser, report, scheme)
        section = page.locator("details.case", has_text="softmax[bfloat16-N=64-D=1000]")
        assert section.get_attribute("open") is not None
        assert section.locator("svg.chart").count() == 5
        section.screenshot(path=str(SHOTS / f"dual-delta{'-dark' if scheme == 'dark' else ''}.png"))
        assert log["errors"] == []
        page.close()


def test_large_run_lists_a_page_of_rows_then_all(browser, tmp_path):
    path = tmp_path / "many.html"
    path.write_text(render_html(many_failures(620)), encoding="utf-8")
    page, log = open_page(browser, path)
    assert page.locator("#cases-table tbody tr:not([hidden])").count() == 500
    assert page.inner_text("#shown") == "500 of 620 cases shown (620 match)"
    page.fill("#filter", "M=61")  # M=61 and M=610..619
    assert page.locator("#cases-table tbody tr:not([hidden])").count() == 11
    assert page.is_hidden("#show-all")
    page.fill("#filter", "")
    page.click("#show-all")
    assert page.locator("#cases-table tbody tr:not([hidden])").count() == 620
    assert log["errors"] == []
    page.close()


def test_hostile_strings_do_not_execute(browser, tmp_path):
    path = tmp_path / "hostile.html"
    path.write_text(render_html(hostile_results()), encoding="utf-8")
    page = browser.new_page()
    dialogs = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    errors = []
    page.on("console", lambda m: m.type == "error" and errors.append(m.text))
    page.goto(path.as_uri())
    assert dialogs == [] and errors == []
    assert page.locator("img").count() == 0
    assert "<script>alert(1)</script>" in page.locator("#cases-table tbody tr").first.inner_text()
    page.close()
