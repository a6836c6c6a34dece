"""The reusable GitHub Action (action.yml), its use in the repository's own workflow, and the pre-commit hook."""

import re
import subprocess
import sys
from pathlib import Path

import yaml
from click.testing import CliRunner
from test_report_workflows import check_jsonschema

from acceptance.cli import main

ROOT = Path(__file__).resolve().parents[1]


def action() -> dict:
    return yaml.safe_load((ROOT / "action.yml").read_text())


def test_the_action_validates_against_the_github_action_schema(tmp_path):
    exe = Path(sys.executable).with_name("check-jsonschema")
    done = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.github-actions", str(ROOT / "action.yml")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    broken = tmp_path / "action.yml"  # the check can fail: a composite step without `shell`
    broken.write_text("name: x\ndescription: y\nruns:\n  using: composite\n  steps:\n    - run: echo\n")
    again = subprocess.run(
        [str(exe), "--builtin-schema", "vendor.github-actions", str(broken)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert again.returncode != 0


def test_the_action_installs_runs_uploads_summarises_and_gates():
    a = action()
    assert a["runs"]["using"] == "composite"
    assert set(a["inputs"]) >= {"specs", "shard", "out", "compare-to"}
    steps = a["runs"]["steps"]
    text = "\n".join(s.get("run", "") for s in steps)
    assert 'target="${PACKAGE:-$ACTION_PATH[onnx]}"' in text and 'python -m pip install "$target"' in text
    install = next(s for s in steps if s.get("id") == "install")
    assert install["env"]["ACTION_PATH"] == "${{ github.action_path }}" and a["inputs"]["package"]["default"] == ""
    gate = next(s for s in steps if s.get("id") == "gate")
    assert "set +e" in gate["run"] and 'echo "exit_code=$?" >> "$GITHUB_OUTPUT"' in gate["run"]
    assert '--shard "$SHARD"' in gate["run"]
    upload = next(s for s in steps if s.get("uses") == "actions/upload-artifact@v4")
    assert upload["with"]["name"] == "${{ steps.gate.outputs.artifact }}"  # the shard, not the job index
    assert '--summary "$GITHUB_STEP_SUMMARY"' in text and "--annotations" in text
    assert steps[-1]["run"].rstrip().endswith('exit "$GATE_EXIT_CODE"')
    for step in steps[2:]:  # everything after the run reports even when the gate failed
        assert "!cancelled()" in step["if"]
    # every input a step refers to is declared
    used = set(re.findall(r"inputs\.([a-z-]+)", (ROOT / "action.yml").read_text()))
    assert used <= set(a["inputs"])


def test_the_repository_workflow_exercises_the_action():
    wf = yaml.safe_load((ROOT / ".github" / "workflows" / "ci.yml").read_text())
    assert check_jsonschema(ROOT / ".github" / "workflows" / "ci.yml").returncode == 0
    step = next(s for s in wf["jobs"]["action"]["steps"] if s.get("uses") == "./")
    assert set(step["with"]) <= set(action()["inputs"])
    assert "package" not in step["with"]  # the action installs its own checkout
    specs = ROOT / step["with"]["specs"]
    assert CliRunner().invoke(main, ["validate", str(specs)]).exit_code == 0


def test_the_pre_commit_hook_validates_changed_specs(tmp_path):
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["entry"] == "acceptance validate" and hook["pass_filenames"] is True
    files = re.compile(hook["files"])
    assert files.search("operator_specs/gelu.yaml") and not files.search("tests/test_cli.py")
    assert re.search(hook["exclude"], "operator_specs/_ops.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ncategory: nope\n")
    result = CliRunner().invoke(
        main, [*hook["entry"].split()[1:], str(ROOT / "operator_specs" / "gelu.yaml"), str(bad)]
    )
    assert result.exit_code == 2 and "bad.yaml: category" in result.output
