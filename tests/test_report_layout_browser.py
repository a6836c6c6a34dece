"""The HTML report's layout at 800 and 1400 px in headless Chromium, checked by element geometry: case ids wrap
between parameters only (never inside a number), no cell of the cases table is cut, the page never scrolls
sideways, the dtype filter is exact, and a dual-delta record with one value per side is a table, not an empty
chart; the cases table fits the window at both widths. Screenshots go to ``reports/screenshots/layout-<width>.png``."""

from pathlib import Path

import pytest
from fixtures.report_results import dual_record, mixed_results
from test_report_browser import SHOTS

from acceptance.report.html import render_html

pytestmark = pytest.mark.browser

WIDTHS = (800, 1400)

#: For every case-id element: the characters on each side of each line break (by the characters' client rects).
BREAKS_JS = """els => els.map(el => {
  const text = el.textContent, node = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
  const tops = [];
  for (let n = node.nextNode(); n; n = node.nextNode()) {
    for (let i = 0; i < n.length; i++) {
      const r = document.createRange(); r.setStart(n, i); r.setEnd(n, i + 1);
      const rect = r.getClientRects()[0]; tops.push(rect ? rect.top : null);
    }
  }
  const breaks = [];
  for (let i = 1; i < tops.length; i++) {
    const wrapped = tops[i] !== null && tops[i - 1] !== null && tops[i] > tops[i - 1] + 2;
    if (wrapped) { breaks.push(text.slice(i - 1, i + 1)); }
  }
  return [text, breaks];
})"""

CUT_JS = """cells => cells.filter(c => c.offsetParent && c.scrollWidth > c.clientWidth + 1)
  .map(c => c.textContent.trim())"""


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> Path:
    results = mixed_results()
    case = next(c for c in results.cases if c.dual_delta)
    one = dual_record([0.83], [3.1e-4], metric="max_hyb", passed=False, conclusion="one trial")
    results.cases[results.cases.index(case)] = case.model_copy(update={"dual_delta": [*case.dual_delta, one]})
    path = tmp_path_factory.mktemp("layout") / "report.html"
    path.write_text(render_html(results, results_sha256="ab" * 32), encoding="utf-8")
    return path


def open_at(browser, path: Path, width: int):
    page = browser.new_page(viewport={"width": width, "height": 1000})
    page.goto(path.as_uri())
    page.wait_for_load_state("load")
    return page


@pytest.mark.parametrize("width", WIDTHS)
def test_ids_wrap_between_parameters_and_nothing_is_cut(browser, report, width):
    page = open_at(browser, report, width)
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"layout-{width}.png"), full_page=False)
    assert page.evaluate("document.documentElement.scrollWidth") <= width  # the page never scrolls sideways
    assert page.eval_on_selector_all("#cases-table td", CUT_JS) == []
    table, section = (page.locator(s).bounding_box() for s in ("#cases-table", "section.cases"))
    assert table is not None and section is not None
    assert table["x"] + table["width"] <= section["x"] + section["width"] + 1  # every column in view
    ids = page.eval_on_selector_all("#cases-table td.id a, details.case > summary code", BREAKS_JS)
    assert ids, "no case ids found"
    for text, breaks in ids:
        for pair in breaks:
            assert not (pair[0].isdigit() and pair[1].isdigit()), f"{text!r} wraps inside a number at {pair!r}"
            assert pair[0] in "[],/_:-" or pair[1] == "-", f"{text!r} wraps inside a word at {pair!r}"
    if width == 800:
        assert any(breaks for _, breaks in ids)  # the narrow page does wrap some ids, at their separators
    page.close()


def test_dtype_filters_are_exact(browser, report):
    page = open_at(browser, report, 1400)
    shown = "#cases-table tbody tr:not([hidden])"
    page.select_option("#dtype-filter", "float16")
    dtypes = page.eval_on_selector_all(shown, "rows => rows.map(r => r.getAttribute('data-dtype'))")
    assert dtypes and set(dtypes) == {"float16"}
    page.select_option("#dtype-filter", "")
    page.fill("#filter", "float16")
    ids = page.eval_on_selector_all(f"{shown} td.id", "c => c.map(x => x.textContent)")
    assert ids and all("bfloat16" not in i for i in ids)
    page.fill("#filter", "bfloat16")
    ids = page.eval_on_selector_all(f"{shown} td.id", "c => c.map(x => x.textContent)")
    assert "softmax[bfloat16-N=64-D=1000]" in ids and all("bfloat16" in i for i in ids)
    page.close()


def test_one_trial_is_a_table_of_values_not_an_empty_chart(browser, report):
    page = open_at(browser, report, 800)
    section = page.locator("section.dual", has_text="max_hyb (output 0, 1 trial)")
    assert section.locator("table.values").count() == 1 and section.locator("svg.chart").count() == 0
    box = section.locator("table.values").bounding_box()
    assert box is not None and box["width"] > 100 and box["height"] > 40
    assert "0.83" in section.locator("table.values").inner_text()
    page.close()


@pytest.mark.parametrize("width", WIDTHS)
def test_criteria_notes_read_as_sentences_under_their_row(browser, tmp_path, width):
    """A criterion with a note of a few hundred characters: the note is a row of its own spanning the table (as
    wide as the criterion's row), the criterion's row stays a few lines tall, and the table fits its case."""
    results = mixed_results()
    case = next(c for c in results.cases if c.verdict == "fail" and c.criteria)
    note = "material magnitude bias; mean shift against the oracle: " + "impl -0.357 ulp additive, " * 12
    criteria = [c.model_copy(update={"note": note}) if c.passed is False else c for c in case.criteria]
    results.cases[results.cases.index(case)] = case.model_copy(update={"criteria": criteria})
    path = tmp_path / "report.html"
    path.write_text(render_html(results, results_sha256="ab" * 32), encoding="utf-8")
    page = open_at(browser, path, width)
    details = page.locator("details.case", has=page.locator("table.criteria tr.note")).first
    details.evaluate("d => d.open = true")
    table = details.locator("table.criteria")
    rows = table.evaluate(
        """t => [...t.querySelectorAll('tbody tr')].map(r => ({note: r.classList.contains('note'),
            height: r.getBoundingClientRect().height, width: r.getBoundingClientRect().width,
            text: r.textContent}))"""
    )
    line = 20  # px: one line of the table's 13 px text with its padding, generously
    notes = [r for r in rows if r["note"]]
    assert any(note.strip() == r["text"].strip() for r in notes)
    for r in rows:
        if not r["note"]:
            assert r["height"] <= 5 * line, r  # a criterion's row: metric, figures, source in a few lines
    widths = {round(r["width"]) for r in rows}
    assert len(widths) == 1  # every note row spans the whole table
    box, case_box = table.bounding_box(), details.bounding_box()
    assert box is not None and case_box is not None and box["x"] + box["width"] <= case_box["x"] + case_box["width"] + 1
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    page.close()
