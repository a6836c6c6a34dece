"""The release sign-off page: one pass/fail line per operator and dtype.

Each line gives the case counts, the thresholds in force with where each came
from (:attr:`Criterion.source`: a category default or a spec override), and
the cases that failed. Every waiver in force (:attr:`CaseResult.waiver`) is
listed with what it did (waived a failure, not needed, did not cover it), and
the page carries the same provenance block as the HTML report. Self-contained, no script, printable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import groupby

from acceptance.records import CaseResult, Results
from acceptance.report.html import asset, environment, page_context
from acceptance.wording import fmt_value, metric_name, one_line


@dataclass(frozen=True)
class Threshold:
    """One threshold in force for an (operator, dtype): ``metric comparison lo[..hi]`` and its source.

    ``lo``/``hi`` differ when the threshold varies across cases (e.g. scaled
    with the accumulation length).
    """

    metric: str
    comparison: str
    lo: float | list[float]  # a number, or a pair for diff3
    hi: float | list[float]
    source: str

    def text(self) -> str:
        bound = fmt_value(self.lo) if self.lo == self.hi else f"{fmt_value(self.lo)} … {fmt_value(self.hi)}"
        return f"{self.metric} {self.comparison} {bound}"


@dataclass(frozen=True)
class SignoffLine:
    """One (operator, dtype): fail on any fail or error, else pass when any case passed, else waived (when a skip
    was a waiver) or skip."""

    operator: str
    category: str
    dtype: str
    spec_file: str
    passed: int
    failed: int
    errors: int
    skipped: int
    waived: int
    thresholds: list[Threshold] = field(default_factory=list)
    failing: list[str] = field(default_factory=list)
    description: str = ""

    @property
    def cases(self) -> int:
        return self.passed + self.failed + self.errors + self.skipped

    @property
    def verdict(self) -> str:
        if self.failed or self.errors:
            return "fail"
        if self.passed:
            return "pass"
        return "waived" if self.waived else "skip"


def thresholds_in_force(cases: list[CaseResult]) -> list[Threshold]:
    """Distinct (metric, comparison, source) over the cases' evaluated criteria, with the range of their thresholds,
    in first-seen order (a rule not in force, e.g. determinism where the category allows variation, is left out)."""
    seen: dict[tuple[str, str, str], list[float | list[float]]] = {}
    for case in cases:
        for c in case.criteria:
            if c.threshold is not None and c.passed is not None:
                seen.setdefault((metric_name(c), c.comparison, c.source), []).append(c.threshold)
    return [Threshold(m, comp, min(ts), max(ts), src) for (m, comp, src), ts in seen.items()]


def _count(cases: list[CaseResult], verdict: str) -> int:
    """How many of ``cases`` have ``verdict``."""
    return sum(c.verdict == verdict for c in cases)


def signoff_lines(results: Results) -> list[SignoffLine]:
    """One line per (operator, dtype), ordered by operator then dtype."""
    key = lambda c: (c.operator, c.dtype)  # noqa: E731
    lines = []
    for (operator, dtype), group in groupby(sorted(results.cases, key=key), key=key):
        cases = list(group)
        lines.append(
            SignoffLine(
                operator=operator,
                category=cases[0].category,
                dtype=dtype,
                spec_file=cases[0].spec_file,
                passed=_count(cases, "pass"),
                failed=_count(cases, "fail"),
                errors=_count(cases, "error"),
                skipped=_count(cases, "skip"),
                waived=sum(c.verdict == "skip" and c.waiver is not None for c in cases),
                thresholds=thresholds_in_force(cases),
                failing=[c.id for c in cases if c.verdict in ("fail", "error")],
                description=cases[0].description,
            )
        )
    return lines


def waiver_effect(case: CaseResult) -> str:
    """What a case's waiver did: waived a failure (verdict skip, with the first reason), was not needed
    (the case passes), or did not cover the failure (fail/error)."""
    # a waived failure's first reason is the waiver itself; the failure is the next one
    failures = [r for r in case.reasons if not r.startswith("waived: ")]
    reason = one_line(failures[0]) if failures else None
    if case.verdict == "skip":
        return f"waived a failure: {reason}" if reason else "waived a failure"
    if case.verdict == "pass":
        return "not needed: the case passes"
    return f"does not cover this {'failure' if case.verdict == 'fail' else 'error'}" + (f": {reason}" if reason else "")


def waivers(results: Results) -> list[tuple[CaseResult, str]]:
    """Every case with a waiver in force, and what the waiver did."""
    return [(c, waiver_effect(c)) for c in results.cases if c.waiver is not None]


def render_signoff(results: Results, *, results_sha256: str | None = None) -> str:
    """The release sign-off HTML page."""
    lines = signoff_lines(results)
    return (
        environment()
        .get_template("signoff.html.j2")
        .render(
            **page_context(results, results_sha256, asset("report.css"), None),
            lines=lines,
            operators_failing=sum(line.verdict == "fail" for line in lines),
            waivers=waivers(results),
            waiver_records=results.waivers,
        )
    )
