"""Performance regression in a comparison: the median ratio and the p10/p90 separation rule by hand, no false
slowdown between samples of one timing distribution, the gate of `compare`, `run --compare-to` and
`bench --compare-to`, and the comparison in the JUnit XML."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from fixtures.report_results import mixed_results

from acceptance.cli import main
from acceptance.decide import regression
from acceptance.records import PerfRecord
from acceptance.report.junit import render_junit

ROOT = Path(__file__).resolve().parents[1]
KERNELS = Path(__file__).resolve().parent / "bench_kernels.py"
FAST = ["--min-time", "0.05", "--min-runs", "5", "--warmup-time", "0", "--device", "cpu", "--no-isolation"]
XSD = next(
    (
        p
        for p in (
            ROOT.parent / "shared" / "schemas" / "junit-10.xsd",
            ROOT.parent.parent / "shared" / "schemas" / "junit-10.xsd",
        )
        if p.exists()
    ),
    None,
)


def perf(median, p10, p90, device="cpu", timer="perf_counter") -> PerfRecord:
    return PerfRecord(
        timer=timer,
        device=device,
        runs=20,
        warmup_runs=1,
        median_s=median,
        min_s=p10 * 0.9,
        p10_s=p10,
        p90_s=p90,
        mean_s=median,
    )


@pytest.mark.parametrize(
    "new, ratio, separated, slower",
    [
        (perf(1.5e-3, 1.3e-3, 1.7e-3), 1.5, True, True),  # 1.5x, p10 1.3 ms > base p90 1.1 ms
        (perf(1.4e-3, 1.05e-3, 1.9e-3), 1.4, False, False),  # 1.4x but p10 1.05 ms < 1.1 ms: spreads overlap
        (perf(1.2e-3, 1.15e-3, 1.3e-3), 1.2, True, False),  # separated, but 1.2x <= 1.25x
        (perf(0.5e-3, 0.45e-3, 0.55e-3), 0.5, False, False),  # faster: reported, never a regression
    ],
)
def test_perf_ratio_median_and_separation_by_hand(new, ratio, separated, slower):
    base = perf(1.0e-3, 0.9e-3, 1.1e-3)
    r = regression.perf_ratio(base, new)
    assert r.ratio == pytest.approx(ratio, rel=1e-12)
    assert (r.separated, r.slower, r.note) == (separated, slower, None)
    assert (r.base_p90_s, r.new_p10_s) == (1.1e-3, new.p10_s)


def test_timings_of_different_devices_are_shown_but_never_flagged():
    r = regression.perf_ratio(
        perf(1e-3, 0.9e-3, 1.1e-3), perf(5e-3, 4.9e-3, 5.1e-3, device="cuda:0", timer="cuda_events")
    )
    assert r.ratio == pytest.approx(5.0) and r.separated and not r.slower
    assert r.note == "timed on cuda:0 (cuda_events), base on cpu (perf_counter): not compared"


def _record(seconds: np.ndarray) -> PerfRecord:
    p10, p50, p90 = np.percentile(seconds, [10, 50, 90])
    return perf(float(p50), float(p10), float(p90))


def test_no_false_slowdown_between_samples_of_one_distribution_and_a_tight_shift_is_caught():
    # 400 pairs of 20 calls each, log-normal call times with a 30 % spread (a busy CPU runner): the median alone
    # moves past 1.25x between two samples of the same code now and then (std of the log-median ratio
    # ~ 1.2533 * 0.3 * sqrt(2 / 20) = 0.119, log 1.25 = 0.223 is 1.9 of them); the p10 > p90 rule never fires.
    rng = np.random.default_rng(0)
    draw = lambda sigma, scale=1.0: scale * 1e-3 * np.exp(rng.normal(0, sigma, 20))  # noqa: E731
    median_only = flagged = 0
    for _ in range(400):
        a, b = _record(draw(0.3)), _record(draw(0.3))
        median_only += b.median_s / a.median_s > 1.25
        flagged += regression.perf_ratio(a, b).slower
    assert median_only > 0 and flagged == 0
    # a 1.5x slowdown of a kernel with a 5 % spread (a quiet GPU): the spreads separate, caught every time
    caught = sum(regression.perf_ratio(_record(draw(0.05)), _record(draw(0.05, 1.5))).slower for _ in range(100))
    assert caught == 100


def _bench_spec(folder: Path, sleep: float) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sleepy.yaml"
    path.write_text(
        f"""\
