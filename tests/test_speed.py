"""Harness speed features: exact rounding by casts and bits, a command line that starts without torch or scipy,
the reference cache wired into runs, and --jobs; results are the same bit for bit whichever path ran."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from acceptance.formats import dtypes

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- exact rounding


def _fraction_round(x: float, precision: int, emin: int, largest: float) -> float:
    """Round-to-nearest-even of ``x`` to a binary format (precision bits, minimum exponent), by exact rationals."""
    if x == 0 or math.isnan(x) or math.isinf(x):
        return x
    v = Fraction(x)
    e = max(math.frexp(abs(x))[1] - 1, emin)
    q = Fraction(2) ** (e - precision + 1)
    n = v / q
    k = math.floor(n)
    rest = n - k
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and k % 2 == 1):
        k += 1
    r = float(k * q)
    if abs(r) > largest:
        return math.copysign(math.inf, x)
    return r if r != 0 else math.copysign(0.0, x)


def _hard_values(name: str) -> np.ndarray:
    """Exact ties, ties ± one float64 ulp (a double rounding through float32 gets these wrong), subnormal-range
    and overflow-boundary values, specials, and random values over the whole range."""
    row = dtypes.lookup(name)
    rng = np.random.default_rng(7)
    grid = dtypes.round_to(rng.uniform(-4, 4, 300) * 2.0 ** rng.integers(row.emin - row.precision, 15, 300), name)
    spacing = np.ldexp(1.0, np.maximum(np.frexp(grid)[1] - 1, row.emin) - (row.precision - 1))
    ties = grid + np.copysign(spacing / 2, grid)
    near = np.concatenate([ties, np.nextafter(ties, np.inf), np.nextafter(ties, -np.inf)])
    top = row.max + np.array([0.0, 1.0, -1.0]) * row.max * 2.0 ** -(row.precision + 1)
    specials = np.array([0.0, -0.0, np.inf, -np.inf, 5e-324, -5e-324, 2.0 ** (row.emin - row.precision), 1e300])
    wide = rng.standard_normal(2000) * 10.0 ** rng.integers(-45, 40, 2000)
    return np.concatenate([near, top, -top, specials, wide])


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32"])
def test_fast_rounding_equals_exact_rational_rounding(name):
    row = dtypes.lookup(name)
    x = _hard_values(name)
    expected = np.array([_fraction_round(float(v), row.precision, row.emin, row.max) for v in x])
    got = dtypes.round_to(x, name)
    assert np.array_equal(got, expected)
    assert np.array_equal(np.signbit(got), np.signbit(expected))


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32"])
def test_fast_rounding_keeps_nan_and_shape(name):
    x = np.array([[np.nan, 1.0], [-np.nan, 3.0]])
    got = dtypes.round_to(x, name)
    assert got.shape == (2, 2) and np.isnan(got[:, 0]).all() and got[0, 1] == 1.0 and got[1, 1] == 3.0
    assert dtypes.round_to(np.float64(0.1), name).shape == ()


# ----------------------------------------------------------------------------- start-up


def test_command_line_starts_without_torch_or_scipy():
    code = (
        "import sys, acceptance.cli as c\n"
        "try:\n    c.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('torch', 'scipy', 'numba', 'pydantic') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_the_runner_leaves_scipy_stats_and_the_metrics_engines_to_be_imported_while_the_worker_starts():
    code = (
        "import sys, acceptance.measure.case\n"
        "print('scipy.stats' in sys.modules, 'acceptance.numerics.stats' in sys.modules,"
        " 'acceptance.numerics.metrics.many' in sys.modules, 'numba' in sys.modules)\n"
        "from acceptance.session import startup\n"
        "startup.imported_meanwhile('acceptance.numerics.metrics.many', 'acceptance.numerics.stats').join()\n"
        "print('acceptance.numerics.metrics.many' in sys.modules, 'acceptance.numerics.stats' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False"] * 4 + ["True", "True"]


_PLAIN_SPEC = """name: plain_add
category: arithmetic
impl: operator:add
dtypes: [float16, bfloat16, float32]
inputs:
  - {name: a, shape: [N], dist: {uniform: [-1, 1]}}
cases:
  - {N: 17}
  - {N: 5}
