"""The fast paths of input generation and of the per-trial extras give the same bits as the formulas they replace.

References are independent: rounding by exact rational arithmetic (``fractions.Fraction``), the polar method and
the log series restated plainly from the docstring of :mod:`acceptance.spec.inputs`, range counts by classifying each
element with the format's limits written out by hand.
"""

import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

from acceptance.formats import dtypes, presets
from acceptance.spec import Uniform, expand, inputs, load_specs
from acceptance.spec.inputs import draw, generate, standard_normal, unit_uniform

# (precision p, minimum normal exponent, largest finite value) of each format, from IEEE 754 / the bfloat16 definition
FORMATS = {
    "float16": (11, -14, 65504.0),
    "bfloat16": (8, -126, float(Fraction(2**8 - 1, 2**7) * 2**127)),
    "float32": (24, -126, float(Fraction(2**24 - 1, 2**23) * 2**127)),
}


def exact_round(x: float, dtype: str) -> float:
    """Round-to-nearest-even of ``x`` to ``dtype`` with rational arithmetic; overflow to inf."""
    p, emin, top = FORMATS[dtype]
    if x == 0 or math.isinf(x):
        return x
    a = abs(Fraction(x))
    e = max(math.frexp(abs(x))[1] - 1, emin)
    q = Fraction(2) ** (e - p + 1)
    k = math.floor(a / q)
    rest = a / q - k
    if rest > Fraction(1, 2) or (rest == Fraction(1, 2) and k % 2 == 1):
        k += 1
    r = k * q
    if r > top:
        return math.copysign(math.inf, x)
    return math.copysign(float(r), x)


def storage_bits(t: torch.Tensor) -> np.ndarray:
    """The stored bit patterns of a float tensor, as unsigned integers."""
    width = {2: torch.int16, 4: torch.int32}[t.element_size()]
    mask = (1 << (8 * t.element_size())) - 1
    return t.contiguous().view(width).numpy().astype(np.int64) & mask


def bits_of_value(v: np.ndarray, dtype: str) -> np.ndarray:
    """The bit patterns of values already exact in ``dtype`` (so every cast below is exact)."""
    if dtype == "float16":
        return v.astype(np.float16).view(np.uint16).astype(np.int64)
    if dtype == "float32":
        return v.astype(np.float32).view(np.uint32).astype(np.int64)
    return (v.astype(np.float32).view(np.uint32) >> np.uint32(16)).astype(np.int64)


def adversarial(dtype: str, rng: np.random.Generator) -> np.ndarray:
    """Values at every place where rounding twice (float64 -> float32 -> dtype) or a shortcut could go wrong:
    exact midpoints between neighbours of ``dtype`` and a float64 ulp either side of them, midpoints plus a bit
    far below float32's last place (rounded to float32 they become exact midpoints), the subnormal range,
    the overflow threshold, zeros and infinities."""
    p, emin, top = FORMATS[dtype]
    e = rng.integers(emin - p - 2, int(math.log2(top)) + 1, 1500)
    k = rng.integers(2 ** (p - 1), 2**p, 1500).astype(np.float64)
    mids = np.ldexp(k + 0.5, e - p + 1)  # halfway between k and k + 1 units of the last place
    trap = np.ldexp(k + 0.5 + 2.0**-35, e - p + 1)
    sub = np.ldexp(rng.uniform(0, 2, 500), emin) * rng.choice([1, 2.0 ** -(p - 1), 2.0**-p], 500)
    j = rng.integers(0, 2 ** (p - 1), 500).astype(np.float64)  # the subnormal grid: units of 2^(emin - p + 1)
    sub_mids = np.ldexp(np.concatenate([j + 0.5, j + 0.5 + 2.0**-30, j + 0.5 - 2.0**-30]), emin - p + 1)
    over = top * (1 + 2.0**-p)  # the midpoint between the largest value and the next power of two
    edges = [0.0, -0.0, np.inf, -np.inf, top, over, np.nextafter(over, 0), np.nextafter(over, np.inf)]
    x = np.concatenate([mids, np.nextafter(mids, 0), np.nextafter(mids, np.inf), trap, sub, sub_mids, edges])
    with np.errstate(over="ignore"):
        x = x[np.abs(x) <= 1e300]
    return np.concatenate([x, -x])


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_to_tensor_is_the_exact_rounding(dtype):
    x = adversarial(dtype, np.random.default_rng(1))
    got = dtypes.to_tensor(x, dtype)
    assert got.dtype == getattr(torch, dtype) and got.shape == x.shape
    expected = np.array([exact_round(float(v), dtype) for v in x])
    assert storage_bits(got).tolist() == bits_of_value(expected, dtype).tolist()


