"""End to end through ``acceptance run``: verdicts, errors, determinism, exit codes, outputs."""

import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from click.testing import CliRunner

from acceptance.cli import main
from acceptance.session import results as results_mod

HERE = Path(__file__).parent
SPECS = HERE / "runner_specs"
XSD = HERE.parent.parent / "shared" / "schemas" / "junit-10.xsd"


def run_cli(*args):
    return CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)


def write_spec(
    folder: Path,
    name: str,
    impl: str,
    *,
    category="convolution",
    extra="",
    dtypes="[float32]",
    inputs=None,
    cases="[{M: 8, N: 5, K: 12}]",
    trials=4,
):
    shutil.copy(SPECS / "kernels.py", folder / "kernels.py")
    inputs = inputs or (
        "  - {name: a, shape: [M, K], dist: {uniform: [-1, 1]}}\n"
        "  - {name: b, shape: [K, N], dist: {uniform: [-1, 1]}}\n"
    )
    text = (
        f"name: {name}\ncategory: {category}\nimpl: {impl}\nbaseline: torch:matmul\n"
        f"dtypes: {dtypes}\ninputs:\n{inputs}cases: {cases}\ntrials: {trials}\nseed: 0\n{extra}"
    )
    path = folder / f"{name}.yaml"
    path.write_text(text)
    return path


def cases_by_operator(out: Path):
    res = results_mod.load(out / "results.json")
    return res, {c.operator: c for c in res.cases}


def test_scale_bias_fails_with_the_metric_named(tmp_path):
    out = tmp_path / "out"
    r = run_cli("run", SPECS / "scaled_matmul.yaml", "--out", out)
    assert r.exit_code == 1, r.output
    res, by_op = cases_by_operator(out)
    case = by_op["scaled_matmul"]
    assert case.verdict == "fail"
    # e = 1.01 b exactly in real arithmetic: diff1 = sum|0.01 b| / sum|b| = 0.01 (float32 rounding ~1e-7)
    assert case.metrics[0]["diff1"] == pytest.approx(0.01, rel=1e-4)
    assert case.reasons[0].startswith("diff1 1e-2 > 1e-5 (float32 convolution default)")
    assert "diff1" in r.output
    assert case.tolerance_to_pass["diff1"] == pytest.approx(0.01, rel=1e-4)
    assert case.worst is not None and case.worst.abs_error > 0


def test_raising_and_hanging_impls_error_and_the_run_goes_on(tmp_path):
    write_spec(tmp_path, "raises", "kernels.py:raises")
    write_spec(tmp_path, "hangs", "kernels.py:hangs", extra="timeout: 1\n")
    write_spec(tmp_path, "good", "torch:matmul")
    write_spec(tmp_path, "wrong_shape", "kernels.py:wrong_shape")
    write_spec(tmp_path, "wrong_dtype", "kernels.py:wrong_dtype")
    write_spec(tmp_path, "not_a_tensor", "kernels.py:not_a_tensor")
    out = tmp_path / "out"
    r = run_cli("run", tmp_path, "--out", out)
    assert r.exit_code == 1, r.output
    res, by_op = cases_by_operator(out)
    assert by_op["good"].verdict == "pass"
    assert by_op["raises"].verdict == "error"
    assert "RuntimeError: kernel launch failed" in by_op["raises"].error
    assert by_op["hangs"].verdict == "error" and "timeout" in by_op["hangs"].error
    assert "shape (7, 5)" in by_op["wrong_shape"].error and "(8, 5)" in by_op["wrong_shape"].error
    assert "torch.float64" in by_op["wrong_dtype"].error
    assert "returned str" in by_op["not_a_tensor"].error
    assert res.summary.errors == 5 and res.summary.passed == 1 and res.summary.exit_code == 1


