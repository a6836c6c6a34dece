"""Output invariants and the gross-error rule, on values worked out by hand."""

from __future__ import annotations

import math

import torch

from acceptance.decide import verdict
from acceptance.numerics import stats
from acceptance.numerics.invariants import Invariants, first_violation, sum_tolerance


def test_range_violation_names_the_first_element():
    y = torch.tensor([0.5, 1.0, 1.0000001192092896, -1.0], dtype=torch.float32)
    o = torch.tensor([0.5, 1.0, 0.9999999, -1.0], dtype=torch.float64)
    found = first_violation(Invariants(range=(-1.0, 1.0)), y, o, "float32")
    assert found is not None and "1 elements" in found and "flat index 2" in found and "1.00000012" in found
    assert first_violation(Invariants(range=(-1.0, 1.0)), y.clamp(-1, 1), o, "float32") is None


def test_positive_allows_a_flush_below_the_smallest_normal_only():
    o = torch.tensor([1.1e-7, 1e-39], dtype=torch.float64)  # a normal float32, then a subnormal one
    flushed_tail = torch.tensor([0.0, 0.0], dtype=torch.float32)
    found = first_violation(Invariants(positive=True), flushed_tail, o, "float32")
    assert found is not None and "1 elements" in found and "flat index 0" in found
    assert first_violation(Invariants(positive=True), flushed_tail[1:], o[1:], "float32") is None


def test_sum_to_tolerance_is_gamma_n_plus_3():
    u = 2.0**-24
    assert math.isclose(sum_tolerance(125, "float32"), 128 * u / (1 - 128 * u))
    assert sum_tolerance(300, "bfloat16") is None  # (n + 3) 2^-8 >= 1: no bound
    rows = torch.full((2, 125), 1 / 125, dtype=torch.float32)
    o = torch.full((2, 125), 1 / 125, dtype=torch.float64)
    assert first_violation(Invariants(sum_to=1.0), rows, o, "float32") is None
    rows[1, 0] += 1e-4  # sum off by 1e-4 >> gamma_128 = 7.6e-6
    found = first_violation(Invariants(sum_to=1.0), rows, o, "float32")
    assert found is not None and "slice 1" in found


def test_monotone_ignores_equal_inputs_and_finds_a_reversed_step():
    x = torch.tensor([3.0, 1.0, 2.0, 2.0])
    y = torch.tensor([0.9, 0.1, 0.5, 0.4])  # equal inputs may differ; sorted by x: 0.1, (0.5, 0.4), 0.9
    assert first_violation(Invariants(monotone="increasing"), y, y.double(), "float32", x) is None
    y2 = torch.tensor([0.3, 0.1, 0.5, 0.5])  # x = 2 -> 0.5, x = 3 -> 0.3: reversed
    found = first_violation(Invariants(monotone="increasing"), y2, y2.double(), "float32", x)
    assert found is not None and "1 steps reversed" in found


def _gate(d1, d2, free=1e-8, floor=None, impl_ulp=()):
    rec = stats.analyze(d1, d2, metric="max_hyb", factor=2.0, free=free, floor=floor, impl_ulp=impl_ulp)
    return verdict.dual_delta_gate(rec)


def test_gross_error_fails_when_one_trial_in_twenty_is_far_beyond_rounding():
    d2 = [1e-7 + 1e-9 * i for i in range(20)]  # the baseline's worst trial: 1.19e-7
    d1 = list(d2)
    d1[7] = 1.19e-7 * 51  # 51 x the baseline's worst: gross
    rec = _gate(d1, d2)
    assert rec.passed is False
    found = verdict.gross_error(rec)
    assert found is not None and "gross error in 1 of 20 trials (worst: trial 7" in found
    d1[7] = 1.19e-7 * 49  # 49 x: not gross (and the other tests see one outlier of 20 in a sample this tight)
    assert verdict.gross_error(stats.analyze(d1, d2, metric="max_hyb", factor=2.0, free=1e-8)) is None


def test_gross_error_needs_the_trial_beyond_the_floor_too():
    d2 = [1e-7] * 20
    d1 = [1e-7] * 19 + [1e-4]  # 1000 x the baseline's worst
    assert (
        verdict.gross_error(stats.analyze(d1, d2, metric="max_hyb", free=0.0, floor=5.0, impl_ulp=[0.4] * 19 + [200.0]))
        is None
    )
    found = verdict.gross_error(
        stats.analyze(d1, d2, metric="max_hyb", free=0.0, floor=5.0, impl_ulp=[0.4] * 19 + [251.0])
    )
    assert found is not None and "50 x the 5-ulp floor" in found


def test_gross_error_decides_when_a_third_of_the_trials_are_bad():
    # 7 of 20 trials 1000 x the baseline's worst: the gross rule finds all seven
    d2 = [1e-7 * (1 + 0.05 * i) for i in range(20)]
    d1 = [d * 0.9 for d in d2]
    for i in (1, 4, 6, 9, 12, 15, 18):
        d1[i] = 1e-4
    rec = _gate(d1, d2)
    assert rec.passed is False
    found = verdict.gross_error(rec)
    assert found is not None and found.startswith("gross error in 7 of 20 trials (worst: trial 1,")


def test_gross_error_is_off_without_a_scale():
    assert verdict.gross_error(stats.analyze([0.0, 1e-3], [0.0, 0.0], metric="max_hyb", free=0.0)) is None


SPEC = """\
name: op
category: {category}
impl: torch:{fn}
dtypes: [float32]
inputs:
  - {{name: x, shape: [8, 5], dist: {{uniform: [-1, 1]}}}}
params: {{dim: {dim}}}
{extra}
"""


def _rules(tmp_path, fn="tanh", category="activation", dim=-1, extra=""):
    from acceptance.spec import expand, load_specs
    from acceptance.spec.defaults import rules_for

    path = tmp_path / "op.yaml"
    path.write_text(SPEC.format(fn=fn, category=category, dim=dim, extra=extra))
    specs, problems = load_specs([path])
    assert not problems, problems
    return rules_for(expand(specs)[0]), problems


def test_builtin_functions_bring_their_invariants(tmp_path):
    assert _rules(tmp_path, "tanh")[0].invariants == Invariants(range=(-1.0, 1.0))
    soft = _rules(tmp_path, "softmax", "composite", dim=0)[0].invariants
    assert soft.range == (0.0, 1.0) and soft.sum_to == 1.0 and soft.dim == 0  # the case's dim parameter
    assert not _rules(tmp_path, "matmul", "convolution")[0].invariants.any()


def test_a_spec_section_replaces_the_defaults(tmp_path):
    rules, _ = _rules(tmp_path, "tanh", extra="invariants: {range: [0, 2], monotone: increasing}")
    assert rules.invariants == Invariants(range=(0.0, 2.0), monotone="increasing")
    assert not _rules(tmp_path, "tanh", extra="invariants: {}")[0].invariants.any()


def test_a_reversed_range_is_a_spec_error_naming_the_field(tmp_path):
    from acceptance.spec import load_specs

    path = tmp_path / "op.yaml"
    path.write_text(SPEC.format(fn="tanh", category="activation", dim=-1, extra="invariants: {range: [1, -1]}"))
    specs, problems = load_specs([path])
    assert not specs and len(problems) == 1
    assert "invariants" in str(problems[0]) and "lower bound exceeds the upper" in str(problems[0])
