"""The large HTML layout (past INLINE_MAX cases): every case embedded once as script-safe JSON, details
compressed in chunks, nothing laid out per case; small runs keep the full layout."""

import base64
import gzip
import json
import re

from fixtures.report_results import hostile_results, large_results, large_verdict, results_of

from acceptance.report.html import INLINE_MAX, render_html

ORDER = {"fail": 0, "error": 1, "skip": 2, "pass": 3}


def block(page: str, name: str) -> str:
    """The text of ``<script type="application/json" id=name ...>`` up to the first ``</script>``."""
    start = re.search(rf'<script type="application/json" id="{name}"[^>]*>', page)
    assert start, name
    return page[start.end() : page.index("</script>", start.end())]


def details_of(page: str) -> list[dict]:
    chunk = int(re.search(r'id="case-details" data-chunk="(\d+)"', page).group(1))
    parts = json.loads(block(page, "case-details"))
    cases = [c for part in parts for c in json.loads(gzip.decompress(base64.b64decode(part)))]
    assert all(len(json.loads(gzip.decompress(base64.b64decode(p)))) == chunk for p in parts[:-1])
    return cases


def test_small_runs_keep_the_full_layout():
    page = render_html(large_results(30))
    assert INLINE_MAX >= 30
    assert len(re.findall(r'<details id="c\d+"', page)) == 30
    assert 'id="case-rows"' not in page and page.count("<tr data-verdict=") == 30


def test_large_layout_embeds_each_case_once_failures_first():
    n = INLINE_MAX + 200
    results = large_results(n)
    page = render_html(results)
    assert "<details id=" not in page and "<tr data-verdict=" not in page
    rows = json.loads(block(page, "case-rows"))
    expected = sorted(range(n), key=lambda i: (ORDER[large_verdict(i)], i))
    assert [r[1] for r in rows] == [results.cases[i].id for i in expected]
    assert [r[0] for r in rows] == [large_verdict(i) for i in expected]
    details = details_of(page)
    assert len(details) == n
    for row, detail, i in zip(rows, details, expected, strict=True):
        assert detail["anchor"] == row[-1]
        assert detail["seed"] == str(i)
        assert ["impl", repr(1 + i / 1024)] in detail["worst"] and ["baseline", "1.0"] in detail["worst"]
        assert (detail["error"] == f"RuntimeError: launch {i} failed") == (large_verdict(i) == "error")


def test_a_large_page_is_smaller_than_its_results():
    results = large_results(INLINE_MAX + 1)
    page = render_html(results)
    assert len(page) < len(results.model_dump_json())


def test_script_blocks_cannot_be_closed_or_broken_by_case_text():
    hostile = hostile_results()
    evil_id = "op[</script><img src=x onerror=document.title='x'>\u2028<!--\u2029]"
    case = hostile.cases[0].model_copy(update={"id": evil_id, "reasons": ["</SCRIPT >\u2028<b>&amp;"]})
    results = results_of([*hostile.cases, case])
    page = render_html(results, inline_max=0)
    assert page.count("<script") == 3  # the two data blocks and the page's script; nothing injected
    for name in ("case-rows", "case-details"):
        text = block(page, name)
        assert not set(text) & {"<", ">", "&", "\u2028", "\u2029"}
    rows = json.loads(block(page, "case-rows"))
    assert "op[</script><img src=x onerror=document.title='x'>\\u2028<!--\\u2029]" in [r[1] for r in rows]
    detail = next(d for d in details_of(page) if d["reasons"] == ["</SCRIPT >\\u2028<b>&amp;"])
    assert detail["anchor"] in [r[-1] for r in rows]
    hostile_row = next(r for r in rows if r[1].startswith("op[<script>"))
    assert "\\x1b[31m" in hostile_row[1] and "\x1b" not in hostile_row[1]


def test_numbers_past_53_bits_and_non_finite_ones_survive_the_json():
    cases = large_results(3).cases
    seed = 2**64 - 1  # a JavaScript number would print 18446744073709552000
    cases[0] = cases[0].model_copy(update={"seed": seed})
    details = details_of(render_html(results_of(cases), inline_max=0))
    assert "18446744073709551615" in [d["seed"] for d in details]


def test_a_non_finite_number_in_a_view_becomes_text():
    from acceptance.report import casedata

    assert json.loads(casedata.item_json({"x": [float("nan"), float("-inf"), 1.5]})) == {"x": ["nan", "-inf", 1.5]}


def test_printable_text_needs_no_visible_controls():
    """The reports skip visible_controls for text that is str.isprintable(): no printable character is one it
    replaces (checked over every code point)."""
    from acceptance.report.html import visible
    from acceptance.wording import visible_controls

    printable = "".join(chr(c) for c in range(0x110000) if chr(c).isprintable())
    assert len(printable) > 100_000
    assert visible_controls(printable) == printable
    for text in ("a\x1bb", "\u202eevil", "x\u2028y", "tab\tand\nnewline", "\ud800"):
        assert visible(text) == visible_controls(text)
