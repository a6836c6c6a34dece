"""A run's life cycle: nothing the code under test spawns outlives its case, ``--resume`` trusts content (not case
ids), and a run that is stopped (SIGTERM, SIGKILL, a killed job) keeps every case it finished."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

KERNELS = Path(__file__).parent / "lifecycle_specs" / "lifecycle.py"


def spec_text(name: str, impl: str, sizes: tuple[int, ...] = (8,), trials: int = 2, seed: int = 0) -> str:
    cases = "\n".join(f"  - {{N: {n}}}" for n in sizes)
    return (
        textwrap.dedent(f"""\
        name: {name}
        category: arithmetic
        impl: lifecycle.py:{impl}
        baseline: lifecycle.py:good
        dtypes: [float32]
        inputs:
          - {{name: x, shape: [N], dist: {{uniform: [-1, 1]}}}}
        cases:
        """)
        + cases
        + f"\ntrials: {trials}\nseed: {seed}\ntimeout: 120\n"
    )


def write_specs(folder: Path, specs: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(KERNELS, folder / "lifecycle.py")
    for name, text in specs.items():
        (folder / f"{name}.yaml").write_text(text)
    return folder


def env_for(traces: Path, out: Path, **more: str) -> dict[str, str]:
    traces.mkdir(parents=True, exist_ok=True)
    return {**os.environ, "LIFECYCLE_DIR": str(traces), "LIFECYCLE_OUT": str(out), **more}


def acceptance(*args: object, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "acceptance", *map(str, args)], capture_output=True, text=True, env=env, timeout=300
    )


def start(*args: object, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "acceptance", *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def running(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def journal_lines(out: Path) -> int:
    path = out / "journal.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def wait_for(condition, seconds: float = 120.0) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def calls(traces: Path) -> list[int]:
    """The input sizes of the counted impl's calls, one per call."""
    path = traces / "calls"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


# ----------------------------------------------------------------------------- what the impl spawns

LEFT_BEHIND = {"double_fork_daemon": "daemon", "background_child": "child", "stubborn_grandchild": "grandchild"}


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="child subreapers are Linux only")
@pytest.mark.parametrize("jobs", ["1", "2"])
def test_nothing_the_impl_spawns_outlives_its_case_or_writes_after_it(tmp_path, jobs):
    specs = write_specs(
        tmp_path / "specs",
        {"good": spec_text("good", "good"), "late_thread": spec_text("late_thread", "late_thread")}
        | {impl: spec_text(impl, impl) for impl in [*LEFT_BEHIND, "daemon_then_crash"]},
    )
    out, traces = tmp_path / "out", tmp_path / "traces"
    proc = acceptance("run", specs, "--out", out, "--jobs", jobs, "--no-cache", env=env_for(traces, out))
    assert proc.returncode == 1, proc.stderr[-3000:]
    record = (out / "results.json").read_bytes()
    by_op = {c["operator"]: c for c in json.loads(record)["cases"]}
    assert by_op["good"]["verdict"] == "pass"
    for impl in LEFT_BEHIND:
        assert by_op[impl]["verdict"] == "error"
        assert by_op[impl]["error"].startswith("impl left 1 child process(es) running"), by_op[impl]["error"]
    late = by_op["late_thread"]
    assert late["verdict"] == "error"
    assert "impl left 1 thread(s) running ('Thread-1 (write)'); the worker was ended" in late["error"]
    # a daemon whose worker then died is handed up past it (to the fork server or the job), and killed there
    assert by_op["daemon_then_crash"]["error"] == "impl ended the worker process with exit status 3 in trial 0"
    pids = {name: int((traces / f"{name}.pid").read_text()) for name in [*LEFT_BEHIND.values(), "orphan"]}
    assert not [name for name, pid in pids.items() if running(pid)], "left-behind processes outlived the run"
    time.sleep(4.0)  # past the moment they would have written (lifecycle.LATER = 3 s after they started)
    assert sorted(p.name for p in traces.glob("*.wrote")) == []
    assert not (out / "late.txt").exists()
    assert (out / "results.json").read_bytes() == record