def test_nan_output_fails_on_placement(tmp_path):
    write_spec(
        tmp_path,
        "nan_exp",
        "kernels.py:nan_exp",
        category="activation",
        inputs="  - {name: x, shape: [N, K], dist: {uniform: [-1, 1]}}\n",
        cases="[{N: 9, K: 31}]",
    )
    (tmp_path / "nan_exp.yaml").write_text((tmp_path / "nan_exp.yaml").read_text().replace("torch:matmul", "torch:exp"))
    out = tmp_path / "out"
    r = run_cli("run", tmp_path, "--out", out)
    assert r.exit_code == 1, r.output
    _, by_op = cases_by_operator(out)
    case = by_op["nan_exp"]
    assert case.verdict == "fail"
    failed = {c.metric for c in case.criteria if c.passed is False}
    assert "nan_mismatch" in failed
    assert any("NaN placement differs from the baseline at 1 positions" in x for x in case.reasons)
    assert case.worst.index == [0, 0] and case.worst.abs_error == float("inf")  # never a large finite stand-in


def test_seed_determinism(tmp_path):
    spec = write_spec(tmp_path, "split_k", "kernels.py:split_k_matmul", cases="[{M: 33, N: 7, K: 130}]", trials=3)
    metrics = []
    for i in range(2):
        out = tmp_path / f"out{i}"
        assert run_cli("run", spec, "--out", out).exit_code == 0
        metrics.append(json.loads((out / "results.json").read_text())["cases"][0]["metrics"])
    assert metrics[0] == metrics[1]
    assert metrics[0][0]["max_abs"] > 0  # split-K really rounds differently
    out = tmp_path / "other_seed"
    assert run_cli("run", spec, "--out", out, "--seed", "7").exit_code == 0
    assert json.loads((out / "results.json").read_text())["cases"][0]["metrics"] != metrics[0]


def test_results_round_trip_and_junit_valid(tmp_path):
    out = tmp_path / "out"
    run_cli("run", SPECS, "--out", out)
    text = (out / "results.json").read_text()
    assert results_mod.dumps(results_mod.load(out / "results.json")) == text
    data = json.loads(text)
    assert data["schema_version"] == results_mod.SCHEMA_VERSION
    env = data["environment"]
    assert (
        env["device"] == "cpu"
        and env["torch"] == torch.__version__
        and env["command_line"].startswith("acceptance run")
    )
    if not XSD.exists():
        pytest.skip(f"{XSD} absent")
    import xmlschema

    xmlschema.XMLSchema(str(XSD)).validate(str(out / "junit.xml"))


@pytest.mark.parametrize(
    "mutation,field",
    [
        (("category: convolution", "category: conv"), "category"),
        (("[M, K]", "[M, Q]"), "inputs[0].shape"),
        (("kernels.py:scaled_matmul", "kernels.py:no_such_kernel"), "impl"),
        (("dtypes: [float32]", "dtypes: [float33]"), "dtypes"),
        (("seed: 3", "seed: 3\nthresholds: {float32: {diff9: 1.0}}"), "thresholds"),
    ],
)
def test_spec_errors_exit_2_naming_file_and_field(tmp_path, mutation, field):
    shutil.copy(SPECS / "kernels.py", tmp_path / "kernels.py")
    text = (SPECS / "scaled_matmul.yaml").read_text().replace(*mutation)
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    out = tmp_path / "out"
    r = run_cli("run", bad, "--out", out)
    assert r.exit_code == 2
    assert "Traceback" not in r.output
    line = next(x for x in r.output.splitlines() if "bad.yaml" in x)
    assert field in line
    assert not (out / "results.json").exists()
    assert run_cli("validate", bad).exit_code == 2


def test_usage_errors_exit_2(tmp_path):
    assert run_cli("run", tmp_path / "missing", "--out", tmp_path).exit_code == 2
    assert run_cli("run", SPECS, "--dtype", "float17", "--out", tmp_path).exit_code == 2
    assert run_cli("run", SPECS, "--device", "tpu", "--out", tmp_path).exit_code == 2
    assert run_cli("run", SPECS, "--only", "no_such_op", "--out", tmp_path).exit_code == 2
    if not torch.cuda.is_available():
        assert run_cli("run", SPECS, "--device", "cuda", "--out", tmp_path).exit_code == 2


