"""JUnit XML for CI: one testsuite per operator, one testcase per case.

Built with the ``junit-xml`` package, then made to conform to junit-10.xsd
(the schema Jenkins, GitLab and the GitHub JUnit actions read):

- each testsuite carries ``file`` = the operator's spec path;
- each testcase has ``classname`` ``acceptance.<category>.<operator>`` and
  ``name`` = the case id (unique and stable), and ``time`` in seconds
  (``timing.total``) always set, written ``%.6f``;
- fail becomes ``<failure>``, error ``<error>``, skip ``<skipped>``, each with
  a non-empty ``message`` (the case's first reason, the waiver for waived
  cases) and the full account of the case (:func:`text.case_details`) as body;
- with a comparison to a base run (``--compare-to``), one more testsuite
  ``comparison``: a failing testcase per regressed case (classname
  ``acceptance.comparison.<operator>``, name the case id, type ``regression``,
  the regression sentences as message and body), or one passing testcase
  ``no regression against <base>``; its properties name the base run and the
  allowed factors, its ``system-out`` is the comparison in Markdown;
- the ``disabled`` attribute junit-xml adds (unknown to junit-10.xsd) is
  dropped, and characters XML 1.0 forbids are written as visible ``\\xNN``
  escapes.
"""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET
from itertools import groupby

from junit_xml import TestCase, TestSuite

from acceptance.records import CaseResult, Comparison, Results
from acceptance.report.text import case_details, headline
from acceptance.wording import safe, visible_controls

#: A failure message is one line of at most this many characters; a body at most :data:`BODY_LIMIT` (16,000
#: characters, under 64 KB in UTF-8: the most a GitHub check-run annotation, where JUnit reporter actions show
#: it, holds); once the bodies of a file reach :data:`BODIES_LIMIT` characters in all, each further body at most
#: :data:`LATE_BODY_LIMIT`, so 20,000 failing cases stay a file CI tools parse. results.json keeps everything.
MESSAGE_LIMIT = 1000
BODY_LIMIT = 16_000
BODIES_LIMIT = 20_000_000
LATE_BODY_LIMIT = 2_000


def _seconds(t: float) -> float:
    """Non-negative finite seconds (a broken timer must not break the XML)."""
    return t if math.isfinite(t) and t > 0 else 0.0


def classname(case: CaseResult) -> str:
    """``acceptance.<category>.<operator>``."""
    return visible_controls(f"acceptance.{case.category}.{case.operator}")


def bounded(body: str, limit: int) -> str:
    """``body`` cut to ``limit`` characters, with a note of how many more there are and where."""
    if len(body) <= limit:
        return body
    return body[:limit] + f"\n… [{len(body) - limit} more characters in report.html and results.json]"


def _testcase(case: CaseResult, name: str, body_limit: int) -> tuple[TestCase, int]:
    """The testcase of ``case`` and the length of its body."""
    tc = TestCase(name=name, classname=classname(case), elapsed_sec=_seconds(case.timing.total))
    message = safe(headline(case), MESSAGE_LIMIT)
    body = bounded(case_details(case), body_limit) if case.verdict != "pass" else ""
    if case.verdict == "fail":
        tc.add_failure_info(message=message, output=body, failure_type="accuracy")
    elif case.verdict == "error":
        tc.add_error_info(message=message, output=body, error_type="error")
    elif case.verdict == "skip":
        tc.add_skipped_info(message=message, output=body)
    return tc, len(body)


def _conform(suite: ET.Element, times: list[float]) -> None:
    """Drop the ``disabled`` attribute junit-10.xsd rejects and write every ``time`` as ``%.6f``."""
    suite.attrib.pop("disabled", None)
    for element, seconds in zip(suite.iter("testcase"), times, strict=False):
        element.set("time", f"{seconds:.6f}")
    suite.set("time", f"{sum(times):.6f}")