# ----------------------------------------------------------------------------- resume by content

SIZES = (8, 16, 24)


def counted_run(specs: Path, out: Path, traces: Path, *more: str) -> subprocess.CompletedProcess:
    (traces / "calls").unlink(missing_ok=True)
    return acceptance("run", specs, "--out", out, "--jobs", "1", "--no-cache", *more, env=env_for(traces, out))


def test_resume_reuses_only_unchanged_content_and_says_why(tmp_path):
    specs = write_specs(tmp_path / "specs", {"op": spec_text("op", "counted", SIZES)})
    out, traces = tmp_path / "out", tmp_path / "traces"
    assert counted_run(specs, out, traces).returncode == 0
    full = calls(traces)
    assert sorted(set(full)) == list(SIZES)
    per_trial = len(full) // (len(SIZES) * 2)  # the impl's calls per trial (its determinism repeat included)

    same = counted_run(specs, out, traces, "--resume")
    assert same.returncode == 0 and calls(traces) == []
    assert "resuming: 3 of 3 cases" in same.stderr and "re-run" not in same.stderr

    kernel = specs / "lifecycle.py"
    kernel.write_text(kernel.read_text().replace("SCALE = 2.0", "SCALE = 3.0"))  # the kernel changed (x1.5)
    changed = counted_run(specs, out, traces, "--resume")
    assert "resume: 3 cases re-run: impl source changed (specs/lifecycle.py)" in changed.stderr
    assert sorted(calls(traces)) == sorted(full)
    assert changed.returncode == 1  # x * 3 against the baseline's x * 2: every case fails now
    assert {c["verdict"] for c in json.loads((out / "results.json").read_text())["cases"]} == {"fail"}

    (specs / "op.yaml").write_text(spec_text("op", "counted", SIZES, trials=3, seed=11))
    retried = counted_run(specs, out, traces, "--resume")
    assert "resume: 3 cases re-run: trials changed (2 -> 3)" in retried.stderr
    assert "resume: 3 cases re-run: seed changed (0 -> 11)" in retried.stderr
    assert len(calls(traces)) == len(SIZES) * 3 * per_trial
    cases = json.loads((out / "results.json").read_text())["cases"]
    assert [(c["trials"], c["seed"]) for c in cases] == [(3, 11)] * 3


