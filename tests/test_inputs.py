"""Deterministic inputs: seeds, the documented transforms of the PCG64 stream, bounds, rounding."""

import hashlib
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import scipy.stats
import torch

from acceptance.formats.dtypes import round_to, to_tensor
from acceptance.spec import Choice, Normal, RandInt, Sparse, Specials, Uniform, expand, load_specs
from acceptance.spec.inputs import _log, case_seed, draw, generate, integers, standard_normal

ROOT = Path(__file__).resolve().parents[1]

SPEC = """\
name: mixed
category: composite
impl: torch:add
dtypes: [float16, bfloat16, float32, float64]
inputs:
  - {name: u, shape: [M, N], dist: {uniform: [LO, HI]}}
  - {name: g, shape: [N], dist: {normal: [2, 3]}}
  - {name: idx, shape: [K], dtype: int64, dist: {randint: [0, M]}}
  - {name: small, shape: [K], dtype: int8, dist: {randint: [-128, 128]}}
  - {name: mask, shape: [K], dtype: bool, dist: {randint: [0, 2]}}
  - {name: sp, shape: [N], dist: {sparse: {density: 0.1, of: {uniform: [1, 2]}}}}
  - {name: spec, shape: [N], dist: {specials: {fraction: 0.05, values: [.inf, -.inf, .nan, -0.0], of: {normal: [0, 1]}}}}
  - {name: pick, shape: [K], dist: {choice: [-1.5, 0.25, 7]}}
cases:
  - {M: 64, N: 20000, K: 5000, LO: 5, HI: 10}
  - {M: 3, N: 7, K: 11, LO: -1, HI: 1}
  - {M: 1, N: 0, K: 1, LO: 1, HI: 5}
seed: 7
"""  # noqa: E501


@pytest.fixture(scope="module")
def specs(tmp_path_factory):
    path = tmp_path_factory.mktemp("specs") / "mixed.yaml"
    path.write_text(SPEC)
    loaded, problems = load_specs([path])
    assert problems == []
    return loaded


def bits_of(t: torch.Tensor) -> bytes:
    return t.reshape(-1).view(torch.uint8).numpy().tobytes()


def digest(tensors) -> str:
    h = hashlib.sha256()
    for t in tensors:
        h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode() + bits_of(t))
    return h.hexdigest()


# --------------------------------------------------------------------------- seeds


def test_case_seed_is_the_documented_hash():
    text = b"3|matmul[float16-M=1-N=1-K=32]|5"
    expected = int.from_bytes(hashlib.sha256(text).digest()[:8], "little")
    assert case_seed(3, "matmul[float16-M=1-N=1-K=32]", 5) == expected
    seeds = {case_seed(s, cid, t) for s in (0, 1) for cid in ("a[float16]", "a[float32]") for t in range(3)}
    assert len(seeds) == 12
    assert all(0 <= s < 2**64 for s in seeds)


def test_same_trial_is_bit_identical_and_trials_differ(specs):
    case = expand(specs)[0]
    first, again, other = generate(case, 0), generate(case, 0), generate(case, 1)
    assert [bits_of(a) for a in first] == [bits_of(b) for b in again]
    for a, b in zip(first, other, strict=False):
        assert bits_of(a) != bits_of(b)


def test_inputs_do_not_depend_on_other_cases_or_dtypes(specs):
    """A shard that runs one case sees the same tensors as a run of everything."""
    everything = {c.id: digest(generate(c, 2)) for c in expand(specs)}
    for dtype in ("float16", "bfloat16", "float32", "float64"):
        for case in expand(specs, dtypes=[dtype], only="*K=11*"):
            assert digest(generate(case, 2)) == everything[case.id]
    assert len(set(everything.values())) == len(everything)