"""


_MPMATH_SPEC = _PLAIN_SPEC.replace("name: plain_add", "name: plain_exp").replace(
    "impl: operator:add", "impl: math:exp\noracle: {mpmath: exp, dps: 30}"
)


@pytest.mark.parametrize(
    "command", ["list", "validate", "list-mpmath", "validate-mpmath", "compare", "report", "report-files"]
)
def test_spec_and_results_commands_start_without_torch_or_scipy(command, tmp_path):
    """``list``/``validate`` of a spec whose callables are plain Python (``-mpmath``: with an mpmath oracle, whose
    function name is checked), ``compare``/``report`` of results files (``report-files``: every report file
    written): none of them loads torch, scipy or numba (only a spec's own callables may)."""
    spec = tmp_path / "plain_add.yaml"
    spec.write_text(_MPMATH_SPEC if command.endswith("-mpmath") else _PLAIN_SPEC)
    recorded = str(ROOT / "tests" / "fixtures" / "recorded_run.json")
    files = [
        x for name in ("html", "junit", "summary", "signoff", "merged") for x in (f"--{name}", str(tmp_path / name))
    ]
    args = {
        "list": [str(spec)],
        "validate": [str(spec)],
        "list-mpmath": [str(spec)],
        "validate-mpmath": [str(spec)],
        "compare": [recorded, recorded],
        "report": [recorded],
        "report-files": [recorded, *files],
    }[command]
    command = command.split("-")[0]
    code = (
        "import sys, acceptance.cli as c\n"
        f"try:\n    c.main({[command, *args]!r})\nexcept SystemExit as exc:\n    print('exit', exc.code)\n"
        "print(sorted(m for m in ('torch', 'scipy', 'numba') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = out.stdout.strip().splitlines()
    assert lines[-2] == "exit 0", out.stdout + out.stderr
    assert lines[-1] == "[]"
    if command == "validate":
        assert lines[0] == "1 specs valid, 6 cases"  # 2 cases x 3 dtypes
    if command == "list":
        name = "plain_exp" if spec.read_text() == _MPMATH_SPEC else "plain_add"
        assert lines[1].split()[:4] == [name, "arithmetic", "float16,bfloat16,float32", "6"]
    if len(args) > 1 and args[1] == "--html":
        assert "rel_error_buckets" in Path(recorded).read_text()  # the report's bucket section has data to show
        assert all((tmp_path / name).stat().st_size > 0 for name in ("html", "junit", "summary", "signoff", "merged"))


# ----------------------------------------------------------------------------- cache and jobs in runs

from click.testing import CliRunner  # noqa: E402

from acceptance.cli import main  # noqa: E402

SPEC = ROOT / "operator_specs" / "softmax.yaml"
VOLATILE_ENV = ("start_time", "end_time", "command_line")


def _run(out: Path, *flags: str) -> dict:
    r = CliRunner().invoke(
        main,
        ["run", str(SPEC), "--out", str(out), "--trials", "3", "--dtype", "float16", "--only", "*-M=1*", *flags],
        catch_exceptions=False,
    )
    assert r.exit_code in (0, 1), r.output
    return json.loads((out / "results.json").read_text())


def _stripped(results: dict) -> dict:
    """results.json without what legitimately differs between two runs: when they ran, the command typed, and
    the seconds each case took, and the digest over them."""
    results = json.loads(json.dumps(results))
    results.pop("digest")
    for k in VOLATILE_ENV:
        results["environment"].pop(k)
    for case in results["cases"]:
        case.pop("timing")
    return results


def test_results_identical_across_cache_states_and_job_counts(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path / "cache"))
    cold = _run(tmp_path / "cold", "--jobs", "1")
    files = list((tmp_path / "cache").rglob("*.ref"))
    cases = len(cold["cases"])
    assert cases == 2 and len(files) == 4 * cases  # per case, one pack of its 3 trials' inputs (written by
    # the worker, which makes them), one of the baseline's outputs, one of the oracle's, and its measurement
    # (acceptance.measure.memo)
    warm = _run(tmp_path / "warm", "--jobs", "1")
    assert all(c["timing"]["baseline"] == 0 and c["timing"]["oracle"] == 0 for c in warm["cases"])  # not called
    assert all(c["timing"]["impl"] > 0 for c in warm["cases"])  # the impl always runs
    assert _stripped(warm) == _stripped(cold)  # --jobs 2: test_results_identical_cold_warm_and_two_jobs_...


def test_two_jobs_store_every_cases_inputs_and_references_as_one_job_does(tmp_path, monkeypatch):
    """Each job's worker writes the inputs it made (when idle, or as its job ends): the cache holds the same
    entries after a run of two jobs as after a run of one, and a warm run of either reads them all."""
    entries = {}
    for jobs in ("1", "2"):
        monkeypatch.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path / f"cache{jobs}"))
        cold = _run(tmp_path / f"cold{jobs}", "--jobs", jobs)
        entries[jobs] = sorted(p.name for p in (tmp_path / f"cache{jobs}").rglob("*.ref"))
        assert len(entries[jobs]) == 4 * len(cold["cases"])
    assert entries["1"] == entries["2"]