def test_corrupt_journal_lines_are_skipped_with_a_warning(tmp_path):
    specs = write_specs(tmp_path / "specs", {"op": spec_text("op", "counted", SIZES)})
    out, traces = tmp_path / "out", tmp_path / "traces"
    assert counted_run(specs, out, traces).returncode == 0
    lines = (out / "journal.jsonl").read_text().splitlines()
    lines[1] = lines[1][: len(lines[1]) // 2]  # cut short, as by a kill in the middle of the write
    (out / "journal.jsonl").write_text("\n".join([lines[0], lines[1], "not json", *lines[2:]]) + "\n")
    resumed = counted_run(specs, out, traces, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert (
        "resume: 2 journal lines skipped: not a journal record (cut short, not UTF-8 or corrupt: line 2, 3)"
        in resumed.stderr
    )
    assert calls(traces) and set(calls(traces)) == {SIZES[1]}  # only the case whose line was cut is measured again
    assert len(json.loads((out / "results.json").read_text())["cases"]) == 3


# ----------------------------------------------------------------------------- stopped runs keep their work


def slow_specs(folder: Path) -> Path:
    """Four cases of 0.1 s per impl call: a run is still measuring when it is stopped."""
    return write_specs(folder, {"op": spec_text("op", "counted", (8, 16, 24, 32), trials=3)})


def test_sigterm_keeps_every_finished_case_and_writes_the_reports(tmp_path):
    specs, out, traces = slow_specs(tmp_path / "specs"), tmp_path / "out", tmp_path / "traces"
    proc = start(
        "run", specs, "--out", out, "--jobs", "1", "--no-cache", env=env_for(traces, out, LIFECYCLE_SLEEP="0.1")
    )
    wait_for(lambda: journal_lines(out) >= 2)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    journaled = {json.loads(line)["case"]["id"] for line in (out / "journal.jsonl").read_text().splitlines()}
    results = json.loads((out / "results.json").read_text())
    assert len(journaled) >= 2 and {c["id"] for c in results["cases"]} == journaled
    assert results["summary"]["verdict"] == "interrupted" and results["interrupted"]
    assert len(results["not_run"]) == 4 - len(journaled)
    assert (out / "junit.xml").exists() and (out / "report.html").exists()


def test_after_sigkill_resume_measures_only_the_unfinished_cases(tmp_path):
    specs, out, traces = slow_specs(tmp_path / "specs"), tmp_path / "out", tmp_path / "traces"
    proc = start(
        "run", specs, "--out", out, "--jobs", "1", "--no-cache", env=env_for(traces, out, LIFECYCLE_SLEEP="0.1")
    )
    wait_for(lambda: journal_lines(out) >= 2)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    finished = {json.loads(line)["case"]["params"]["N"] for line in (out / "journal.jsonl").read_text().splitlines()}
    assert 2 <= len(finished) < 4
    resumed = counted_run(specs, out, traces, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert set(calls(traces)) == {8, 16, 24, 32} - finished
    assert len(json.loads((out / "results.json").read_text())["cases"]) == 4


def test_a_job_killed_from_outside_is_that_case_error_and_the_rest_completes(tmp_path):
    specs = write_specs(
        tmp_path / "specs",
        {"victim": spec_text("victim", "reports_its_job")} | {f"ok{k}": spec_text(f"ok{k}", "good") for k in range(4)},
    )
    out, traces = tmp_path / "out", tmp_path / "traces"
    proc = start("run", specs, "--out", out, "--jobs", "2", "--no-cache", env=env_for(traces, out))
    wait_for(lambda: (traces / "job.pid").exists() and (traces / "job.pid").read_text() != "")
    os.kill(int((traces / "job.pid").read_text()), signal.SIGKILL)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 1, err[-3000:]
    results = json.loads((out / "results.json").read_text())
    by_op = {c["operator"]: c for c in results["cases"]}
    assert set(by_op) == {"victim", "ok0", "ok1", "ok2", "ok3"} and not results["interrupted"]
    assert by_op["victim"]["verdict"] == "error"
    assert by_op["victim"]["error"] == "the job process measuring this case ended (SIGKILL)"
    assert [by_op[f"ok{k}"]["verdict"] for k in range(4)] == ["pass"] * 4


def test_a_kill_between_group_commits_loses_no_case_and_counts_no_half_line(tmp_path):
    """The journal fsyncs in groups (64 lines or 0.2 s): a SIGKILL in between keeps every line written (the
    operating system has them); a line cut short (as a power loss in the middle of a batch leaves it) is skipped
    and only its case runs again; the resumed record holds every case exactly once."""
    sizes = tuple(range(1, 121))
    specs = write_specs(tmp_path / "specs", {"op": spec_text("op", "counted", sizes, trials=1)})
    out, traces = tmp_path / "out", tmp_path / "traces"
    proc = start(
        "run", specs, "--out", out, "--jobs", "1", "--no-cache", env=env_for(traces, out, LIFECYCLE_SLEEP="0.03")
    )
    wait_for(lambda: journal_lines(out) >= 70)
    proc.send_signal(signal.SIGKILL)
    proc.communicate(timeout=60)
    lines = (out / "journal.jsonl").read_bytes().split(b"\n")
    whole = [line for line in lines if line.endswith(b"}")]
    assert 70 <= len(whole) < len(sizes)
    cut = whole[-1][: len(whole[-1]) // 2]
    (out / "journal.jsonl").write_bytes(b"\n".join(whole[:-1]) + b"\n" + cut)
    kept = {json.loads(line)["case"]["params"]["N"] for line in whole[:-1]}
    resumed = counted_run(specs, out, traces, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resume: 1 journal line skipped" in resumed.stderr
    assert set(calls(traces)) == set(sizes) - kept
    ids = [c["id"] for c in json.loads((out / "results.json").read_text())["cases"]]
    assert len(ids) == len(set(ids)) == len(sizes)
