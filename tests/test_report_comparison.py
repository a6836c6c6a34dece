"""The comparison of two runs as terminal lines (acceptance.report.comparison.terminal_table)."""

from fixtures.report_results import mixed_results, results_of

from acceptance.decide.regression import compare_results
from acceptance.report.comparison import terminal_table


def test_a_regression_is_named_and_tabled_first():
    base = mixed_results()
    cases = list(base.cases)
    i = next(k for k, c in enumerate(cases) if c.verdict == "pass")
    cases[i] = cases[i].model_copy(update={"verdict": "fail"})
    cmp = compare_results(base, results_of(cases), base_label="main")
    lines = terminal_table(cmp)
    assert lines[0] == "compared with main: REGRESSION"
    assert lines[1].startswith(f"{len(cases)} cases, 1 verdict change, 1 regression; an error may grow 2x")
    assert f"  {cases[i].id}: pass -> fail" in lines
    head = next(k for k, line in enumerate(lines) if line.startswith("case "))
    assert lines[head + 1].split()[:4] == [cases[i].id, "pass", "fail", "regressed"]
    assert len({line.index("base") for line in lines[head : head + 1]}) == 1


def test_one_case_unchanged_reads_in_the_singular():
    one = results_of([mixed_results().cases[0]])
    lines = terminal_table(compare_results(one, one))
    assert lines[0].endswith("no regression")
    assert lines[1].startswith("1 case, 0 verdict changes, 0 regressions;")


def test_hostile_ids_cannot_forge_a_log_line():
    base = mixed_results()
    cases = [
        c.model_copy(update={"id": "x\n::error::forged", "verdict": "fail"}) if k == 0 else c
        for k, c in enumerate(base.cases)
    ]
    text = "\n".join(terminal_table(compare_results(base, results_of(cases))))
    assert "\n::error" not in text and "::error::" not in text
