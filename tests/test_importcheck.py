"""A spec's code is imported for validation in a child process: an import that exits (status 0 included),
crashes or hangs is a problem of that spec, never the end of the run with a green exit status; the runner
itself never imports the code under test."""

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from acceptance.errors import SpecError
from acceptance.isolation.importcheck import ImportCheck

ROOT = Path(__file__).resolve().parents[1]

SPEC = """name: {name}
category: arithmetic
impl: {impl}
baseline: torch:add
dtypes: [float32]
inputs:
  - {{name: a, shape: [8], dist: {{uniform: [-1, 1]}}}}
  - {{name: b, shape: [8], dist: {{uniform: [-1, 1]}}}}
cases: [{{}}]
trials: 2
"""

MODULES = {
    "exits0.py": "import os\nos._exit(0)\n",
    "exits3.py": "import os\nos._exit(3)\n",
    "segv.py": "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n",
    "sysexit.py": "import sys\nsys.exit(0)\n",
    "sleeps.py": textwrap.dedent("""\
        import subprocess, time
        child = subprocess.Popen(["sleep", "600"])
        with open(__file__[:-3] + ".child", "w") as fh:
            fh.write(str(child.pid))
        time.sleep(600)
        def add(a, b): return a + b
        """),
    "marker.py": textwrap.dedent("""\
        import os
        with open(__file__[:-3] + ".marks", "a") as fh:  # every process that imports it, by pid
            fh.write(f"{os.getpid()}\\n")
        import torch
        def add(a, b): return torch.add(a, b)
        def also(a, b): return torch.add(a, b)
        """),
}


def _env() -> dict:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


@pytest.fixture
def folder(tmp_path):
    for name, text in MODULES.items():
        (tmp_path / name).write_text(text)
    for name, impl in [
        ("exits0", "exits0.py:add"),
        ("exits3", "exits3.py:add"),
        ("segv", "segv.py:add"),
        ("sysexit", "sysexit.py:add"),
        ("good", "torch:add"),
        ("typo", "torch:addd"),
        ("marker", "marker.py:add"),
    ]:
        (tmp_path / f"{name}.yaml").write_text(SPEC.format(name=name, impl=impl))
    return tmp_path


def _acceptance(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "acceptance", *args], cwd=folder, env=_env(), capture_output=True, text=True, timeout=240
    )


def test_an_import_that_exits_or_crashes_is_a_spec_problem_and_nothing_runs(folder):
    done = _acceptance(
        folder,
        "run",
        "exits0.yaml",
        "exits3.yaml",
        "segv.yaml",
        "sysexit.yaml",
        "typo.yaml",
        "good.yaml",
        "--out",
        "out",
        "--jobs",
        "1",
    )
    assert done.returncode == 2, (done.returncode, done.stdout, done.stderr)
    err = done.stderr
    assert (
        "exits0.yaml: impl: 'exits0.py:add': importing 'exits0.py' ended the process importing it (exit status 0)"
    ) in err
    assert (
        "exits3.yaml: impl: 'exits3.py:add': importing 'exits3.py' ended the process importing it (exit status 3)"
        in err
    )
    assert (
        "segv.yaml: impl: 'segv.py:add': importing 'segv.py' ended the process importing it (killed by SIGSEGV)" in err
    )
    # the references after a dead import are still checked, each with its own message
    assert "sysexit.yaml: impl: cannot import sysexit.py: it calls sys.exit(0) at import" in err
    assert "typo.yaml: impl: 'torch:addd': 'torch' has no attribute 'addd'" in err
    assert "5 problem(s) in the specs; nothing was run" in err
    assert not (folder / "out" / "results.json").exists()

    checked = _acceptance(folder, "validate", "exits0.yaml", "good.yaml")
    assert checked.returncode == 2 and "exits0.yaml: impl:" in checked.stderr and "exit status 0" in checked.stderr


