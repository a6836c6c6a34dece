"""The Action's steps executed as GitHub runs a composite action: ``action.yml`` parsed, each step's ``if`` and
``${{ }}`` expressions evaluated, each ``run`` given to ``bash --noprofile --norc -eo pipefail`` with its ``env`` and
the ``GITHUB_OUTPUT``/``GITHUB_STEP_SUMMARY``/``GITHUB_ENV``/``GITHUB_PATH`` files, the uploads recorded.

The install runs on a fresh virtual environment without network: pip installs the action's own checkout
(``github.action_path``) offline, its dependencies already satisfied by this test environment's site-packages
(a ``.pth`` line), so the ``acceptance`` command that runs is the one the step installed. The GitHub CLI is a
fake on ``PATH`` that logs its arguments and serves a run id and the artifact.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
EXPRESSION = re.compile(r"\$\{\{\s*(.*?)\s*\}\}")
TOKEN = re.compile(r"\s*(?:(?P<str>'[^']*')|(?P<op>&&|\|\||!=|==|!|\(\)|\(|\))|(?P<name>[A-Za-z_][\w.-]*))")

FAKE_GH = """#!/usr/bin/env bash
echo "$*" >> "$FAKE_GH_LOG"
if [ "$1 $2" = "run list" ]; then echo 4242; exit 0; fi
if [ "$1 $2" = "run download" ]; then
  dir="${@: -1}"; mkdir -p "$dir"; cp "$OUT/results.json" "$dir/results.json"; exit 0
