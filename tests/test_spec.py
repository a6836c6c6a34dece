"""Spec files: validation messages, expressions, callables, case expansion, the built-in library."""

import math
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import yaml

from acceptance.formats.dtypes import TEST_DTYPES as DTYPES
from acceptance.formats.dtypes import torch_dtype
from acceptance.numerics.metrics import METRICS
from acceptance.spec import (
    CATEGORIES,
    Expr,
    SpecError,
    discover,
    expand,
    load_specs,
    parse_expr,
    resolve_callable,
)

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "operator_specs"

EXAMPLE = """\
name: matmul
category: convolution        # convolution | reduction | activation | arithmetic |
                             # pure_io | composite | atomic_add
impl: torch:matmul           # module:attr, or a .py path relative to this file:attr
baseline: torch:matmul       # optional: default = impl run on CPU
oracle: torch:matmul         # optional: default = baseline on float64 inputs
dtypes: [float16, bfloat16, float32]
inputs:
  - {name: a, shape: [M, K], dist: {uniform: [-1, 1]}}
  - {name: b, shape: [K, N], dist: {normal: [0, 1]}}
params: {}                   # keyword arguments passed to every call
cases:
  - {M: 128, N: 128, K: 128}
  - {M: 1, N: 1, K: 32}
  - {M: 1000, N: 3, K: 4097}
trials: 20
seed: 0
thresholds:                  # optional per-dtype overrides of the category defaults
  float16: {diff1: 3.0e-3, diff2: 3.0e-3}
"""

MINIMAL = """\
name: op
category: reduction
impl: torch:sum
dtypes: [float16, float32]
inputs:
  - {name: x, shape: [M, N], dist: {uniform: [-1, 1]}}
cases:
  - {M: 4, N: 5}
"""


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text))
    return path


def problems_of(folder: Path, name: str, text: str) -> list[str]:
    path = write(folder, name, text)
    specs, problems = load_specs([path])
    assert not specs
    assert all(p.file == str(path) for p in problems)
    return [f"{p.field}: {p.message}" for p in problems]


def edit(base: str, old: str, new: str) -> str:
    assert old in base
    return base.replace(old, new)


# --------------------------------------------------------------------------- the example


def test_example_loads_as_written(tmp_path):
    path = write(tmp_path, "matmul.yaml", EXAMPLE)
    specs, problems = load_specs([path])
    assert problems == []
    (spec,) = specs
    assert (spec.name, spec.category, spec.impl, spec.baseline, spec.oracle) == (
        "matmul",
        "convolution",
        "torch:matmul",
        "torch:matmul",
        "torch:matmul",
    )
    assert spec.path == path
    assert spec.dtypes == ["float16", "bfloat16", "float32"]
    assert [i.name for i in spec.inputs] == ["a", "b"]
    assert [i.dtype for i in spec.inputs] == [None, None]
    assert (spec.inputs[0].dist.lo, spec.inputs[0].dist.hi) == (-1.0, 1.0)
    assert (spec.inputs[1].dist.mean, spec.inputs[1].dist.std) == (0.0, 1.0)
    assert [c.symbols for c in spec.cases] == [
        {"M": 128, "N": 128, "K": 128},
        {"M": 1, "N": 1, "K": 32},
        {"M": 1000, "N": 3, "K": 4097},
    ]
    assert (spec.trials, spec.seed, spec.params) == (20, 0, {})
    assert spec.thresholds == {"float16": {"diff1": 3.0e-3, "diff2": 3.0e-3}}
    assert (spec.timeout, spec.atomic_runs, spec.dual_delta, spec.description) == (60.0, 2, None, "")

    cases = expand(specs)
    assert [c.id for c in cases[:3]] == [
        "matmul[float16-M=128-N=128-K=128]",
        "matmul[float16-M=1-N=1-K=32]",
        "matmul[float16-M=1000-N=3-K=4097]",
    ]
    assert len(cases) == 3 * 3
    assert len({c.id for c in cases}) == 9
    assert [c.dtype for c in cases] == ["float16"] * 3 + ["bfloat16"] * 3 + ["float32"] * 3
    assert cases[2].shapes == [(1000, 4097), (4097, 3)]
    assert cases[4].index == 1 and cases[4].symbols == {"M": 1, "N": 1, "K": 32}


def test_defaults_of_optional_fields(tmp_path):
    specs, problems = load_specs([write(tmp_path, "op.yaml", MINIMAL)])
    assert problems == []
    spec = specs[0]
    assert (spec.baseline, spec.oracle, spec.trials, spec.seed, spec.timeout, spec.atomic_runs) == (
        None,
        None,
        10,
        0,
        60.0,
        2,
    )
    assert (spec.thresholds, spec.dual_delta, spec.waivers, spec.params) == ({}, None, [], {})


@pytest.mark.parametrize("metric", METRICS)
def test_every_metric_of_the_registry_takes_a_threshold(tmp_path, metric):
    value = {"diff3": "[1.0e-3, 1.0e-4]", "diff4": "false", "snr_db": "-3.5"}.get(metric, "0.25")
    text = MINIMAL + f"thresholds:\n  float32: {{{metric}: {value}}}\n"
    specs, problems = load_specs([write(tmp_path, "op.yaml", text)])
    assert problems == []
    assert specs[0].thresholds["float32"][metric] == yaml.safe_load(value)