def general_path(x: np.ndarray, dtype: str) -> torch.Tensor:
    """:func:`acceptance.formats.dtypes.to_tensor` as it was written before its fast paths."""
    r = dtypes.round_to(x, dtype)
    return torch.from_numpy(np.ascontiguousarray(r)).reshape(r.shape).to(dtypes.torch_dtype(dtype))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_to_tensor_equals_the_general_path_on_large_arrays(dtype):
    rng = np.random.default_rng(2)
    arrays = [
        rng.uniform(-100, 100, 300_000),
        rng.standard_normal(200_000) * 1e-5,
        rng.uniform(-1, 1, 100_000) * 7e4,
        rng.standard_normal((300, 500)).T,
        rng.uniform(-3, 3, 20_001)[::3],
        np.asarray(1 + 2.0**-11 + 2.0**-40),
    ]
    for x in arrays:
        got, want = dtypes.to_tensor(x, dtype), general_path(x, dtype)
        assert got.shape == want.shape and got.dtype == want.dtype and got.is_contiguous()
        assert np.array_equal(storage_bits(got), storage_bits(want))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_arrays_with_nan_keep_the_bits_of_torchs_cast(dtype):
    """torch's float -> bfloat16 cast gives NaN 0xFFFF in its vector loop and 0x7FC0 in its scalar tail, so an
    array with a NaN is converted as a whole, as before."""
    x = np.tile([np.nan, -np.nan, 1.5, -0.0], 25)
    assert np.array_equal(storage_bits(dtypes.to_tensor(x, dtype)), storage_bits(general_path(x, dtype)))


def test_empty_arrays_keep_their_shape():
    for dtype in ("float16", "bfloat16", "float32"):
        t = dtypes.to_tensor(np.empty((3, 0)), dtype)
        assert t.shape == (3, 0) and t.dtype == getattr(torch, dtype)


# --------------------------------------------------------------------------- range counts


def classify(values: list[float], dtype: str) -> tuple[int, int, int, int]:
    """(overflow, underflow, subnormal, nonfinite) by the definitions of RangeCounts, one element at a time."""
    limits = {  # (overflow threshold, smallest normal, smallest subnormal)
        "float16": (65520.0, 2.0**-14, 2.0**-24),
        "bfloat16": (float(Fraction(2**9 - 1, 2**8) * 2**127), 2.0**-126, 2.0**-133),
        "float32": (float(Fraction(2**25 - 1, 2**24) * 2**127), 2.0**-126, 2.0**-149),
    }
    threshold, tiny, sub = limits[dtype]
    over = under = subn = bad = 0
    for v in values:
        a = abs(v)
        if not math.isfinite(a):
            bad += 1
        elif a >= threshold:
            over += 1
        elif 0 < a <= sub / 2:
            under += 1
        elif sub / 2 < a < tiny:
            subn += 1
    return over, under, subn, bad


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_range_counts_by_element(dtype):
    rng = np.random.default_rng(3)
    threshold, tiny, sub = {
        "float16": (65520.0, 2.0**-14, 2.0**-24),
        "bfloat16": (3.3961e38, 2.0**-126, 2.0**-133),
        "float32": (3.4028236e38, 2.0**-126, 2.0**-149),
    }[dtype]
    values = np.concatenate(
        [
            rng.standard_normal(2000),
            rng.uniform(0, 2 * tiny, 300),
            rng.uniform(0, sub, 300),
            [
                sub / 2,
                np.nextafter(sub / 2, 1),
                tiny,
                np.nextafter(tiny, 0),
                threshold * 0.99,
                threshold * 1.01,
                1e300,
                np.inf,
                -np.inf,
                np.nan,
                0.0,
                -0.0,
            ],
        ]
    )
    values = values * rng.choice([-1.0, 1.0], values.size)
    got = presets.range_counts(torch.from_numpy(values), dtype)
    assert got == presets.RangeCounts(dtype, values.size, *classify(values.tolist(), dtype))
    assert presets._counts_torch(torch.from_numpy(values), getattr(torch, dtype), dtype) == got


