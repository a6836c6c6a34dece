"""The fault catalogue: impls that exit, crash, hang, leak, mutate, overspend or forge output. Each case is an
error with its cause in words, the rest of the run passes, nothing is lost, and the exit code is 1."""

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

FAULTS = Path(__file__).parent / "fault_specs" / "faults.py"

#: impl -> the cause the case's error must state (None: the case must pass)
CATALOGUE = {
    "good": None,
    "exits_zero": "impl called sys.exit(0) in trial 0",
    "hard_exit_zero": "impl ended the worker process with exit status 0 in trial 0",
    "hard_exit_one": "impl ended the worker process with exit status 1 in trial 0",
    "segfault": "impl terminated by SIGSEGV in trial 0",
    "raises_keyboard_interrupt": "impl raised KeyboardInterrupt",
    "swallows_everything_and_hangs": "impl exceeded the 2 s timeout in trial 0; the worker was killed",
    "native_busy_loop": "impl exceeded the 2 s timeout in trial 0; the worker was killed",
    "mutates_input": "impl modified input 0 (`x`) in place (3 elements changed) in trial 0",
    "allocates_too_much": "impl exceeded the worker's memory limit of 1 GiB",
    "closes_stdout": None,
    "leaves_a_child": "impl left 1 child process(es) running",
    "writes_to_the_output_folder": "impl wrote to the output folder in trial 0 (results.json); the files were removed",
    "forges_a_log_line": "impl raised ValueError: bad",
    "returns_a_string": "impl returned str at output 0 in trial 0",
}


def spec_text(name: str, impl: str, extra: str = "", n: int = 64) -> str:
    return (
        textwrap.dedent(f"""\
        name: {name}
        category: arithmetic
        impl: faults.py:{impl}
        baseline: faults.py:good
        dtypes: [float32]
        inputs:
          - {{name: x, shape: [N], dist: {{uniform: [-1, 1]}}}}
        cases:
          - {{N: {n}}}
        trials: 2
        timeout: 2
        """)
        + extra
    )


def write_specs(folder: Path, names: dict[str, str]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(FAULTS, folder / "faults.py")
    for name, impl in names.items():
        extra = "memory_limit_gib: 1\n" if impl == "allocates_too_much" else ""
        (folder / f"{name}.yaml").write_text(spec_text(name, impl, extra))
    return folder


def acceptance(*args, env=None, **kw) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "acceptance", *map(str, args)],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=300,
        **kw,
    )


@pytest.fixture(scope="module")
def catalogue_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    specs = write_specs(root / "specs", {f"f_{impl}": impl for impl in CATALOGUE})
    out = root / "out"
    started = time.monotonic()
    proc = acceptance("run", specs, "--out", out, "--jobs", "1", env={"ACCEPTANCE_TEST_OUT": str(out)})
    return proc, json.loads((out / "results.json").read_text()), time.monotonic() - started


def test_every_fault_is_an_error_with_its_cause(catalogue_run):
    proc, results, _ = catalogue_run
    by_op = {c["operator"]: c for c in results["cases"]}
    assert set(by_op) == {f"f_{impl}" for impl in CATALOGUE}, proc.stderr
    for impl, cause in CATALOGUE.items():
        case = by_op[f"f_{impl}"]
        if cause is None:
            assert case["verdict"] == "pass", (impl, case["reasons"])
        else:
            assert case["verdict"] == "error", (impl, case["verdict"], case["reasons"])
            assert cause in case["error"], (impl, case["error"])


def test_the_run_finishes_and_fails(catalogue_run):
    proc, results, seconds = catalogue_run
    assert proc.returncode == 1, proc.stderr[-2000:]
    assert results["summary"]["verdict"] == "fail" and not results["interrupted"]
    assert results["summary"]["errors"] == sum(c is not None for c in CATALOGUE.values())
    assert seconds < 120  # two 2 s timeouts; a kill is a kill (a correctness bound, not a speed target)


def test_nothing_the_impl_prints_or_raises_forges_a_log_line(catalogue_run):
    proc, results, _ = catalogue_run
    log = proc.stdout + proc.stderr
    assert not any(line.lstrip().startswith("::") for line in log.splitlines())
    assert "\x1b" not in log and "\u202e" not in log
    assert "forged annotation" in log  # shown, defused
    assert max(len(line) for line in log.splitlines()) < 6000  # 100 kB message cut in the log...
    full = next(c for c in results["cases"] if c["operator"] == "f_forges_a_log_line")["error"]
    assert len(full) > 100_000  # ...and kept whole in results.json