# --------------------------------------------------------------------------- validation messages


def test_brief_style_messages_name_file_and_path(tmp_path):
    text = edit(EXAMPLE, "{name: b, shape: [K, N]", "{name: b, shape: [Q, N]")
    path = write(tmp_path, "matmul.yaml", text)
    _, problems = load_specs([path])
    assert [str(p) for p in problems] == [f"{path}: inputs[1].shape[0]: unknown symbol 'Q' (case symbols: K, M, N)"]

    bad = write(tmp_path, "bad.yaml", edit(MINIMAL, "category: reduction", "category: conv"))
    _, problems = load_specs([bad])
    assert [str(p) for p in problems] == [
        f"{bad}: category: 'conv' is not one of convolution, reduction, activation, arithmetic, "
        "pure_io, composite, atomic_add, quantized"
    ]
    near = write(tmp_path, "near.yaml", edit(MINIMAL, "category: reduction", "category: reducton"))
    assert str(load_specs([near])[1][0]).endswith("quantized (did you mean 'reduction'?)")


@pytest.mark.parametrize(
    "old, new, expected",
    [
        (
            "dtypes: [float16, float32]",
            "dtypes: [float16, float128]",
            "dtypes[1]: 'float128' is not one of " + ", ".join(DTYPES),
        ),
        ("dtypes: [float16, float32]", "dtypes: [float16, float16]", "dtypes[1]: duplicate dtype 'float16'"),
        ("dtypes: [float16, float32]", "dtypes: []", "dtypes: expected at least 1 item(s), got 0"),
        ("impl: torch:sum", "impl: torchh:sum", "impl: 'torchh:sum': cannot import module 'torchh'"),
        (
            "impl: torch:sum",
            "impl: torch:summ",
            "impl: 'torch:summ': 'torch' has no attribute 'summ'; did you mean 'sum'?",
        ),
        ("impl: torch:sum", "impl: torch.sum", "impl: 'torch.sum' is not of the form module:attr"),
        ("impl: torch:sum", "impl: math:pi", "impl: 'math:pi' is not callable (it is a float)"),
        ("impl: torch:sum", "impl: nothere.py:f", "impl: 'nothere.py:f': no such file 'nothere.py'"),
        ("name: op", "name: my op", "name: 'my op': an operator name may contain only"),
        ("name: op\n", "", "name: required field is missing"),
        ("cases:", "trials: '20'\ncases:", "trials: expected an integer, got string '20'"),
        ("cases:", "trials: 2.5\ncases:", "trials: expected an integer, got number 2.5"),
        ("cases:", "trials: 0\ncases:", "trials: must be >= 1, got integer 0"),
        ("cases:", "timeout: 0\ncases:", "timeout: must be > 0, got integer 0"),
        ("cases:", "atomic_runs: 1\ncases:", "atomic_runs: must be >= 2, got integer 1"),
        ("cases:", "seed: true\ncases:", "seed: expected an integer, got boolean true"),
        ("cases:", "treshold: {}\ncases:", "treshold: unknown field 'treshold'; did you mean 'thresholds'?"),
        ("cases:", "params: [1, 2]\ncases:", "params: expected a mapping of keyword arguments, got a list"),
        (
            "{name: x, shape",
            "{name: x, shap: [M], shape",
            "inputs[0].shap: unknown field 'shap'; did you mean 'shape'?",
        ),
        ("shape: [M, N]", "shape: M", "inputs[0].shape: expected a list, got string 'M'"),
        ("shape: [M, N]", "shape: [M, -3]", "inputs[0].shape[1]: a dimension must be >= 0, got -3"),
        (
            "shape: [M, N]",
            "shape: [M, 2.5]",
            "inputs[0].shape[1]: expected an integer or an expression of case symbols",
        ),
        ("shape: [M, N]", "shape: [M, N/2]", "inputs[0].shape[1]: 'N/2': operator '/' is not allowed"),
        ("shape: [M, N]", "shape: [M, 'N**2']", "inputs[0].shape[1]: 'N**2': operator '**' is not allowed"),
        ("shape: [M, N]", "shape: [M, 'abs(N)']", "inputs[0].shape[1]: 'abs(N)': only symbols, integers"),
        ("shape: [M, N]", "shape: [M, 'N +']", "inputs[0].shape[1]: 'N +' is not a valid expression"),
        (
            "shape: [M, N]",
            "shape: [M, N - 6]",
            "inputs[0].shape[1]: N - 6 = -1 for cases[0] (M=4, N=5); a dimension must be >= 0",
        ),
        ("shape: [M, N]", "shape: [M, N // (M - 4)]", "inputs[0].shape[1]: N // (M - 4) divides by zero for cases[0]"),
        (
            "{uniform: [-1, 1]}",
            "{uniformm: [-1, 1]}",
            "inputs[0].dist.uniformm: unknown distribution 'uniformm'; did you mean 'uniform'?",
        ),
        ("{uniform: [-1, 1]}", "{}", "inputs[0].dist: give exactly one distribution"),
        (
            "{uniform: [-1, 1]}",
            "{uniform: [-1, 1], normal: [0, 1]}",
            "inputs[0].dist: give exactly one distribution: uniform, normal, randint, choice, sparse, specials, preset"
            " (got uniform, normal)",
        ),
        ("{uniform: [-1, 1]}", "{uniform: [1]}", "inputs[0].dist.uniform: expected 2 values [lo, hi], got 1"),
        ("{uniform: [-1, 1]}", "{uniform: [1, -1]}", "inputs[0].dist.uniform: needs finite lo < hi, got [1.0, -1.0]"),
        (
            "{uniform: [-1, 1]}",
            "{uniform: [-1, x]}",
            "inputs[0].dist.uniform[1]: unknown symbol 'x' (case symbols: M, N)",
        ),
        ("{uniform: [-1, 1]}", "{normal: [0, -1]}", "inputs[0].dist.normal: needs a finite mean and std >= 0"),
        (
            "{uniform: [-1, 1]}",
            "{randint: [0, 1.5]}",
            "inputs[0].dist.randint[1]: expected an integer or an expression",
        ),
        (
            "{uniform: [-1, 1]}",
            "{randint: [M, 2]}",
            "inputs[0].dist.randint: needs lo < hi (hi is exclusive), got [4, 2] for cases[0] (M=4, N=5)",
        ),
        ("{uniform: [-1, 1]}", "{choice: []}", "inputs[0].dist.choice: expected at least 1 item(s), got 0"),
        (
            "{uniform: [-1, 1]}",
            "{choice: [1, abc]}",
            "inputs[0].dist.choice[1]: expected a number (.inf, -.inf, .nan allowed), got string 'abc'",
        ),
        (
            "{uniform: [-1, 1]}",
            "{sparse: {density: 1.5, of: {uniform: [0, 1]}}}",
            "inputs[0].dist.sparse.density: must be <= 1, got number 1.5",
        ),
        (
            "{uniform: [-1, 1]}",
            "{sparse: {density: 0.5, of: {normal: [0]}}}",
            "inputs[0].dist.sparse.of.normal: expected 2 values [mean, std], got 1",
        ),
        (
            "{uniform: [-1, 1]}",
            "{specials: {fraction: 0.1, values: [], of: {normal: [0, 1]}}}",
            "inputs[0].dist.specials.values: expected at least 1 item(s), got 0",
        ),
        (
            "dist: {uniform: [-1, 1]}}",
            "dist: {uniform: [-1, 1]}, dtype: int65}",
            "inputs[0].dtype: 'int65' is not one of int64, int32, int16, int8, uint8, bool (did you mean 'int64'?)",
        ),
        (
            "dist: {uniform: [-1, 1]}}",
            "dist: {uniform: [-1, 1]}, dtype: int64}",
            "inputs[0].dist: uniform draws real numbers; int64 input needs randint or choice",
        ),
        (
            "dist: {uniform: [-1, 1]}}",
            "dist: {randint: [0, 300]}, dtype: int8}",
            "inputs[0].dist.randint: [0, 300) does not fit int8 (-128 .. 127)",
        ),
        (
            "dist: {uniform: [-1, 1]}}",
            "dist: {randint: [0, 3]}, dtype: bool}",
            "inputs[0].dist.randint: [0, 3) does not fit bool (0 .. 1)",
        ),
        (
            "dist: {uniform: [-1, 1]}}",
            "dist: {choice: [0, 1.5]}, dtype: int32}",
            "inputs[0].dist.choice: 1.5 is not an integer in int32 range",
        ),
        (
            "  - {name: x,",
            "  - {name: x, shape: [M], dist: {normal: [0, 1]}}\n  - {name: x,",
            "inputs[1].name: duplicate input name 'x' (also inputs[0])",
        ),
        (
            "inputs:\n  - {name: x, shape: [M, N], dist: {uniform: [-1, 1]}}\n",
            "inputs: []\n",
            "inputs: expected at least 1 item(s), got 0",
        ),
        (
            "  - {M: 4, N: 5}",
            "  - {M: 4, N: 5}\n  - {M: 4}",
            "cases[1]: missing symbol 'N' (used by inputs[0].shape[1])",
        ),
        (
            "  - {M: 4, N: 5}",
            "  - {M: 4, N: 5, dim: 1}",
            "cases[0].dim: symbol 'dim' is used by no input shape or bound (used: M, N);"
            " put keyword arguments under params",
        ),
        (
            "  - {M: 4, N: 5}",
            "  - {M: 4, N: five}",
            "cases[0].N: expected an integer, got string 'five'; case keys are integer symbols,"
            " put keyword arguments under params",
        ),
        (
            "  - {M: 4, N: 5}",
            "  - {M: 4, N: 5, params: [1]}",
            "cases[0].params: expected a mapping of keyword arguments, got a list",
        ),
        (
            "  - {M: 4, N: 5}",
            "  - {M: 4, N: 5, params: {f: !!set {a}}}",
            "cases[0].params: f: a set is not a plain value",
        ),
        ("cases:\n  - {M: 4, N: 5}\n", "cases: []\n", "cases: expected at least 1 item(s), got 0"),
        ("cases:\n  - {M: 4, N: 5}\n", "", "inputs[0].shape[0]: unknown symbol 'M' (case symbols: none)"),
        ("cases:", "thresholds: {float16: {diff9: 1}}\ncases:", "thresholds.float16.diff9: unknown metric 'diff9'"),
        (
            "cases:",
            "thresholds: {float16: {diff1: -1}}\ncases:",
            "thresholds.float16.diff1: a threshold must be a number >= 0, got -1",
        ),
        (
            "cases:",
            "thresholds: {float16: {diff1: .nan}}\ncases:",
            "thresholds.float16.diff1: a threshold must be a number >= 0, got nan",
        ),
        (
            "cases:",
            "thresholds: {float16: {diff1: '1e-3'}}\ncases:",
            "thresholds.float16.diff1: expected a number, got string '1e-3'",
        ),
        (
            "cases:",
            "thresholds: {float16: {diff3: [1e-3]}}\ncases:",
            "thresholds.float16.diff3: expected 2 values [m1, m2], got 1",
        ),
        (
            "cases:",
            "thresholds: {float16: {diff4: 0.5}}\ncases:",
            "thresholds.float16.diff4: expected true or false, got number 0.5",
        ),
        ("cases:", "thresholds: {float12: {diff1: 1}}\ncases:", "thresholds.float12: 'float12' is not one of"),
        (
            "cases:",
            "thresholds: {float64: {diff1: 1}}\ncases:",
            "thresholds.float64: dtype 'float64' is not tested (dtypes: float16, float32)",
        ),
        ("cases:", "oracle: {mpmath: 3}\ncases:", "oracle: mpmath: expected a function name, got integer 3"),
        (
            "cases:",
            "oracle: {mpmath: exp, dps: '50'}\ncases:",
            "oracle: dps: expected an integer >= 20 (decimal digits), got string '50'",
        ),
        (
            "cases:",
            "oracle: {mpmath: exp, dps: 5}\ncases:",
            "oracle: dps: expected an integer >= 20 (decimal digits), got integer 5",
        ),
        ("cases:", "oracle: {mpmath: expp}\ncases:", "oracle: mpmath: mpmath oracle: unknown function 'expp'"),
        (
            "cases:",
            "oracle: {mpmath: exp, digits: 50}\ncases:",
            "oracle: unknown key 'digits' in an mpmath oracle (keys: mpmath, dps)",
        ),
        (
            "cases:",
            "oracle: 3\ncases:",
            "oracle: expected module:attr or a mapping {mpmath: <function>, dps: <digits>}, got integer 3",
        ),
        ("cases:", "dual_delta: {alpha: 1.5}\ncases:", "dual_delta.alpha: must be < 1, got number 1.5"),
        ("cases:", "dual_delta: {trials: 4}\ncases:", "dual_delta.trials: must be >= 5, got integer 4"),
        (
            "cases:",
            "dual_delta: {enabled: yes}\ncases:",
            "dual_delta.enabled: expected true or false, got string 'yes'",
        ),
        ("cases:", "dual_delta: {metrics: [diff3]}\ncases:", "dual_delta.metrics[0]: 'diff3' is not a scalar metric"),
        ("cases:", "dual_delta: {metrics: [max_abss]}\ncases:", "dual_delta.metrics[0]: 'max_abss' is not one of"),
        ("cases:", "dual_delta: {factor: 0}\ncases:", "dual_delta.factor: expected a number > 0, got integer 0"),
        (
            "cases:",
            "dual_delta: {factor: {max_abs: -2}}\ncases:",
            "dual_delta.factor: max_abs: expected a number > 0, got integer -2",
        ),
        ("cases:", "dual_delta: {factor: {diff4: 2}}\ncases:", "dual_delta.factor: 'diff4' is not a scalar metric"),
        ("cases:", "dual_delta: {seed: 2}\ncases:", "dual_delta.seed: unknown field 'seed'"),
        (
            "cases:",
            "waivers: [{match: 'nothing*', reason: known}]\ncases:",
            "waivers[0].match: 'nothing*' matches no case id of this operator (e.g. op[float16-M=4-N=5])",
        ),
        ("cases:", "waivers: [{match: 'op*'}]\ncases:", "waivers[0].reason: required field is missing"),
    ],
)
def test_each_problem_names_the_field(tmp_path, old, new, expected):
    found = problems_of(tmp_path, "spec.yaml", edit(MINIMAL, old, new))
    assert any(line.startswith(expected) for line in found), found


