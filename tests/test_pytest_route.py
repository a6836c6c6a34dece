"""The pytest route as docs/ecosystem.md documents it: the command shown there runs, with -k over case ids,
-x and pytest-xdist, and writes one results.json for the whole session."""

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: The command docs/ecosystem.md shows (the test checks that it does).
COMMAND = (
    'pytest operator_specs/gelu.yaml -k "float16 and not bfloat16 and not N1-" -x -n 2 --acceptance-out reports/pytest'
)


def _installed() -> bool:
    from importlib.metadata import entry_points

    return any(ep.value == "acceptance.pytest_plugin" for ep in entry_points(group="pytest11"))


def _pytest(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """``pytest ARGS`` in a fresh process in ``cwd``, as a kernel repository runs it (this checkout's package)."""
    plugin = [] if _installed() else ["-p", "acceptance.pytest_plugin"]
    env = dict(os.environ, PYTHONPATH=f"{ROOT}:{os.environ.get('PYTHONPATH', '')}".rstrip(":"))
    return subprocess.run(
        [sys.executable, "-m", "pytest", *plugin, "-p", "no:cacheprovider", *args],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A folder holding the built-in gelu spec under operator_specs/ (12 cases: 3 dtypes x 4 shapes)."""
    (tmp_path / "operator_specs").mkdir()
    shutil.copy(ROOT / "operator_specs" / "gelu.yaml", tmp_path / "operator_specs")
    return tmp_path


def test_the_documented_command_is_the_one_tested():
    docs = (ROOT / "docs" / "ecosystem.md").read_text()
    assert f"$ {COMMAND}\n" in docs


def test_the_documented_command_runs_under_xdist(repo):
    pytest.importorskip("xdist")
    argv = shlex.split(COMMAND)
    assert argv[0] == "pytest"
    done = _pytest(argv[1:], repo)
    # float16 (not bfloat16) gelu cases, N=1 left out: N=65537, N=4097 and N=4097 with approximate=tanh
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "2 workers [3 items]" in done.stdout and "= 3 passed in " in done.stdout
    res = json.loads((repo / "reports" / "pytest" / "results.json").read_text())
    assert sorted(c["id"] for c in res["cases"]) == [
        "gelu[float16-N=4097-LO=-1-HI=1]",
        "gelu[float16-N=4097-LO=-10-HI=10-approximate=tanh]",
        "gelu[float16-N=65537-LO=-10-HI=10]",
    ]
    assert (res["summary"]["verdict"], res["summary"]["total"], res["not_run"]) == ("pass", 3, [])
    assert sorted(p.name for p in (repo / "reports" / "pytest").iterdir()) == [
        "junit.xml",
        "report.html",
        "results.json",
    ]


def test_k_matches_the_ids_without_their_equal_signs(repo):
    done = _pytest(["operator_specs", "-k", "N1- or approximatetanh", "--co", "-q"], repo)
    assert done.returncode == 0, done.stdout + done.stderr
    items = sorted(line.split("::")[1] for line in done.stdout.splitlines() if "::" in line)
    assert items == sorted(
        [f"gelu[{d}-N=1-LO=-1-HI=1]" for d in ("float16", "bfloat16", "float32")]
        + [f"gelu[{d}-N=4097-LO=-10-HI=10-approximate=tanh]" for d in ("float16", "bfloat16", "float32")]
    )


def test_an_equal_sign_in_k_is_a_usage_error_that_says_how_to_spell_it(repo):
    for extra in ([], ["-n", "2"]):  # under xdist too: one usage error, not an internal error in every worker
        done = _pytest(["operator_specs", "-k", "float16 and not N=1", *extra], repo)
        assert done.returncode == pytest.ExitCode.USAGE_ERROR, done.stdout + done.stderr
        assert (
            "ERROR: -k 'float16 and not N=1': pytest's -k cannot hold '='; a spec case also matches its id "
            "without '=' (N=1 as N1, e.g. -k 'float16 and not N1')"
        ) in done.stderr


SCALED = """name: {name}
category: composite
impl: kernels.py:scaled
baseline: kernels.py:scaled
impl_params: {{scale: {scale}}}
baseline_params: {{scale: 1.0}}
dtypes: [float32]
inputs:
  - {{name: x, shape: [N], dist: {{uniform: [1, 2]}}}}
cases: [{{N: 4}}, {{N: 9}}]
trials: 3
"""


def test_a_session_stopped_by_x_is_recorded_as_interrupted_never_a_pass(tmp_path):
    """bad.yaml's first case fails (impl 1.5x the baseline); -x stops there: results.json holds that case, the
    run is interrupted (exit code 1 in it), and the three selected cases not run are listed."""
    specs = tmp_path / "specs"
    specs.mkdir()
    shutil.copy(ROOT / "tests" / "ecosystem_specs" / "kernels.py", specs)
    (specs / "bad.yaml").write_text(SCALED.format(name="bad", scale=1.5))
    (specs / "good.yaml").write_text(SCALED.format(name="good", scale=1.0))
    done = _pytest(["specs", "-x", "--acceptance-out", "out"], tmp_path)
    assert done.returncode == pytest.ExitCode.TESTS_FAILED, done.stdout[-3000:] + done.stderr[-2000:]
    res = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [c["id"] for c in res["cases"]] == ["bad[float32-N=4]"]
    assert res["not_run"] == ["bad[float32-N=9]", "good[float32-N=4]", "good[float32-N=9]"]
    assert (res["interrupted"], res["summary"]["verdict"], res["summary"]["exit_code"]) == (True, "interrupted", 1)


def test_large_tier_specs_are_collected_only_when_asked(tmp_path):
    """As `acceptance run`: the LLM-sized spec (tier: large, 7 cases) is left out unless --acceptance-tier large."""
    (tmp_path / "operator_specs").mkdir()
    for name in ("q4_0_q8_1_matmul_llm.yaml", "gelu.yaml"):
        shutil.copy(ROOT / "operator_specs" / name, tmp_path / "operator_specs")
    shutil.copy(ROOT / "operator_specs" / "_ops.py", tmp_path / "operator_specs")

    def items(*extra: str) -> list[str]:
        done = _pytest(["operator_specs", "--co", "-q", *extra], tmp_path)
        assert done.returncode == 0, done.stdout + done.stderr
        return [line.split("::")[0] for line in done.stdout.splitlines() if "::" in line]

    assert set(items()) == {"operator_specs/gelu.yaml"} and len(items()) == 12
    large = items("--acceptance-tier", "large")
    assert set(large) == {"operator_specs/q4_0_q8_1_matmul_llm.yaml"} and len(large) == 7
    assert len(items("--acceptance-tier", "large", "--acceptance-tier", "default")) == 19
