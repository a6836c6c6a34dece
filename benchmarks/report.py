"""Reporter cost at scale: sizes and render times for a 5,000-case run, and the HTML's load time in Chromium.

    python benchmarks/report.py [--cases 5000] [--trials 100] [--chromium /usr/bin/chromium]

Prints one line per measurement. The browser part is skipped when playwright or
Chromium is absent.
"""

from __future__ import annotations

import argparse
import hashlib
import tempfile
import time
from pathlib import Path

import numpy as np

from acceptance import records as rs
from acceptance.decide.verdict import summarize
from acceptance.report.github import annotations, render_summary
from acceptance.report.html import MAX_PLOTTED_CASES, render_html
from acceptance.report.junit import render_junit
from acceptance.report.signoff import render_signoff
from acceptance.session import results as results_io

BUCKETS = ["=0", "<1e-6", "1e-6..1e-5", "1e-5..1e-4", "1e-4..1e-3", "1e-3..1e-2", "1e-2..1e-1", "1e-1..1", ">1"]
OPERATORS = [
    ("matmul", "composite"),
    ("conv2d", "convolution"),
    ("softmax", "activation"),
    ("sum", "reduction"),
    ("add", "arithmetic"),
    ("layer_norm", "composite"),
    ("gelu", "activation"),
    ("bmm", "composite"),
]
DTYPES = ["float32", "float16", "bfloat16"]


def _describe(v: np.ndarray) -> rs.Describe:
    return rs.Describe(
        n=v.size,
        mean=v.mean(),
        median=float(np.median(v)),
        std=v.std(ddof=1),
        p50=float(np.percentile(v, 50)),
        p90=float(np.percentile(v, 90)),
        p99=float(np.percentile(v, 99)),
        max=v.max(),
        min=v.min(),
    )


