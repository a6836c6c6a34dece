"""The habits of test runners on ``acceptance run``: ``-k`` with pytest's expression semantics over case ids,
``-x`` stopping at the first failure, one status line per case in a log, ``-v`` listing passes; and ``acceptance
compare`` printing what changed, counted by case."""

import json
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner
from fixtures.report_results import environment

from acceptance.cli import main
from acceptance.decide.verdict import summarize
from acceptance.records import CaseResult, Criterion, Results
from acceptance.session.keyword import KeywordError, parse
from acceptance.session.load import select_keyword

ROOT = Path(__file__).resolve().parents[1]
KERNELS = ROOT / "tests" / "ecosystem_specs" / "kernels.py"

IDS = [
    "gelu[float16-N=1-LO=-1-HI=1]",
    "gelu[float16-N=1000-LO=-10-HI=10]",
    "gelu[bfloat16-N=4097-LO=-10-HI=10-approximate=tanh]",
    "gelu[float32-N=65537-LO=-1-HI=1]",
    "add[float16-M=33-N=1000-LO=-10-HI=10-alpha=2]",
    "softmax[float32-M=257-N=5-dim=0]",
    "cat[float16-shapes=1,2,3-dim=.5]",
    "q4_0_q8_1_matmul[float32-#2]",
    "GELU[FLOAT16-n=7]",
]
WORDS = ["float16", "[float16", "bfloat16", "N=1", "N=1-", "n=1000", "N1", "LO=-1", "HI10", "gelu", "add",
         "tanh", "dim=0", "1,2", ".5", "#2", "q4_0", "]", "=", "zzz"]  # fmt: skip


def _tokens(rng: random.Random, depth: int) -> list[str]:
    """A random well-formed expression as tokens: words joined by not, and, or and parentheses."""
    pick = rng.random() if depth < 4 else 0.0
    if pick < 0.35:
        return [rng.choice(WORDS)]
    if pick < 0.5:
        return ["not", *_tokens(rng, depth + 1)]
    if pick < 0.65:
        return ["(", *_tokens(rng, depth + 1), ")"]
    return [*_tokens(rng, depth + 1), rng.choice(["and", "or"]), *_tokens(rng, depth + 1)]


def _brute_force(tokens: list[str], case_id: str) -> bool:
    """The expression evaluated by Python: each word replaced by whether it is a substring of the id (or of the id
    without '='), case-insensitively; Python's not > and > or is the grammar's precedence."""
    names = (case_id.lower(), case_id.replace("=", "").lower())

    def value(token: str) -> str:
        if token in ("and", "or", "not", "(", ")"):
            return token
        return str(any(token.lower() in name for name in names))

    return bool(eval(" ".join(value(t) for t in tokens)))  # noqa: S307 - only True/False/and/or/not/()


def _text(tokens: list[str], rng: random.Random) -> str:
    """The tokens as a user might type them: parentheses glued to their neighbours or not, extra blanks."""
    out = ""
    for t in tokens:
        glue = t == ")" or out.endswith("(") or (t == "(" and rng.random() < 0.3)
        out += ("" if glue or not out else rng.choice([" ", "  ", "\t"])) + t
    return out


def test_the_k_expression_agrees_with_a_brute_force_evaluation():
    rng = random.Random(20261127)
    checked = 0
    for _ in range(400):
        tokens = _tokens(rng, 0)
        keyword = parse(_text(tokens, rng))
        for case_id in IDS:
            assert keyword.matches(case_id) == _brute_force(tokens, case_id), (tokens, case_id)
            checked += 1
    assert checked == 400 * len(IDS)