def test_the_runner_never_imports_the_code_under_test(folder):
    """marker.py writes the pid of every process that imports it: the check's child and the worker, never the
    runner (the process the command started)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "acceptance", "run", "marker.yaml", "good.yaml", "--out", "out", "--jobs", "1"],
        cwd=folder,
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = proc.communicate(timeout=240)
    assert proc.returncode == 0, (out, err)
    pids = [int(line) for line in (folder / "marker.marks").read_text().split()]
    assert len(pids) >= 2 and proc.pid not in pids  # imported by the check and by the worker, elsewhere


def _gone(pid: int) -> bool:
    """Whether process ``pid`` ended within 10 s (absent, or a zombie waiting to be reaped)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (FileNotFoundError, ProcessLookupError):
            return True
        if state == "Z":
            return True
        time.sleep(0.05)
    return False


def test_an_import_that_hangs_is_stopped_and_the_next_reference_is_checked(folder):
    with ImportCheck(timeout=1.5) as check:
        started = time.monotonic()
        with pytest.raises(SpecError, match=r"^'sleeps.py:add': importing 'sleeps.py' did not finish within 1.5 s"):
            check("sleeps.py:add", folder / "good.yaml")
        assert time.monotonic() - started < 30
        left = int((folder / "sleeps.child").read_text())  # what the import started went with it
        assert _gone(left)
        check("torch:add", folder / "good.yaml")  # a fresh child answers
        with pytest.raises(SpecError, match="has no attribute 'nope'"):
            check("torch:nope", folder / "good.yaml")


def test_each_module_is_imported_once_and_answers_are_kept(folder):
    with ImportCheck() as check:
        check("marker.py:add", folder / "good.yaml")
        check("marker.py:also", folder / "good.yaml")
        check("marker.py:add", folder / "marker.yaml")  # the same file from another spec of the folder
        with pytest.raises(SpecError, match="'marker.py' has no attribute 'missing'"):
            check("marker.py:missing", folder / "good.yaml")
    pids = [int(p) for p in (folder / "marker.marks").read_text().split()]
    assert len(pids) == 1 and pids[0] != os.getpid()


def test_the_pytest_plugin_reports_an_exiting_import_as_a_collection_error(folder):
    specs = folder / "specs"
    specs.mkdir()
    (specs / "exits0.py").write_text(MODULES["exits0.py"])
    (specs / "exits0.yaml").write_text(SPEC.format(name="exits0", impl="exits0.py:add"))
    from importlib.metadata import entry_points

    installed = any(ep.value == "acceptance.pytest_plugin" for ep in entry_points(group="pytest11"))
    plugin = [] if installed else ["-p", "acceptance.pytest_plugin"]
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", "specs", "-q"],
        cwd=folder,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode not in (0, 5), done.stdout  # 0: passed, 5: nothing collected; both would be green-ish
    assert "invalid operator spec" in done.stdout and "exit status 0" in done.stdout


def test_questions_asked_ahead_are_answered_in_order_across_dead_children(folder):
    """Asked without waiting, a question whose import ends the child is that question's problem; those sent
    after it are asked again of a fresh child and answered on their own."""
    spec = folder / "good.yaml"
    refs = ["exits0.py:add", "torch:add", "torch:nope", "segv.py:add", "marker.py:add", "exits3.py:add", "math:sqrt"]
    with ImportCheck() as check:
        for ref in refs:
            check.ahead(ref, spec)
        assert check.settle() is True
        for ref, expected in zip(
            refs,
            ["exit status 0", None, "has no attribute 'nope'", "killed by SIGSEGV", None, "exit status 3", None],
            strict=False,
        ):
            if expected is None:
                check(ref, spec)
            else:
                with pytest.raises(SpecError, match=expected):
                    check(ref, spec)
    with ImportCheck() as check:
        check.ahead("torch:add", spec)
        assert check.settle() is False


def test_a_child_that_cannot_start_is_reported_to_the_caller(monkeypatch, folder):
    """The child starts in a thread: what stops it from starting is raised where the answers are read."""
    from acceptance.isolation import forkserver

    def broken():
        raise OSError("no fork server here")

    monkeypatch.setattr(forkserver, "context", broken)
    check = ImportCheck()
    check.ahead("torch:add", folder / "good.yaml")  # returns at once
    with pytest.raises(OSError, match="no fork server here"):
        check.settle()
    check.close()