def test_date_like_param_is_a_string(tmp_path):
    path = write(tmp_path, "op.yaml", edit(MINIMAL, "  - {M: 4, N: 5}", "  - {M: 4, N: 5, params: {when: 2024-01-01}}"))
    specs, problems = load_specs([path])
    assert problems == [] and specs[0].cases[0].params == {"when": "2024-01-01"}


def test_all_problems_of_all_files_are_collected(tmp_path):
    write(
        tmp_path,
        "a.yaml",
        edit(edit(MINIMAL, "category: reduction", "category: conv"), "impl: torch:sum", "impl: torch:nope"),
    )
    write(
        tmp_path,
        "b.yaml",
        edit(edit(MINIMAL, "name: op", "name: op2"), "shape: [M, N]", "shape: [M, Q]")
        + "trials: -1\nthresholds: {float64: {diff1: 1}}\n",
    )
    write(tmp_path, "c.yaml", "name: x\n  bad: [\n")
    write(tmp_path, "d.yaml", MINIMAL.replace("name: op", "name: fine"))
    specs, problems = load_specs([tmp_path])
    assert [s.name for s in specs] == ["fine"]
    lines = [f"{Path(p.file).name}: {p.field}: {p.message}" for p in problems]
    assert lines[0].startswith("a.yaml: category: 'conv' is not one of")
    assert lines[1].startswith("a.yaml: impl: 'torch:nope': 'torch' has no attribute 'nope'")
    # b.yaml: a schema problem (trials) does not hide the symbol and dtype problems
    assert "b.yaml: trials: must be >= 1, got integer -1" in lines
    assert "b.yaml: inputs[0].shape[1]: unknown symbol 'Q' (case symbols: M, N)" in lines
    assert "b.yaml: thresholds.float64: dtype 'float64' is not tested (dtypes: float16, float32)" in lines
    assert (
        "b.yaml: cases[0].N: symbol 'N' is used by no input shape or bound (used: M, Q); "
        "put keyword arguments under params"
    ) in lines
    assert any(
        line.startswith("c.yaml: line 2, column 6: YAML error: mapping values are not allowed") for line in lines
    )
    assert len(lines) == 7