def test_cache_info_and_clear(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path / "cache"))
    _run(tmp_path / "out", "--jobs", "1")
    files = list((tmp_path / "cache").rglob("*.ref"))
    assert files
    info = CliRunner().invoke(main, ["cache", "info"]).output
    assert f"entries:  {len(files)}" in info and str(tmp_path / "cache") in info
    size_mib = sum(f.stat().st_size for f in files) / 2**20
    assert f"size:     {size_mib:.1f} MiB" in info
    cleared = CliRunner().invoke(main, ["cache", "clear"]).output
    assert f"removed {len(files)} file(s)" in cleared
    assert not list((tmp_path / "cache").rglob("*.ref"))


def test_reference_key_ignores_the_impl_and_thresholds_but_not_inputs():
    import dataclasses

    from acceptance.measure.references import spec_part
    from acceptance.spec import expand, load_spec

    spec, problems = load_spec(SPEC)
    assert not problems
    case = expand([spec])[0]
    same = dataclasses.replace(
        case, spec=dataclasses.replace(case.spec, impl="torch:exp", thresholds={"x": {}}, trials=99, timeout=1.0)
    )
    assert spec_part(same) == spec_part(case)
    other_seed = dataclasses.replace(case, spec=dataclasses.replace(case.spec, seed=case.spec.seed + 1))
    other_inputs = dataclasses.replace(case, spec=dataclasses.replace(case.spec, inputs=case.spec.inputs[:0]))
    other_baseline = dataclasses.replace(case, spec=dataclasses.replace(case.spec, baseline="torch:exp"))
    assert len({spec_part(case), spec_part(other_seed), spec_part(other_inputs), spec_part(other_baseline)}) == 4


def test_reference_key_covers_case_values_and_emulation_but_not_the_impls_params():
    import dataclasses

    from acceptance.measure.references import spec_part
    from acceptance.spec import expand, load_spec
    from acceptance.spec.model import Override

    spec, _ = load_spec(SPEC)
    case = expand([spec])[0]
    variants = [
        dataclasses.replace(case, role_params={"baseline": {"dim": 0}}),
        dataclasses.replace(case, role_params={"oracle": {"dim": 0}}),
        dataclasses.replace(case, symbols={**case.symbols, "M": case.symbols["M"] + 1}),
        dataclasses.replace(case, preset="r4"),
        dataclasses.replace(case, params={**case.params, "dim": 0}),
        dataclasses.replace(case, spec=dataclasses.replace(case.spec, emulate={case.dtype: "ftz"})),
        dataclasses.replace(case, spec=dataclasses.replace(case.spec, role_params={"oracle": {"dim": 0}})),
    ]
    keys = [spec_part(v) for v in variants]
    assert len(set(keys) | {spec_part(case)}) == len(variants) + 1
    harmless = [
        dataclasses.replace(case, role_params={"impl": {"dim": 0}}),
        dataclasses.replace(
            case,
            spec=dataclasses.replace(
                case.spec,
                deterministic=False,
                tier="large",
                perf={"flops": 1},
                overrides=[Override("*", {"diff1": 1.0}, {}, 0)],
            ),
        ),
    ]
    assert {spec_part(v) for v in harmless} == {spec_part(case)}