def synthetic_results(n: int, trials: int, seed: int = 0) -> rs.Results:
    """A run of ``n`` cases: 75 % pass, 15 % fail, 5 % error, 5 % skip (waived failures); 40 % carry a dual-delta
    record of ``trials`` trials."""
    rng = np.random.default_rng(seed)
    cases = []
    for i in range(n):
        op, category = OPERATORS[i % len(OPERATORS)]
        dtype = DTYPES[(i // len(OPERATORS)) % len(DTYPES)]
        verdict = rng.choice(["pass", "fail", "error", "skip"], p=[0.75, 0.15, 0.05, 0.05])
        value = float(rng.uniform(1e-4, 2e-3) if verdict != "fail" else rng.uniform(3.1e-3, 9e-3))
        criteria = [
            rs.Criterion(
                metric="diff1",
                value=value,
                threshold=3e-3,
                passed=verdict not in ("fail", "skip"),
                source=f"{dtype} {category} default",
            ),
            rs.Criterion(
                metric="diff2", value=value * 0.7, threshold=3e-3, passed=True, source=f"{dtype} {category} default"
            ),
        ]
        dual = []
        if i % 5 < 2:
            base = rng.gamma(2.0, 1e-3, trials)
            impl = base * (3.0 if verdict == "fail" else 1.1)
            dual = [
                rs.DualDeltaRecord(
                    metric="max_abs",
                    trials=trials,
                    delta_impl=impl.tolist(),
                    delta_baseline=base.tolist(),
                    impl=_describe(impl),
                    baseline=_describe(base),
                    ratio=_describe(impl / base),
                    tests=[
                        rs.StatTest(name="ks", statistic=0.3, p_value=1e-3),
                        rs.StatTest(name="wilcoxon", statistic=900.0, p_value=1e-4, alternative="greater"),
                    ],
                    conclusion="impl is inferior" if verdict == "fail" else "impl is non-inferior",
                    factor=2.0,
                    alpha=0.05,
                    p_value=1e-4,
                    p_adjusted=1e-3,
                    passed=verdict != "fail",
                )
            ]
        cases.append(
            rs.CaseResult(
                id=f"{op}[{dtype}-M={i}-N=128-K={64 + i % 4096}]",
                operator=op,
                category=category,
                spec_file=f"operator_specs/{op}.yaml",
                dtype=dtype,
                params={"M": i, "N": 128, "K": 64 + i % 4096},
                trials=trials,
                seed=i,
                verdict=str(verdict),
                reasons=[] if verdict == "pass" else [f"diff1 {value:.3g} > 3e-3 ({dtype} {category} default)"],
                criteria=criteria,
                dual_delta=dual,
                rel_error_buckets=dict(zip(BUCKETS, rng.integers(0, 10_000, len(BUCKETS)).tolist(), strict=False)),
                worst=rs.WorstElement(
                    trial=0, index=[i % 128, 3], evaluated=1.0, baseline=0.99, abs_error=0.01, rel_error=0.0101
                ),
                error="RuntimeError: kernel launch failed" if verdict == "error" else None,
                waiver="accepted for this release" if verdict == "skip" else None,
                timing=rs.Timing(total=0.05, impl=0.01, baseline=0.03, oracle=0.01),
            )
        )
    env = rs.Environment(
        acceptance="0.1.0",
        python="3.11",
        torch="2.13.0",
        numpy="2.4",
        platform="linux",
        host="bench",
        device="cpu",
        device_name="cpu",
        start_time="2026-01-01T00:00:00Z",
        end_time="2026-01-01T01:00:00Z",
    )
    return rs.Results(environment=env, summary=summarize(cases), cases=cases)


def timed(fn, *args, **kwargs):
    start = time.perf_counter()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - start


def browser_load(path: Path, chromium: str) -> None:
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        print("browser: skipped (playwright not installed)")
        return
    if not Path(chromium).exists():
        print(f"browser: skipped (no Chromium at {chromium})")
        return
    args = [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--no-first-run",
        "--disable-sync",
    ]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=args)
        page = browser.new_page(viewport={"width": 1300, "height": 900})
        start = time.perf_counter()
        page.goto(path.as_uri(), wait_until="load", timeout=120_000)
        wall = time.perf_counter() - start
        nav = page.evaluate(
            "() => { const e = performance.getEntriesByType('navigation')[0];"
            " return [e.domContentLoadedEventEnd, e.loadEventEnd]; }"
        )
        filter_ms = page.evaluate("""() => { const f = document.getElementById('filter'); const t = performance.now();
            f.value = 'softmax float16'; f.dispatchEvent(new Event('input')); document.body.offsetHeight;
            return performance.now() - t; }""")
        clear_ms = page.evaluate("""() => { const f = document.getElementById('filter'); const t = performance.now();
            f.value = ''; f.dispatchEvent(new Event('input')); document.body.offsetHeight;
            return performance.now() - t; }""")
        sort_ms = page.evaluate("""() => { const th = document.querySelectorAll('#cases-table th')[8];
            const t = performance.now(); th.click(); document.body.offsetHeight; return performance.now() - t; }""")
        print(
            f"browser: goto->load {wall:.2f} s; DOMContentLoaded {nav[0] / 1e3:.2f} s, load event {nav[1] / 1e3:.2f} s"
        )
        print(
            f"browser: filter keystroke {filter_ms:.0f} ms, clearing the filter {clear_ms:.0f} ms,"
            f" sort by time {sort_ms:.0f} ms (script + layout)"
        )
        browser.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=5000)
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--chromium", default="/usr/bin/chromium")
    args = parser.parse_args()

    results, t = timed(synthetic_results, args.cases, args.trials)
    print(
        f"cases: {args.cases} ({results.summary.failed} fail, {results.summary.errors} error), "
        f"{sum(bool(c.dual_delta) for c in results.cases)} with {args.trials}-trial dual-delta; built in {t:.2f} s"
    )
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        path, t = timed(results_io.write, results, folder / "results.json")
        data = path.read_bytes()
        print(f"results.json: {len(data) / 1e6:.2f} MB, write {t:.2f} s")
        _, t = timed(results_io.load, path)
        print(f"results.json: load+validate {t:.2f} s")
        sha = hashlib.sha256(data).hexdigest()
        for name, fn, kwargs in [
            ("report.html", render_html, {"results_sha256": sha}),
            ("signoff.html", render_signoff, {"results_sha256": sha}),
            ("junit.xml", render_junit, {}),
            ("summary.md", render_summary, {}),
        ]:
            text, t = timed(fn, results, **kwargs)
            size = len(text.encode("utf-8"))
            (folder / name).write_text(text, encoding="utf-8")
            print(f"{name}: {size / 1e6:.2f} MB, render {t:.2f} s")
        lines, t = timed(annotations, results)
        print(f"annotations: {len(lines)} lines, {t * 1e3:.1f} ms")
        print(f"report.html draws charts for the first {MAX_PLOTTED_CASES} cases with distributions")
        browser_load(folder / "report.html", args.chromium)


if __name__ == "__main__":
    main()