def test_unreadable_files_give_problems_not_tracebacks(tmp_path):
    (tmp_path / "binary.yaml").write_bytes(b"\xff\xfe\x00garbage")
    (tmp_path / "empty.yaml").write_text("")
    (tmp_path / "list.yaml").write_text("- a\n- b\n")
    (tmp_path / "dup.yaml").write_text(MINIMAL.replace("  - {M: 4, N: 5}", "  - {M: 4, N: 5, M: 6}"))
    (tmp_path / "two.yaml").write_text(MINIMAL + "---\n" + MINIMAL)
    (tmp_path / "raises.py").write_text("raise RuntimeError('broken on import')\n")
    (tmp_path / "imports.yaml").write_text(edit(MINIMAL, "impl: torch:sum", "impl: raises.py:f"))
    (tmp_path / "loop.yaml").write_text(edit(MINIMAL, "cases:", "params: &p {a: *p}\ncases:"))
    specs, problems = load_specs([tmp_path, tmp_path / "missing.yaml", tmp_path / "emptydir"])
    assert specs == []
    text = "\n".join(map(str, problems))
    assert f"{tmp_path / 'binary.yaml'}: cannot read the file" in text
    assert (
        f"{tmp_path / 'empty.yaml'}: expected a mapping (name, category, impl, ...) at the top level, got an empty file"
        in text
    )
    assert (
        f"{tmp_path / 'list.yaml'}: expected a mapping (name, category, impl, ...) at the top level, got a list" in text
    )
    assert f"{tmp_path / 'dup.yaml'}: line 8, column 18: YAML error: duplicate key 'M'" in text
    assert (
        f"{tmp_path / 'two.yaml'}: line 9, column 1: YAML error: expected a single document in the stream,"
        " but found another document" in text
    )
    assert (f"{tmp_path / 'imports.yaml'}: impl: cannot import raises.py: RuntimeError: broken on import") in text
    assert f"{tmp_path / 'missing.yaml'}: cannot read the file: No such file or directory" in text
    assert f"{tmp_path / 'emptydir'}: cannot read the file: No such file or directory" in text
    assert f"{tmp_path / 'loop.yaml'}: a YAML alias refers to itself; the spec must be a finite tree" in text
    assert len(problems) == 9


