"""The pytest plugin: spec cases as items (-k, -x, xdist), failures with their reasons, waived cases skipped,
nothing collected unless asked; the entry point that registers it."""

import shutil
from pathlib import Path

import pytest
import tomllib

# the items run in this process (pytester): what they import is imported here first, so that pytester's
# restoring of sys.modules between runs never unloads and reloads torch, numba kernels or the workers
import acceptance.cli  # noqa: F401
import acceptance.measure.case  # noqa: F401
import acceptance.numerics.stats  # noqa: F401  (scipy.stats: its numpy.fft cannot be loaded twice)
import acceptance.pytest_plugin  # noqa: F401
import acceptance.report.html  # noqa: F401
import acceptance.report.junit  # noqa: F401

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = ROOT / "examples" / "ecosystem"
KERNELS = Path(__file__).parent / "ecosystem_specs" / "kernels.py"

SPEC = """name: {name}
category: composite
impl: kernels.py:{impl}
baseline: kernels.py:square
dtypes: [float32]
inputs:
  - {{name: x, shape: [N], dist: {{uniform: [1, 2]}}}}
cases: [{{N: 4}}, {{N: 9}}]
trials: 3
{extra}"""


@pytest.fixture(autouse=True)
def this_package_first(monkeypatch):
    """Worker processes and subprocesses import this checkout's package, whatever folder pytester runs in."""
    monkeypatch.setenv("PYTHONPATH", f"{ROOT}:{__import__('os').environ.get('PYTHONPATH', '')}".rstrip(":"))


@pytest.fixture
def repo(pytester):
    """A kernel repository: specs/ with a passing, a failing and a waived operator, and other YAML."""
    specs = pytester.mkdir("specs")
    shutil.copy(KERNELS, specs / "kernels.py")
    (specs / "good.yaml").write_text(SPEC.format(name="good", impl="square", extra=""))
    (specs / "bad.yaml").write_text(
        SPEC.format(
            name="bad", impl="scaled", extra=("impl_params: {scale: 1.5}\nbaseline_params: {scale: 1.0}\n")
        ).replace("kernels.py:square", "kernels.py:scaled")
    )
    (specs / "waived.yaml").write_text(
        SPEC.format(
            name="waived",
            impl="broken",
            extra=(
                "waivers: [{match: 'waived*', reason: driver bug, covers: [error], link: 'https://example.org/1'}]\n"
            ),
        )
    )
    (specs / "config.yaml").write_text("retries: 3\n")  # not a spec: left alone
    return pytester


def _installed() -> bool:
    """Whether the installed distribution's ``pytest11`` entry point loads the plugin already (a regular
    install); without it (running from a bare checkout) the tests name the plugin with ``-p``."""
    from importlib.metadata import entry_points

    return any(ep.value == "acceptance.pytest_plugin" for ep in entry_points(group="pytest11"))


PLUGIN = () if _installed() else ("-p", "acceptance.pytest_plugin")


def run(pytester, *args, isolated=False):
    """pytest with the plugin, in this process; the code under test in this process too unless ``isolated``."""
    isolation = () if isolated else ("--acceptance-no-isolation",)
    return pytester.runpytest(
        *PLUGIN, "-p", "no:cacheprovider", *isolation, "-W", "ignore::pytest.PytestAssertRewriteWarning", *args
    )


def test_each_case_is_an_item_named_by_its_case_id(repo):
    result = run(repo, "specs", "--collect-only", "-q")
    lines = [line for line in result.outlines if "::" in line]
    assert sorted(lines) == sorted(
        f"specs/{op}.yaml::{op}[float32-N={n}]" for op in ("good", "bad", "waived") for n in (4, 9)
    )


def test_outcomes_and_the_failure_message_carry_the_reasons(repo):
    result = run(repo, "specs", "-rs", isolated=True)
    result.assert_outcomes(passed=2, failed=2, skipped=2)
    text = result.stdout.str()
    assert "fail: diff1 0.5 > 3e-3" in text  # |1.5x - x| / |x| summed: exactly 0.5
    assert "waived: driver bug" in text


def test_k_selects_cases_and_x_stops_at_the_first_failure(repo):
    run(repo, "specs", "-k", "good and 9").assert_outcomes(passed=1)
    result = run(repo, "specs", "-x", "-k", "bad")
    result.assert_outcomes(failed=1)