def test_every_spec_field_is_either_keyed_or_named_as_harmless():
    """A field added to the spec enters the key unless named in NOT_IN_KEY: this list makes that a decision."""
    import dataclasses

    from acceptance.measure.references import NOT_IN_KEY
    from acceptance.spec import OperatorSpec

    keyed = {"baseline", "oracle", "inputs", "params", "seed", "emulate", "role_params", "backward"}
    fields = {f.name for f in dataclasses.fields(OperatorSpec)}
    assert fields == keyed | NOT_IN_KEY and not keyed & NOT_IN_KEY


# ----------------------------------------------------------------------------- identical records, diverse specs


def _library_subset(folder: Path) -> Path:
    """Copies of diverse built-in specs (a softmax, a reduction, a matmul, a composite, a quantized matmul and an
    atomic one, with their helper module), each cut to its first case and one dtype; the matmul once more with
    an emulated baseline and per-role keyword arguments of the oracle, an add of 600,001 elements (more
    than one piece of the host metrics engine), and a vendor-math spec with an mpmath oracle (its case is the
    last in case order and the first that ``--jobs`` starts)."""
    import yaml

    folder.mkdir()
    (folder / "_ops.py").write_text((ROOT / "operator_specs" / "_ops.py").read_text())
    for name in ("softmax", "sum", "matmul", "layer_norm", "q4_0_q8_1_matmul", "index_add"):
        spec = yaml.safe_load((ROOT / "operator_specs" / f"{name}.yaml").read_text())
        spec["cases"], spec["dtypes"] = spec["cases"][:1], spec["dtypes"][:1]
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(spec))
    matmul = yaml.safe_load((ROOT / "operator_specs" / "matmul.yaml").read_text())
    matmul.update(
        name="matmul_emulated",
        dtypes=["float16"],
        cases=matmul["cases"][1:2],
        emulate={"contraction": "matmul", "accumulate": {"dtype": "float32", "chunk": 4}},
    )
    (folder / "matmul_emulated.yaml").write_text(yaml.safe_dump(matmul))
    arctan = yaml.safe_load((ROOT / "operator_specs" / "vendor_math" / "np_arctan.yaml").read_text())
    arctan.update(name="zz_np_arctan", dtypes=["float32"], cases=[{"N": 300, "LO": -10, "HI": 10}])
    (folder / "_vendor.py").write_text((ROOT / "operator_specs" / "vendor_math" / "_vendor.py").read_text())
    (folder / "zz_np_arctan.yaml").write_text(yaml.safe_dump(arctan))  # last in case order, first sent to a job
    (folder / "big_add.yaml").write_text(
        "name: big_add\ncategory: arithmetic\nimpl: torch:add\ndtypes: [float32]\n"
        "inputs:\n  - {name: a, shape: [N], dist: {uniform: [-1, 1]}}\n"
        "  - {name: b, shape: [N], dist: {normal: [0, 1]}}\n"
        "params: {alpha: 1.0}\noracle_params: {alpha: 1}\ncases: [{N: 600001}]\ntrials: 2\nseed: 3\n"
    )
    return folder