def test_empty_folder_is_a_problem(tmp_path):
    (tmp_path / "specs").mkdir()
    specs, problems = load_specs([tmp_path / "specs"])
    assert specs == [] and [str(p) for p in problems] == [
        f"{tmp_path / 'specs'}: no spec files (*.yaml, *.yml) in this folder"
    ]


def test_duplicate_operator_names_across_files(tmp_path):
    first = write(tmp_path, "a/one.yaml", MINIMAL)
    second = write(tmp_path, "b/two.yaml", MINIMAL)
    specs, problems = load_specs([tmp_path])
    assert [s.path for s in specs] == [first]
    assert [str(p) for p in problems] == [f"{second}: name: operator 'op' is already defined in {first}"]


def test_yaml_is_read_with_yaml_12_scalars(tmp_path):
    text = edit(
        MINIMAL,
        "cases:",
        "thresholds: {float16: {diff1: 1e-5, diff2: 3E-3, max_ulp: 2}}\nparams: {mode: no, flag: true, n: 010}\ncases:",
    )
    specs, problems = load_specs([write(tmp_path, "op.yaml", text)])
    assert problems == []
    assert specs[0].thresholds == {"float16": {"diff1": 1e-5, "diff2": 3e-3, "max_ulp": 2.0}}
    assert specs[0].params == {"mode": "no", "flag": True, "n": 10}