@pytest.mark.parametrize(
    ("expression", "selected"),
    [
        # 'float16' is a substring of 'bfloat16'; 'N=1' of 'N=1000' (pytest's substring semantics)
        ("float16 and not N=1", [2, 6, 8]),
        ("[float16 and not N=1-", [1, 4, 6, 8]),
        ("not gelu or tanh", [2, 4, 5, 6, 7]),
        ("not (gelu or tanh)", [4, 5, 6, 7]),
        ("gelu and not float16 or add", [3, 4]),  # (gelu and not float16) or add
        ("N1000", [1, 4]),  # the id without '=' too, as pytest's -k spells it
        ("'shapes=1,2,3-dim'", [6]),
        ("GELU[float16", [0, 1, 8]),  # case-insensitive
    ],
)
def test_k_selects_by_hand(expression, selected):
    keyword = parse(expression)
    assert [k for k, case_id in enumerate(IDS) if keyword.matches(case_id)] == selected
    cases = [SimpleNamespace(id=i) for i in IDS]
    assert [c.id for c in select_keyword(cases, expression)] == [IDS[k] for k in selected]  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("expression", "column", "message"),
    [
        ("float16 and", 12, "expected a word, 'not' or '(', got end of input"),
        ("float16 and and", 13, "expected a word, 'not' or '(', got 'and'"),
        ("(float16 or N=1", 16, "expected ')', got end of input"),
        ("float16)", 8, "expected 'and', 'or' or the end, got ')'"),
        ("float16 N=1", 9, "expected 'and', 'or' or the end, got 'N=1'"),
        ("not", 4, "expected a word, 'not' or '(', got end of input"),
        ("'open", 1, "closing quote ' is missing"),
        ("   ", 1, "expected a word, 'not' or '(', got end of input"),
        ("()", 2, "expected a word, 'not' or '(', got ')'"),
    ],
)
def test_a_malformed_expression_names_its_column(expression, column, message):
    with pytest.raises(KeywordError) as info:
        parse(expression)
    assert (info.value.column, info.value.message) == (column, message)
    head, text, caret = info.value.lines()
    assert head == f"-k {expression!r}: {message} at column {column}"
    assert caret.index("^") - 2 == column - 1 and text == f"  {expression}"


def test_a_malformed_expression_is_a_usage_error_before_anything_loads(tmp_path):
    result = CliRunner().invoke(main, ["run", str(tmp_path / "absent"), "-k", "float16 and (not"])
    assert result.exit_code == 2
    assert "-k 'float16 and (not': expected a word, 'not' or '(', got end of input at column 17" in result.output
    assert "no such file" not in result.output  # the expression is checked first


# ----------------------------------------------------------------------------- runs in a subprocess (a CI log)

SPEC = """name: {name}
category: composite
impl: kernels.py:scaled
baseline: kernels.py:scaled
impl_params: {{scale: {scale}}}
baseline_params: {{scale: 1.0}}
dtypes: [float32]
inputs:
  - {{name: x, shape: [N], dist: {{uniform: [1, 2]}}}}
cases: [{{N: 4}}, {{N: 9}}, {{N: 1}}, {{N: 1000}}]
trials: 3
"""


@pytest.fixture(scope="module")
def specs(tmp_path_factory) -> Path:
    """bad.yaml (impl 1.5x the baseline: diff1 = |1.5x - x| / |x| = 0.5 exactly) before good.yaml (the same
    kernel on both sides), 4 cases each."""
    root = tmp_path_factory.mktemp("habits") / "specs"
    root.mkdir()
    (root / "kernels.py").write_text(KERNELS.read_text())
    (root / "bad.yaml").write_text(SPEC.format(name="bad", scale=1.5))
    (root / "good.yaml").write_text(SPEC.format(name="good", scale=1.0))
    return root