def test_the_device_comes_from_the_option_or_acceptance_device_and_a_bad_one_is_a_usage_error(tmp_path, monkeypatch):
    """``$ACCEPTANCE_DEVICE`` sets ``--device`` of run, bench and tune (the option wins); a device that is
    not one is exit 2 with one line naming where it came from, never a traceback (tune raised one)."""
    monkeypatch.setenv("ACCEPTANCE_DEVICE", "tpu")
    for cmd in ("run", "bench", "tune"):
        r = CliRunner().invoke(main, [cmd, str(SPECS), "--only", "scaled_matmul"])
        assert r.exit_code == 2, (cmd, r.output, r.exception)
        assert (
            r.output.strip().splitlines()[-1] == "$ACCEPTANCE_DEVICE: 'tpu' is not a device (auto, cpu, cuda, cuda:N)"
        )
        assert "Traceback" not in r.output
        r = CliRunner().invoke(main, [cmd, str(SPECS), "--only", "scaled_matmul", "--device", "npu"])
        assert r.exit_code == 2 and r.output.strip().splitlines()[-1] == (
            "--device: 'npu' is not a device (auto, cpu, cuda, cuda:N)"
        ), (cmd, r.output)
    monkeypatch.setenv("ACCEPTANCE_DEVICE", "cpu")
    out = tmp_path / "out"
    r = run_cli("run", SPECS, "--only", "scaled_matmul", "--trials", "2", "--out", out)
    assert r.exit_code in (0, 1), r.output
    env = json.loads((out / "results.json").read_text())["environment"]
    assert env["device"] == "cpu" and "--device cpu" in env["command_line"]


def test_list_and_validate():
    r = run_cli("list", SPECS)
    assert r.exit_code == 0
    assert "scaled_matmul" in r.output and "convolution" in r.output
    r = run_cli("validate", SPECS)
    assert r.exit_code == 0 and "2 specs valid, 2 cases" in r.output


@pytest.mark.parametrize(
    "mask,expected",
    [
        (lambda m: m.__setitem__((3, slice(None)), True), "all 8 in row 3 of dim 0"),
        (lambda m: m.__setitem__((slice(None), 2), True), "all 6 in index 2 of the last dim"),
        (
            lambda m: m.__setitem__((slice(None), slice(5, 8)), True),
            "all 18 in the tail of the last dim (indices >= 5 of 8)",
        ),
        (lambda m: m.fill_(True), "everywhere"),
        (lambda m: (m.__setitem__((0, 1), True), m.__setitem__((4, 6), True)), None),
    ],
)
def test_locate_bad_elements(mask, expected):
    from acceptance.measure.diagnose import locate as _locate

    m = torch.zeros(6, 8, dtype=torch.bool)
    mask(m)
    assert _locate(m) == expected


def test_locate_scattered_1d_is_not_a_tail():
    from acceptance.measure.diagnose import locate as _locate

    m = torch.zeros(100, dtype=torch.bool)
    m[[2, 50, 97]] = True
    assert _locate(m) is None
    m[90:] = True
    m[[2, 50]] = False
    assert _locate(m) == "all 10 in the tail of the last dim (indices >= 90 of 100)"


def test_underpowered_dual_delta_is_flagged(tmp_path):
    from acceptance.decide.run import underpowered

    res = results_mod.load(HERE / "fixtures" / "recorded_run.json")
    ids, m, needed = underpowered(res.cases)
    records = [rec for c in res.cases for rec in c.dual_delta]
    assert m == len(records) > 0
    # smallest n with 2^-n < alpha / m
    assert 0.5**needed < 0.05 / m <= 0.5 ** (needed - 1)
    assert ids == [c.id for c in res.cases if any(rec.trials < needed for rec in c.dual_delta)]
    write_spec(tmp_path, "few", "kernels.py:split_k_matmul", trials=3)
    r = CliRunner().invoke(main, ["run", str(tmp_path), "--out", str(tmp_path / "out")])
    assert "fewer than 6 trials" in r.output  # m = 2 records: 2^-6 < 0.025 <= 2^-5


