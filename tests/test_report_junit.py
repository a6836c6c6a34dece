"""JUnit XML: junit-10.xsd validity, one suite per operator with its spec file, unique names, messages, escaping."""

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from fixtures.report_results import hostile_results, mixed_results, results_of

from acceptance.report.junit import render_junit
from acceptance.wording import visible_controls

_ROOT = Path(__file__).resolve().parents[1]
XSD = next(
    (
        p
        for p in (
            _ROOT.parent / "shared" / "schemas" / "junit-10.xsd",  # a checkout beside shared/
            _ROOT.parent.parent / "shared" / "schemas" / "junit-10.xsd",
        )  # a worktree one level down
        if p.exists()
    ),
    _ROOT.parent / "shared" / "schemas" / "junit-10.xsd",
)


@pytest.fixture(scope="module")
def schema():
    if not XSD.exists():
        pytest.skip(f"{XSD} not present")
    xmlschema = pytest.importorskip("xmlschema")
    return xmlschema.XMLSchema(str(XSD))


@pytest.fixture(scope="module")
def mixed():
    results = mixed_results()
    return results, ET.fromstring(render_junit(results).encode("utf-8"))


def test_valid_against_junit_10_xsd(schema):
    for results in (mixed_results(), hostile_results()):
        schema.validate(render_junit(results))


def test_one_suite_per_operator_with_its_spec_file(mixed):
    results, root = mixed
    suites = {s.get("name"): s for s in root.findall("testsuite")}
    expected = {c.operator: c.spec_file for c in results.cases}
    assert {name: s.get("file") for name, s in suites.items()} == expected
    add = suites["add"]  # add has a float32 pass and a bfloat16 skip
    assert (add.get("tests"), add.get("failures"), add.get("errors"), add.get("skipped")) == ("2", "0", "0", "1")
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("8", "2", "1")


def test_every_case_once_with_unique_classname_and_name_and_time(mixed):
    results, root = mixed
    cases = root.findall("testsuite/testcase")
    keys = [(tc.get("classname"), tc.get("name")) for tc in cases]
    assert len(keys) == len(set(keys)) == len(results.cases)
    by_name = {tc.get("name"): tc for tc in cases}
    for case in results.cases:
        tc = by_name[case.id]
        assert tc.get("classname") == f"acceptance.{case.category}.{case.operator}"
        assert tc.get("time") == f"{case.timing.total:.6f}"
    # suite time is the sum of its cases' times
    softmax = root.find("testsuite[@name='softmax']")
    assert float(softmax.get("time")) == pytest.approx(3.2)
    assert float(root.get("time")) == pytest.approx(sum(c.timing.total for c in results.cases))


def test_failure_error_skip_elements_and_messages(mixed):
    _, root = mixed
    tc = {t.get("name"): t for t in root.iter("testcase")}
    failure = tc["conv2d[float16-N=1-C=3-H=31-W=31]"].find("failure")
    assert failure.get("message") == "diff1 4.1e-3 > 3e-3 (float16 convolution default)"
    body = failure.text
    assert "FAIL diff1 4.1e-3 > 3e-3 (float16 convolution default)" in body
    assert "pass diff2 2.5e-3 <= 3e-3" in body
    assert "diff4 not evaluated: fewer than 100 unequal points (40)" in body
    assert "worst element at (0, 2, 30, 17) (trial 3): impl " in body
    assert "where they sit: last row of every image (index 30 of H): a dropped tail" in body
    dual = tc["softmax[bfloat16-N=64-D=1000]"].find("failure").text
    assert "dual-delta max_abs (output 0, 60 trials): FAIL - impl is inferior" in dual
    error = tc["layer_norm[float16-N=8-D=4096]"].find("error")
    assert error.get("message") == "RuntimeError: CUDA error: an illegal memory access was encountered"
    assert "in layer_norm_fwd_kernel" in error.text
    waived = tc["gelu[float16-N=4096]"].find("skipped")
    assert waived.get("message") == "waived: tanh approximation in the fused kernel; accepted for release 2.4"
    assert (
        tc["add[bfloat16-N=17]"].find("skipped").get("message")
        == "bfloat16 is not supported by the baseline on this CPU"
    )
    passed = tc["matmul[float32-M=128-N=128-K=4097]"]
    assert list(passed) == []