def _run(*args: str, cwd: Path, ci: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"} | ({"CI": ci} if ci is not None else {})
    env["PYTHONPATH"] = f"{ROOT}:{env.get('PYTHONPATH', '')}".rstrip(":")
    return subprocess.run(
        [sys.executable, "-m", "acceptance", "run", *args], cwd=cwd, env=env, capture_output=True, text=True,
        timeout=600,
    )  # fmt: skip


def _status(stdout: str) -> list[str]:
    return [line for line in stdout.splitlines() if line.startswith("[")]


IDS_OF = [f"{op}[float32-N={n}]" for op in ("bad", "good") for n in (4, 9, 1, 1000)]


def test_x_stops_at_the_first_failure_and_the_run_is_never_a_pass(specs):
    out = specs.parent / "x"
    done = _run(str(specs), "-x", "-j", "1", "--out", str(out), cwd=specs.parent)
    assert done.returncode == 1, done.stderr
    # the status line, printed as the case finished: the verdict and the first reason
    assert _status(done.stdout) == [
        "[1/8] FAIL bad[float32-N=4] — diff1 0.5 > 3e-3 (float32 composite default); against the oracle rounded "
        "to float32: impl 0.5, baseline 0 (the impl is the further one)"
    ]
    assert "stopped at the first failure (-x) after 1 of 8 cases: 7 cases not run; the run is not a pass" in (
        done.stderr
    )
    res = json.loads((out / "results.json").read_text())
    assert [c["id"] for c in res["cases"]] == IDS_OF[:1]
    assert res["not_run"] == IDS_OF[1:]
    assert res["interrupted"] is True
    assert (res["summary"]["verdict"], res["summary"]["exit_code"], res["summary"]["failed"]) == ("interrupted", 1, 1)


def test_status_lines_in_a_ci_log_and_v_lists_the_passing_cases(specs):
    out = specs.parent / "v"
    done = _run(str(specs), "-k", "good and not N=1000", "-v", "--out", str(out), cwd=specs.parent, ci="true")
    assert done.returncode == 0, done.stderr
    lines = _status(done.stdout)
    assert sorted(line.split("] ", 1)[1] for line in lines) == sorted(f"PASS {i}" for i in IDS_OF[4:7])
    assert [line.split("]")[0] for line in lines] == ["[1/3", "[2/3", "[3/3"]  # k counts the finished cases
    summary = done.stdout.splitlines()
    assert [line.split() for line in summary if line.startswith("PASS ")] == [["PASS", i] for i in IDS_OF[4:7]]
    assert summary.index(lines[-1]) < summary.index(f"PASS  {IDS_OF[4]}")  # the status lines come first
    quiet = _run(str(specs), "-k", "good[float32-N=4]", "--out", str(out), cwd=specs.parent)
    assert quiet.returncode == 0 and not any(line.startswith("PASS ") for line in quiet.stdout.splitlines())
    assert _status(quiet.stdout) == ["[1/1] PASS good[float32-N=4]"]


def test_a_k_expression_that_selects_nothing_is_a_usage_error(specs):
    done = _run(str(specs), "-k", "good and N=7", "--out", str(specs.parent / "none"), cwd=specs.parent)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "no case matches -k 'good and N=7'; nothing run"


def test_progress_is_a_bar_only_for_a_person_at_a_terminal(monkeypatch):
    from acceptance.cli import progress

    monkeypatch.setattr(sys.stdout, "isatty", lambda: True, raising=False)
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True, raising=False)
    for ci, expected in [(None, True), ("", True), ("false", True), ("0", True), ("true", False), ("1", False)]:
        if ci is None:
            monkeypatch.delenv("CI", raising=False)
        else:
            monkeypatch.setenv("CI", ci)
        assert progress.interactive() is expected, ci
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setattr(sys.stdout, "isatty", lambda: False, raising=False)
    assert progress.interactive() is False


def test_a_status_line_makes_the_id_and_reason_safe():
    from acceptance.cli.progress import status_line

    case = _case("x\n::error::forged[float16]", "error", reasons=["boom\x1b[31m\nnext"])
    line = status_line(3, 12, case)
    assert line == "[ 3/12] ERROR x : :error: :forged[float16] — boom\\x1b[31m next"


# ----------------------------------------------------------------------------- compare