def _comparison_suite(cmp: Comparison, hostname: str, timestamp: str) -> ET.Element:
    """The ``comparison`` testsuite (see the module docstring)."""
    from acceptance.decide.regression import regressions_by_case
    from acceptance.report.comparison import markdown
    from acceptance.wording import fmt

    testcases = []
    for c, lines in regressions_by_case(cmp):
        tc = TestCase(
            name=visible_controls(c.id),
            classname=visible_controls(f"acceptance.comparison.{c.operator}"),
            elapsed_sec=0.0,
        )
        tc.add_failure_info(
            message=safe("; ".join(lines), MESSAGE_LIMIT),
            output="\n".join(safe(line) for line in lines),
            failure_type="regression",
        )
        testcases.append(tc)
    if not testcases:
        testcases.append(
            TestCase(
                name=visible_controls(f"no regression against {cmp.base}"),
                classname="acceptance.comparison",
                elapsed_sec=0.0,
            )
        )
    properties = {
        "base": cmp.base,
        "max_ratio": fmt(cmp.max_ratio),
        "metrics": ", ".join(cmp.metrics),
        "regressions": str(len(cmp.regressions)),
        "waivers_passing": str(len(cmp.waivers_passing)),
    }
    if cmp.max_slowdown is not None:
        properties["max_slowdown"] = fmt(cmp.max_slowdown)
    text = markdown(cmp)
    suite = TestSuite(
        name="comparison",
        test_cases=testcases,
        hostname=hostname,
        timestamp=timestamp,
        properties={k: visible_controls(v) for k, v in properties.items()},
        stdout=visible_controls(text[:BODY_LIMIT]),
    )
    element = suite.build_xml_doc()
    _conform(element, [0.0] * len(testcases))
    return element


def render_junit(results: Results) -> str:
    """The JUnit XML document (UTF-8 text with an XML declaration)."""
    env = results.environment
    properties = {
        "device": env.device,
        "device_name": env.device_name,
        "torch": env.torch,
        "git_commit": env.git_commit or "",
        "acceptance": env.acceptance,
    }
    root = ET.Element("testsuites", {"name": "acceptance"})
    seen: set[tuple[str, str]] = set()
    totals = {"tests": 0, "failures": 0, "errors": 0}
    body_chars = 0
    total_time = 0.0
    by_suite = sorted(results.cases, key=lambda c: (c.operator, c.spec_file))
    for (operator, spec_file), group in groupby(by_suite, key=lambda c: (c.operator, c.spec_file)):
        cases = list(group)
        testcases = []
        for case in cases:
            name, n = visible_controls(case.id), 1
            while (classname(case), name) in seen:  # ids are unique in a well-formed run; stay unique anyway
                n += 1
                name = visible_controls(f"{case.id} #{n}")
            seen.add((classname(case), name))
            tc, chars = _testcase(case, name, BODY_LIMIT if body_chars < BODIES_LIMIT else LATE_BODY_LIMIT)
            testcases.append(tc)
            body_chars += chars
        suite = TestSuite(
            name=visible_controls(operator),
            test_cases=testcases,
            hostname=visible_controls(env.host),
            timestamp=visible_controls(env.start_time),
            file=visible_controls(spec_file),
            properties={k: visible_controls(v) for k, v in {"category": cases[0].category, **properties}.items()},
        )
        element = suite.build_xml_doc()
        times = [_seconds(c.timing.total) for c in cases]
        _conform(element, times)
        root.append(element)
        totals["tests"] += len(cases)
        totals["failures"] += sum(c.verdict == "fail" for c in cases)
        totals["errors"] += sum(c.verdict == "error" for c in cases)
        total_time += sum(times)
    if results.comparison is not None:
        element = _comparison_suite(results.comparison, visible_controls(env.host), visible_controls(env.start_time))
        root.append(element)
        totals["tests"] += int(element.get("tests", "0"))
        totals["failures"] += int(element.get("failures", "0"))
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{total_time:.6f}")
    ET.indent(root, space=" ")
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
