"""The GitHub workflows: valid against the GitHub workflow schema (offline), and the accuracy gate's shape."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = ROOT / ".github" / "workflows"


def check_jsonschema(*paths: Path) -> subprocess.CompletedProcess:
    exe = Path(sys.executable).with_name("check-jsonschema")
    if not exe.exists():
        found = shutil.which("check-jsonschema")
        if found is None:
            pytest.skip("check-jsonschema is not installed (dev extra)")
        exe = Path(found)
    return subprocess.run(
        [str(exe), "--builtin-schema", "vendor.github-workflows", *map(str, paths)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_workflows_validate_against_the_github_schema():
    done = check_jsonschema(WORKFLOWS / "accuracy.yml", WORKFLOWS / "ci.yml", WORKFLOWS / "accuracy-regression.yml")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_schema_check_rejects_a_broken_workflow(tmp_path):
    broken = tmp_path / "broken.yml"
    broken.write_text("on: pull_request\njobs:\n  x:\n    runs-on: ubuntu-latest\n    steps:\n      - uses: 3\n")
    assert check_jsonschema(broken).returncode != 0


def load(name: str) -> dict:
    # PyYAML reads the key `on` as True (YAML 1.1)
    return yaml.safe_load((WORKFLOWS / name).read_text())


def test_accuracy_gate_runs_reports_and_then_fails_with_the_captured_code():
    wf = load("accuracy.yml")
    assert "pull_request" in wf[True]
    steps = wf["jobs"]["accuracy"]["steps"]
    names = [s.get("name", s.get("uses")) for s in steps]
    gate = next(s for s in steps if s.get("id") == "gate")
    assert "set +e" in gate["run"] and "acceptance run operator_specs --out reports/pr" in gate["run"]
    assert 'echo "exit_code=$?" >> "$GITHUB_OUTPUT"' in gate["run"]
    after = steps[names.index("Run the operator specs") + 1 :]
    uses = [s.get("uses", "") for s in after]
    assert "actions/upload-artifact@v4" in uses
    assert "mikepenz/action-junit-report@v5" in uses
    summary = next(s for s in after if "--summary" in s.get("run", ""))
    assert 'acceptance report reports/pr/results.json --summary "$GITHUB_STEP_SUMMARY"' in summary["run"]
    assert "--annotations" in summary["run"]
    for step in after:  # reporting runs even though the gate step's command failed
        assert "!cancelled()" in step["if"]
    last = after[-1]
    assert last["env"]["GATE_EXIT_CODE"] == "${{ steps.gate.outputs.exit_code }}"
    assert 'exit "$GATE_EXIT_CODE"' in last["run"]


def test_ci_installs_cpu_torch_then_the_dev_extra_and_runs_pytest():
    steps = load("ci.yml")["jobs"]["tests"]["steps"]
    install = next(s for s in steps if s.get("name") == "Install")["run"]
    assert "--index-url https://download.pytorch.org/whl/cpu" in install
    assert install.index("torch==") < install.index('pip install -e ".[dev]"')
    assert any(s.get("run") == "python -m pytest -q" for s in steps)


def documented_workflows() -> list[str]:
    """The YAML blocks of "Use it in your repository" in docs/reports.md (the plain and the sharded workflow)."""
    section = (ROOT / "docs" / "reports.md").read_text().split("## Use it in your repository", 1)[1]
    return [part.split("```", 1)[0] for part in section.split("```yaml\n")[1:]]


def test_the_documented_workflows_validate(tmp_path):
    blocks = documented_workflows()
    assert len(blocks) == 2
    for k, block in enumerate(blocks):
        path = tmp_path / f"workflow{k}.yml"
        path.write_text(block)
        done = check_jsonschema(path)
        assert done.returncode == 0, done.stdout + done.stderr
    plain, sharded = (yaml.safe_load(b)["jobs"] for b in blocks)
    assert any("acceptance run operator_specs --out reports/pr" in s.get("run", "") for s in plain["accuracy"]["steps"])
    runs = [s.get("run", "") for s in sharded["shard"]["steps"]]
    assert any("--shard ${{ matrix.shard }}/4" in r for r in runs)
    assert sharded["shard"]["strategy"]["matrix"]["shard"] == [1, 2, 3, 4]
    assert sharded["report"]["needs"] == "shard" and "!cancelled()" in sharded["report"]["if"]
    merge = next(s["run"] for s in sharded["report"]["steps"] if "--merged" in s.get("run", ""))
    assert "shards/*/results.json" in merge