def _case(case_id: str, verdict: str, diff1: float = 1e-4, reasons: list[str] | None = None) -> CaseResult:
    return CaseResult(
        id=case_id,
        operator=case_id.split("[")[0],
        category="activation",
        spec_file="operator_specs/x.yaml",
        dtype="float32",
        params={},
        trials=5,
        seed=0,
        verdict=verdict,  # type: ignore[arg-type]
        reasons=reasons if reasons is not None else ([] if verdict == "pass" else ["diff1 too large"]),
        metrics=[{"diff1": diff1, "diff2": diff1, "max_hyb": diff1, "mean_hyb": diff1}],
        criteria=[Criterion(metric="diff1", value=diff1, threshold=3e-4, passed=verdict != "fail")],
        error="worker died" if verdict == "error" else None,
    )


def _results(cases: list[CaseResult]) -> Results:
    return Results(environment=environment(), summary=summarize(cases), cases=cases)


def _write(path: Path, res: Results) -> Path:
    from acceptance.session.results import write

    return write(res, path)


def test_compare_counts_regressed_cases_not_sentences(tmp_path):
    """Two cases regress, one of them twice (a worse verdict and diff1 grown 10x: two sentences); one is fixed;
    six stay the same. The table holds the three changed cases only."""
    same = [_case(f"op[float32-N={n}]", "pass") for n in range(6)]
    base = [_case("a[float32-N=1]", "pass"), _case("b[float32-N=2]", "pass"), _case("c[float32-N=3]", "fail")]
    new = [
        _case("a[float32-N=1]", "fail", diff1=1e-3),  # 10x: above the allowed 2x, and above float32's floor
        _case("b[float32-N=2]", "error"),
        _case("c[float32-N=3]", "pass"),
    ]
    b = _write(tmp_path / "base.json", _results(base + same))
    n = _write(tmp_path / "new.json", _results(new + same))
    result = CliRunner().invoke(main, ["compare", str(b), str(n), "--summary", str(tmp_path / "summary.md")])
    assert result.exit_code == 1, result.output
    lines = result.stdout.splitlines()
    assert lines[0] == f"compared with {b}: REGRESSION — 2 regressed cases, 1 fixed case (of 9 cases)"
    head = lines.index(next(line for line in lines if line.startswith("case ")))
    rows = lines[head + 1 : lines.index("", head)]
    assert [r.split()[:4] for r in rows] == [
        ["a[float32-N=1]", "pass", "fail", "regressed"],
        ["b[float32-N=2]", "pass", "error", "regressed"],
        ["c[float32-N=3]", "fail", "pass", "fixed"],
    ]
    assert rows[0].split()[4:7] == ["10x", "diff1", "grew"]
    sentences = lines[lines.index("regressions:") + 1 :]
    assert [s.split(": ", 1)[0].strip() for s in sentences] == ["a[float32-N=1]", "a[float32-N=1]", "b[float32-N=2]"]
    assert (tmp_path / "summary.md").read_text().startswith(f"### Accuracy compared with {b}: REGRESSION")
    assert "###" not in result.stdout  # Markdown only with --summary


def test_compare_says_no_change_briefly(tmp_path):
    one = _write(tmp_path / "one.json", _results([_case("op[float32-N=1]", "pass")]))
    result = CliRunner().invoke(main, ["compare", str(one), str(one)])
    assert result.exit_code == 0
    assert result.stdout.splitlines() == [
        f"compared with {one}: no change (1 case; errors within 2x on diff1, diff2, max_hyb, mean_hyb)"
    ]
    markdown = CliRunner().invoke(main, ["compare", str(one), str(one), "--summary", "-"])
    assert markdown.stdout.startswith(f"### Accuracy compared with {one}: no regression")


def test_compare_help_names_summary():
    result = CliRunner().invoke(main, ["compare", "--help"])
    assert result.exit_code == 0 and "--summary" in result.output