def test_range_counts_of_ordinary_and_empty_oracles():
    x = torch.linspace(-3, 3, 1001, dtype=torch.float64).reshape(7, 11, 13)[:, ::2]  # strided, no edge values
    assert presets.range_counts(x, "float16") == presets.RangeCounts("float16", x.numel(), 0, 0, 0, 0)
    assert presets.range_counts(torch.zeros(5, dtype=torch.float64), "bfloat16") == presets.RangeCounts(
        "bfloat16", 5, 0, 0, 0, 0
    )
    assert presets.range_counts(torch.empty(0, dtype=torch.float64), "float16") == presets.RangeCounts(
        "float16", 0, 0, 0, 0, 0
    )
    half = torch.tensor([1e5, float("nan"), 1e-9], dtype=torch.float32)  # a float32 oracle is counted in float64
    assert presets.range_counts(half, "float16") == presets.RangeCounts("float16", 3, 1, 1, 0, 1)


# --------------------------------------------------------------------------- the draws


def plain_log(x: np.ndarray) -> np.ndarray:
    """The module docstring's series, written out: x = m 2^e, t = (m-1)/(m+1), 2t(1 + t^2/3 + ... + t^22/23)."""
    m, e = np.frexp(x)
    low = m < 0.7071067811865476
    m = np.where(low, 2.0 * m, m)
    e = (e - low).astype(np.float64)
    t = (m - 1.0) / (m + 1.0)
    series = np.full_like(t, 1.0 / 23)
    for k in range(10, -1, -1):
        series = series * (t * t) + 1.0 / (2 * k + 1)
    return e * 0.6931471805599453 + 2.0 * t * series


def plain_normal(bits: np.random.PCG64, n: int) -> np.ndarray:
    """Marsaglia's polar method from raw words, batch by batch as documented."""
    out = []
    have = 0
    while have < n:
        pairs = (n - have + 1) // 2
        batch = pairs + pairs // 3 + 8
        x = 2.0 * ((bits.random_raw(batch) >> np.uint64(11)).astype(np.float64) * 2.0**-53) - 1.0
        y = 2.0 * ((bits.random_raw(batch) >> np.uint64(11)).astype(np.float64) * 2.0**-53) - 1.0
        s = x * x + y * y
        ok = (s > 0.0) & (s < 1.0)
        x, y, s = x[ok], y[ok], s[ok]
        f = np.sqrt(-2.0 * plain_log(s) / s)
        out.append(np.stack([x * f, y * f], axis=1).reshape(-1))
        have += 2 * int(ok.sum())
    return np.concatenate(out)[:n] if out else np.empty(0)


@pytest.mark.parametrize("n", [0, 1, 2, 1001, 70_001])  # 70 001 values: 35 001 pairs, three chunks
def test_standard_normal_is_the_plain_polar_method(n):
    fast, plain = np.random.PCG64(np.random.SeedSequence(n)), np.random.PCG64(np.random.SeedSequence(n))
    got, want = standard_normal(fast, n), plain_normal(plain, n)
    assert got.tobytes() == want.tobytes()
    assert fast.random_raw() == plain.random_raw()  # the same words were used