def test_no_worker_or_child_outlives_the_run(catalogue_run):
    leftover = subprocess.run(["pgrep", "-f", "time.sleep\\(300\\)"], capture_output=True, text=True).stdout.split()
    assert leftover == []


def test_a_module_that_exits_at_import_is_a_spec_error(tmp_path):
    (tmp_path / "bad.py").write_text("import sys\nsys.exit(0)\n")
    (tmp_path / "op.yaml").write_text(spec_text("op", "good").replace("faults.py:good", "bad.py:fn"))
    proc = acceptance("validate", tmp_path)
    assert proc.returncode == 2
    assert "bad.py: it calls sys.exit(0) at import" in proc.stderr


def test_a_case_too_large_for_memory_is_a_spec_error(tmp_path):
    write_specs(tmp_path, {})
    (tmp_path / "huge.yaml").write_text(spec_text("huge", "good", n=10**12))
    proc = acceptance("validate", tmp_path)
    assert proc.returncode == 2
    assert (
        "huge[float32-N=1000000000000] needs 1.86e+04 GiB" in proc.stderr.replace("18600", "1.86e+04")
        or "huge[float32-N=1000000000000] needs" in proc.stderr
    )


def test_an_unwritable_out_is_found_before_anything_runs(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    proc = acceptance("run", tmp_path / "no-such-specs", "--out", blocker / "out")
    assert proc.returncode == 2 and f"--out {blocker / 'out'}: cannot write there" in proc.stderr


def test_a_second_run_on_the_same_folder_is_refused(tmp_path):
    from acceptance.session.results import OutputFolder

    specs = write_specs(tmp_path / "specs", {"ok": "good"})
    held = OutputFolder(tmp_path / "out")
    try:
        proc = acceptance("run", specs, "--out", tmp_path / "out")
        assert proc.returncode == 2 and "in use by another run (pid" in proc.stderr
    finally:
        held.close()


def _comparable(results: dict) -> dict:
    """results.json without what depends on when and how long (timestamps, durations, the command line, and the
    digest over them)."""
    for case in results["cases"]:
        case.pop("timing")
    results.pop("environment")
    results.pop("digest")
    return results


def _marked(mark: str) -> list[int]:
    """Live processes whose environment holds ``ACCEPTANCE_TEST_MARK=mark`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if f"ACCEPTANCE_TEST_MARK={mark}".encode() in (entry / "environ").read_bytes().split(b"\0"):
                if (entry / "stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


@pytest.mark.parametrize("jobs", [["--jobs", "1"], ["--jobs", "2"]], ids=["jobs1", "jobs2"])
def test_kill_9_then_resume_gives_the_uninterrupted_results(tmp_path, jobs):
    specs = write_specs(tmp_path / "specs", {f"ok{k}": "steady" for k in range(6)})
    for path in specs.glob("ok*.yaml"):  # slow enough to be killed in the middle: 0.4 s a case at least
        path.write_text(
            path.read_text()
            .replace("impl: faults.py:steady", "impl: faults.py:steady\nbaseline_timeout: 30")
            .replace("trials: 2", "trials: 40")
        )
    full = tmp_path / "full"
    assert acceptance("run", specs, "--out", full).returncode == 0
    out = tmp_path / "out"
    mark = f"{os.getpid()}-{time.monotonic_ns()}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "acceptance", "run", str(specs), "--out", str(out), *jobs],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "ACCEPTANCE_TEST_MARK": mark},
    )
    journal = out / "journal.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not journal.exists() or len(journal.read_text().splitlines()) < 2):
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = len(journal.read_text().splitlines())
    assert 2 <= done < 6 and not (out / "results.json").exists()
    # its job processes, their workers and the fork servers end with it
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and _marked(mark):
        time.sleep(0.2)
    assert not _marked(mark), "processes of the killed run are still alive"
    resumed = acceptance("run", specs, "--out", out, "--resume")
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming: {done} of 6 cases" in resumed.stderr
    assert _comparable(json.loads((out / "results.json").read_text())) == _comparable(
        json.loads((full / "results.json").read_text())
    )


@pytest.mark.parametrize("jobs", [["--jobs", "1"], ["--jobs", "2"]], ids=["jobs1", "jobs2"])
def test_sigterm_leaves_an_interrupted_run_that_is_never_green(tmp_path, jobs):
    """With several jobs, the killed jobs' workers outlive them by a few milliseconds, possibly in a call that
    watches the output folder: the results are written once they are gone, never removed by one of them as a
    file the call wrote (without the wait, the results were missing in most runs of this test)."""
    specs = write_specs(tmp_path / "specs", {f"ok{k}": "steady" for k in range(6)})
    for path in specs.glob("ok*.yaml"):  # 0.4 s a case at least: still measuring when the signal comes
        path.write_text(path.read_text().replace("trials: 2", "trials: 40"))
    out = tmp_path / "out"
    proc = subprocess.Popen(
        [sys.executable, "-m", "acceptance", "run", str(specs), "--out", str(out), *jobs],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    journal = out / "journal.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and (not journal.exists() or len(journal.read_text().splitlines()) < 1):
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 143, err[-3000:]
    results = json.loads((out / "results.json").read_text())
    assert results["interrupted"] and results["summary"]["verdict"] == "interrupted"
    assert results["summary"]["exit_code"] == 143 and results["not_run"]
    assert len(results["cases"]) + len(results["not_run"]) == 6
    assert {p.name for p in out.iterdir()} >= {"results.json", "junit.xml", "report.html", "journal.jsonl"}


def test_a_sigterm_as_the_measuring_ends_still_gives_an_interrupted_run(tmp_path, monkeypatch):
    """A SIGTERM that lands after the last case, while the run takes its handler down, is still an interrupted
    run (143, results written), not click's "Aborted!" (exit 1, no results). The signal is simulated by the
    progress display raising it as it closes, the moment after the handler's removal would run."""

    from click.testing import CliRunner

    from acceptance.cli import run as cli
    from acceptance.errors import Terminated

    class ProgressThenSigterm(cli.Progress):
        def __exit__(self, *exc):
            super().__exit__(*exc)
            raise Terminated()

    monkeypatch.setattr(cli, "Progress", ProgressThenSigterm)
    specs = write_specs(tmp_path / "specs", {"ok0": "good"})
    out = tmp_path / "out"
    r = CliRunner().invoke(cli.main, ["run", str(specs), "--out", str(out), "--jobs", "1", "--no-cache"])
    assert r.exit_code == 143, r.output
    results = json.loads((out / "results.json").read_text())
    assert results["interrupted"] and results["summary"]["exit_code"] == 143
    assert [c["operator"] for c in results["cases"]] == ["ok0"]  # measured before the signal: kept


_KILLS_ITS_JOB = '''
import os, signal, torch


def kill_job_once(x):
    """Kills the job process measuring it (the worker's parent), the first time only."""
    mark = os.path.join(os.path.dirname(__file__), "killed")
    if not os.path.exists(mark):
        open(mark, "w").close()
        os.kill(os.getppid(), signal.SIGKILL)
    return x.clone()
'''


def test_a_killed_job_process_is_one_error_and_the_run_goes_on(tmp_path):
    """With ``--jobs 2``, a SIGKILL of one job process (here by the code under test, which an out-of-memory kill
    does as well) is the error of the case it was measuring, naming the signal; the cases waiting for that job go
    to another one, a fresh job replaces it, and every other case of the run is measured and passes."""
    specs = write_specs(tmp_path / "specs", {f"ok{k}": "good" for k in range(6)})
    (specs / "faults.py").write_text((specs / "faults.py").read_text() + _KILLS_ITS_JOB)
    (specs / "killer.yaml").write_text(spec_text("killer", "kill_job_once"))
    out = tmp_path / "out"
    proc = acceptance("run", specs, "--out", out, "--jobs", "2", "--no-cache")
    assert proc.returncode == 1, proc.stderr
    results = json.loads((out / "results.json").read_text())
    by_op = {c["operator"]: c for c in results["cases"]}
    assert set(by_op) == {"killer", *(f"ok{k}" for k in range(6))} and not results["interrupted"]
    assert by_op["killer"]["verdict"] == "error"
    assert by_op["killer"]["error"] == "the job process measuring this case ended (SIGKILL)"
    assert all(by_op[f"ok{k}"]["verdict"] == "pass" for k in range(6)), [c["error"] for c in results["cases"]]