def test_same_inputs_in_a_fresh_process(specs, tmp_path):
    """No dependence on process state (Python's hash seed, import order, prior draws)."""
    case = expand(specs, dtypes=["bfloat16"])[1]
    script = textwrap.dedent(f"""
        import hashlib
        from pathlib import Path
        import torch
        from acceptance.spec import load_specs, expand
        from acceptance.spec.inputs import generate
        specs, _ = load_specs([Path({str(specs[0].path)!r})])
        case = [c for c in expand(specs) if c.id == {case.id!r}][0]
        h = hashlib.sha256()
        for t in generate(case, 4):
            raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
            h.update(str(t.dtype).encode() + str(tuple(t.shape)).encode() + raw)
        print(h.hexdigest())
    """)
    env = dict(os.environ, PYTHONHASHSEED="12345")
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == digest(generate(case, 4))


# --------------------------------------------------------------------------- the documented transforms


def stream(case, trial, i):
    """The raw PCG64 stream of input ``i``, as the module docstring documents it."""
    seed = case_seed(case.spec.seed, case.id, trial)
    return np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(i,)))


def test_uniform_is_lo_plus_span_times_53_bit_fraction(specs):
    case = expand(specs, dtypes=["float64"])[1]  # LO=-1, HI=1, shape (3, 7)
    words = stream(case, 0, 0).random_raw(21)
    expected = [-1.0 + 2.0 * (int(w) >> 11) / 2.0**53 for w in words]
    assert generate(case, 0)[0].flatten().tolist() == expected


def test_float16_inputs_are_the_float64_draws_rounded_once(specs):
    case = expand(specs, dtypes=["float16"])[0]  # LO=5, HI=10
    words = stream(case, 3, 0).random_raw(64 * 20000)
    draws = 5.0 + 5.0 * ((words >> np.uint64(11)).astype(np.float64) * 2.0**-53)
    got = generate(case, 3)[0]
    assert got.dtype == torch.float16
    assert np.array_equal(got.flatten().numpy(), draws.astype(np.float16))  # numpy rounds float64 -> float16 once


def test_randint_is_top_bits_with_rejection(specs):
    case = expand(specs, dtypes=["float32"])[1]  # idx: randint [0, 3), K = 11
    words = iter(stream(case, 0, 2).random_raw(1000))
    expected = []
    while len(expected) < 11:  # span 3 -> top 2 bits, keep values < 3
        k = next(words) >> 62
        if k < 3:
            expected.append(int(k))
    assert generate(case, 0)[2].tolist() == expected


def test_normal_is_the_polar_method():
    rng = np.random.PCG64(np.random.SeedSequence(99))
    got = standard_normal(rng, 1001)
    words = np.random.PCG64(np.random.SeedSequence(99)).random_raw(4000)
    expected = []
    # batch of 1001 values: 501 pairs, drawn as 501 + 167 + 8 = 676 x's then 676 y's
    xs = 2.0 * ((words[:676] >> np.uint64(11)) * 2.0**-53) - 1.0
    ys = 2.0 * ((words[676:1352] >> np.uint64(11)) * 2.0**-53) - 1.0
    for x, y in zip(xs, ys, strict=False):
        s = x * x + y * y
        if 0.0 < s < 1.0:
            f = math.sqrt(-2.0 * math.log(s) / s)
            expected += [x * f, y * f]
    assert len(expected) >= 1001
    np.testing.assert_allclose(got, expected[:1001], rtol=2e-15, atol=0)


def test_log_matches_libm_within_2_ulp():
    x = np.concatenate([np.geomspace(1e-300, 1.0, 200001)[:-1], np.nextafter(1.0, 0.0) - np.arange(1, 1000) * 2.0**-53])
    got = _log(x)
    exact = np.array([math.log(v) for v in x])
    ulp = np.spacing(np.abs(exact))
    assert np.max(np.abs(got - exact) / ulp) <= 2


# --------------------------------------------------------------------------- distributions


def test_uniform_within_bounds_and_uniform_in_distribution():
    rng = np.random.PCG64(1)
    x = draw(Uniform(-3.0, 7.0), 200_000, rng, {})
    assert x.min() >= -3.0 and x.max() < 7.0
    assert scipy.stats.kstest(x, scipy.stats.uniform(loc=-3, scale=10).cdf).pvalue > 1e-3


def test_uniform_cast_stays_within_closed_bounds(specs):
    for case in expand(specs, only="*K=5000*"):
        u = generate(case, 0)[0].double()
        assert u.min() >= 5.0 and u.max() <= 10.0, case.id  # rounding to the dtype may reach hi