def test_results_identical_cold_warm_and_two_jobs_on_diverse_specs(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCEPTANCE_CACHE_DIR", str(tmp_path / "cache"))
    specs = _library_subset(tmp_path / "specs")

    def run(out: str, *flags: str) -> dict:
        r = CliRunner().invoke(
            main, ["run", str(specs), "--out", str(tmp_path / out), "--trials", "2", *flags], catch_exceptions=False
        )
        assert r.exit_code in (0, 1), r.output
        return json.loads((tmp_path / out / "results.json").read_text())

    cold = run("cold", "--jobs", "1")
    warm = run("warm", "--jobs", "1")
    parallel = run("jobs2", "--jobs", "2", "--no-cache")
    ops = sorted({c["operator"] for c in cold["cases"]})
    assert ops == [
        "big_add",
        "index_add",
        "layer_norm",
        "matmul",
        "matmul_emulated",
        "q4_0_q8_1_matmul",
        "softmax",
        "sum",
        "zz_np_arctan",
    ]
    assert cold["cases"][-1]["operator"] == "zz_np_arctan"
    assert not [c["id"] for c in cold["cases"] if c["verdict"] == "error"]
    emulated = next(c for c in cold["cases"] if c["operator"] == "matmul_emulated")
    assert emulated["emulation"] and "float32 accumulator" in emulated["emulation"]
    served = [c["id"] for c in warm["cases"] if c["timing"]["baseline"] == 0 and c["timing"]["oracle"] == 0]
    # every baseline and oracle output came from the cache (the quantized spec's packed inputs are drawn again)
    assert len(served) == len(warm["cases"])
    assert _stripped(warm) == _stripped(cold)
    assert _stripped(parallel) == _stripped(cold)


def test_host_metric_sums_do_not_depend_on_thread_scheduling(monkeypatch):
    """Pieces reduced by several threads in a random order give the sums of a sequential float64 pass over
    each piece, added in piece order (computed here with numpy's strictly sequential ``cumsum``)."""
    import random
    import time

    from acceptance.numerics.metrics import host

    rng = np.random.default_rng(11)
    n, block = 10_007, 1_000
    b = rng.standard_normal(n).astype(np.float32)
    e = (b + rng.standard_normal(n).astype(np.float32) * 1e-3).astype(np.float32)
    d = np.abs(e.astype(np.float64) - b.astype(np.float64))
    piece_sums = [np.cumsum(d[i : i + block])[-1] for i in range(0, n, block)]
    expected = np.cumsum([0.0] + piece_sums)[-1]
    piece_b2 = [np.cumsum(b[i : i + block].astype(np.float64) ** 2)[-1] for i in range(0, n, block)]
    expected_b2 = np.cumsum([0.0] + piece_b2)[-1]

    kernel = host._kernel
    jitter = random.Random(5)

    def slow_kernel(*args):
        time.sleep(jitter.random() * 2e-3)
        return kernel(*args)

    monkeypatch.setattr(host, "_kernel", slow_kernel)
    fmt = dtypes.lookup("float32")
    got = set()
    for threads in (1, 2, 3, 3, 3):
        monkeypatch.setattr(host.numba.config, "NUMBA_NUM_THREADS", threads)
        r = host.reduce(e, b, fmt, block=block)
        got.add((r.sum_abs, r.sum_b2))
    assert got == {(expected, expected_b2)}


# ----------------------------------------------------------------------------- diagnostics in bounded memory


def test_diagnosis_in_pieces_equals_one_pass_and_numpy(monkeypatch):
    """Per-element diagnostics taken 64 elements at a time: the same record as in one pass, and the worst element
    (first largest |e-o|/(1+|o|)), the fraction over tolerance and the bucket total computed here with numpy."""
    import torch

    from acceptance.measure import diagnose

    rng = np.random.default_rng(3)
    n = 1000
    o = rng.uniform(-2, 2, n)
    b = (o + rng.normal(0, 1e-4, n)).astype(np.float32)
    e = (o + rng.normal(0, 1e-3, n)).astype(np.float32)
    e[[100, 900]] = np.float32(o[100] + 0.5)  # the largest score twice (at 100 first: same |o| at 900)
    o[900] = o[100]
    tol = 2e-3

    def record(block):
        monkeypatch.setattr(diagnose, "DIAGNOSIS_BLOCK", block)
        d = diagnose.Diagnosis("float32")
        d.add(
            0,
            0,
            torch.from_numpy(e).reshape(40, 25),
            torch.from_numpy(b).reshape(40, 25),
            torch.from_numpy(o).reshape(40, 25),
            tol,
        )
        return d

    pieces, whole = record(64), record(1 << 22)
    assert (pieces.worst, pieces.score, pieces.buckets, pieces.bad_fraction, pieces.bad_where) == (
        whole.worst,
        whole.score,
        whole.buckets,
        whole.bad_fraction,
        whole.bad_where,
    )
    e64, b64 = e.astype(np.float64), b.astype(np.float64)
    score = np.abs(e64 - o) / (1 + np.abs(o))
    assert pieces.worst.index == [100 // 25, 100 % 25] and int(np.argmax(score)) == 100
    assert pieces.score == score[100]
    assert pieces.bad_fraction == np.mean(np.abs(e64 - b64) / (1 + np.abs(b64)) > tol)
    assert sum(pieces.buckets.values()) == n


def test_torch_free_dtype_facts_agree_with_torch():
    """The facts the table now gives without torch: every test dtype exists in torch, itemsize equals torch's,
    bfloat16's largest value equals torch.finfo's."""
    import torch

    assert all(getattr(torch, name, None) is not None for name in dtypes.TEST_DTYPES)
    for name, row in dtypes.TABLE.items():
        if row.kind != "block" and getattr(torch, name, None) is not None:
            assert row.itemsize == getattr(torch, name).itemsize, name
    assert dtypes.TABLE["bfloat16"].max == float(torch.finfo(torch.bfloat16).max)


def test_jobs_start_the_cases_with_an_mpmath_oracle_first(monkeypatch):
    """The vendor-math cases (mpmath oracles, seconds each when not cached) are the last of the built-in
    library; ``--jobs`` sends them to the jobs first, so that no job is left alone with one at the end, and the
    records still come back in case order."""
    import torch

    from acceptance import spec
    from acceptance.measure import case as measuring
    from acceptance.session import executors
    from acceptance.session.run import run_cases

    specs, problems = spec.load_specs(spec.discover([ROOT / "operator_specs"]))
    assert not problems
    cases = spec.expand(specs)
    mpmath_ids = [c.id for c in cases if isinstance(c.spec.oracle, dict) and "mpmath" in c.spec.oracle]
    assert len(mpmath_ids) >= 20 and cases[-1].id in mpmath_ids  # last in case order
    sent = []

    class Pool:  # in place of the job processes: records what is sent, in order
        def __init__(self, settings, devices):
            pass

        def run(self, queue, started):
            while queue:
                case = queue.popleft()
                sent.append(case.id)
                yield case, measuring.error_result(case, spec.rules_for(case), 1, "not measured")

        def close(self, *, graceful):
            pass

    monkeypatch.setattr(executors, "JobPool", Pool)
    decided = run_cases(cases, torch.device("cpu"), jobs=2)
    assert sent[: len(mpmath_ids)] == mpmath_ids  # first, in their own order
    assert sent[len(mpmath_ids) :] == [c.id for c in cases if c.id not in set(mpmath_ids)]
    assert [c.id for c in decided] == [c.id for c in cases]


_DUAL_SPEC = """name: scaled_exp
category: activation
impl: _k.py:scaled_exp
baseline: torch:exp
dtypes: [float16, float32]
inputs:
  - {name: x, shape: [N], dist: {uniform: [-2, 2]}}
cases:
  - {N: 64}
  - {N: 9}
seed: 3
dual_delta: {trials: 12}
"""


def test_a_run_decides_each_case_once_with_holm_over_the_whole_run(tmp_path, monkeypatch):
    """``run`` decides the measured cases together once (the runner's decision is the run's), in case order, with every
    p-value adjusted by Holm over the whole run: recomputed here from the recorded raw p-values by the step-down
    formula adj_(i) = min(1, max_{j<=i} (m - j + 1) p_(j))."""
    from acceptance.decide import run as deciding

    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "exp.yaml").write_text(_DUAL_SPEC)
    (tmp_path / "s" / "_k.py").write_text(
        "import torch\n\ndef scaled_exp(x):\n    return torch.exp(x) * (1 + 2 ** -9)\n"
    )
    from acceptance.session import run as session_run

    calls, whole = [], []
    decide_all, decided = deciding.decide_all, session_run.decided
    monkeypatch.setattr(deciding, "decide_all", lambda *a, **k: calls.append(len(a[0])) or decide_all(*a, **k))
    monkeypatch.setattr(session_run, "decided", lambda *a, **k: whole.append(len(a[0])) or decided(*a, **k))
    r = CliRunner().invoke(
        main, ["run", str(tmp_path / "s"), "--out", str(tmp_path / "out"), "--jobs", "1"], catch_exceptions=False
    )
    assert r.exit_code in (0, 1), r.output
    # one decision over the whole run (the held cases decided in one pass); the per-case status lines of a log
    # decide each case alone (size 1)
    assert whole == [4]
    assert sorted(calls) == [1, 1, 1, 1]
    cases = json.loads((tmp_path / "out" / "results.json").read_text())["cases"]
    assert [c["id"] for c in cases] == [f"scaled_exp[{d}-N={n}]" for d in ("float16", "float32") for n in (64, 9)]
    family = [
        (c["id"], i, f)
        for c in cases
        for i, rec in enumerate(c["dual_delta"])
        for f in ("p_value", "p_worst")
        if rec[f] is not None
    ]
    raw = {key: next(c for c in cases if c["id"] == key[0])["dual_delta"][key[1]][key[2]] for key in family}
    ranked = sorted(family, key=lambda key: raw[key])
    m, running, expected = len(ranked), 0.0, {}
    for j, key in enumerate(ranked, start=1):
        running = max(running, min(1.0, (m - j + 1) * raw[key]))
        expected[key] = running
    assert m >= 8
    for key in family:
        rec = next(c for c in cases if c["id"] == key[0])["dual_delta"][key[1]]
        got = rec["p_adjusted" if key[2] == "p_value" else "p_worst_adjusted"]
        assert got == pytest.approx(expected[key], rel=1e-12, abs=0)


def test_the_jobs_workers_start_from_the_runs_one_fork_server(tmp_path):
    """With ``--jobs 2`` both jobs are forked by the fork server the run launched, and each job forks its own
    worker (no job launches a server of its own, which would import torch again): the impl records the process it
    runs in, its parent and its parent's parent. The server holds the runner's modules, scipy.stats and the metrics
    engines for the jobs (their workers inherit them); with ``--jobs 1`` it holds none of them (its worker needs
    none)."""
    (tmp_path / "s").mkdir()
    record = tmp_path / "parents"
    (tmp_path / "s" / "_k.py").write_text(
        "import os, sys, time\n\ndef add(a, b):\n"
        "    grand = open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1]\n"
        f"    with open({str(record)!r}, 'a') as fh:\n"
        "        fh.write(f'{os.getpid()} {os.getppid()} {grand} '\n"
        '                 f\'{int("scipy.stats" in sys.modules)'
        ' + 2 * int("acceptance.numerics.metrics.many" in sys.modules)}\\n\')\n'
        "    time.sleep(0.2)\n    return a + b\n"
    )
    (tmp_path / "s" / "add.yaml").write_text(
        "name: slow_add\ncategory: arithmetic\nimpl: _k.py:add\nbaseline: torch:add\ndtypes: [float32]\n"
        "inputs:\n  - {name: a, shape: [N], dist: {uniform: [-1, 1]}}\n"
        "  - {name: b, shape: [N], dist: {uniform: [-1, 1]}}\n"
        "cases: [{N: 3}, {N: 4}, {N: 5}, {N: 6}, {N: 7}, {N: 8}]\ntrials: 2\nseed: 0\n"
    )
    for jobs in ("2", "1"):
        record.unlink(missing_ok=True)
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "acceptance",
                "run",
                str(tmp_path / "s"),
                "--out",
                str(tmp_path / f"out{jobs}"),
                "--jobs",
                jobs,
                "--no-cache",
            ],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert out.returncode == 0, out.stdout + out.stderr
        rows = {tuple(map(int, line.split())) for line in record.read_text().splitlines()}
        workers = {pid for pid, _, _, _ in rows}
        parents = {parent for _, parent, _, _ in rows}
        grandparents = {grand for _, _, grand, _ in rows}
        assert len(workers) == int(jobs), rows  # one worker per job, each called
        # one job: its worker starts from the fork server; two: each job forks its own worker, and both jobs
        # start from the one fork server (no job launches a server of its own)
        assert len(parents) == int(jobs) and len(grandparents) == 1, rows
        assert {loaded for _, _, _, loaded in rows} == ({3} if jobs == "2" else {0}), rows  # both, or neither


