"""One HTML report with every section at once, from real runs: a comparison (errors and timings), performance,
relative-error buckets side by side, waivers, descriptions, determinism and the baseline's emulation; rendered
without a template error, every section present, and long case ids wrapped (in Chromium when present)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner
from fixtures.browser import chromium
from test_report_html import Page

from acceptance.cli import main
from acceptance.report.html import render_html
from acceptance.session import results as results_mod

ROOT = Path(__file__).resolve().parents[1]
MFMA = ROOT / "examples" / "mfma_specs"
FAST = ["--min-time", "0.02", "--min-runs", "3", "--warmup-time", "0", "--device", "cpu", "--no-isolation"]
LONG = "an_operator_with_a_name_long_enough_to_overflow_any_table_column_unless_it_wraps"

KERNEL = """\
def twice(a, b):
    return (a @ b) * 2


def mm(a, b):
    return a @ b
"""

WAIVED = f"""\
name: {LONG}
description: "a kernel that doubles its product, waived while it is fixed"
category: composite
impl: k.py:twice
baseline: k.py:mm
dtypes: [float32]
inputs:
  - {{name: a, shape: [M, K], dist: {{preset: r0}}}}
  - {{name: b, shape: [K, N], dist: {{preset: r0}}}}
cases:
  - {{M: 3, N: 5, K: 7, preset: r4}}
trials: 2
seed: 0
dual_delta: {{enabled: false}}
perf: {{flops: 2*M*N*K}}
waivers:
  - {{match: "{LONG}[*", reason: "doubling bug, fix in review", expires: 2099-12-31, link: "https://tracker.example/42"}}
  - {{match: "*preset=r4]", reason: "crashes on old drivers", covers: [error]}}   # nothing errors: unmatched
"""


def _specs(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(MFMA / "kernels.py", folder / "kernels.py")
    for name in ("plain.yaml", "acc4.yaml"):  # same cases, two baselines: the bucket table puts them side by side
        text = (MFMA / name).read_text(encoding="utf-8")
        text = text.replace("{M: 64, N: 64, K: 512, preset: [r0, r1, r4, r5]}", "{M: 16, N: 16, K: 64, preset: r1}")
        (folder / name).write_text(text + "perf: {flops: 2*M*N*K}\n", encoding="utf-8")
    (folder / "k.py").write_text(KERNEL, encoding="utf-8")
    (folder / "waived.yaml").write_text(WAIVED, encoding="utf-8")
    return folder


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("all")
    specs = _specs(root / "specs")
    cli = CliRunner()
    base = cli.invoke(main, ["bench", str(specs), "--out", str(root / "base"), *FAST])
    assert base.exit_code == 0, base.output
    new = cli.invoke(main, ["bench", str(specs), "--out", str(root / "new"), *FAST, "--compare-to", str(root / "base")])
    assert new.exit_code in (0, 1), new.output
    res = results_mod.load(root / "new" / "results.json")
    text = render_html(res)  # re-rendered from results.json alone, as `acceptance report` does
    path = root / "report.html"
    path.write_text(text, encoding="utf-8")
    return res, text, Page(text), path


def test_the_run_has_every_record_a_section_renders(report):
    res, _, _, _ = report
    assert res.comparison is not None and all(c.perf is not None for c in res.comparison.cases)
    assert all(c.perf is not None and c.determinism is not None and c.description for c in res.cases)
    assert {c.operator: c.emulation is not None for c in res.cases} == {
        "mfma_plain": False,
        "mfma_acc4": True,
        LONG: False,
    }
    assert sum(bool(c.rel_error_buckets) for c in res.cases) >= 2
    waived = next(c for c in res.cases if c.operator == LONG)
    assert waived.verdict == "skip" and waived.waiver == "doubling bug, fix in review"
    assert [(w.match, w.status) for w in res.waivers] == [(f"{LONG}[*", "applied"), ("*preset=r4]", "unmatched")]


def test_every_section_is_present_and_filled(report):
    res, text, page, _ = report
    labels = [a.get("aria-label") for tag, a in page.tags if tag == "section" and a.get("aria-label")]
    for label in (
        "Comparison with the base run",
        "Performance",
        "Waivers",
        "Cases",
        "Case details",
        "Relative-error buckets side by side",
        "Environment and provenance",
    ):
        assert label in labels, label
    words = " ".join(page.text)
    for case in res.cases:
        assert case.description in words and case.id in words
    acc4 = next(c for c in res.cases if c.operator == "mfma_acc4")
    assert f"baseline emulation {acc4.emulation}" in " ".join(" ".join(page.text).split())
    assert words.count("run to run (impl / baseline)") == len(res.cases)
    assert "Median time NEW/BASE" in words and "matched nothing (remove it?)" in words
    assert "https://tracker.example/42" in words and "2099-12-31" in words
    # no template slip: nothing renders as Python's None or jinja's undefined
    cells = [t.strip() for t in page.text]
    assert "None" not in cells and "Undefined" not in text


def test_long_ids_break_at_their_separators_in_every_table(report):
    _, _, page, _ = report
    css = page.raw["style"][0]
    assert "section.comparison td.id { overflow-wrap: normal; word-break: normal; }" in css  # only at <wbr>
    assert "section.comparison li, section.waivers td," in css
    comparison_ids = [a for tag, a in page.tags if tag == "td" and a.get("class") == "id"]
    assert len(comparison_ids) >= 3  # cases table and comparison table use the same class


@pytest.mark.browser
def test_in_chromium_no_error_and_no_cell_overflows(report, tmp_path):
    _, _, _, path = report
    with chromium() as b:
        errors = []
        for width in (1300, 800):
            page = b.new_page(viewport={"width": width, "height": 900})
            page.on("console", lambda m: m.type == "error" and errors.append(m.text))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.goto(path.as_uri())
            page.wait_for_load_state("load")
            # every table cell holding a long id keeps its text inside its box
            over = page.eval_on_selector_all(
                "td.id, section.waivers td, section.perf td",
                "cs => cs.filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.textContent.slice(0, 60))",
            )
            assert over == [], (width, over)
            assert page.evaluate("document.documentElement.scrollWidth") <= width, width
            page.close()
    assert errors == []
