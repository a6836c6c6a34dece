"""Device-faithful testing end to end: the spec's emulate section, presets as a case axis, the oracle's range,
input layouts, the edge sweep, run-to-run determinism, --seeds and the sanitizer's report parsing."""

from __future__ import annotations

import math
import shutil
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

from acceptance.measure.determinism import compare
from acceptance.measure.sanitize import findings
from acceptance.numerics.emulate.roles import emulated_baseline
from acceptance.report.buckets import bucket_table
from acceptance.report.text import deciding_criterion
from acceptance.session.run import run_cases
from acceptance.spec import expand, load_spec, load_specs
from acceptance.spec.axes import with_seeds
from acceptance.spec.inputs import generate

HERE = Path(__file__).parent
STUDY = HERE.parent / "examples" / "mfma_specs"
CPU = torch.device("cpu")


def write(folder: Path, name: str, body: str) -> Path:
    shutil.copy(HERE / "faithful_kernels.py", folder / "faithful_kernels.py")
    path = folder / f"{name}.yaml"
    path.write_text(f"name: {name}\n{body}")
    return path


MATMUL = """category: convolution
impl: torch:matmul
dtypes: [float16, float32]
inputs:
  - {name: a, shape: [M, K], dist: {uniform: [-1, 1]}}
  - {name: b, shape: [K, N], dist: {uniform: [-1, 1]}}
cases: [{M: 4, N: 3, K: 8}]
trials: 2
"""


def problems(tmp_path, body) -> list[str]:
    spec, found = load_spec(write(tmp_path, "op", body))
    assert spec is None
    return [str(p).split(": ", 1)[1] for p in found]


# --------------------------------------------------------------------------- the emulate section


def test_emulate_resolves_per_dtype_with_overrides(tmp_path):
    spec, found = load_spec(
        write(
            tmp_path,
            "op",
            MATMUL
            + """emulate:
  contraction: matmul
  ftz: true
  tf32: true
  accumulate: {dtype: float32, chunk: 4, rounding: truncate, fused: true}
  dtypes:
    float32: {ftz: false, accumulate: false}
""",
        )
    )
    assert found == []
    h, f = spec.emulate["float16"], spec.emulate["float32"]
    assert h.ftz_inputs == 2.0**-14 and h.tf32 is None  # float16's smallest normal; TF32 is for float32 only
    assert (h.accumulate.dtype, h.accumulate.chunk, h.accumulate.rounding, h.accumulate.fused) == (
        "float32",
        4,
        "truncate",
        True,
    )
    assert f.ftz_inputs is None and f.accumulate is None and f.tf32 == "nearest_away"
    assert h.describe() == (
        "flush inputs |x| < 6.1035e-05 to ±0; emulated matmul: float32 accumulator, groups of 4 "
        "exact products (fused with the accumulator, truncated)"
    )


@pytest.mark.parametrize(
    "emulate, expected",
    [
        (
            "{accumulate: {dtype: float32, chunk: 4}}",
            "emulate: accumulate needs `contraction: matmul | bmm | linear | conv2d`",
        ),
        (
            "{contraction: softmax, accumulate: {dtype: float32}}",
            "emulate: contraction: 'softmax' is not one of matmul, bmm, linear, conv2d",
        ),
        ("{contraction: matmul, accumulate: {dtype: float64}}", "emulate.accumulate"),
        ("{ftz: -1.0}", "emulate.ftz"),
        ("{dtypes: {bfloat16: {ftz: true}}}", "emulate.dtypes.bfloat16: 'bfloat16' is not one of the spec's dtypes"),
    ],
)
def test_emulate_spec_errors_name_the_field(tmp_path, emulate, expected):
    found = problems(tmp_path, MATMUL + f"emulate: {emulate}\n")
    assert any(line.startswith(expected) for line in found), found


def test_params_the_emulated_contraction_does_not_take_are_a_spec_error(tmp_path):
    body = MATMUL.replace("trials: 2", "trials: 2\nparams: {alpha: 2}")
    found = problems(tmp_path, body + "emulate: {contraction: matmul, accumulate: {dtype: float32}}\n")
    assert found == ["params.alpha: the emulated matmul does not take 'alpha' (it takes a, b)"]