# --------------------------------------------------------------------------- expressions


@pytest.mark.parametrize(
    "text, symbols, value",
    [
        ("N*2", {"N": 7}, 14),
        ("(M + 1) // 2", {"M": 8}, 4),
        ("(M + 1) // 2", {"M": 9}, 5),
        ("K - M * 2 + 3", {"K": 100, "M": 10}, 83),
        ("-M + 10", {"M": 3}, 7),
        ("N // 3 * 3", {"N": 10}, 9),
    ],
)
def test_expression_values(text, symbols, value):
    expr = parse_expr(text)
    assert isinstance(expr, Expr)
    assert expr.evaluate(symbols) == value
    assert set(expr.names) == set(symbols)


def test_constant_expressions_fold_to_integers():
    assert parse_expr("3 * (4 + 1)") == 15
    assert parse_expr("7 // 2") == 3


@pytest.mark.parametrize(
    "text, message",
    [
        ("M / 2", "operator '/' is not allowed"),
        ("M ** 2", "operator '**' is not allowed"),
        ("M % 2", "operator '%' is not allowed"),
        ("__import__('os').system('true')", "only symbols, integers"),
        ("M.real", "only symbols, integers"),
        ("M if N else K", "only symbols, integers"),
        ("1.5 * M", "only integer constants are allowed"),
        ("True + M", "only integer constants are allowed"),
        ("M +", "is not a valid expression"),
        ("4 // 0", "division by zero"),
    ],
)
def test_expressions_reject_everything_else(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace("*", r"\*")):
        parse_expr(text)


def test_expression_shapes_and_bounds_per_case(tmp_path):
    text = """\
    name: exprs
    category: pure_io
    impl: torch:clone
    dtypes: [float32]
    inputs:
      - {name: x, shape: [N*2, (M+1)//2, 3], dist: {uniform: [LO, HI]}}
      - {name: i, shape: [N - 1], dtype: int32, dist: {randint: [0, N]}}
    cases:
      - {N: 4, M: 9, LO: -1, HI: 2}
      - {N: 1, M: 0, LO: 5, HI: 10}
    """
    specs, problems = load_specs([write(tmp_path, "exprs.yaml", text)])
    assert problems == []
    first, second = expand(specs)
    assert first.shapes == [(8, 5, 3), (3,)]
    assert second.shapes == [(2, 0, 3), (0,)]
    assert first.id == "exprs[float32-N=4-M=9-LO=-1-HI=2]"


# --------------------------------------------------------------------------- callables


def test_callable_from_a_py_file_next_to_the_spec(tmp_path):
    write(
        tmp_path,
        "kernels/my_kernels.py",
        """\
    import torch

    def my_matmul(a, b, scale=1.0):
        return torch.matmul(a, b) * scale

    class Ops:
        @staticmethod
        def twice(x):
            return 2 * x
    """,
    )
    spec_path = write(
        tmp_path, "kernels/matmul.yaml", edit(EXAMPLE, "impl: torch:matmul", "impl: my_kernels.py:my_matmul")
    )
    path_before = list(sys.path)
    fn = resolve_callable("my_kernels.py:my_matmul", spec_path)
    assert sys.path == path_before
    assert "my_kernels" not in sys.modules
    a, b = torch.tensor([[1.0, 2.0]]), torch.tensor([[3.0], [4.0]])
    assert fn(a, b, scale=0.5).item() == 0.5 * (1 * 3 + 2 * 4)
    assert resolve_callable("my_kernels.py:Ops.twice", spec_path)(torch.tensor(3.0)).item() == 6.0
    # the same file is imported once, whichever spec names it
    assert resolve_callable("kernels/my_kernels.py:my_matmul", tmp_path / "other.yaml") is fn
    specs, problems = load_specs([spec_path])
    assert problems == [] and specs[0].impl == "my_kernels.py:my_matmul"


def test_callable_from_dotted_modules_and_attributes():
    assert resolve_callable("torch:matmul", Path("x.yaml")) is torch.matmul
    assert resolve_callable("torch.nn.functional:gelu", Path("x.yaml")) is torch.nn.functional.gelu
    assert resolve_callable("torch:Tensor.add", Path("x.yaml")) is torch.Tensor.add


@pytest.mark.parametrize(
    "ref, message",
    [
        ("torch.matmul", "is not of the form module:attr"),
        (":matmul", "is not of the form module:attr"),
        ("torch:", "is not of the form module:attr"),
        ("no_such_module_xyz:f", "cannot import module 'no_such_module_xyz'"),
        ("torch:Tensor.nope", "'torch:Tensor' has no attribute 'nope'"),
        ("missing.py:f", "no such file 'missing.py'"),
        ("math:pi", "is not callable"),
    ],
)
def test_callable_errors(ref, message):
    with pytest.raises(SpecError, match=message):
        resolve_callable(ref, Path("/nonexistent/spec.yaml"))


# --------------------------------------------------------------------------- discovery and expansion