def test_reports_are_written_when_asked(repo):
    from acceptance.session import results

    run(repo, "specs", "-k", "good", "--acceptance-out", "out")
    res = results.load(repo.path / "out" / "results.json")
    assert sorted(c.id for c in res.cases) == ["good[float32-N=4]", "good[float32-N=9]"]
    assert (repo.path / "out" / "junit.xml").exists()


def test_the_reports_of_a_session_record_its_waivers_and_its_real_start_and_end(repo):
    """The plugin's results.json is assembled as a run's: every waiver of the specs run with what it did, and the
    session's start (before the first case) and end (after the last) as measured here around pytest."""
    from datetime import datetime, timezone

    from acceptance.session import results

    before = datetime.now(timezone.utc)
    run(repo, "specs", "--acceptance-out", "out")
    after = datetime.now(timezone.utc)
    res = results.load(repo.path / "out" / "results.json")
    (waiver,) = res.waivers
    assert (waiver.operator, waiver.status, waiver.reason) == ("waived", "applied", "driver bug")
    assert sorted(waiver.cases) == ["waived[float32-N=4]", "waived[float32-N=9]"]
    start = datetime.fromisoformat(res.environment.start_time)
    end = datetime.fromisoformat(res.environment.end_time)
    assert before.replace(microsecond=0) <= start <= end <= after  # the span of the session (whole seconds)
    assert {c.verdict for c in res.cases if c.operator == "waived"} == {"skip"}


def test_nothing_is_collected_unless_named_on_the_command_line(repo):
    repo.makeini("[pytest]\ntestpaths = specs\n")
    result = run(repo, "--collect-only", "-q")  # specs/ only through testpaths: no items
    assert "no tests collected" in result.stdout.str()


def test_the_ini_option_limits_which_folders_hold_specs(repo):
    repo.makeini("[pytest]\nacceptance_specs = elsewhere\n")
    result = run(repo, "specs", "--collect-only", "-q")
    assert "no tests collected" in result.stdout.str()


def test_an_invalid_spec_is_a_collection_error_naming_the_field(repo):
    (repo.path / "specs" / "broken.yaml").write_text("name: broken\ncategory: nope\nimpl: kernels.py:square\n")
    result = run(repo, "specs/broken.yaml")
    assert "invalid operator spec" in result.stdout.str()
    assert "category: 'nope' is not one of" in result.stdout.str()


def test_a_device_that_is_not_one_is_a_usage_error_before_any_case_runs(repo, monkeypatch):
    """``--acceptance-device``, else ``$ACCEPTANCE_DEVICE``: a device that is not one ends the session with
    pytest's usage error (exit 4) and one line, instead of failing every case with the same traceback."""
    result = run(repo, "specs", "--acceptance-device", "tpu")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert (
        "ERROR: --acceptance-device (or $ACCEPTANCE_DEVICE): 'tpu' is not a device (auto, cpu, cuda, cuda:N)"
        in result.stderr.lines
    )
    result.assert_outcomes()
    monkeypatch.setenv("ACCEPTANCE_DEVICE", "npu")
    result = run(repo, "specs", "-k", "good")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "'npu' is not a device" in result.stderr.str()
    monkeypatch.setenv("ACCEPTANCE_DEVICE", "cpu")
    run(repo, "specs", "-k", "good").assert_outcomes(passed=2)


def test_the_example_repository_runs_as_pytest_items_under_xdist(pytester):
    pytest.importorskip("onnxruntime")
    pytest.importorskip("xdist")
    shutil.copytree(EXAMPLE, pytester.path / "example")
    # a fresh process, as a kernel repository runs it (the plugin's entry point stands in for -p there)
    result = pytester.runpytest_subprocess(
        *PLUGIN, "-p", "no:cacheprovider", "example/specs", "example/tests", "-q", "-n", "2", timeout=300
    )
    result.assert_outcomes(passed=12)  # 10 spec cases + 2 hand-written tests


def test_the_entry_point_registers_the_plugin():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["entry-points"]["pytest11"] == {"acceptance": "acceptance.pytest_plugin"}
    assert any(dep.startswith("onnxruntime") for dep in project["optional-dependencies"]["onnx"])
