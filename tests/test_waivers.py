"""Waivers that age well: errors covered when asked, an expiry date, a tracking link, unmatched ones listed."""

import shutil
from datetime import date
from pathlib import Path

import torch

from acceptance.decide.waivers import unmatched, waiver_records
from acceptance.session.run import run_cases
from acceptance.spec import expand, load_spec

KERNELS = Path(__file__).parent / "ecosystem_specs" / "kernels.py"


def spec(tmp_path: Path, impl: str, waivers: str) -> Path:
    shutil.copy(KERNELS, tmp_path / "kernels.py")
    path = tmp_path / "op.yaml"
    path.write_text(
        f"name: op\ncategory: composite\nimpl: kernels.py:{impl}\nbaseline: kernels.py:square\n"
        "dtypes: [float32]\ninputs:\n  - {name: x, shape: [N], dist: {uniform: [1, 2]}}\n"
        f"cases: [{{N: 4}}, {{N: 5}}]\ntrials: 2\nwaivers:\n{waivers}"
    )
    return path


def run(path: Path, today: date):
    s, problems = load_spec(path)
    assert problems == [], problems
    cases = run_cases(expand([s], today=today), torch.device("cpu"), isolate=False)
    return cases, waiver_records([s], cases, today=today)


def test_a_waiver_covers_errors_only_when_it_says_so(tmp_path):
    plain = spec(tmp_path, "broken", "  - {match: 'op*', reason: driver bug}\n")
    cases, records = run(plain, date(2026, 1, 1))
    assert [c.verdict for c in cases] == ["error", "error"]
    assert records[0].status == "unmatched"
    covering = spec(
        tmp_path,
        "broken",
        "  - {match: 'op*', reason: driver bug, covers: [fail, error], link: 'https://tracker.example/42'}\n",
    )
    cases, records = run(covering, date(2026, 1, 1))
    assert [c.verdict for c in cases] == ["skip", "skip"]
    assert cases[0].reasons[0] == "waived: driver bug" and "kernel not built for this GPU" in cases[0].reasons[1]
    (record,) = records
    assert record.status == "applied" and record.link == "https://tracker.example/42"
    assert record.cases == ["op[float32-N=4]", "op[float32-N=5]"]


def test_an_expired_waiver_waives_nothing_and_says_so(tmp_path):
    path = spec(tmp_path, "broken", "  - {match: 'op*', reason: driver bug, covers: [error], expires: 2027-01-31}\n")
    on_the_day, _ = run(path, date(2027, 1, 31))  # it applies through its date
    assert [c.verdict for c in on_the_day] == ["skip", "skip"]
    cases, (record,) = run(path, date(2027, 2, 1))
    assert [c.verdict for c in cases] == ["error", "error"]
    assert cases[0].reasons[-1] == "waiver expired on 2027-01-31: driver bug"
    assert record.status == "expired" and record.cases == ["op[float32-N=4]", "op[float32-N=5]"]
    assert unmatched([record]) == [record]


def test_a_waiver_no_case_needed_is_listed_as_unmatched(tmp_path):
    path = spec(tmp_path, "square", "  - {match: 'op[*N=4]', reason: flaky on old drivers}\n")
    cases, (record,) = run(path, date(2026, 1, 1))
    assert [c.verdict for c in cases] == ["pass", "pass"]
    assert record.status == "unmatched" and record.cases == []


def test_waiver_fields_are_checked(tmp_path):
    for bad, message in (
        ("expires: 31.01.2027", "expected a date YYYY-MM-DD"),
        ("covers: [skip]", "Input should be 'fail' or 'error'"),
    ):
        _, problems = load_spec(spec(tmp_path, "square", f"  - {{match: 'op*', reason: r, {bad}}}\n"))
        assert any(message in str(p) and "waivers[0]" in str(p) for p in problems), problems