def _round(x: Fraction, p: int, emin: int, emax: int, truncate: bool) -> Fraction | float:
    """Exact x rounded to a binary format (precision p, smallest normal 2**emin): nearest-even or toward zero;
    beyond the largest finite value, inf (nearest) or the largest value (truncate)."""
    if x == 0:
        return Fraction(0)
    e = max(math.floor(math.log2(abs(x))), emin)
    while Fraction(2) ** e > abs(x) and e > emin:
        e -= 1
    while Fraction(2) ** (e + 1) <= abs(x):
        e += 1
    q = Fraction(2) ** (e - p + 1)
    n, rest = divmod(abs(x), q)
    if not truncate and (rest > q / 2 or (rest == q / 2 and n % 2)):
        n += 1
    top = (2 - Fraction(1, 2 ** (p - 1))) * Fraction(2) ** emax
    r = n * q
    if r > top:
        return math.copysign(math.inf, x) if not truncate else (top if x > 0 else -top)
    return r if x > 0 else -r


def test_spec_emulated_baseline_is_flush_then_fused_dot4_truncation_then_float16(tmp_path):
    """The baseline a spec gets from `emulate:` against an independent Fraction computation: inputs below
    2**-14 set to 0, D = RZ_fp32(D + four exact products) along K, then float16 round-to-nearest-even.
    Rows hold a subnormal input, a float16 tie and a float16 overflow."""
    spec, _ = load_spec(
        write(
            tmp_path,
            "op",
            MATMUL.replace("[float16, float32]", "[float16]")
            + """emulate:
  contraction: matmul
  ftz: true
  accumulate: {dtype: float32, chunk: 4, rounding: truncate, fused: true}
""",
        )
    )
    a = torch.tensor(
        [
            [2.0**-15, 1.0, 2.0**-14, -(2.0**-20), 0.5, 0.25, 3.0, 1.0],  # subnormals flushed
            [1024.0, 1.0, 0.5, 0.0, 0.0, 0.0, 0.0, 0.0],  # 1025.5: a float16 tie
            [255.875, 16.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0],
        ],
        dtype=torch.float16,
    )  # 65504 + 16 + ...
    b = torch.tensor(
        [
            [1.0, 1.0, 2.0**-15],
            [1.0, 1.0, 1.0],
            [4.0, 1.0, 1.0],
            [1.0, 1.0, 1.0],
            [1.0, 1.0, 1.0],
            [1.0, 1.0, 1.0],
            [1.0, 1.0, 1.0],
            [1.0, 1.0, 1.0],
        ],
        dtype=torch.float16,
    )
    b[0, 0] = 256.0
    got = emulated_baseline(None, spec.emulate["float16"])(a, b)
    for i in range(3):
        for j in range(3):
            row = [Fraction(float(v)) if abs(float(v)) >= 2.0**-14 else Fraction(0) for v in a[i]]
            col = [Fraction(float(v)) if abs(float(v)) >= 2.0**-14 else Fraction(0) for v in b[:, j]]
            acc = Fraction(0)
            for k0 in range(0, 8, 4):
                acc = _round(acc + sum(row[k] * col[k] for k in range(k0, k0 + 4)), 24, -126, 127, truncate=True)
            want = _round(Fraction(acc), 11, -14, 15, truncate=False)
            assert float(got[i, j]) == float(want), (i, j)
    assert float(got[1, 1]) == 1026.0  # 1025.5 ties to even
    assert math.isinf(float(got[2, 0]))  # 255.875*256 + 16 + 6 = 65526 >= 65520 rounds to inf


# --------------------------------------------------------------------------- the study


def _ge_1e3(case) -> int:
    return sum(case.rel_error_buckets.get(k, 0) for k in ("1e-3..1e-2", "1e-2..1e-1", "1e-1..1", ">1"))


