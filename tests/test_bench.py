"""``acceptance bench``: statistics of timed calls, warm-up kept out of them, rates from the spec's perf section,
the speed-up gate, the tier selection, and the CUDA-events timer."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from acceptance.cli import main
from acceptance.measure import timing
from acceptance.session import bench
from acceptance.spec import load_specs

SPECS = Path(__file__).parent / "bench_specs"
FAST = ["--min-time", "0.05", "--min-runs", "5", "--warmup-time", "0", "--device", "cpu"]


def test_sample_stats_by_hand():
    # sorted 1, 2, 3, 4, 10: p10 at position 0.4 -> 1 + 0.4 * (2 - 1); p90 at 3.6 -> 4 + 0.6 * (10 - 4)
    s = bench.sample_stats([4.0, 1.0, 10.0, 3.0, 2.0])
    assert s == bench.SampleStats(runs=5, median=3.0, min=1.0, mean=4.0, p10=pytest.approx(1.4), p90=pytest.approx(7.6))
    with pytest.raises(ValueError):
        bench.sample_stats([])


def test_rate_is_work_over_seconds():
    assert bench.rate(3_000_000_000, 1.5) == 2.0
    assert bench.rate(None, 1.0) is None and bench.rate(10, 0.0) is None


def test_loop_runs_until_both_minimums_and_stops_at_max_runs():
    calls = []
    fn = lambda x: calls.append(1) or x  # noqa: E731
    x = torch.zeros(1)
    _, warm, runs = timing.time_calls(
        fn, (x,), {}, torch.device("cpu"), timing.TimerOptions(warmup=3, warmup_time=0.0, min_time=0.0, min_runs=7)
    )
    assert (len(warm), len(runs), len(calls)) == (3, 7, 10)
    _, _, runs = timing.time_calls(
        fn,
        (x,),
        {},
        torch.device("cpu"),
        timing.TimerOptions(warmup=0, warmup_time=0.0, min_time=3600.0, min_runs=1, max_runs=12),
    )
    assert len(runs) == 12
    with pytest.raises(ValueError):
        timing.TimerOptions(min_runs=5, max_runs=4)


def _bench(tmp_path, *args):
    result = CliRunner().invoke(main, ["bench", *args, "--out", str(tmp_path), *FAST], catch_exceptions=False)
    return result, json.loads((tmp_path / "results.json").read_text())


def test_first_call_sleep_stays_out_of_the_statistics_and_gflops_is_flops_over_median(tmp_path):
    result, res = _bench(tmp_path, str(SPECS / "warmup.yaml"), "--warmup", "1")
    assert result.exit_code == 0, result.output
    (case,) = res["cases"]
    perf = case["perf"]
    assert case["verdict"] == "pass" and case["metrics"]  # the accuracy fields are there too
    assert perf["timer"] == "perf_counter" and perf["warmup_runs"] == 1 and perf["runs"] >= 5
    assert perf["first_call_s"] >= 0.5  # the 0.5 s set-up call was the warm-up
    assert perf["median_s"] < 0.05 and perf["p90_s"] < 0.05  # the later calls sleep 1 ms
    m, n, k = 16, 8, 32
    assert perf["flops"] == 2 * m * n * k and perf["bytes"] == 4 * (m * k + k * n + m * n)
    assert perf["gflops"] == pytest.approx(2 * m * n * k / perf["median_s"] / 1e9, rel=1e-12)
    assert perf["gbps"] == pytest.approx(4 * (m * k + k * n + m * n) / perf["median_s"] / 1e9, rel=1e-12)
    assert perf["bandwidth_fraction"] == pytest.approx(perf["gbps"] / perf["copy_gbps"], rel=1e-12)
    assert "GFLOP/s" in result.output and "warmup_matmul[float32-M=16-N=8-K=32]" in result.output


def test_without_warmup_the_sleep_lands_in_the_timed_calls(tmp_path):
    _, res = _bench(tmp_path, str(SPECS / "warmup.yaml"), "--warmup", "0")
    perf = res["cases"][0]["perf"]
    assert perf["warmup_runs"] == 0 and perf["first_call_s"] is None
    assert perf["p90_s"] >= 0.5 * 0.4 or perf["mean_s"] >= 0.5 / perf["runs"]  # the 0.5 s call is among them
    assert perf["median_s"] < 0.05  # and the median still does not move


def test_slowed_impl_fails_min_speedup_and_a_faster_one_passes(tmp_path):
    result, res = _bench(tmp_path, str(SPECS / "slowed.yaml"), str(SPECS / "faster.yaml"))
    assert result.exit_code == 1
    by_op = {c["operator"]: c for c in res["cases"]}
    slowed, faster = by_op["slowed_matmul"], by_op["faster_matmul"]
    for case in (slowed, faster):
        p = case["perf"]
        assert p["speedup"] == pytest.approx(p["baseline_median_s"] / p["median_s"], rel=1e-12)
    assert slowed["perf"]["speedup"] < 1 / 1.5 and slowed["verdict"] == "fail"
    (gate,) = [c for c in slowed["criteria"] if c["kind"] == "perf"]
    assert gate["passed"] is False and gate["threshold"] == 1.5 and gate["comparison"] == ">="
    assert any("speedup" in r and "< 1.5" in r for r in slowed["reasons"])
    assert faster["verdict"] == "pass" and faster["perf"]["speedup"] > 1.5
    html = (tmp_path / "report.html").read_text()
    assert "Performance" in html and "slowed_matmul" in html and "<svg" in html


def test_perf_section_errors_name_the_field(tmp_path):
    spec = tmp_path / "bad.yaml"
    text = (
        (SPECS / "slowed.yaml")
        .read_text()
        .replace("flops: 2*M*N*K", "flops: 2*M*Q")
        .replace("  baseline: ../bench_kernels.py:matmul\n  min_speedup", "  min_speedup")
    )
    spec.write_text(text.replace("../bench_kernels.py", str(Path(__file__).parent / "bench_kernels.py")))
    _, problems = load_specs([spec])
    fields = {p.field for p in problems}
    assert "perf" in fields  # min_speedup without a baseline
    spec.write_text(spec.read_text().replace("  min_speedup: 1.5\n", ""))
    _, problems = load_specs([spec])
    assert [(p.field, "unknown symbol 'Q'" in p.message) for p in problems] == [("perf.flops", True)]


def test_large_tier_runs_only_when_asked(tmp_path):
    runner = CliRunner()
    args = [str(SPECS / "large_tier.yaml"), "--out", str(tmp_path), "--device", "cpu"]
    skipped = runner.invoke(main, ["run", *args])
    assert skipped.exit_code == 2 and "no case matches" in skipped.output
    ran = runner.invoke(main, ["run", *args, "--tier", "large"])
    assert ran.exit_code == 0, ran.output
    assert [c["operator"] for c in json.loads((tmp_path / "results.json").read_text())["cases"]] == [
        "large_tier_matmul"
    ]


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_events_time_the_device_work():
    dev = torch.device("cuda")
    assert timing.timer_of(dev) == "cuda_events"
    opts = timing.TimerOptions(warmup=2, warmup_time=0.0, min_time=0.0, min_runs=20)
    x = torch.zeros(1, device=dev)
    medians = []
    for cycles in (2_000_000, 4_000_000):  # torch.cuda._sleep spins the GPU for a number of clock cycles
        _, _, runs = timing.time_calls(lambda t, c=cycles: torch.cuda._sleep(c) or t, (x,), {}, dev, opts)
        medians.append(float(np.median(runs)))
    assert medians[0] > 1e-4 and medians[1] / medians[0] == pytest.approx(2.0, rel=0.1)


def test_in_process_timing_gives_the_same_record():
    specs, _ = load_specs([SPECS / "faster.yaml"])
    from acceptance.spec import expand

    opts = timing.TimerOptions(warmup=1, warmup_time=0.0, min_time=0.0, min_runs=4)
    from acceptance.session.run import run_cases

    executor = bench.Bench(torch.device("cpu"), opts, isolate=False)
    (result,) = run_cases(expand(specs), torch.device("cpu"), executor=executor)
    copy = executor.copy_gbps
    p = result.perf
    assert p.runs == 4 and p.warmup_runs == 1 and copy > 0
    assert p.speedup == pytest.approx(p.baseline_median_s / p.median_s, rel=1e-12)
    # the gate follows the measured ratio (which a loaded machine may push either way; no timing is asserted)
    assert result.verdict == ("pass" if p.speedup >= 1.5 else "fail")