def test_discover_sorts_recurses_and_skips_underscore_and_dot_entries(tmp_path):
    for name in [
        "b.yaml",
        "a.yml",
        "sub/c.yaml",
        "_private/d.yaml",
        "_e.yaml",
        ".hidden/f.yaml",
        "notes.txt",
        "sub/_g.yml",
    ]:
        write(tmp_path, name, "x: 1\n")
    explicit = tmp_path / "_private" / "d.yaml"
    assert discover([tmp_path, explicit]) == [
        tmp_path / "a.yml",
        tmp_path / "b.yaml",
        tmp_path / "sub" / "c.yaml",
        explicit,
    ]
    assert discover([tmp_path / "b.yaml", tmp_path]) == [
        tmp_path / "b.yaml",
        tmp_path / "a.yml",
        tmp_path / "sub" / "c.yaml",
    ]


CASES = """\
name: ops
category: activation
impl: torch:exp
dtypes: [float16, bfloat16, float32]
inputs:
  - {name: x, shape: [N], dist: {uniform: [-1, 1]}}
params: {alpha: 1}
cases:
  - {N: 8}
  - {N: 8, params: {alpha: 2.5, mode: tanh}}
  - {N: 8}
  - {N: 3, params: {sizes: [1, 2], flag: true, cap: .inf}}
"""


def test_case_ids_params_and_collisions(tmp_path):
    specs, problems = load_specs([write(tmp_path, "ops.yaml", CASES)])
    assert problems == []
    cases = expand(specs, dtypes=["float16"])
    assert [c.id for c in cases] == [
        "ops[float16-N=8]",
        "ops[float16-N=8-alpha=2.5-mode=tanh]",
        "ops[float16-N=8#2]",
        "ops[float16-N=3-sizes=[1,2]-flag=true-cap=inf]",
    ]
    assert cases[0].params == {"alpha": 1}
    assert cases[1].params == {"alpha": 2.5, "mode": "tanh"}
    assert cases[1].case_params == {"alpha": 2.5, "mode": "tanh"}
    assert cases[3].params == {"alpha": 1, "sizes": [1, 2], "flag": True, "cap": math.inf}
    assert [c.index for c in cases] == [0, 1, 2, 3]


def test_cases_without_symbols(tmp_path):
    text = """\
    name: fixed
    category: activation
    impl: torch:exp
    dtypes: [float32, float16]
    inputs:
      - {name: x, shape: [16], dist: {uniform: [-1, 1]}}
    """
    specs, problems = load_specs([write(tmp_path, "fixed.yaml", text)])
    assert problems == []
    assert [(c.id, c.shapes) for c in expand(specs)] == [("fixed[float32]", [(16,)]), ("fixed[float16]", [(16,)])]


def test_dtype_filter_and_only_glob(tmp_path):
    write(tmp_path, "ops.yaml", CASES)
    write(tmp_path, "matmul.yaml", EXAMPLE)
    specs, problems = load_specs([tmp_path])
    assert problems == []
    every = expand(specs)
    assert len(every) == 3 * 3 + 3 * 4

    f32 = expand(specs, dtypes=["float32"])
    assert [c.id for c in f32] == [c.id for c in every if c.dtype == "float32"]
    assert expand(specs, dtypes=["float64"]) == []
    with pytest.raises(SpecError, match="unknown dtype 'float33' is not one of"):
        expand(specs, dtypes=["float33"])

    assert {c.spec.name for c in expand(specs, only="matmul")} == {"matmul"}
    assert len(expand(specs, only="matmul")) == 9
    assert len(expand(specs, only="mat*")) == 9
    assert [c.id for c in expand(specs, only="matmul[bfloat16-*")] == [
        "matmul[bfloat16-M=128-N=128-K=128]",
        "matmul[bfloat16-M=1-N=1-K=32]",
        "matmul[bfloat16-M=1000-N=3-K=4097]",
    ]
    # brackets are literal, so an id is its own pattern
    assert [c.id for c in expand(specs, only="matmul[float16-M=1-N=1-K=32]")] == ["matmul[float16-M=1-N=1-K=32]"]
    assert [c.id for c in expand(specs, only="*-N=1-*")] == [
        f"matmul[{d}-M=1-N=1-K=32]" for d in ("float16", "bfloat16", "float32")
    ]
    assert [c.id for c in expand(specs, only="ops[float32-N=8#2]")] == ["ops[float32-N=8#2]"]
    assert [c.id for c in expand(specs, dtypes=["float16"], only="*mode=tanh*")] == [
        "ops[float16-N=8-alpha=2.5-mode=tanh]"
    ]
    assert expand(specs, only="nothing") == []


def test_ids_do_not_depend_on_filters(tmp_path):
    specs, _ = load_specs([write(tmp_path, "ops.yaml", CASES)])
    every = {(c.dtype, c.index): c.id for c in expand(specs)}
    for dtype in ("float16", "bfloat16", "float32"):
        for case in expand(specs, dtypes=[dtype], only="*#2*"):
            assert case.id == every[(dtype, case.index)]