def test_study_flush_acc4_empties_the_1e3_bucket_and_the_plain_baseline_shows_it():
    specs, found = load_specs([STUDY / "plain.yaml", STUDY / "flush_acc4.yaml"])
    assert found == []
    cases = [c for c in expand(specs) if c.preset in ("r0", "r1")]
    results = {c.id: c for c in run_cases(cases, CPU, trials=1, isolate=False)}
    for case in cases:
        got = results[case.id]
        if case.spec.name == "mfma_flush_acc4":
            assert _ge_1e3(got) == 0 and got.rel_error_buckets["=0"] == 64 * 64, case.id
            assert got.emulation.startswith("flush inputs |x| < 6.1035e-05")
            continue
        # the plain baseline: recount |impl - base| / |base| >= 1e-3 in numpy from the same inputs
        from examples.mfma_specs.kernels import mfma_matmul  # noqa: E402 (the example's own kernel)

        a, b = generate(case, 0)
        e, base = mfma_matmul(a, b).double().numpy(), torch.matmul(a, b).double().numpy()
        rel = np.abs(e - base) / np.abs(base)
        assert _ge_1e3(got) == int((rel >= 1e-3).sum()) > 0, case.id
        assert got.emulation is None
    table = bucket_table(list(results.values()))  # the HTML section: one group per shared case label
    assert [label for label, _ in table["groups"]] == [
        "float16-M=64-N=64-K=512-preset=r0",
        "float16-M=64-N=64-K=512-preset=r1",
    ]
    for label, rows in table["groups"]:
        by_op = {r["operator"]: r for r in rows}
        assert by_op["mfma_flush_acc4"]["bad"] == 0 and by_op["mfma_plain"]["bad"] == _ge_1e3(
            results[f"mfma_plain[{label}]"]
        )


# --------------------------------------------------------------------------- presets and the oracle's range


def test_preset_case_axis_draws_each_range_and_names_the_case(tmp_path):
    spec, found = load_spec(
        write(
            tmp_path,
            "op",
            """category: activation
impl: torch:exp
dtypes: [float32]
inputs: [{name: x, shape: [N], dist: {preset: r0}}]
cases: [{N: 4000, preset: [r0, r1, r4, r5]}, {N: 1000}]
""",
        )
    )
    assert found == []
    cases = expand([spec])
    assert [c.id for c in cases] == [f"op[float32-N=4000-preset={p}]" for p in ("r0", "r1", "r4", "r5")] + [
        "op[float32-N=1000]"
    ]
    bounds = {"r0": (-1, 1), "r1": (-10, 10), "r4": (1, 5), "r5": (5, 10)}
    for c in cases[:4]:
        x = generate(c, 0)[0]
        lo, hi = bounds[c.preset]
        assert lo <= float(x.min()) and float(x.max()) <= hi and float(x.max()) - float(x.min()) > 0.9 * (hi - lo)
    assert -1 <= float(generate(cases[4], 0)[0].min())  # no case preset: the input's own (r0)


def test_specials_preset_draws_the_dtypes_special_values(tmp_path):
    spec, _ = load_spec(
        write(
            tmp_path,
            "op",
            """category: activation
impl: torch:exp
dtypes: [float16]
inputs: [{name: x, shape: [N], dist: {preset: specials}}]
cases: [{N: 20000}]
""",
        )
    )
    x = generate(expand([spec])[0], 0)[0].double()
    assert bool(torch.isnan(x).any()) and bool((x == math.inf).any()) and bool((x == -math.inf).any())
    assert bool((x.abs() == 65504).any()) and bool((x.abs() == 2.0**-24).any())


@pytest.mark.parametrize(
    "body, expected",
    [
        (
            "inputs: [{name: x, shape: [N], dist: {preset: r9}}]\ncases: [{N: 4}]",
            "inputs[0].dist.preset: 'r9' is not one of",
        ),
        (
            "inputs: [{name: x, shape: [N], dist: {uniform: [0, 1]}}]\ncases: [{N: 4, preset: r4}]",
            "cases[0].preset: no input has `dist: {preset: ...}`",
        ),
        (
            "inputs: [{name: x, shape: [N], dist: {uniform: [0, 1]}, layout: diagonal}]\ncases: [{N: 4}]",
            "inputs[0].layout: 'diagonal' is not one of contiguous, transposed",
        ),
    ],
)
def test_preset_and_layout_spec_errors(tmp_path, body, expected):
    found = problems(tmp_path, f"category: activation\nimpl: torch:exp\ndtypes: [float32]\n{body}\n")
    assert any(line.startswith(expected) for line in found), found


