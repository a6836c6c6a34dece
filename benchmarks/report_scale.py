"""The reports at 3,000 and 20,000 cases: render time, sizes, and the HTML page in headless Chromium.

    python benchmarks/report_scale.py RUN/results.json [--cases 3000 20000] [--chromium /usr/bin/chromium]

The large runs are a real results.json replicated (``benchmarks/scaled_results.py``: distinct ids, mixed
verdicts). Prints, per size: render CPU and wall time and size of report.html, junit.xml and the job summary;
then, in Chromium, the time to the load event and to the first table rows, the page's element count, a filter
keystroke, a sort, and opening a case. The browser part is skipped when playwright or Chromium is absent.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from scaled_results import scaled  # noqa: E402

from acceptance.report.github import render_summary  # noqa: E402
from acceptance.report.html import prepare, render_html  # noqa: E402
from acceptance.report.junit import render_junit  # noqa: E402
from acceptance.session import results as results_io  # noqa: E402

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--no-first-run"]

_TIMINGS = """() => { const e = performance.getEntriesByType('navigation')[0];
  const fcp = performance.getEntriesByName('first-contentful-paint')[0];
  return [e.domContentLoadedEventEnd, e.loadEventEnd, fcp ? fcp.startTime : -1,
          document.getElementsByTagName('*').length]; }"""
_ACT = """async (what) => { const t = performance.now();
  if (what === 'filter') { const f = document.getElementById('filter'); f.value = 'float16 fail';
    f.dispatchEvent(new Event('input')); }
  if (what === 'clear') { const f = document.getElementById('filter'); f.value = '';
    f.dispatchEvent(new Event('input')); }
  if (what === 'sort') { document.querySelectorAll('#cases-table th')[8].click(); }
  if (what === 'open') { document.querySelector('#cases-table tbody td.id a').click();
    while (!document.querySelector('tr.detail-row, details.case[open]')) {
      await new Promise(r => setTimeout(r, 5)); } }
  document.body.offsetHeight; return performance.now() - t; }"""


def timed(fn, *args, **kwargs):
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.process_time() - cpu, time.perf_counter() - wall


def browser(path: Path, chromium: str) -> None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("  browser: skipped (playwright not installed)")
        return
    if not Path(chromium).exists():
        print(f"  browser: skipped (no Chromium at {chromium})")
        return
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, args=ARGS)
        page = b.new_page(viewport={"width": 1300, "height": 900})
        start = time.perf_counter()
        page.goto(path.as_uri(), wait_until="commit", timeout=300_000)
        page.wait_for_selector("#cases-table tbody tr", state="visible", timeout=300_000)
        rows = time.perf_counter() - start
        page.wait_for_load_state("load", timeout=300_000)
        wall = time.perf_counter() - start
        dcl, load, fcp, count = page.evaluate(_TIMINGS)
        print(
            f"  browser: first rows visible {rows:.2f} s, goto->load {wall:.2f} s (DOMContentLoaded {dcl / 1e3:.2f} s,"
            f" load event {load / 1e3:.2f} s, first contentful paint {fcp / 1e3:.2f} s); {count} elements"
        )
        acts = {what: page.evaluate(_ACT, what) for what in ("filter", "clear", "sort", "open")}
        count = page.evaluate("document.getElementsByTagName('*').length")
        print(
            f"  browser: filter keystroke {acts['filter']:.0f} ms, clearing it {acts['clear']:.0f} ms, sort by time"
            f" {acts['sort']:.0f} ms, opening a case {acts['open']:.0f} ms; {count} elements with it open"
        )
        b.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path, help="a real results.json to replicate")
    parser.add_argument("--cases", type=int, nargs="+", default=[3000, 20000])
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()
    source = results_io.load(args.results)
    prepare()
    for n in args.cases:
        results = scaled(source, n)
        print(
            f"{n} cases ({results.summary.failed} fail, {results.summary.errors} error, {results.summary.skipped} skip)"
        )
        with tempfile.TemporaryDirectory() as tmp:
            for name, render in (
                ("report.html", render_html),
                ("junit.xml", render_junit),
                ("summary", render_summary),
            ):
                text, cpu, wall = timed(render, results)
                path = Path(tmp) / name
                path.write_text(text, encoding="utf-8")
                print(f"  {name}: {path.stat().st_size / 1e6:.2f} MB, render {cpu:.2f} s CPU ({wall:.2f} s wall)")
            browser(Path(tmp) / "report.html", args.chromium)


if __name__ == "__main__":
    main()