fi
exit 1
"""


@dataclass
class Job:
    """What one execution of the Action left behind."""

    outcomes: dict[str, str] = field(default_factory=dict)
    outputs: dict[str, dict[str, str]] = field(default_factory=dict)
    logs: dict[str, str] = field(default_factory=dict)
    uploads: list[dict[str, str]] = field(default_factory=list)
    summary: str = ""

    @property
    def failed(self) -> bool:
        return "failure" in self.outcomes.values()


def evaluate(expr: str, lookup: dict[str, str]) -> str | bool:
    """A GitHub expression of the forms the Action uses: context paths, '' strings, ==, !=, !, &&, ||,
    ``cancelled()`` (never, here)."""
    source, pos = [], 0
    while pos < len(expr.rstrip()):
        m = TOKEN.match(expr, pos)
        assert m, f"unsupported expression {expr!r} at {pos}"
        pos = m.end()
        if m["str"] is not None:
            source.append(repr(m["str"][1:-1]))
        elif m["op"] is not None:
            source.append({"&&": " and ", "||": " or ", "!": " not ", "()": ""}.get(m["op"], m["op"]))
        elif m["name"] == "cancelled":
            source.append("False")
        else:
            source.append(repr(lookup.get(m["name"], "")))
    return eval("".join(source), {"__builtins__": {}})  # noqa: S307 - only the tokens above


def substitute(text: str, lookup: dict[str, str]) -> str:
    return EXPRESSION.sub(lambda m: str(evaluate(m.group(1), lookup)), text)


def read_outputs(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    lines = iter(path.read_text().splitlines())
    for line in lines:
        if "<<" in line and "=" not in line.split("<<")[0]:
            key, end = line.split("<<", 1)
            out[key] = "\n".join(iter(lambda: next(lines), end))
        elif "=" in line:
            key, value = line.split("=", 1)
            out[key] = value
    return out


def execute(
    work: Path,
    env: dict[str, str],
    inputs: dict[str, str],
    preset: dict[str, dict[str, str]] | None = None,
    only: set[str] | None = None,
) -> Job:
    """Run the Action's steps in ``work`` (the workspace) as the runner would."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    values = {k: str(v.get("default", "")) for k, v in action["inputs"].items()} | inputs
    github = {"action_path": str(ROOT), "token": "t0ken", "repository": "owner/kernels", "workflow": "Accuracy"}
    job, summary = Job(outputs=dict(preset or {})), work / "step_summary.md"
    summary.touch()
    for i, step in enumerate(action["runs"]["steps"]):
        sid = step.get("id", f"step{i}")
        lookup = {f"inputs.{k}": v for k, v in values.items()} | {f"github.{k}": v for k, v in github.items()}
        lookup |= {f"steps.{s}.outputs.{k}": v for s, o in job.outputs.items() for k, v in o.items()}
        lookup |= {f"steps.{s}.outcome": v for s, v in job.outcomes.items()}
        condition = EXPRESSION.sub(r"\1", str(step.get("if", ""))).strip()
        wanted = evaluate(condition, lookup) if condition else not job.failed
        if not wanted or (only is not None and step["name"] not in only):
            job.outcomes[sid] = "skipped"
            continue
        if "uses" in step:
            job.uploads.append({k: substitute(str(v), lookup) for k, v in step["with"].items()})
            job.outputs[sid], job.outcomes[sid] = {"artifact-url": "https://example.invalid/artifact"}, "success"
            continue
        files = {n: work / f"{sid}.{n.lower()}" for n in ("GITHUB_OUTPUT", "GITHUB_ENV", "GITHUB_PATH")}
        for f in files.values():
            f.write_text("")
        step_env = {k: substitute(str(v), lookup) for k, v in step.get("env", {}).items()}
        script = work / f"{sid}.sh"
        script.write_text(substitute(step["run"], lookup))
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=work,
            env=env
            | step_env
            | {k: str(v) for k, v in files.items()}
            | {"GITHUB_STEP_SUMMARY": str(summary), "GITHUB_ACTION_PATH": str(ROOT)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        job.logs[sid] = done.stdout + done.stderr
        job.outcomes[sid] = "success" if done.returncode == 0 else "failure"
        job.outputs[sid] = read_outputs(files["GITHUB_OUTPUT"])
    job.summary = summary.read_text()
    return job


@pytest.fixture(scope="module")
def runner_env(tmp_path_factory) -> dict[str, str]:
    """A fresh virtual environment first on PATH (dependencies borrowed, no pip index), and the fake GitHub CLI."""
    base = tmp_path_factory.mktemp("runner")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    site = next((venv / "lib").glob("python*/site-packages"))
    (site / "borrowed.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    tools = base / "bin"
    tools.mkdir()
    (tools / "gh").write_text(FAKE_GH)
    (tools / "gh").chmod(0o755)
    path = os.pathsep.join([str(venv / "bin"), str(tools), "/usr/bin", "/bin"])
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PIP_", "VIRTUAL_ENV", "PYTHON"))}
    return env | {
        "PATH": path,
        "PIP_NO_INDEX": "1",
        "PIP_NO_BUILD_ISOLATION": "0",
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "FAKE_GH_LOG": str(base / "gh.log"),
        "HOME": str(base),
    }


@pytest.mark.slow
def test_the_action_installs_its_own_checkout_runs_uploads_the_shard_compares_with_main_and_gates(tmp_path, runner_env):
    job = execute(
        tmp_path, runner_env, {"specs": str(ROOT / "examples" / "quickstart"), "shard": "1/1", "compare-to": "main"}
    )
    assert job.outcomes["install"] == "success", job.logs["install"]
    assert "Successfully installed operator-acceptance" in job.logs["install"]
    assert job.outputs["gate"]["exit_code"] == "1", job.logs["gate"]  # the quickstart's partial block fails
    assert job.outputs["gate"]["artifact"] == "accuracy-reports-1-of-1"
    assert [u["name"] for u in job.uploads] == ["accuracy-reports-1-of-1"]
    assert {"results.json", "junit.xml", "report.html"} <= {p.name for p in (tmp_path / "reports/accuracy").iterdir()}
    gh = Path(runner_env["FAKE_GH_LOG"]).read_text().splitlines()
    assert gh[0].startswith("run list --workflow Accuracy --branch main --status success")
    assert gh[1] == "run download 4242 --name accuracy-reports-1-of-1 --dir reports/accuracy/reference"
    assert "gelu_blocked" in job.summary and "Accuracy compared with" in job.summary
    assert list(job.outcomes.values())[-1] == "failure" and "exited with 1" in list(job.logs.values())[-1]


def test_an_install_failure_fails_with_its_own_message_and_nothing_runs_after_it(tmp_path, runner_env):
    job = execute(tmp_path, runner_env, {"package": str(tmp_path / "no-such-checkout")})
    assert job.outcomes["install"] == "failure"
    assert "::error title=operator-acceptance not installed::pip could not install" in job.logs["install"]
    assert set(job.outcomes.values()) == {"failure", "skipped"} and list(job.logs) == ["install"]


def test_compare_to_a_run_id_downloads_that_run_without_a_lookup(tmp_path, runner_env):
    preset = {"install": {}, "gate": {"exit_code": "0", "artifact": "accuracy-reports"}}
    (tmp_path / "reports/accuracy").mkdir(parents=True)
    (tmp_path / "reports/accuracy/results.json").write_text("{}")
    log = Path(runner_env["FAKE_GH_LOG"])
    log.write_text("")
    job = execute(
        tmp_path,
        runner_env | {"OUT": "reports/accuracy"},
        {"compare-to": "987654"},
        preset,
        only={"Download the reference results"},
    )
    assert job.outcomes["step2"] == "success", job.logs
    assert log.read_text().splitlines() == [
        "run download 987654 --name accuracy-reports --dir reports/accuracy/reference"
    ]
    assert (tmp_path / "reports/accuracy/reference/results.json").exists()
