"""The large HTML layout in headless Chromium: a 5,000-case page loads with a bounded DOM, lists failures
first one page at a time, filters by text and verdict, sorts, opens a case's detail with the numbers of the
record, shows what the full layout shows, and cannot be made to run injected markup.

Uses the system Chromium (``/usr/bin/chromium``, or ``$ACCEPTANCE_CHROMIUM``); skips when it or playwright is
absent.
"""

import re
import time
from pathlib import Path

import pytest
from fixtures.report_results import hostile_results, large_results, large_verdict, mixed_results, results_of

from acceptance.report.html import PAGE_ROWS, render_html

pytestmark = pytest.mark.browser

N = 5_000
ORDER = {"fail": 0, "error": 1, "skip": 2, "pass": 3}


@pytest.fixture(scope="module")
def large(tmp_path_factory):
    results = large_results(N)
    path = tmp_path_factory.mktemp("large") / "report.html"
    path.write_text(render_html(results), encoding="utf-8")
    return results, path


def open_page(browser, path: Path):
    page = browser.new_page(viewport={"width": 1300, "height": 900})
    log = {"errors": [], "requests": [], "dialogs": []}
    page.on("console", lambda m: m.type == "error" and log["errors"].append(m.text))
    page.on("pageerror", lambda e: log["errors"].append(str(e)))
    page.on("request", lambda r: log["requests"].append(r.url))
    page.on("dialog", lambda d: (log["dialogs"].append(d.message), d.dismiss()))
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page, log


def listed(page) -> list[str]:
    """The case ids of the table rows shown, in order (the text of their links, <wbr> dropped)."""
    return page.eval_on_selector_all("#cases-table tbody tr[data-case] td.id a", "as => as.map(a => a.textContent)")


def elements(page) -> int:
    return page.evaluate("document.getElementsByTagName('*').length")


def failures_first(results) -> list[str]:
    return [c.id for c in sorted(results.cases, key=lambda c: ORDER[c.verdict])]  # stable: run order within


def test_loads_one_page_failures_first_with_a_bounded_dom(browser, large):
    results, path = large
    page, log = open_page(browser, path)
    expected = failures_first(results)
    assert listed(page) == expected[:PAGE_ROWS]
    assert page.inner_text("#shown") == f"1–{PAGE_ROWS} of {N} matching shown ({N} cases)"
    assert elements(page) < 5_000
    page.click("#next")
    assert listed(page) == expected[PAGE_ROWS : 2 * PAGE_ROWS]
    assert page.inner_text("#page") == f"page 2 of {-(-N // PAGE_ROWS)}"
    page.click("#prev")
    assert listed(page) == expected[:PAGE_ROWS]
    page.click("#next-bottom")  # the pager under the table
    assert listed(page) == expected[PAGE_ROWS : 2 * PAGE_ROWS]
    assert page.inner_text("#page-bottom") == page.inner_text("#page")
    assert log["errors"] == [] and log["requests"] == [path.as_uri()]
    page.close()


def test_search_and_verdict_filter(browser, large):
    results, path = large
    page, _ = open_page(browser, path)
    page.fill("#filter", "t42")  # word start: t42, t420..t429, t4200..t4299; never t142
    want = [i for i in failures_first(results) if re.search(r"(?<![a-z0-9])t42", i)]
    assert len(want) == 1 + 10 + 100
    assert listed(page) == want[:PAGE_ROWS]
    assert page.inner_text("#shown") == f"1–{PAGE_ROWS} of {len(want)} matching shown ({N} cases)"
    page.click("#next")
    assert listed(page) == want[PAGE_ROWS:]
    page.fill("#filter", "float16 t42")
    assert listed(page) == [i for i in want if "[float16-" in i]
    page.fill("#filter", "")
    page.select_option("#verdict-filter", "error")
    errors = [c.id for c in results.cases if c.verdict == "error"]
    assert page.inner_text("#shown") == f"1–{PAGE_ROWS} of {len(errors)} matching shown ({N} cases)"
    assert listed(page) == errors[:PAGE_ROWS]
    page.select_option("#dtype-filter", "bfloat16")
    assert listed(page) == [i for i in errors if "[bfloat16-" in i][:PAGE_ROWS]
    page.close()