def test_dual_delta_section_of_a_spec(tmp_path):
    write_spec(
        tmp_path,
        "tuned",
        "kernels.py:split_k_matmul",
        extra="dual_delta: {metrics: [max_abs, rms], factor: {max_abs: 3.0}, alpha: 0.01, trials: 12}\n",
    )
    write_spec(tmp_path, "off", "kernels.py:split_k_matmul", extra="dual_delta: {enabled: false}\n")
    write_spec(
        tmp_path,
        "on_for_arithmetic",
        "kernels.py:split_k_matmul",
        category="arithmetic",
        extra="dual_delta: {enabled: true}\nthresholds: {float32: {diff3_2: 1.0}}\n",
    )
    out = tmp_path / "out"
    r = run_cli("run", tmp_path, "--out", out)
    assert r.exit_code == 0, r.output
    _, by_op = cases_by_operator(out)
    tuned = by_op["tuned"]
    assert tuned.trials == 12
    assert [(d.metric, d.factor, d.alpha, d.trials) for d in tuned.dual_delta] == [
        ("max_abs", 3.0, 0.01, 12),
        ("rms", 1.5, 0.01, 12),
    ]
    sources = {c.metric: c.source for c in tuned.criteria if c.kind == "dual_delta"}
    assert sources == {"max_abs": "spec override", "rms": "convolution default"}
    assert not by_op["off"].dual_delta
    assert [d.metric for d in by_op["on_for_arithmetic"].dual_delta] == ["max_hyb", "mean_hyb"]


def test_relative_error_buckets_against_numpy():
    from acceptance.measure.diagnose import abs_error as _abs_error
    from acceptance.measure.diagnose import buckets as _buckets
    from acceptance.measure.diagnose import rel_error as _rel_error
    from acceptance.records import REL_ERROR_BUCKETS

    rng = np.random.default_rng(4)
    b = rng.uniform(-1, 1, 5000)
    e = b * (1 + 10.0 ** rng.uniform(-8, 1, 5000) * rng.choice([-1, 1], 5000))
    e[:50] = b[:50]  # exact
    b[50:60], e[50:55] = 0.0, 0.0  # 0/0 -> 0 (5 of them), x/0 -> inf (5)
    e[60], b[61], e[62], b[62] = np.nan, np.inf, np.inf, np.inf  # mismatches -> >1; matched inf -> 0
    rel = _rel_error(_abs_error(torch.from_numpy(e), torch.from_numpy(b)), torch.from_numpy(b))
    got = _buckets(rel)
    with np.errstate(divide="ignore", invalid="ignore"):
        want_rel = np.abs(e - b) / np.abs(b)
    want_rel[np.isnan(want_rel)] = np.inf
    want_rel[(e == b) | (np.isinf(e) & (e == b))] = 0.0
    edges = [0.0] + [u for _, u in REL_ERROR_BUCKETS] + [np.inf]
    nz = want_rel[want_rel != 0]
    want = {"=0": int((want_rel == 0).sum())}
    for label, lo, hi in zip([x for x, _ in REL_ERROR_BUCKETS], edges[:-2], edges[1:-1], strict=False):
        want[label] = int(((nz >= lo) & (nz < hi)).sum())
    want[">1"] = int((nz >= 1.0).sum())
    assert got == want
    assert sum(got.values()) == 5000 and got["=0"] == 50 + 5 + 1


def test_the_recorded_command_line_reproduces_the_run(tmp_path):
    """results.json's ``command_line`` parsed again gives the run's parameters: flags by their names alone
    (``--no-cache``, never ``--no-cache True``), options with their values, defaults left out."""
    import shlex

    out = tmp_path / "out"
    args = [str(SPECS), "--out", str(out), "--trials", "2", "--no-cache", "--jobs", "1", "--strict"]
    r = run_cli("run", *args)
    assert r.exit_code in (0, 1), r.output
    words = shlex.split(json.loads((out / "results.json").read_text())["environment"]["command_line"])
    assert words[:2] == ["acceptance", "run"]
    assert "True" not in words and "False" not in words
    assert "--resume" not in words and "--sanitize" not in words
    again = main.commands["run"].make_context("run", words[2:]).params
    assert again == main.commands["run"].make_context("run", args).params