def test_normal_moments_and_shape():
    x = draw(Normal(2.0, 3.0), 200_000, np.random.PCG64(2), {})
    assert abs(x.mean() - 2.0) < 5 * 3.0 / math.sqrt(x.size)
    assert abs(x.std() / 3.0 - 1.0) < 5 / math.sqrt(2 * x.size)
    assert scipy.stats.kstest(x, scipy.stats.norm(loc=2, scale=3).cdf).pvalue > 1e-3


def test_randint_bounds_and_uniformity():
    x = draw(RandInt(-5, 12), 170_000, np.random.PCG64(3), {})
    assert x.dtype == np.int64
    counts = np.bincount(x + 5, minlength=17)
    assert x.min() == -5 and x.max() == 11 and counts.size == 17
    assert scipy.stats.chisquare(counts).pvalue > 1e-3


def test_integers_span_edge_cases():
    rng = np.random.PCG64(4)
    assert integers(rng, 9, 10, 5).tolist() == [9] * 5
    extreme = integers(rng, -(2**63), 2**63 - 1, 10_000)
    assert extreme.dtype == np.int64 and extreme.min() < -(2**61) and extreme.max() > 2**61
    assert integers(rng, 0, 2, 0).size == 0


def test_choice_sparse_and_specials():
    rng = np.random.PCG64(5)
    picked = draw(Choice((-1.5, 0.25, 7.0)), 30_000, rng, {})
    assert set(np.unique(picked)) == {-1.5, 0.25, 7.0}
    assert scipy.stats.chisquare(np.unique(picked, return_counts=True)[1]).pvalue > 1e-3

    n = 100_000
    sparse = draw(Sparse(0.1, Uniform(1.0, 2.0)), n, rng, {})
    nonzero = sparse[sparse != 0]
    assert np.all((nonzero >= 1.0) & (nonzero < 2.0))
    assert abs(nonzero.size / n - 0.1) < 5 * math.sqrt(0.1 * 0.9 / n)

    special = draw(Specials(0.05, (math.inf, -math.inf, math.nan), Normal(0.0, 1.0)), n, rng, {})
    odd = ~np.isfinite(special)
    assert abs(odd.mean() - 0.05) < 5 * math.sqrt(0.05 * 0.95 / n)
    assert np.isnan(special).any() and np.isposinf(special).any() and np.isneginf(special).any()
    assert np.abs(special[~odd]).max() < 7


def test_generate_dtypes_shapes_and_integer_inputs(specs):
    big, small, empty = expand(specs, dtypes=["bfloat16"])
    u, g, idx, i8, mask, sp, spec, pick = generate(big, 0)
    assert [t.dtype for t in (u, g, idx, i8, mask, sp, spec, pick)] == [
        torch.bfloat16,
        torch.bfloat16,
        torch.int64,
        torch.int8,
        torch.bool,
        torch.bfloat16,
        torch.bfloat16,
        torch.bfloat16,
    ]
    assert [tuple(t.shape) for t in (u, g, idx, i8, mask, sp, spec, pick)] == [
        (64, 20000),
        (20000,),
        (5000,),
        (5000,),
        (5000,),
        (20000,),
        (20000,),
        (5000,),
    ]
    assert all(t.is_contiguous() and t.device.type == "cpu" for t in (u, g, idx))
    assert idx.min() >= 0 and idx.max() <= 63 and len(idx.unique()) == 64  # randint [0, M), exclusive
    assert i8.min() == -128 and i8.max() == 127
    assert set(mask.tolist()) == {False, True}
    assert set(pick.double().unique().tolist()) == {-1.5, 0.25, 7.0}
    signed_zero = (spec == 0) & torch.signbit(spec)
    assert signed_zero.any() and spec.isnan().any() and spec.isinf().any()

    tiny = generate(small, 0)
    assert tiny[2].max() < 3 and tiny[0].abs().max() <= 1
    assert [tuple(t.shape) for t in generate(empty, 0)] == [(1, 0), (0,), (1,), (1,), (1,), (0,), (0,), (1,)]


