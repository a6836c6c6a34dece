"""results.json is trusted by content: its digest must match, every case's verdict must be the one its criteria
give, and the summary the one its cases give; `report`, `compare` and merges refuse anything else (exit 2,
naming the file and the case)."""

import hashlib
import json
from pathlib import Path

import pydantic_core
import pytest
from click.testing import CliRunner

import acceptance
from acceptance.cli import main
from acceptance.session import results as results_mod

SPECS = Path(__file__).parent / "integrity_specs"


def invoke(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def failing_run(tmp_path_factory):
    """A run of two cases whose impl is 1.5x the baseline: both fail several criteria."""
    out = tmp_path_factory.mktemp("failing")
    acceptance.run([SPECS / "failing.yaml"], out=out, isolate=False, jobs=1)
    return out / "results.json"


def _digest(data):
    """The digest as documented: sha256 of the compact JSON (pydantic-core's) of the document without "digest"."""
    rest = {k: v for k, v in data.items() if k != "digest"}
    return "sha256:" + hashlib.sha256(pydantic_core.to_json(rest)).hexdigest()


def _forge(source, target, edit):
    """``source`` edited by ``edit`` and given a matching digest, as a forger knowing the algorithm would."""
    data = json.loads(source.read_text())
    edit(data)
    data["digest"] = _digest(data)
    target.write_text(json.dumps(data, indent=1))
    return target


def test_the_written_digest_is_the_sha256_of_the_canonical_json(failing_run):
    data = json.loads(failing_run.read_text())
    assert data["schema_version"] == 3
    assert data["digest"] == _digest(data)
    assert [c["verdict"] for c in data["cases"]] == ["fail", "fail"]
    assert data["summary"]["verdict"] == "fail"


def _all_pass(data):
    for case in data["cases"]:
        case["verdict"], case["reasons"] = "pass", []
    data["summary"].update(verdict="pass", passed=2, failed=0, exit_code=0)


def _first_pass(data):
    data["cases"][0]["verdict"] = "pass"
    data["summary"].update(passed=1, failed=1)


def _criteria_passed_verdict_kept(data):
    for c in data["cases"][1]["criteria"]:
        c["passed"] = True if c["passed"] is False else c["passed"]


def _error_without_error(data):
    data["cases"][0]["verdict"] = "error"
    data["summary"].update(failed=1, errors=1)


def _waived_without_waiver(data):
    data["cases"][1]["verdict"] = "skip"
    data["summary"].update(failed=1, skipped=1)


EDITS = {
    "every verdict pass, summary pass": (_all_pass, 0),
    "one verdict pass with failed criteria": (_first_pass, 0),
    "criteria all passed, verdict still fail": (_criteria_passed_verdict_kept, 1),
    "verdict error without an error": (_error_without_error, 0),
    "verdict skip without a waiver": (_waived_without_waiver, 1),
}


@pytest.mark.parametrize("name", EDITS)
def test_hand_edited_verdicts_are_refused_naming_the_case(failing_run, tmp_path, name):
    edit, index = EDITS[name]
    case_id = json.loads(failing_run.read_text())["cases"][index]["id"]
    forged = _forge(failing_run, tmp_path / "results.json", edit)
    runs = {
        "report": ("report", forged, "--junit", tmp_path / "j.xml"),
        "compare": ("compare", failing_run, forged),
        "merge": ("report", failing_run, forged, "--merged", tmp_path / "m.json"),
    }
    for command, args in runs.items():
        r = invoke(*args)
        assert r.exit_code == 2, (command, r.output)
        assert str(forged) in r.output and f"case {case_id}" in r.output and "contradicts" in r.output, r.output
        assert "Traceback" not in r.output
    assert not (tmp_path / "j.xml").exists() and not (tmp_path / "m.json").exists()


def test_a_summary_that_its_cases_do_not_give_is_refused(failing_run, tmp_path):
    forged = _forge(failing_run, tmp_path / "results.json", lambda d: d["summary"].update(verdict="pass", exit_code=0))
    r = invoke("report", forged)
    assert r.exit_code == 2 and str(forged) in r.output
    assert "summary (pass, 2 failed" in r.output and "cases give (fail, 2 failed" in r.output


def test_content_that_does_not_match_its_digest_is_refused(failing_run, tmp_path):
    data = json.loads(failing_run.read_text())
    data["cases"][0]["reasons"] = ["all fine"]
    (tmp_path / "edited.json").write_text(json.dumps(data, indent=1))
    data["digest"] = "sha256:" + "0" * 64
    (tmp_path / "zeroed.json").write_text(json.dumps(data, indent=1))
    cut = failing_run.read_bytes()[:-50]
    (tmp_path / "cut.json").write_bytes(cut)
    for name in ("edited.json", "zeroed.json"):
        r = invoke("report", tmp_path / name)
        assert r.exit_code == 2 and f"{tmp_path / name}: its content does not match its digest" in r.output
    r = invoke("report", tmp_path / "cut.json")
    assert r.exit_code == 2 and "cut.json: cannot read results" in r.output and "Traceback" not in r.output


def test_reformatting_keeps_the_digest_valid(failing_run, tmp_path):
    """The digest is over canonical JSON: the same content indented otherwise, keys reordered, non-ASCII
    characters escaped, still reads."""
    data = json.loads(failing_run.read_text())
    reordered = dict(reversed(list(data.items())))
    (tmp_path / "r.json").write_text(json.dumps(reordered, indent=4, ensure_ascii=True))
    assert [c.id for c in results_mod.load(tmp_path / "r.json").cases] == [c["id"] for c in data["cases"]]


def test_a_file_without_a_digest_is_read_with_a_warning(tmp_path):
    fixture = Path(__file__).parent / "fixtures" / "recorded_run.json"
    assert json.loads(fixture.read_text())["schema_version"] == 1  # written before digests
    warnings = []
    res = results_mod.load(fixture, warn=warnings.append)
    assert len(warnings) == 1 and "schema_version 1 has no digest" in warnings[0] and str(fixture) in warnings[0]
    assert len(res.cases) == len(json.loads(fixture.read_text())["cases"])
    r = invoke("report", fixture, "--merged", tmp_path / "m.json")
    assert r.exit_code == 0 and "warning:" in r.output and "has no digest" in r.output
    rewritten = json.loads((tmp_path / "m.json").read_text())
    assert rewritten["digest"] == _digest(rewritten)


def _case(verdict, *, failed=False, error=None, waiver=None):
    from acceptance.records import CaseResult, Criterion

    criteria = [
        Criterion(metric="diff1", value=0.5 if failed else 1e-4, threshold=3e-3, passed=not failed),
        Criterion(kind="vacuity", metric="vacuous", comparison="==", passed=None),  # not evaluated: never fails
    ]
    return CaseResult(
        id="op[float32-N=1]", operator="op", category="arithmetic", spec_file="op.yaml", dtype="float32",
        params={"N": 1}, trials=1, seed=0, verdict=verdict, criteria=criteria, error=error, waiver=waiver,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("verdict", "kwargs", "consistent"),
    [
        ("pass", {}, True),
        ("fail", {}, False),
        ("skip", {"waiver": "known"}, False),  # a waiver turns failures into skip, not passes
        ("fail", {"failed": True}, True),
        ("pass", {"failed": True}, False),
        ("skip", {"failed": True, "waiver": "known"}, True),
        ("skip", {"failed": True}, False),
        ("error", {"error": "boom"}, True),
        ("error", {}, False),
        ("pass", {"error": "boom"}, False),
        ("fail", {"error": "boom", "failed": True}, False),
        ("skip", {"error": "boom", "waiver": "known"}, True),
    ],
)
def test_which_verdicts_a_record_allows(verdict, kwargs, consistent):
    from acceptance.decide.verdict import contradiction

    why = contradiction(_case(verdict, **kwargs))
    assert (why is None) == consistent, why
    if not consistent:
        assert why.startswith(f"verdict {verdict!r} contradicts its record")
