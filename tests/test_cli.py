"""The command line as a user meets it: version, help, python -m, the metrics command, an mpmath oracle."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

import acceptance
from acceptance.cli import main
from acceptance.decide.verdict import summarize
from acceptance.session import results as results_mod
from acceptance.wording import counted


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def test_version_and_help():
    r = invoke("--version")
    assert r.exit_code == 0 and acceptance.__version__ in r.output
    r = invoke("--help")
    assert r.exit_code == 0
    for command in ("run", "validate", "list", "report", "metrics"):
        assert command in r.output


def test_python_dash_m():
    out = subprocess.run([sys.executable, "-m", "acceptance", "--version"], capture_output=True, text=True)
    assert out.returncode == 0 and acceptance.__version__ in out.stdout


@pytest.mark.parametrize("module", ["acceptance.cli.tune", "acceptance.cli.bench", "acceptance.cli.cache"])
def test_each_command_module_imports_first_and_registers_its_commands(module):
    """A command module imported first (by a tool, a test) registers on the one group."""
    code = f"import {module}\nfrom acceptance.cli import main\nprint(' '.join(sorted(main.commands)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["bench", "cache", "compare", "list", "metrics", "report", "run", "tune", "validate"]


def test_metrics_command_on_saved_arrays(tmp_path):
    rng = np.random.default_rng(0)
    b = rng.uniform(-1, 1, 1000).astype(np.float32)
    e = (b * np.float32(1.001)).astype(np.float32)
    np.save(tmp_path / "e.npy", e)
    torch.save(torch.from_numpy(b), tmp_path / "b.pt")
    r = invoke("metrics", tmp_path / "e.npy", tmp_path / "b.pt", "--json")
    assert r.exit_code == 0, r.output
    values = json.loads(r.output)
    e64, b64 = e.astype(np.float64), b.astype(np.float64)
    assert values["diff1"] == pytest.approx(np.abs(e64 - b64).sum() / np.abs(b64).sum(), rel=1e-12)
    assert values["max_abs"] == pytest.approx(np.abs(e64 - b64).max(), rel=1e-12)
    assert values["diff4"][2] == np.count_nonzero(e64 != b64)
    r = invoke("metrics", tmp_path / "e.npy", tmp_path / "b.pt")
    assert r.exit_code == 0 and "diff1" in r.output and "max_ulp" in r.output


def test_metrics_command_errors_exit_2(tmp_path):
    np.save(tmp_path / "a.npy", np.zeros(3))
    np.save(tmp_path / "b.npy", np.zeros(4))
    (tmp_path / "junk.npy").write_bytes(b"not numpy")
    r = invoke("metrics", tmp_path / "a.npy", tmp_path / "b.npy")
    assert r.exit_code == 2 and "shape" in r.output
    r = invoke("metrics", tmp_path / "junk.npy", tmp_path / "b.npy")
    assert r.exit_code == 2 and "junk.npy" in r.output


def test_report_rerenders_and_merges_shards(tmp_path):
    fixture = Path(__file__).parent / "fixtures" / "recorded_run.json"
    res = results_mod.load(fixture)
    half = len(res.cases) // 2
    for i, cases in enumerate((res.cases[:half], res.cases[half:])):
        part = res.model_copy(update={"cases": cases, "summary": summarize(cases)})
        results_mod.write(part, tmp_path / f"shard{i}.json")
    r = invoke(
        "report",
        tmp_path / "shard0.json",
        tmp_path / "shard1.json",
        "--merged",
        tmp_path / "all.json",
        "--html",
        tmp_path / "r.html",
        "--junit",
        tmp_path / "j.xml",
        "--signoff",
        tmp_path / "s.html",
        "--summary",
        tmp_path / "summary.md",
    )
    assert r.exit_code == 0, r.output
    merged = results_mod.load(tmp_path / "all.json")
    assert sorted(c.id for c in merged.cases) == sorted(c.id for c in res.cases)
    assert merged.summary == res.summary
    for name in ("r.html", "j.xml", "s.html", "summary.md"):
        assert (tmp_path / name).stat().st_size > 0
    r = invoke("report", tmp_path / "nope.json")
    assert r.exit_code == 2 and "nope.json" in r.output


def test_report_reads_run_folders_like_compare(tmp_path):
    """A run's output folder is what a user has at hand: report reads its results.json, or merges the shards'
    results*.json below it; the summary it prints is the recorded one, counted here from the cases."""
    fixture = Path(__file__).parent / "fixtures" / "recorded_run.json"
    res = results_mod.load(fixture)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_bytes(fixture.read_bytes())
    third = len(res.cases) // 3
    for i, cases in enumerate((res.cases[:third], res.cases[third:])):
        part = res.model_copy(update={"cases": cases, "summary": summarize(cases)})
        results_mod.write(part, tmp_path / "shards" / f"shard-{i}" / "results.json")
    verdicts = [c.verdict for c in res.cases]
    expected = f"{counted(len(verdicts), 'case')}, {verdicts.count('pass')} passed, {verdicts.count('fail')} failed"
    for folder in ("run", "shards"):
        r = invoke("report", tmp_path / folder, "--merged", tmp_path / f"{folder}.json")
        assert r.exit_code == 0, r.output
        merged = results_mod.load(tmp_path / f"{folder}.json")
        assert sorted(c.id for c in merged.cases) == sorted(c.id for c in res.cases)
    r = invoke("report", tmp_path / "run")
    assert expected in r.output
    (tmp_path / "empty").mkdir()
    r = invoke("report", tmp_path / "empty")
    assert r.exit_code == 2 and "empty: no results.json in this folder" in r.output
    r = invoke("compare", tmp_path / "run", tmp_path / "shards")
    assert r.exit_code == 0, r.output


def test_mpmath_oracle_through_a_spec(tmp_path):
    (tmp_path / "exp.yaml").write_text(
        "name: exp_mp\ncategory: activation\nimpl: torch:exp\noracle: {mpmath: exp, dps: 40}\n"
        "dtypes: [float32]\ninputs:\n  - {name: x, shape: [N], dist: {uniform: [-3, 3]}}\n"
        "cases: [{N: 40}]\ntrials: 8\nseed: 1\n"
    )
    out = tmp_path / "out"
    r = invoke("run", tmp_path, "--out", out)
    assert r.exit_code == 0, r.output
    (case,) = results_mod.load(out / "results.json").cases
    rec = next(r for r in case.dual_delta if r.metric == "max_hyb")
    # torch's float32 exp is within ~1 ulp of the true value: |e - exp(x)| / (1 + exp(x)) < 2^-23
    assert 0 < max(rec.delta_impl) < 2.0**-23


def test_unwritable_outputs_exit_2_naming_the_path(tmp_path):
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    specs = Path(__file__).parent / "runner_specs" / "scaled_matmul.yaml"
    r = invoke("run", specs, "--out", blocker / "out")
    assert r.exit_code == 2 and "a_file" in r.output and "Traceback" not in r.output
    fixture = Path(__file__).parent / "fixtures" / "recorded_run.json"
    r = invoke("report", fixture, "--html", blocker / "r.html")
    assert r.exit_code == 2 and "a_file" in r.output


def test_shards_partition_the_run_and_merge_to_the_same_numbers(tmp_path):
    specs = Path(__file__).parent / "mutation_specs"
    picked = ["--only", "legit_*", "--trials", "6"]
    assert invoke("run", specs, "--out", tmp_path / "full", *picked).exit_code == 0
    shards = []
    for k in (1, 2, 3):
        out = tmp_path / f"shard{k}"
        r = invoke("run", specs, "--out", out, "--shard", f"{k}/3", *picked)
        assert r.exit_code == 0, r.output
        shards.append(out / "results.json")
    assert invoke("report", *shards, "--merged", tmp_path / "merged.json").exit_code == 0
    full = {c.id: c for c in results_mod.load(tmp_path / "full" / "results.json").cases}
    parts = [[c.id for c in results_mod.load(p).cases] for p in shards]
    assert sorted(sum(parts, [])) == sorted(full) and all(parts)  # a partition, no shard empty
    merged = {c.id: c for c in results_mod.load(tmp_path / "merged.json").cases}
    assert merged.keys() == full.keys()
    for case_id, case in merged.items():  # same inputs in every shard: the same baseline errors to the bit
        assert [d.delta_baseline for d in case.dual_delta] == [d.delta_baseline for d in full[case_id].dual_delta]
        if case.atomic_spread:  # an impl whose result varies run to run (atomics in a random order)
            continue
        assert case.metrics == full[case_id].metrics  # and, for a deterministic impl, the same metrics
        assert [d.delta_impl for d in case.dual_delta] == [d.delta_impl for d in full[case_id].dual_delta]
    assert any(c.atomic_spread for c in merged.values()) and sum(not c.atomic_spread for c in merged.values()) > 10
    assert invoke("run", specs, "--shard", "0/3", "--out", tmp_path / "x").exit_code == 2


def test_the_command_exits_quickly_with_its_status_output_and_clean_up(tmp_path):
    """``python -m acceptance`` ends without the interpreter's teardown: the exit status is the command's (1 for a
    failing run, 2 for a usage error), everything printed reaches the pipe, results.json is whole, and the exit
    handlers ran (the fork server's socket folder under TMPDIR is removed)."""
    import os
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(dir="/tmp", prefix="acc-"))  # short: the fork server's socket path goes in it
    env = {**os.environ, "TMPDIR": str(tmp), "ACCEPTANCE_CACHE_DIR": str(tmp_path / "cache")}
    spec = Path(__file__).parent / "runner_specs" / "scaled_matmul.yaml"
    out = subprocess.run(
        [sys.executable, "-m", "acceptance", "run", str(spec), "--out", str(tmp_path / "out"), "--trials", "3"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert (tmp_path / "out" / "results.json").exists(), out.stdout + out.stderr
    res = results_mod.load(tmp_path / "out" / "results.json")
    counts = {v: sum(c.verdict == v for c in res.cases) for v in ("pass", "fail", "error")}
    assert counts["fail"] == 1
    lines = out.stdout.rstrip().splitlines()
    assert (
        f"FAIL: {counted(len(res.cases), 'case')}, {counts['pass']} passed, {counts['fail']} failed, "
        f"{counted(counts['error'], 'error')}" in out.stdout
    )
    assert lines[-1] == "wrote " + ", ".join(
        str(tmp_path / "out" / f) for f in ("results.json", "junit.xml", "report.html")
    )
    left = [p.name for p in tmp.iterdir() if p.name.startswith("pymp-")]
    shutil.rmtree(tmp)
    assert not left
    out = subprocess.run(
        [sys.executable, "-m", "acceptance", "report", str(tmp_path / "nope.json")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 2 and "nope.json: no such file or directory" in out.stderr


def test_a_temporary_folder_too_long_for_a_socket_is_a_usage_error(tmp_path):
    """The fork server's socket lives in the temporary folder, and a Unix socket's path has ~107 bytes at most:
    a longer TMPDIR is exit 2 with a message naming the folder and the fix, not a traceback."""
    import os

    long_tmp = tmp_path / ("t" * 120)
    long_tmp.mkdir()
    spec = Path(__file__).parent / "runner_specs" / "scaled_matmul.yaml"
    out = subprocess.run(
        [sys.executable, "-m", "acceptance", "run", str(spec), "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env={**os.environ, "TMPDIR": str(long_tmp)},
        timeout=120,
    )
    assert out.returncode == 2, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert f"its socket goes in {long_tmp}: set TMPDIR to a shorter folder" in out.stderr


def test_the_command_exits_after_a_run_that_used_the_metrics_thread_pool(tmp_path):
    """An output of more than 2^18 elements is reduced by a pool of threads that lives for the process; the
    quick exit stops it as a normal exit does (it once waited on the pool's idle threads forever)."""
    import os
    import shutil
    import tempfile

    (tmp_path / "s").mkdir()
    n = 2**19 + 5
    (tmp_path / "s" / "add.yaml").write_text(
        "name: big_add\ncategory: arithmetic\nimpl: torch:add\ndtypes: [float32]\n"
        "inputs:\n  - {name: a, shape: [N], dist: {uniform: [-1, 1]}}\n"
        "  - {name: b, shape: [N], dist: {uniform: [-1, 1]}}\n"
        f"cases: [{{N: {n}}}]\ntrials: 2\nseed: 0\n"
    )
    tmp = Path(tempfile.mkdtemp(dir="/tmp", prefix="acc-"))
    try:
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "acceptance",
                "run",
                str(tmp_path / "s"),
                "--out",
                str(tmp_path / "out"),
                "--no-cache",
            ],
            capture_output=True,
            text=True,
            timeout=180,
            env={**os.environ, "TMPDIR": str(tmp)},
        )
    finally:
        shutil.rmtree(tmp)
    assert out.returncode == 0, out.stdout + out.stderr
    (case,) = results_mod.load(tmp_path / "out" / "results.json").cases
    assert case.compared == n and case.verdict == "pass"