def test_log_is_the_plain_series():
    x = np.concatenate([np.geomspace(1e-300, 1.0, 5001)[:-1], np.random.default_rng(4).uniform(0, 1, 5000)[1:]])
    assert inputs._log(x.copy()).tobytes() == plain_log(x).tobytes()


@pytest.mark.parametrize("n", [0, 1, 7, 4096])
def test_unit_uniform_and_uniform_are_the_documented_formulas(n):
    assert inputs._GENERATOR_EXACT  # with this NumPy the Generator path is taken
    a, b = np.random.PCG64(n + 11), np.random.PCG64(n + 11)
    words = b.random_raw(2 * n)
    u = [(int(w) >> 11) * 2.0**-53 for w in words]
    assert unit_uniform(a, n).tolist() == u[:n]
    assert draw(Uniform(-2.5, 4.0), n, a, {}).tolist() == [-2.5 + 6.5 * v for v in u[n:]]
    assert a.random_raw() == b.random_raw()


def test_uniform_with_an_infinite_span_keeps_the_formula():
    """(hi - lo) overflows: the formula gives inf or nan, as it always did."""
    a, b = np.random.PCG64(5), np.random.PCG64(5)
    got = draw(Uniform(-1e308, 1e308), 50, a, {})
    u = (b.random_raw(50) >> np.uint64(11)).astype(np.float64) * 2.0**-53
    with np.errstate(over="ignore", invalid="ignore"):
        want = -1e308 + (1e308 - -1e308) * u
    assert np.array_equal(got, want, equal_nan=True)


SPEC = """\
name: every_kind
category: composite
impl: torch:add
dtypes: [float16, bfloat16, float32, float64]
inputs:
  - {name: u, shape: [M, N], dist: {uniform: [-7, 3]}}
  - {name: g, shape: [N], dist: {normal: [1, 1e-4]}}
  - {name: idx, shape: [K], dtype: int64, dist: {randint: [0, M]}}
  - {name: sp, shape: [N], dist: {sparse: {density: 0.3, of: {uniform: [1, 2]}}}}
  - {name: spec, shape: [N], dist: {specials: {fraction: 0.05, values: [.inf, -.inf, .nan, -0.0], of: {normal: [0, 1]}}}}
  - {name: big, shape: [N], dist: {uniform: [-70000, 70000]}}
cases:
  - {M: 64, N: 40000, K: 500}
  - {M: 3, N: 7, K: 11}
seed: 11
"""  # noqa: E501


def test_generate_is_the_same_with_the_fast_paths_off(tmp_path, monkeypatch):
    path = tmp_path / "every_kind.yaml"
    path.write_text(SPEC)
    specs, problems = load_specs([Path(path)])
    assert problems == []
    cases = expand(specs)
    fast = {(c.id, k): [t.clone() for t in generate(c, k)] for c in cases for k in (0, 3)}
    again = {(c.id, k): generate(c, k) for c in cases for k in (0, 3)}
    monkeypatch.setattr(inputs, "_GENERATOR_EXACT", False)
    monkeypatch.setattr(dtypes, "_TENSOR_FAST", {})
    slow = {(c.id, k): generate(c, k) for c in cases for k in (0, 3)}
    for key, tensors in fast.items():
        for a, b, c in zip(tensors, again[key], slow[key], strict=False):
            assert a.dtype == b.dtype == c.dtype and a.shape == b.shape == c.shape
            assert (
                a.reshape(-1).view(torch.uint8).numpy().tobytes() == b.reshape(-1).view(torch.uint8).numpy().tobytes()
            )
            assert (
                a.reshape(-1).view(torch.uint8).numpy().tobytes() == c.reshape(-1).view(torch.uint8).numpy().tobytes()
            )