# --------------------------------------------------------------------------- rounding to the test dtype


def special_grid(dtype: str) -> np.ndarray:
    """Values around every rounding boundary of a format: ties, subnormals, overflow, specials."""
    info = torch.finfo(getattr(torch, dtype))
    rng = np.random.default_rng(0)
    mags = np.exp(rng.uniform(math.log(float(info.smallest_normal)) - 12, math.log(float(info.max)) + 1, 50_000))
    x = np.concatenate([mags, -mags])
    # exact midpoints between neighbours, and one float64 ulp either side
    reps = torch.from_numpy(x).float().to(getattr(torch, dtype)).double().unique().numpy()
    mid = (reps[:-1] + reps[1:]) / 2
    return np.concatenate(
        [
            x,
            mid,
            np.nextafter(mid, np.inf),
            np.nextafter(mid, -np.inf),
            [0.0, -0.0, np.inf, -np.inf, np.nan, float(info.max), -float(info.max)],
        ]
    )


def test_round_to_float16_matches_numpy():
    x = special_grid("float16")
    with np.errstate(over="ignore"):
        expected = x.astype(np.float16).astype(np.float64)
    got = round_to(x, "float16")
    assert np.array_equal(got, expected, equal_nan=True)
    assert np.array_equal(np.signbit(got), np.signbit(expected))


def test_round_to_float32_matches_numpy():
    x = special_grid("float32")
    with np.errstate(over="ignore"):
        expected = x.astype(np.float32).astype(np.float64)
    assert np.array_equal(round_to(x, "float32"), expected, equal_nan=True)


@pytest.mark.parametrize("dtype", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_round_matches_torch_single_rounding_from_float32(dtype):
    """On float32 inputs torch rounds once, so its cast is a reference for the narrow formats."""
    if not hasattr(torch, dtype):
        pytest.skip(f"torch has no {dtype}")
    with np.errstate(over="ignore"):
        x32 = special_grid(dtype).astype(np.float32)
    x = x32.astype(np.float64)
    expected = torch.from_numpy(x32).to(getattr(torch, dtype)).double().numpy()
    assert np.array_equal(round_to(x, dtype), expected, equal_nan=True)


def test_rounding_is_single_unlike_torch_cast():
    """1 + 2^-11 + 2^-40 lies above the float16 midpoint 1 + 2^-11: nearest is 1 + 2^-10.
    Through float32 it first becomes the midpoint, which then ties to even (1.0)."""
    x = np.array([1 + 2**-11 + 2**-40, 1 + 2**-8 + 2**-40])
    assert torch.from_numpy(x[:1]).to(torch.float16).item() == 1.0
    assert to_tensor(x[:1], "float16").item() == 1 + 2**-10
    assert to_tensor(x[1:], "bfloat16").item() == 1 + 2**-7


def test_overflow_and_subnormal_rounding_by_hand():
    half = np.array([65519.99, 65520.0, 2.0**-25, 2.0**-25 * 1.0000001, 3 * 2.0**-26, -1e-10])
    assert round_to(half, "float16").tolist() == [65504.0, math.inf, 0.0, 2.0**-24, 2.0**-24, -0.0]
    assert np.signbit(round_to(half, "float16")[-1])
    if hasattr(torch, "float8_e4m3fn"):
        e4m3 = round_to(np.array([464.0, 470.0, 1e6, -np.inf, 2.0**-10, 3 * 2.0**-11]), "float8_e4m3fn")
        assert e4m3.tolist() == [448.0, 448.0, 448.0, -448.0, 0.0, 2.0**-9]
    assert round_to(np.array([0.1]), "float64")[0] == 0.1


def test_rounding_keeps_a_zero_dimensional_value_zero_dimensional():
    """A 0-d oracle (a full reduction such as torch.sum(x)) rounds to a 0-d tensor, 1 + 2^-11 to 1 (ties to even)."""
    t = to_tensor(np.float64(1 + 2.0**-11), "float16")
    assert t.shape == () and t.dtype == torch.float16 and t.item() == 1.0