def test_failure_message_never_empty():
    base = mixed_results().cases[1]
    bare = base.model_copy(update={"reasons": [], "criteria": []})
    root = ET.fromstring(render_junit(results_of([bare])).encode())
    assert root.find(".//failure").get("message") == "failed"


def test_hostile_strings_round_trip_as_text(schema):
    results = hostile_results()
    xml = render_junit(results)
    schema.validate(xml)
    root = ET.fromstring(xml.encode("utf-8"))
    case = results.cases[0]
    suite = root.find("testsuite")
    assert suite.get("name") == visible_controls(case.operator)
    assert suite.get("file") == "operator_specs/we,ird:na%me\n.yaml"
    names = {tc.get("name") for tc in root.iter("testcase")}
    assert visible_controls(case.id) in names
    assert "\\x1b[31m" in root.find(".//failure").get("message")
    assert not any(ch in xml for ch in "\x00\x07\x1b\ud800")
    assert xml.encode("utf-8")  # lone surrogates would fail here


def test_duplicate_ids_get_distinct_names():
    case = mixed_results().cases[0]
    root = ET.fromstring(render_junit(results_of([case, case])).encode())
    assert [tc.get("name") for tc in root.iter("testcase")] == [case.id, f"{case.id} #2"]


def test_nan_time_written_as_zero():
    case = mixed_results().cases[0]
    broken = case.model_copy(update={"timing": case.timing.model_copy(update={"total": float("nan")})})
    root = ET.fromstring(render_junit(results_of([broken])).encode())
    assert root.find(".//testcase").get("time") == "0.000000"


def test_20000_cases_stay_bounded():
    from fixtures.report_results import many_failures

    n = 20_000
    text = render_junit(many_failures(n))
    root = ET.fromstring(text.encode("utf-8"))
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == (str(n), str(n), "0")
    failures = root.findall(".//failure")
    assert len(failures) == n
    assert len({tc.get("name") for tc in root.iter("testcase")}) == n
    assert all(len(f.get("message", "")) <= 1000 and "\n" not in f.get("message", "") for f in failures)
    # one suite per operator (matmul_0 .. matmul_49), each with its 400 cases
    assert sorted(int(s.get("tests")) for s in root.iter("testsuite")) == [n // 50] * 50
    assert len(text.encode("utf-8")) < 30 * 2**20


def _long_failure(i: int, length: int):
    from fixtures.report_results import many_failures

    case = many_failures(1).cases[0]
    return case.model_copy(update={"id": f"long[{i}]", "reasons": [f"r{i} " + "x" * length]})


def test_a_long_message_and_body_are_cut_with_a_note():
    results = results_of([_long_failure(0, 100_000)])
    failure = ET.fromstring(render_junit(results).encode("utf-8")).find(".//failure")
    message, body = failure.get("message"), failure.text
    assert message.startswith("r0 xxx") and len(message) <= 1000 + 60
    assert "more characters in results.json" in message
    cut = body.rsplit("\n", 1)
    assert len(cut[0]) == 16_000
    kept, more = cut[0].count("x"), int(cut[1].split("[")[1].split(" ")[0])
    assert kept + more >= 100_000  # nothing of the reason lost without saying so
    assert cut[1].endswith("more characters in report.html and results.json]")


def test_bodies_past_the_file_budget_are_shorter(monkeypatch):
    from acceptance.report import junit

    monkeypatch.setattr(junit, "BODIES_LIMIT", 20_000)
    results = results_of([_long_failure(i, 30_000) for i in range(4)])
    bodies = [f.text for f in ET.fromstring(render_junit(results).encode("utf-8")).iter("failure")]
    lengths = [len(b.rsplit("\n", 1)[0]) for b in bodies]
    assert lengths == [16_000, 16_000, 2_000, 2_000]  # 32,000 characters used after two: the rest are short