def test_sort_by_time_both_ways(browser, large):
    results, path = large
    page, _ = open_page(browser, path)
    header = "#cases-table thead th:nth-child(9)"
    by_time = [c.id for c in sorted(results.cases, key=lambda c: c.timing.total)]
    page.click(header)
    assert listed(page) == by_time[:PAGE_ROWS]
    page.click(header)
    assert listed(page) == by_time[::-1][:PAGE_ROWS]
    page.fill("#filter", "conv2d")
    assert listed(page) == [i for i in by_time[::-1] if i.startswith("conv2d[")][:PAGE_ROWS]
    page.close()


def test_opening_a_row_shows_its_numbers(browser, large):
    results, path = large
    page, log = open_page(browser, path)
    i = next(k for k in range(4200, N) if large_verdict(k) == "fail")
    page.fill("#filter", f"t{i}")
    assert listed(page) == [results.cases[i].id]
    page.click("#cases-table tbody tr[data-case] td.id a")
    section = page.wait_for_selector("tr.detail-row details.case")
    text = section.inner_text()
    assert f"impl {1 + i / 1024!r}" in text and "baseline 1.0" in text
    assert f"seed {i}" in text and f"index [{i}]" in text and f"trial {i % 5}" in text
    dtype, category = results.cases[i].dtype, results.cases[i].category
    assert f"diff1 0.0625 > 3e-3 ({dtype} {category} default)" in text
    assert elements(page) < 5_000
    page.click("#cases-table tbody tr[data-case] td.id a")
    assert page.query_selector("tr.detail-row") is None
    assert log["errors"] == []
    page.close()


@pytest.mark.parametrize("make", [mixed_results, hostile_results])
def test_both_layouts_show_the_same_details(browser, tmp_path, make):
    results = make()
    small, big = tmp_path / "small.html", tmp_path / "big.html"
    small.write_text(render_html(results), encoding="utf-8")
    big.write_text(render_html(results, inline_max=0), encoding="utf-8")
    page, _ = open_page(browser, small)
    anchors = page.eval_on_selector_all("details.case", "ds => ds.map(d => d.id)")
    full = {a: page.evaluate(f"document.getElementById('{a}').textContent.replace(/\\s+/g, '')") for a in anchors}
    page.close()
    page, log = open_page(browser, big)
    assert len(anchors) == len(results.cases)
    for a in anchors:
        page.click(f"#cases-table tbody tr[data-case='{a}'] td.id a")
        page.wait_for_selector(f"#{a}")
        assert page.evaluate(f"document.getElementById('{a}').textContent.replace(/\\s+/g, '')") == full[a], a
    assert log["errors"] == []
    page.close()


def _wait_for_details(page, count: int, seconds: float = 30.0) -> None:
    """Poll from here until ``count`` case details are drawn (``page.wait_for_function`` polls by evaluating a
    string in the page, which the report's Content-Security-Policy rightly refuses)."""
    deadline = time.monotonic() + seconds
    while page.evaluate("document.querySelectorAll('tr.detail-row details.case').length") < count:
        assert time.monotonic() < deadline, f"{count} case details not drawn within {seconds} s"
        page.wait_for_timeout(50)


def test_injected_markup_neither_runs_nor_breaks_the_page(browser, tmp_path):
    hostile = hostile_results()
    evil = "op[</script><img src=x onerror=\"document.title='pwned'\"><script>alert(3)</script>\u2028\u2029]"
    case = hostile.cases[0].model_copy(update={"id": evil, "reasons": ["</script><b onclick=alert(4)>\u2028"]})
    results = results_of([*hostile.cases, case])
    path = tmp_path / "evil.html"
    path.write_text(render_html(results, inline_max=0), encoding="utf-8")
    page, log = open_page(browser, path)
    title = page.title()
    assert len(listed(page)) == 4
    assert "op[</script><img src=x onerror=\"document.title='pwned'\"><script>alert(3)</script>\\u2028\\u2029]" in (
        listed(page)
    )
    for k in range(4):
        page.locator("#cases-table tbody tr[data-case] td.id a").nth(k).click()
        _wait_for_details(page, k + 1)
    assert page.query_selector_all("img, b[onclick], table script") == []
    assert page.title() == title and "pwned" not in title
    assert log["dialogs"] == [] and log["errors"] == [] and log["requests"] == [path.as_uri()]
    page.close()