def test_oracle_overflow_is_reported_with_its_count(tmp_path):
    path = write(
        tmp_path,
        "op",
        """category: convolution
impl: faithful_kernels.py:mul
dtypes: [float16]
inputs:
  - {name: a, shape: [N], dist: {preset: r5}}
  - {name: b, shape: [N], dist: {uniform: [6000, 7000]}}
cases: [{N: 2000}]
trials: 1
dual_delta: {enabled: false}
""",
    )
    spec, _ = load_spec(path)
    case = expand([spec])[0]
    a, b = generate(case, 0)
    over = int(((a.double() * b.double()).abs() >= 65520).sum())  # float16 max 65504 + half its spacing 32
    assert 0 < over < 2000
    got = run_cases([case], CPU, isolate=False)[0]
    assert got.oracle_range.startswith(f"oracle exceeds float16 max (65504) at {over} of 2000 elements")


# --------------------------------------------------------------------------- layouts and edges


ADD = """category: arithmetic
impl: faithful_kernels.py:add_assumes_contiguous
baseline: faithful_kernels.py:add
dtypes: [float32]
inputs:
  - {{name: a, shape: [M, N], dist: {{uniform: [-1, 1]}}, layout: {layout}}}
  - {{name: b, shape: [M, N], dist: {{uniform: [-1, 1]}}}}
cases: [{{M: 6, N: 5}}]
trials: 2
"""


@pytest.mark.parametrize("isolate", [False, True])
def test_a_kernel_assuming_contiguous_inputs_passes_contiguous_and_fails_transposed(tmp_path, isolate):
    verdicts = {}
    for layout in ("contiguous", "transposed"):
        spec, found = load_spec(write(tmp_path, f"add_{layout}", ADD.format(layout=layout)))
        assert found == []
        verdicts[layout] = run_cases(expand([spec]), CPU, isolate=isolate)[0]
    assert verdicts["contiguous"].verdict == "pass", verdicts["contiguous"].reasons
    assert verdicts["transposed"].verdict == "fail"
    assert verdicts["transposed"].layouts == {"a": "transposed"}


def test_edge_sweep_adds_the_edge_sizes_of_each_symbol(tmp_path):
    spec, found = load_spec(
        write(
            tmp_path,
            "op",
            """category: activation
impl: torch:exp
dtypes: [float32]
inputs: [{name: x, shape: [M, N], dist: {uniform: [-1, 1]}}]
cases: [{M: 24, N: 2, edges: {max: 40}}]
""",
        )
    )
    assert found == []
    symbols = [c.symbols for c in spec.cases]
    # M = 24: 1, the nearest prime 23, 8*3+1, 16*1-1, 32*1+3, the max 40; N = 2: 1, 2 (prime), 9, 15, 35, 40
    assert symbols == [{"M": 24, "N": 2}] + [{"M": m, "N": 2} for m in (1, 15, 23, 25, 35, 40)] + [
        {"M": 24, "N": n} for n in (1, 9, 15, 35, 40)
    ]


# --------------------------------------------------------------------------- determinism and seeds


def _nan(payload: int) -> torch.Tensor:
    return torch.tensor([0x7FC00000 | payload], dtype=torch.int32).view(torch.float32)


def test_compare_classifies_bits_nan_payloads_and_spread():
    x = torch.tensor([1.0, -0.0, 3.0])
    assert compare(x, x.clone()) == ("bitwise", 0.0, 0)
    assert compare(torch.cat([x, _nan(1)]), torch.cat([x, _nan(2)])) == ("nan_payloads", 0.0, 0)
    y = torch.tensor([1.0 + 2.0**-23, 0.0, 3.0])
    assert compare(x, y) == ("varying", 2.0**-23, 2)  # a last-bit change and a sign of zero
    assert compare(torch.tensor([1.0]), torch.tensor([math.nan])) == ("varying", math.inf, 1)


REDUCE = """category: {category}
impl: faithful_kernels.py:{impl}
baseline: faithful_kernels.py:{baseline}
dtypes: [float32]
inputs: [{{name: x, shape: [R, N], dist: {{uniform: [0, 1]}}}}]
cases: [{{R: 16, N: 4096}}]
trials: 2
dual_delta: {{enabled: false}}
{extra}"""


