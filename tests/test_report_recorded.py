"""Every reporter on recorded runs: each ``tests/fixtures/*.json`` that is a results.json."""

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from acceptance.report.github import annotations, render_summary
from acceptance.report.html import render_html
from acceptance.report.junit import render_junit
from acceptance.report.signoff import render_signoff
from acceptance.session import results as rs

FIXTURES = Path(__file__).resolve().parent / "fixtures"
XSD = Path(__file__).resolve().parents[1].parent / "shared" / "schemas" / "junit-10.xsd"


def recorded() -> list[Path]:
    found = []
    for path in sorted(FIXTURES.glob("*.json")):
        try:
            rs.load(path)
        except rs.ResultsError:
            continue
        found.append(path)
    return found


@pytest.mark.parametrize("path", recorded() or [pytest.param(None, marks=pytest.mark.skip("no recorded run yet"))])
def test_reporters_on_a_recorded_run(path):
    results = rs.load(path)
    n = len(results.cases)
    root = ET.fromstring(render_junit(results).encode("utf-8"))
    assert len(list(root.iter("testcase"))) == n
    if XSD.exists():
        xmlschema = pytest.importorskip("xmlschema")
        xmlschema.XMLSchema(str(XSD)).validate(render_junit(results))
    page = render_html(results, results_sha256="0" * 64)
    assert page.count("<tr data-verdict=") == n
    assert len(render_summary(results).encode("utf-8")) <= 900_000
    bad = results.summary.failed + results.summary.errors
    assert len(annotations(results)) == min(bad, 10)
    assert "<script" not in render_signoff(results)
