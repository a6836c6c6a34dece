"""Harness speed features: exact rounding by casts and bits, a command line that starts without torch or scipy,
the reference cache wired into runs, and --jobs; results are the same bit for bit whichever path ran."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

from acceptance import dtypes

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
    code = ("import sys, acceptance.cli as c\n"
            "try:\n    c.main(['--help'])\nexcept SystemExit:\n    pass\n"
            "print(sorted(m for m in ('torch', 'scipy', 'numba', 'pydantic') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"


# ----------------------------------------------------------------------------- cache and jobs in runs

from click.testing import CliRunner  # noqa: E402

from acceptance.cli import main  # noqa: E402

SPEC = ROOT / "operator_specs" / "softmax.yaml"
VOLATILE_ENV = ("start_time", "end_time", "command_line")


def _run(out: Path, *flags: str) -> dict:
    r = CliRunner().invoke(main, ["run", str(SPEC), "--out", str(out), "--trials", "3", "--dtype", "float16",
                                  "--only", "*-M=1*", *flags], catch_exceptions=False)
    assert r.exit_code in (0, 1), r.output
    return json.loads((out / "results.json").read_text())


def _stripped(results: dict) -> dict:
    """results.json without what legitimately differs between two runs: when they ran, the command typed, and
    the seconds each case took."""
    results = json.loads(json.dumps(results))
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
    assert cases == 2 and len(files) == 3 * 3 * cases  # inputs, baseline, oracle for 3 trials of every case
    warm = _run(tmp_path / "warm", "--jobs", "1")
    assert all(c["timing"]["baseline"] == 0 and c["timing"]["oracle"] == 0 for c in warm["cases"])  # not called
    assert all(c["timing"]["impl"] > 0 for c in warm["cases"])  # the impl always runs
    parallel = _run(tmp_path / "jobs2", "--jobs", "2", "--no-cache")
    assert all(c["timing"]["baseline"] > 0 for c in parallel["cases"])
    assert [c["id"] for c in parallel["cases"]] == [c["id"] for c in cold["cases"]]
    assert _stripped(warm) == _stripped(cold)
    assert _stripped(parallel) == _stripped(cold)


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

    from acceptance.references import spec_part
    from acceptance.spec import expand, load_spec

    spec, problems = load_spec(SPEC)
    assert not problems
    case = expand([spec])[0]
    same = dataclasses.replace(case, spec=dataclasses.replace(case.spec, impl="torch:exp", thresholds={"x": {}},
                                                              trials=99, timeout=1.0))
    assert spec_part(same) == spec_part(case)
    other_seed = dataclasses.replace(case, spec=dataclasses.replace(case.spec, seed=case.spec.seed + 1))
    other_inputs = dataclasses.replace(case, spec=dataclasses.replace(case.spec, inputs=case.spec.inputs[:0]))
    other_baseline = dataclasses.replace(case, spec=dataclasses.replace(case.spec, baseline="torch:exp"))
    assert len({spec_part(case), spec_part(other_seed), spec_part(other_inputs), spec_part(other_baseline)}) == 4
