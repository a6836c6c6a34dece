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
    assert lines[0] == f"compared with main: REGRESSION — 1 regressed case (of {len(cases)} cases)"
    assert f"  {cases[i].id}: pass -> fail" in lines
    head = next(k for k, line in enumerate(lines) if line.startswith("case "))
    assert lines[head + 1].split()[:4] == [cases[i].id, "pass", "fail", "regressed"]
    assert lines[head + 2] == ""  # the one case that changed, and no other
    assert len({line.index("base") for line in lines[head : head + 1]}) == 1


def test_one_case_unchanged_reads_in_the_singular():
    one = results_of([mixed_results().cases[0]])
    lines = terminal_table(compare_results(one, one))
    assert lines == ["compared with base: no change (1 case; errors within 2x on diff1, diff2, max_hyb, mean_hyb)"]


def test_hostile_ids_cannot_forge_a_log_line():
    base = mixed_results()
    cases = [
        c.model_copy(update={"id": "x\n::error::forged", "verdict": "fail"}) if k == 0 else c
        for k, c in enumerate(base.cases)
    ]
    text = "\n".join(terminal_table(compare_results(base, results_of(cases))))
    assert "\n::error" not in text and "::error::" not in text