def test_waivers_mark_matching_cases(tmp_path):
    text = EXAMPLE + "waivers:\n  - {match: 'matmul[bfloat16-*K=4097]', reason: bf16 split-K known}\n"
    specs, problems = load_specs([write(tmp_path, "matmul.yaml", text)])
    assert problems == []
    waived = {c.id: c.waiver for c in expand(specs) if c.waiver}
    assert waived == {"matmul[bfloat16-M=1000-N=3-K=4097]": "bf16 split-K known"}


# --------------------------------------------------------------------------- the built-in library

REQUIRED = {
    "convolution": {"matmul", "conv2d"},
    "reduction": {"sum", "mean", "norm"},
    "activation": {"softmax", "gelu", "silu", "exp"},
    "arithmetic": {"add", "mul"},
    "pure_io": {"cat", "transpose_copy", "index_select"},
    "composite": {"layer_norm", "sdpa"},
    "atomic_add": {"index_add", "scatter_add"},
}


@pytest.fixture(scope="module")
def library():
    specs, problems = load_specs([LIBRARY])
    assert [str(p) for p in problems] == []
    return specs


def test_library_covers_every_category(library):
    by_category = {}
    for spec in library:
        by_category.setdefault(spec.category, set()).add(spec.name)
    assert set(by_category) == set(CATEGORIES)
    for category, names in REQUIRED.items():
        assert names <= by_category[category], category


def test_library_expansion_count(library):
    expected = 0
    for path in discover([LIBRARY]):
        raw = yaml.safe_load(path.read_text())
        # a case with a preset list is one case per preset
        expected += len(raw["dtypes"]) * sum(
            len(c["preset"]) if isinstance(c.get("preset"), list) else 1 for c in raw["cases"]
        )
        if path.parent == LIBRARY and raw["category"] != "quantized":  # vendor_math/: numpy/scipy functions (no
            # bfloat16); a quantized kernel's output dtype is its own (float32 for GGML's)
            assert {"float16", "bfloat16", "float32"} <= set(raw["dtypes"]), path.name
    cases = expand(library)
    assert len(cases) == expected
    assert len({c.id for c in cases}) == expected


def test_library_has_the_sizes_that_expose_bugs(library):
    symbols = {spec.name: [c.symbols for c in spec.cases] for spec in library}
    assert any(s["N"] == 65537 for s in symbols["sum"]) and any(s["N"] == 4097 for s in symbols["sum"])
    assert any(s["M"] == 1 for s in symbols["matmul"]) and any(s["N"] == 1 for s in symbols["matmul"])
    assert any(s["K"] == 4097 for s in symbols["matmul"])
    ranges = {(s["LO"], s["HI"]) for cases in symbols.values() for s in cases if "LO" in s}
    assert {(-1, 1), (-10, 10), (1, 5), (5, 10)} <= ranges


def _conv_out(size, kernel, stride, padding):
    return (size + 2 * padding - kernel) // stride + 1


def _expected_shape(name, s, p):
    """The output shape of each library operator, from its definition."""
    if name in ("matmul", "q4_0_q8_1_matmul"):
        return (s["M"], s["N"])
    if name == "conv2d":
        stride, pad = p.get("stride", 1), p.get("padding", 0)
        return (s["N"], s["O"], _conv_out(s["H"], s["R"], stride, pad), _conv_out(s["W"], s["S"], stride, pad))
    if name in ("sum", "mean", "norm"):
        return (s["N"],) if p["dim"] == 0 else (s["M"],)
    if name in ("softmax", "add", "mul", "layer_norm", "index_add", "scatter_add"):
        return (s["M"], s["N"])
    if name in ("gelu", "silu", "exp") or name.startswith(("np_", "scipy_")):
        return (s["N"],)
    if name == "cat":
        return (s["M"] + s["P"], s["N"]) if p["dim"] == 0 else (s["M"], s["N"] + s["Q"])
    if name == "transpose_copy":
        return (s["N"], s["M"])
    if name == "index_select":
        return (s["K"], s["N"])
    if name == "sdpa":
        return (s["B"], s["H"], s["L"], s["E"])
    raise AssertionError(f"no expected shape for {name}")


def test_every_library_case_runs_on_cpu_in_every_dtype(library):
    """One trial of every case in every dtype: right shape and dtype, finite (no float16 overflow)."""
    from acceptance.formats.quant import packed_shape
    from acceptance.spec.inputs import RoleInputs, generate

    forward = [spec for spec in library if spec.tier == "default" and spec.backward is None]  # large: LLM shapes
    for case in expand(forward):  # the gradient specs' forward calls run in tests/test_backward.py
        fn = resolve_callable(case.spec.impl, case.spec.path)
        inputs = generate(case, 0)
        if isinstance(inputs, RoleInputs):  # quantized inputs: the impl gets the packed blocks
            inputs = inputs.impl
        assert [tuple(t.shape) for t in inputs] == [
            packed_shape(shape, inp.quant) if inp.quant else shape
            for shape, inp in zip(case.shapes, case.spec.inputs, strict=False)
        ]
        out = fn(*inputs, **case.params)
        assert tuple(out.shape) == _expected_shape(case.spec.name, case.symbols, case.params), case.id
        assert out.dtype == torch_dtype(case.dtype), case.id
        assert torch.isfinite(out).all(), case.id