def test_provenance_reads_the_commit_of_the_folder_current_when_called(tmp_path, monkeypatch):
    """The git commit is that of the current folder at the time of the call (the default was fixed when the
    module was imported): a folder outside any repository has none, this checkout has ``git rev-parse HEAD``."""
    import subprocess

    from acceptance.session import provenance

    start = provenance.now()
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=HERE, capture_output=True, text=True)
    monkeypatch.chdir(tmp_path)
    assert provenance.environment(torch.device("cpu"), command_line="", start=start, end=start).git_commit is None
    monkeypatch.chdir(HERE)
    env = provenance.environment(torch.device("cpu"), command_line="", start=start, end=start)
    assert env.git_commit == (head.stdout.strip() if head.returncode == 0 else None)


def test_results_json_is_strict_json_even_for_a_non_finite_parameter(tmp_path):
    """A parameter holding inf or NaN (a free-form value, not a metric) is written as a string strict JSON can
    hold, instead of a NaN literal or a write that fails and loses the run; the file reads back."""
    fixture = HERE / "fixtures" / "recorded_run.json"
    res = results_mod.load(fixture)
    case = res.cases[0].model_copy(update={"params": {**res.cases[0].params, "LO": -math.inf, "HI": math.nan}})
    res = res.model_copy(update={"cases": [case, *res.cases[1:]]})
    path = results_mod.write(res, tmp_path / "results.json")

    def not_strict(constant):
        raise AssertionError(f"{constant} is not strict JSON")

    data = json.loads(path.read_text(), parse_constant=not_strict)
    assert data["cases"][0]["params"]["LO"] == "-Infinity" and data["cases"][0]["params"]["HI"] == "NaN"
    assert results_mod.load(path).cases[0].id == case.id


@pytest.mark.parametrize("seed", range(8))
def test_folding_keeps_the_worst_value_of_each_metric_over_trials(seed):
    """``runner._fold`` over a run of trials equals the worst value taken here from the whole list: NaN wins,
    else the smallest score (``snr_db``) and the largest of anything else, the first of equal values kept
    (so +0.0 then -0.0 stays +0.0); ``diff4``, ``above`` and ``below`` are not folded; tuples element-wise."""
    import math as _math

    from acceptance.measure import case as runner

    rng = np.random.default_rng(seed)
    pool = [0.0, -0.0, 1e-7, 3.5, -2.0, _math.inf, -_math.inf, _math.nan, 7]
    names = ["max_abs", "snr_db", "diff1", "mean_ulp", "n", "made_up"]
    trials = []
    for _ in range(int(rng.integers(1, 12))):
        m = {name: pool[int(rng.integers(len(pool)))] for name in names if rng.random() < 0.9}
        m["pair"] = (pool[int(rng.integers(len(pool)))], pool[int(rng.integers(len(pool)))])
        m.update(diff4=(0.1, 0.2, 3), above=1, below=2)
        trials.append(m)
    worst: dict = {}
    for m in trials:
        runner._fold(worst, m)

    def expected(name, values):
        values = [float(v) for v in values]
        if any(v != v for v in values):
            return "nan"
        pick = values[0]
        for v in values[1:]:
            if (v < pick) if name == "snr_db" else (v > pick):
                pick = v
        return (pick, _math.copysign(1.0, pick))  # the sign of a zero counts

    def seen(v):
        return "nan" if v != v else (v, _math.copysign(1.0, v))

    for name in names:
        values = [m[name] for m in trials if name in m]
        if values:
            assert seen(worst[name]) == expected(name, values), (name, values)
        else:
            assert name not in worst
    for k in range(2):
        assert seen(worst["pair"][k]) == expected("pair", [m["pair"][k] for m in trials])
    assert not {"diff4", "above", "below"} & set(worst)