# ----------------------------------------------------------------------------- the fork server's exit

_PROBE = """
import os


class _Probe:
    def __del__(self, write=os.write):  # runs in the interpreter's teardown, and only there
        write(1, b"torn down\\n")


probe = _Probe()
"""

_LAUNCH = """
import sys
sys.path.insert(0, sys.argv[1])
from acceptance.isolation import forkserver
forkserver._preload = forkserver.PRELOAD + ["teardown_probe"]
context = forkserver.context()
child = context.Process(target=int)  # the server has run its preload once it forked this
child.start()
child.join()
print("server", multiprocessing.forkserver._forkserver._forkserver_pid, flush=True)
"""


def test_the_fork_server_ends_without_the_interpreters_teardown(tmp_path):
    """The fork server outlives the runner by its exit; a normal one tears down torch and every preloaded module
    with the runner's output still open. A probe preloaded into the server writes a line in the teardown
    alone: it must not appear, while the same probe in a process that exits normally writes it (the
    control)."""
    (tmp_path / "teardown_probe.py").write_text(_PROBE)
    control = subprocess.run(
        [sys.executable, "-c", f"import sys; sys.path.insert(0, {str(tmp_path)!r}); import teardown_probe"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert control.stdout == "torn down\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}  # the server's sys.path
    out = subprocess.run(
        [sys.executable, "-c", "import multiprocessing.forkserver\n" + _LAUNCH, str(tmp_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )  # read until the server ends
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("server ") and "torn down" not in out.stdout, out.stdout


def test_only_the_fork_server_gets_the_quick_exit(monkeypatch):
    """The mark that gives the quick exit names the launching process; the launcher's own environment is as it
    was after the launch (the mark set or not before it)."""
    from acceptance.isolation import forkserver

    assert os.environ.get(forkserver.SERVER_MARK) is None  # this process imported the module without it
    monkeypatch.setenv(forkserver.SERVER_MARK, "12345")
    forkserver._launch()  # launched, or already running: the environment is restored either way
    assert os.environ[forkserver.SERVER_MARK] == "12345"


def test_a_job_process_leaves_what_it_inherited_out_of_the_cyclic_collector(tmp_path):
    """A job's set-up freezes the objects it holds then (``gc.freeze``): torch and the runner's modules are never
    garbage, and the collector's full passes no longer traverse them. Measured in a process that sets up as a
    job does."""
    code = (
        "import gc, os, torch\nfrom acceptance.session import executors\n"
        "before = gc.get_freeze_count()\n"
        "executors.job_setup(os.getppid())\n"
        "print(before, gc.get_freeze_count(), len(gc.get_objects()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    before, frozen, tracked = map(int, out.stdout.split())
    assert before == 0 and frozen > 50_000  # torch alone is over 100,000 tracked objects
    assert tracked < frozen // 10  # what the collector still traverses: what was made since


def test_a_run_leaves_what_it_loaded_before_measuring_out_of_the_cyclic_collector(tmp_path):
    """``acceptance run`` freezes the objects of its process (torch, specs, modules) before it measures: the
    freeze count grows by at least the objects torch alone holds."""
    import gc

    gc.unfreeze()
    try:
        _run(tmp_path / "out", "--jobs", "1")
        assert gc.get_freeze_count() > 50_000
    finally:
        gc.unfreeze()


def _events_of_a_run(tmp_path: Path, monkeypatch, jobs: str) -> list[str]:
    """What ``acceptance run --jobs JOBS`` started in threads (:func:`acceptance.session.startup.meanwhile`), and
    when it began the specs' import check, in order."""
    import acceptance.isolation.importcheck
    from acceptance.session import startup
    from acceptance.session.run import _prepare_reports as prepare

    events: list[str] = []
    real_meanwhile, real_check = startup.meanwhile, acceptance.isolation.importcheck.load_checked

    def meanwhile(work) -> None:
        events.append(
            "reports"
            if work is prepare
            else "stats"
            if getattr(work, "args", ()) == ("acceptance.numerics.stats",)
            else repr(work)
        )
        real_meanwhile(work)

    def load_checked(*args, **kwargs):
        events.append("check")
        return real_check(*args, **kwargs)

    monkeypatch.setattr(startup, "meanwhile", meanwhile)
    monkeypatch.setattr(acceptance.isolation.importcheck, "load_checked", load_checked)
    _run(tmp_path / f"out{jobs}", "--jobs", jobs, "--no-cache")
    return events


def test_with_several_jobs_the_runner_loads_what_it_needs_later_while_the_import_check_runs(tmp_path, monkeypatch):
    """With several jobs the runner only waits on the fork server while the import check's child starts (the
    server preloads the jobs' modules first): scipy.stats (to decide) and the reports are loaded then, not
    while the jobs want every core. One job: the reports are prepared once the check is done, as before."""
    assert _events_of_a_run(tmp_path, monkeypatch, "2") == ["stats", "reports", "check"]
    assert _events_of_a_run(tmp_path, monkeypatch, "1") == ["check", "reports"]
