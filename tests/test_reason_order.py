"""A failed case says first which criterion failed and by how much; informational notes (the oracle's range)
follow and name the elements they concern; the worst element shown is the one that decided the failed
criterion, recorded per criterion in results.json. Console, JUnit message and GitHub summary alike."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

import acceptance
from acceptance.records import CaseResult, Results
from acceptance.report.console import render
from acceptance.report.github import render_summary
from acceptance.report.text import headline

KERNEL = """\
import torch
import torch.nn.functional as F


def gelu_tail_zeroed(x):
    out = F.gelu(x)
    out[..., -3:] = 0  # bug: the last three elements are never written
    return out
"""

SPEC = """\
name: gelu_tail
category: activation
impl: kernel.py:gelu_tail_zeroed
baseline: torch.nn.functional:gelu
dtypes: [float16]
inputs:
  - {name: x, shape: [N], dist: {uniform: [-12, 4]}}
cases:
  - {N: 1000}
trials: 4
seed: 3
"""

METRICS = ("diff1", "diff2", "max_ulp", "mean_ulp", "diff4", "dual-delta")


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gelu_tail")
    (folder / "kernel.py").write_text(KERNEL, encoding="utf-8")
    (folder / "gelu_tail.yaml").write_text(SPEC, encoding="utf-8")
    out = folder / "out"
    res = acceptance.run([folder / "gelu_tail.yaml"], out=out, device="cpu")
    return res, out


def the_case(res: Results) -> CaseResult:
    (case,) = res.cases
    assert case.verdict == "fail"
    return case


def test_the_oracle_underflows_yet_the_first_reason_is_a_failed_criterion(run):
    case = the_case(run[0])
    assert case.oracle_range and "oracle underflows float16" in case.oracle_range  # gelu(-12) ~ 1e-33
    first = case.reasons[0]
    assert first.startswith(METRICS) and " > " in first or first.startswith("dual-delta")
    failed = [c for c in case.criteria if c.passed is False]
    assert failed and first.startswith(failed[0].metric)
    notes = [k for k, r in enumerate(case.reasons) if r.startswith("note: ")]
    assert len(notes) == 1 and "oracle underflows float16" in case.reasons[notes[0]]
    # the note comes after every failed criterion and never excuses elements it does not cover
    assert all(k < notes[0] for k, r in enumerate(case.reasons) if r.startswith(METRICS))
    assert "not from the impl" not in case.reasons[notes[0]]
    assert "the element deciding" in case.reasons[notes[0]]


def test_the_worst_element_is_the_one_that_decided_the_failed_criterion(run):
    case = the_case(run[0])
    ulp = [c for c in case.criteria if c.metric == "max_ulp"]
    assert ulp and ulp[0].passed is False and ulp[0].worst is not None
    w = ulp[0].worst
    # the largest ULP error is at one of the zeroed elements: the impl gives 0 where GELU is not
    assert w.index[0] in (997, 998, 999) and w.impl == 0.0 and w.measure == "ulp"
    assert w.error == ulp[0].value  # the worst-over-trials max_ulp is that element's error
    first_failed = next(c for c in case.criteria if c.passed is False and c.worst is not None)
    line = next(r for r in case.reasons if r.startswith("worst element"))
    assert line.startswith(f"worst element for {first_failed.metric} at ({first_failed.worst.index[0]},)")


def test_results_json_records_the_worst_element_per_criterion(run):
    data = json.loads((run[1] / "results.json").read_text(encoding="utf-8"))
    criteria = data["cases"][0]["criteria"]
    by_metric = {c["metric"]: c for c in criteria}
    assert set(by_metric["max_ulp"]["worst"]) >= {"index", "impl", "baseline", "oracle", "error", "measure"}
    assert by_metric["diff1"]["worst"]["measure"] in ("abs", "abs_oracle")


def test_junit_message_and_github_summary_lead_with_the_failed_criterion(run):
    res, out = run
    case = the_case(res)
    assert headline(case) == case.reasons[0]
    (failure,) = ET.parse(out / "junit.xml").getroot().iter("failure")
    assert failure.get("message", "").startswith(case.reasons[0][:40])
    summary = render_summary(res)
    row = next(line for line in summary.splitlines() if "gelu\\_tail" in line and "❌" in line)
    assert "oracle underflows" not in row and any(m in row for m in METRICS)
    console = [text for text, _ in render(res)]
    assert console[1].strip() == case.reasons[0]


def test_an_older_results_file_with_the_note_first_still_leads_with_the_criterion(run):
    case = the_case(run[0])
    legacy = (
        "oracle underflows float16 at 12 of 4000 elements: the test dtype cannot hold the true result there, so "
        "mismatches at those elements come from the inputs' range, not from the impl"
    )
    old = case.model_copy(update={"reasons": [legacy, *[r for r in case.reasons if not r.startswith("note: ")]]})
    assert headline(old) == case.reasons[0]
    lines = [text.strip() for text, _ in render(Results.model_validate({**run[0].model_dump(), "cases": [old]}))]
    assert lines[1] == case.reasons[0]