def test_folding_keeps_the_first_of_two_equal_values_and_lets_nan_win():
    """+0.0 then -0.0 stays +0.0 for an error and for a score (``max``/``min`` keep the first of equals); a NaN
    in any trial is the fold's value, before or after larger ones."""
    import math as _math

    from acceptance.measure import case as runner

    for first, then in ((0.0, -0.0), (-0.0, 0.0)):
        worst: dict = {}
        runner._fold(worst, {"max_abs": first, "snr_db": first})
        runner._fold(worst, {"max_abs": then, "snr_db": then})
        assert _math.copysign(1.0, worst["max_abs"]) == _math.copysign(1.0, first)
        assert _math.copysign(1.0, worst["snr_db"]) == _math.copysign(1.0, first)
    for values in ([1.0, _math.nan, 5.0], [_math.nan, -_math.inf], [_math.inf, _math.nan]):
        worst = {}
        for v in values:
            runner._fold(worst, {"max_abs": v, "snr_db": v})
        assert _math.isnan(worst["max_abs"]) and _math.isnan(worst["snr_db"])
    worst = {}
    for v in (3.0, _math.inf, 2.0):
        runner._fold(worst, {"max_abs": v, "snr_db": -v})
    assert worst == {"max_abs": _math.inf, "snr_db": -_math.inf}


def _comparable(path):
    """A results.json without what differs between two runs of the same cases: timestamps, the command line,
    per-case seconds, and the digest over them."""
    data = json.loads(Path(path).read_text())
    data.pop("environment")
    data.pop("digest")
    for case in data["cases"]:
        case.pop("timing")
    return data


def test_the_library_run_and_the_command_line_write_the_same_results(tmp_path):
    """``acceptance.run(...)`` from Python and ``acceptance run`` on the same specs are one run: the same cases,
    verdicts, metrics, criteria and statistics in results.json, and the same reports written."""
    import acceptance
    from acceptance.cli import main

    specs = Path(__file__).resolve().parents[1] / "examples" / "quickstart"
    r = CliRunner().invoke(
        main, ["run", str(specs), "--out", str(tmp_path / "cli"), "--jobs", "1", "--no-cache"], catch_exceptions=False
    )
    assert r.exit_code == 1  # the quickstart's unaligned cases fail
    res = acceptance.run([specs], out=tmp_path / "lib", jobs=1, cache=False)
    assert res.summary.exit_code == 1 and res.summary.failed == 2
    assert _comparable(tmp_path / "lib" / "results.json") == _comparable(tmp_path / "cli" / "results.json")
    assert {p.name for p in (tmp_path / "lib").iterdir()} == {p.name for p in (tmp_path / "cli").iterdir()}
    nothing = acceptance.run([specs], jobs=1, cache=False, dtypes="float32")  # no out: nothing written
    assert [c.dtype for c in nothing.cases] == ["float32"] * 2


def test_the_library_run_refuses_an_unknown_option():
    import acceptance

    with pytest.raises(TypeError, match="unexpected option.*colour"):
        acceptance.run([], colour=True)


def test_strict_fails_a_vacuous_case_by_its_vacuity_criterion_and_a_plain_run_passes_it(tmp_path):
    """log of negative inputs is NaN on every side: nothing finite is compared, so the case shows nothing."""
    write_spec(
        tmp_path,
        "nan_log",
        "torch:log",
        category="activation",
        inputs="  - {name: x, shape: [N], dist: {uniform: [-2, -1]}}\n",
        cases="[{N: 33}]",
        trials=2,
    )
    spec = tmp_path / "nan_log.yaml"
    spec.write_text(spec.read_text().replace("torch:matmul", "torch:log"))
    why = "no finite element was compared (every output empty or non-finite on both sides)"
    for strict, code, verdict, passed in ((False, 0, "pass", None), (True, 1, "fail", False)):
        out = tmp_path / f"out-{strict}"
        r = run_cli("run", tmp_path, "--out", out, "--no-cache", "--jobs", "1", *(["--strict"] if strict else []))
        assert r.exit_code == code, r.output
        _, by_op = cases_by_operator(out)
        case = by_op["nan_log"]
        (rule,) = [c for c in case.criteria if c.kind == "vacuity"]
        assert (case.verdict, rule.passed, rule.note, case.vacuous) == (verdict, passed, why, why)
        assert case.reasons == ([f"vacuous (--strict): {why}"] if strict else [])