@pytest.mark.parametrize(
    "category, extra, verdict",
    [
        ("reduction", "", "fail"),
        ("reduction", "deterministic: false", "pass"),
        ("atomic_add", "", "pass"),
    ],
)
def test_a_racy_kernel_fails_the_determinism_rule_outside_atomic_add(tmp_path, category, extra, verdict):
    spec, found = load_spec(
        write(tmp_path, "op", REDUCE.format(category=category, impl="racy_sum", baseline="row_sum", extra=extra))
    )
    assert found == []
    got = run_cases(expand([spec]), CPU, isolate=False)[0]
    assert got.determinism.impl == "varying" and got.determinism.impl_differing > 0
    assert got.verdict == verdict, got.reasons
    (rule,) = [c for c in got.criteria if c.kind == "determinism"]
    assert (rule.value, rule.threshold, rule.comparison) == (float(got.determinism.impl_differing), 0.0, "==")
    if verdict == "fail":
        assert got.reasons[0].startswith("impl is not deterministic: ")
        assert rule.passed is False and deciding_criterion(got) == rule
        assert got.tolerance_to_pass == {"run_to_run_differing": float(got.determinism.impl_differing)}
    else:
        assert rule.passed is None  # variation allowed: the rule is not in force


def test_a_varying_baseline_is_a_spec_error(tmp_path):
    spec, _ = load_spec(
        write(tmp_path, "op", REDUCE.format(category="reduction", impl="row_sum", baseline="noisy_baseline", extra=""))
    )
    got = run_cases(expand([spec]), CPU, isolate=False)[0]
    assert got.verdict == "error" and got.error.startswith("spec error: the baseline is not deterministic")


def test_seeds_copy_every_case_under_the_next_seeds(tmp_path):
    spec, _ = load_spec(write(tmp_path, "op", MATMUL))
    cases = with_seeds(expand([spec]), 3)
    assert [c.id for c in cases[:3]] == [
        "op[float16-M=4-N=3-K=8]",
        "op[float16-M=4-N=3-K=8]@seed+1",
        "op[float16-M=4-N=3-K=8]@seed+2",
    ]
    assert [c.spec.seed for c in cases[:3]] == [0, 1, 2]
    assert not torch.equal(generate(cases[0], 0)[0], generate(cases[1], 0)[0])


# --------------------------------------------------------------------------- sanitizer


MEMCHECK = """========= COMPUTE-SANITIZER
========= Invalid __global__ write of size 4 bytes
=========     at 0x1b0 in add_kernel(float *, const float *, int)
=========     by thread (127,0,0) in block (7,0,0)
=========     Address 0x7f2c3e000400 is out of bounds
=========     and is 1 bytes after the nearest allocation at 0x7f2c3e000000 of size 1024 bytes
=========     Saved host backtrace up to driver entry point at kernel launch time
=========
========= ERROR SUMMARY: 3 errors
"""
RACECHECK = """========= COMPUTE-SANITIZER
========= Error: Race reported between Write access at 0x2f0 in reduce_kernel(float *, float *)
=========     and Read access at 0x310 in reduce_kernel(float *, float *) [248 hazards]
=========
========= RACECHECK SUMMARY: 1 hazard displayed (1 error, 0 warnings)
"""


def test_sanitizer_reports_are_counted_and_their_first_lines_kept():
    n, first = findings("impl output\n" + MEMCHECK)
    assert n == 3
    assert first[0] == "Invalid __global__ write of size 4 bytes" and len(first) == 6
    assert findings(RACECHECK) == (
        1,
        [
            "Error: Race reported between Write access at 0x2f0 in reduce_kernel(float *, float *)",
            "and Read access at 0x310 in reduce_kernel(float *, float *) [248 hazards]",
        ],
    )
    assert findings("========= COMPUTE-SANITIZER\n========= ERROR SUMMARY: 0 errors\n") == (0, [])


def test_sanitize_on_cpu_is_a_usage_error_with_the_reason(tmp_path):
    from click.testing import CliRunner

    from acceptance.cli import main

    path = write(tmp_path, "op", MATMUL)
    r = CliRunner().invoke(main, ["run", str(path), "--out", str(tmp_path / "out"), "--device", "cpu", "--sanitize"])
    assert r.exit_code == 2
    assert "--sanitize needs a CUDA device (the impl runs on cpu)" in r.output