name: sleepy_matmul
category: composite
impl: {KERNELS}:matmul_slowed
baseline: {KERNELS}:matmul
impl_params: {{sleep: {sleep}}}
dtypes: [float32]
inputs:
  - {{name: a, shape: [M, K], dist: {{uniform: [-1, 1]}}}}
  - {{name: b, shape: [K, N], dist: {{uniform: [-1, 1]}}}}
cases:
  - {{M: 8, N: 4, K: 16}}
dual_delta: {{enabled: false}}
perf:
  flops: 2*M*N*K
""",
        encoding="utf-8",
    )
    return path


@pytest.fixture(scope="module")
def benched(tmp_path_factory):
    """A base bench run (10 ms per call), the same code again, and the impl made 3x slower (30 ms per call)."""
    root = tmp_path_factory.mktemp("bench")
    cli = CliRunner()
    base = cli.invoke(main, ["bench", str(_bench_spec(root / "s10", 0.01)), "--out", str(root / "base"), *FAST])
    assert base.exit_code == 0, base.output
    same = cli.invoke(
        main,
        [
            "bench",
            str(_bench_spec(root / "s10", 0.01)),
            "--out",
            str(root / "same"),
            *FAST,
            "--compare-to",
            str(root / "base"),
        ],
    )
    slow = cli.invoke(
        main,
        [
            "bench",
            str(_bench_spec(root / "s30", 0.03)),
            "--out",
            str(root / "slow"),
            *FAST,
            "--compare-to",
            str(root / "base" / "results.json"),
        ],
    )
    return root, same, slow


def test_bench_compare_to_passes_the_same_code_and_fails_a_3x_slowdown(benched):
    root, same, slow = benched
    assert same.exit_code == 0, same.output
    cmp = json.loads((root / "same" / "results.json").read_text())["comparison"]
    (case,) = cmp["cases"]
    assert cmp["passed"] and not case["slower"] and cmp["max_slowdown"] == 1.25
    assert case["perf"]["ratio"] == pytest.approx(case["perf"]["new_median_s"] / case["perf"]["base_median_s"])

    assert slow.exit_code == 1, slow.output
    data = json.loads((root / "slow" / "results.json").read_text())
    assert data["summary"]["failed"] == 0 and data["summary"]["verdict"] == "fail"  # accurate, but slower
    (case,) = data["comparison"]["cases"]
    base_case = json.loads((root / "base" / "results.json").read_text())["cases"][0]
    p = case["perf"]
    assert (
        p["base_median_s"] == base_case["perf"]["median_s"]
        and p["new_median_s"] == data["cases"][0]["perf"]["median_s"]
    )
    assert p["ratio"] == pytest.approx(p["new_median_s"] / p["base_median_s"]) and 2.0 < p["ratio"] < 3.5
    assert p["separated"] and case["slower"]
    (line,) = data["comparison"]["regressions"]
    assert line.startswith("sleepy_matmul[float32-M=8-N=4-K=16]: ") and "x slower (median " in line
    assert line.endswith("allowed 1.25x)")
    assert "regression against" in slow.output
    html = (root / "slow" / "report.html").read_text()
    assert "Median time NEW/BASE" in html and "may slow down 1.25x" in html


def test_compare_command_gates_on_the_slowdown_and_its_factor(benched):
    root, _, _ = benched
    cli = CliRunner()
    out = cli.invoke(main, ["compare", str(root / "base"), str(root / "slow"), "--markdown", "-"])
    assert out.exit_code == 1 and "| sleepy_matmul[float32-M=8-N=4-K=16] |" in out.output
    assert "| case | median NEW/BASE | base | new | new p10 > base p90 | slower (> 1.25x) |" in out.output
    ratio = json.loads((root / "slow" / "results.json").read_text())["comparison"]["cases"][0]["perf"]["ratio"]
    loose = cli.invoke(main, ["compare", str(root / "base"), str(root / "slow"), "--max-slowdown", str(ratio * 1.01)])
    assert loose.exit_code == 0, loose.output
    bad = cli.invoke(main, ["compare", str(root / "base"), str(root / "slow"), "--max-slowdown", "0.5"])
    assert bad.exit_code == 2 and "--max-slowdown: must be a finite factor >= 1, got 0.5" in bad.output
    bad_run = cli.invoke(
        main,
        [
            "run",
            str(_bench_spec(root / "s10", 0.01)),
            "--out",
            str(root / "r"),
            "--compare-to",
            str(root / "base"),
            "--max-slowdown",
            "inf",
        ],
    )
    assert bad_run.exit_code == 2 and "--max-slowdown" in bad_run.output


def test_run_compare_to_leaves_timings_out_when_the_new_run_has_none(benched):
    # `run` does not time: nothing to compare, so no slowdown (and the accuracy comparison still runs)
    root, _, _ = benched
    out = CliRunner().invoke(
        main,
        [
            "run",
            str(_bench_spec(root / "s30", 0.03)),
            "--out",
            str(root / "acc"),
            "--device",
            "cpu",
            "--no-isolation",
            "--compare-to",
            str(root / "base"),
        ],
    )
    assert out.exit_code == 0, out.output
    (case,) = json.loads((root / "acc" / "results.json").read_text())["comparison"]["cases"]
    assert case["perf"] is None and not case["slower"] and case["change"] == "same"


# --------------------------------------------------------------------------- JUnit


def test_junit_has_a_comparison_suite_with_a_failing_testcase_per_regression(benched):
    root, _, _ = benched
    from acceptance.session import results as results_mod

    res = results_mod.load(root / "slow" / "results.json")
    xml = render_junit(res)
    tree = ET.fromstring(xml.encode("utf-8"))
    suite = tree.find("testsuite[@name='comparison']")
    (tc,) = suite.findall("testcase")
    assert tc.get("name") == "sleepy_matmul[float32-M=8-N=4-K=16]"
    assert tc.get("classname") == "acceptance.comparison.sleepy_matmul"
    failure = tc.find("failure")
    assert failure.get("type") == "regression" and failure.get("message") == res.comparison.regressions[0]
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["base"] == str(root / "base" / "results.json") and props["max_slowdown"] == "1.25"
    assert props["regressions"] == "1"
    assert "median NEW/BASE" in suite.find("system-out").text
    # the run's totals count it: one accuracy case that passed, one regression
    assert (tree.get("tests"), tree.get("failures")) == ("2", "1")
    if XSD is not None:
        xmlschema = pytest.importorskip("xmlschema")
        xmlschema.XMLSchema(str(XSD)).validate(xml)


def test_junit_without_regression_has_one_passing_comparison_testcase():
    from acceptance.decide.regression import compare_results

    res = mixed_results()
    cmp = compare_results(res, res, base_label="main <nightly>")
    tree = ET.fromstring(render_junit(res.model_copy(update={"comparison": cmp})).encode("utf-8"))
    (tc,) = tree.findall("testsuite[@name='comparison']/testcase")
    assert tc.get("name") == "no regression against main <nightly>" and list(tc) == []
    assert tree.get("tests") == str(len(res.cases) + 1)
    assert ET.fromstring(render_junit(res).encode("utf-8")).find("testsuite[@name='comparison']") is None
