"""acceptance.numerics.metrics on tiny hand-computed examples: thresholds, directions, ULP neighbours, special
values."""

from __future__ import annotations

import math
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch

from acceptance.formats import dtypes
from acceptance.numerics import metrics as M
from acceptance.numerics.metrics import device
from acceptance.numerics.metrics.registry import finalize

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ulp_reference  # noqa: E402

INF, NAN = math.inf, math.nan
ERRORS = [m for m in M.METRICS if m not in ("diff4", "nan_mismatch", "inf_mismatch", "snr_db")]


def both_paths(e, b, **kw) -> list[dict]:
    """compute() and the torch reduction on CPU, which must agree."""
    fmt = dtypes.lookup(kw.get("dtype") or torch.as_tensor(e).dtype)
    return [M.compute(e, b, **kw), finalize(device.reduce(torch.as_tensor(e), torch.as_tensor(b), fmt), M.METRICS)]


# ----------------------------------------------------------------------------- diff1..diff4 by hand


def test_small_example_every_metric_by_hand():
    e = np.array([1.0, 2.0, 4.0, -1.0], dtype=np.float32)
    b = np.array([1.0, 2.5, 3.0, -2.0], dtype=np.float32)
    # |e-b| = 0, .5, 1, 1; |b| = 1, 2.5, 3, 2; Σ|b| = 8.5; Σd² = 2.25; Σb² = 1+6.25+9+4 = 20.25
    for got in both_paths(e, b):
        assert got["diff1"] == 2.5 / 8.5
        assert got["diff2"] == pytest.approx(math.sqrt(2.25 / 20.25), rel=1e-15)
        assert got["diff3_1"] == got["max_rel"] == got["max_rel_floor"] == 0.5  # 1/2 at b = -2
        assert got["diff3_2"] == got["max_abs"] == 1.0
        assert got["diff3"] == (0.5, 0.0)
        assert got["diff4"] == (2 / 3, 1 / 3, 3)  # 4 > 3 and -1 > -2; 2 < 2.5
        assert got["mse"] == 2.25 / 4
        assert got["nmse"] == pytest.approx(2.25 / 20.25, rel=1e-15)
        assert got["rms"] == pytest.approx(1.5 / (2 * 4.0), rel=1e-15)  # sqrt(2.25)/(sqrt(4)·max(4, 3))
        assert got["mean_abs"] == 2.5 / 4
        assert got["max_hyb"] == 1 / 3  # 1/(1+2) beats .5/3.5 and 1/4
        assert got["mean_hyb"] == pytest.approx((0 + 0.5 / 3.5 + 1 / 4 + 1 / 3) / 4, rel=1e-15)
        assert got["normwise_rel"] == pytest.approx(1.5 / 4.5, rel=1e-15)
        assert got["snr_db"] == pytest.approx(10 * math.log10(20.25 / 2.25), rel=1e-15)  # 10·log10(9) dB
        # float32 ulp at the reference b: at 2.5 2^-22 → .5·2^22; at 3 2^-22 → 2^22; at -2 2^-22 → 2^22
        assert got["max_ulp"] == 2.0**22
        assert got["mean_ulp"] == (0 + 2.0**21 + 2.0**22 + 2.0**22) / 4
        assert (got["n"], got["special_matched"], got["nan_mismatch"], got["inf_mismatch"]) == (4, 0, 0, 0)


def test_diff4_counts_unequal_points_and_their_direction():
    e = np.array([1, 2, 3, 4, 5, 6], dtype=np.float32)
    b = np.array([0, 2, 4, 4, 4, 6], dtype=np.float32)  # e > b at 0 and 4; e < b at 2; three equal
    for got in both_paths(e, b):
        assert got["diff4"] == (2 / 3, 1 / 3, 3)
    for got in both_paths(b, e):
        assert got["diff4"] == (1 / 3, 2 / 3, 3)
    for got in both_paths(e, e):
        assert got["diff4"] == (0.0, 0.0, 0)
    got = M.compute(e + 1, e)
    assert got["diff4"] == (1.0, 0.0, 6)  # one-sided: the verdict stage's business


@pytest.mark.parametrize(("dtype", "th"), [("float32", 1e-6), ("float16", 1e-4)])
def test_diff3_splits_at_the_threshold(dtype, th):
    """|b| ≤ th goes to m2 (absolute), |b| > th to m1 (relative); compared in float64 on b's exact value."""
    npd = np.dtype(dtype)
    nearest = npd.type(th)  # the dtype's neighbours around th: below ≤ th < above
    above = nearest if float(nearest) > th else np.nextafter(nearest, npd.type(1))
    below = np.nextafter(above, npd.type(0))
    assert float(below) <= th < float(above)
    b = np.array([below, above, -above], dtype=npd)
    e = np.array([2 * below, 1.5 * above, -above], dtype=npd)  # abs error `below` at b = below; rel .5 above
    m1 = float(abs(npd.type(1.5 * above) - above)) / float(above)
    for got in both_paths(e, b):
        assert got["diff3"] == (m1, float(below))
        assert dtypes.lookup(dtype).diff3_threshold == th


def test_diff3_threshold_table_is_reasoned_from_unit_roundoff():
    th = {name: row.diff3_threshold for name, row in dtypes.TABLE.items()}
    assert (th["float32"], th["float16"]) == (1e-6, 1e-4)  # MLU-OPS
    # the others: the MLU-OPS value of the nearest given dtype scaled by the unit roundoff ratio,
    # rounded to the nearest power of ten
    for name, base, p_base, p in [
        ("bfloat16", 1e-4, 11, 8),
        ("float8_e4m3fn", 1e-4, 11, 4),
        ("float8_e5m2", 1e-4, 11, 3),
        ("float64", 1e-6, 24, 53),
    ]:
        assert th[name] == 10.0 ** round(math.log10(base * 2.0 ** (p_base - p)))
    assert th["int32"] == th["bool"] == 0.0


def test_integer_dtype_threshold_zero_splits_zeros_from_the_rest():
    e, b = np.array([3, 1, 7], dtype=np.int32), np.array([0, 2, 7], dtype=np.int32)
    assert M.compute(e, b)["diff3"] == (0.5, 3.0)


def test_max_rel_floor_ignores_small_baselines():
    e = np.array([2e-3, 2e-4, 1.0])
    b = np.array([1e-3, 1e-4, 1.1])  # 1e-3 itself is not above the floor
    got = M.compute(e, b)
    assert got["max_rel"] == 1.0
    assert got["max_rel_floor"] == pytest.approx(0.1 / 1.1, rel=1e-15)


# ----------------------------------------------------------------------------- ULP


def neighbours(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Pairs (x, nextafter(x, ·)) in ``dtype``: around 1, 2^k, the largest finite, subnormals and zero."""
    fi = torch.finfo(dtype)
    xs = torch.tensor(
        [
            1.0,
            2.0,
            0.5,
            3.0,
            1024.0,
            fi.max,
            fi.tiny,
            fi.tiny * 2,
            fi.smallest_normal,
            fi.smallest_normal / 2,
            fi.smallest_normal * 3 / 4,
            0.0,
        ],
        dtype=torch.float64,
    )
    subnormal = torch.nextafter(torch.zeros((), dtype=dtype), torch.ones((), dtype=dtype))
    x = torch.cat([xs.to(dtype), subnormal.reshape(1), (2 * subnormal).reshape(1)])
    x = torch.cat([x, -x])
    up = torch.nextafter(x, torch.full_like(x, math.inf))
    down = torch.nextafter(x, torch.full_like(x, -math.inf))
    x, y = torch.cat([x, x]), torch.cat([up, down])
    return x[torch.isfinite(y)], y[torch.isfinite(y)]


@pytest.mark.parametrize(
    "dtype,backend",
    [
        (d, b)
        for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64)
        for b in ("numpy", "torch")
        if b == "torch" or d != torch.bfloat16
    ],
)
def test_neighbouring_values_are_one_ulp_apart_both_ways(dtype, backend):
    x, y = neighbours(dtype)
    if backend == "numpy":  # numpy has no bfloat16
        x, y = x.numpy(), y.numpy()
    assert len(x) == 54
    name = str(dtype).removeprefix("torch.")
    halves = 0
    for e, b in ((x, y), (y, x)):
        got = M.compute(e, b)
        # a neighbour is 1 ulp of the reference b away, but 1/2 where b is a power of two (at or above twice the
        # smallest normal) and e the value just below it in magnitude: the spacing halves there
        e64, b64 = (torch.as_tensor(v).double().numpy() for v in (e, b))
        mb = np.abs(b64)
        power = (np.frexp(mb)[0] == 0.5) & (mb >= 2 * float(torch.finfo(dtype).tiny)) & (np.abs(e64) < mb)
        want = np.where(power, 0.5, 1.0)
        assert np.array_equal(want, ulp_reference.ulp_error(e64, b64, name))
        halves += int((want == 0.5).sum())
        assert (got["max_ulp"], got["n"]) == (1.0, len(x))
        assert got["mean_ulp"] == pytest.approx(want.mean(), rel=1e-15)
    assert halves == 10  # b = +-(0.5, 1, 2, 1024, 2·smallest normal), e the value just below it in magnitude


@pytest.mark.parametrize(
    "dtype",
    [
        torch.float16,
        torch.bfloat16,
        torch.float8_e4m3fn,
        torch.float8_e5m2,
        torch.float8_e4m3fnuz,
        torch.float8_e5m2fnuz,
    ],
)
def test_every_pair_of_neighbours_of_a_small_format_is_one_ulp_apart(dtype):
    """Exhaustive: all finite values of the format sorted, each next to its successor (zero crossing included)."""
    bits = np.arange(2 ** (8 * dtype.itemsize)).astype(np.uint16 if dtype.itemsize == 2 else np.uint8)
    values = torch.from_numpy(bits.view(np.int16) if dtype.itemsize == 2 else bits).view(dtype).double()
    values = torch.unique(values[torch.isfinite(values)])  # sorted; -0 merges with +0
    lo, hi = values[:-1].to(dtype), values[1:].to(dtype)
    for e, b in ((lo, hi), (hi, lo)):
        got = M.compute(e, b)
        assert (got["max_ulp"], got["n"]) == (1.0, len(lo))  # one step, counted at b: 1, or 1/2 below 2^k
        assert 0.5 < got["mean_ulp"] < 1.0
    # two steps outward from b = +-(2^k - s/2) to +-(2^k + s): s/2 + s = 3 ulp of b (s/2 its spacing), either way
    assert M.compute(values[:-2].to(dtype), values[2:].to(dtype))["max_ulp"] == 3.0
    assert M.compute(values[2:].to(dtype), values[:-2].to(dtype))["max_ulp"] == 3.0


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_ulp_agrees_with_numpy_spacing(dtype):
    """np.spacing(|b|) is the gap from |b| up to the next value: 2^(floor(log2 |b|) − (p−1)), subnormal-aware: one
    ulp of the dtype at the reference b (already a value of the dtype, so rounding it changes nothing)."""
    rng = np.random.default_rng(1)
    fi = np.finfo(dtype)
    n = 3000
    x = (rng.choice([-1.0, 1.0], n) * 2.0 ** rng.uniform(fi.minexp - fi.nmant, fi.maxexp - 2, n)).astype(dtype)
    y = (x * (1 + 1e-2 * rng.standard_normal(n))).astype(dtype)
    y[1::7] = np.nextafter(x[1::7], dtype(np.inf))
    y[::7] = 0  # against zero: spacing(0) is the smallest subnormal
    x[::7] = rng.integers(1, 500, len(x[::7])) * np.nextafter(dtype(0), dtype(1))
    want = np.abs(x.astype(np.float64) - y) / np.spacing(np.abs(y)).astype(np.float64)
    assert np.all(np.isfinite(want)) and want.max() > 100
    got = M.compute(x, y)
    assert got["max_ulp"] == want.max()
    assert got["mean_ulp"] == pytest.approx(want.mean(), rel=1e-12)


def test_ulp_refers_to_the_output_dtype():
    e = np.array([1.0 + 2.0**-10], dtype=np.float64)
    b = np.array([1.0], dtype=np.float64)
    assert M.compute(e, b, dtype="float16")["max_ulp"] == 1.0
    assert M.compute(e, b, dtype=torch.bfloat16)["max_ulp"] == 2.0**-3
    assert M.compute(e, b, dtype=np.float32)["max_ulp"] == 2.0**13
    assert M.compute(e, b)["max_ulp"] == 2.0**42


def test_float64_ulp_beyond_the_float64_range_saturates_to_the_cap():
    got = M.compute(np.array([1e-15]), np.array([0.0]))  # 1e-15 / 2^-1074 ≈ 2e308: more steps than float64 has
    assert got["max_ulp"] == 2.0 * 0x7FEFFFFFFFFFFFFF and got["max_abs"] == 1e-15


# ----------------------------------------------------------------------------- special values


def test_nan_and_inf_placements():
    e = np.array([NAN, INF, -INF, 1.0, NAN, INF, 1.0, 2.0, NAN], dtype=np.float32)
    b = np.array([NAN, INF, -INF, 1.0, 1.0, -INF, INF, 2.5, -INF], dtype=np.float32)
    # matched: NaN/NaN, +Inf/+Inf, -Inf/-Inf; compared: (1, 1), (2, 2.5); NaN vs number and NaN vs -Inf;
    # Inf mismatches: +Inf vs -Inf (e > b), 1 vs +Inf (e < b)
    for got in both_paths(e, b):
        assert (got["n"], got["special_matched"], got["nan_mismatch"], got["inf_mismatch"]) == (2, 3, 2, 2)
        assert got["diff4"] == (1 / 3, 2 / 3, 3)  # +Inf > -Inf; 1 < Inf; 2 < 2.5; NaNs have no direction
        for name in ERRORS:
            assert got[name] == ((INF, INF) if name == "diff3" else INF), name
        assert got["snr_db"] == -INF  # a score: the worst is -inf


@pytest.mark.parametrize(
    ("e", "b", "nan_mm", "inf_mm"),
    [
        ([NAN], [3.0], 1, 0),
        ([3.0], [NAN], 1, 0),
        ([NAN], [INF], 1, 0),
        ([INF], [3.0], 0, 1),
        ([-INF], [INF], 0, 1),
        ([1e-9], [-INF], 0, 1),  # tiny |b| region or not, a mismatch makes both diff3 sides inf
    ],
)
def test_any_single_mismatch_makes_every_error_infinite(e, b, nan_mm, inf_mm):
    for got in both_paths(np.array(e + [1.0, 2.0]), np.array(b + [1.0, 2.5])):
        assert (got["nan_mismatch"], got["inf_mismatch"], got["n"]) == (nan_mm, inf_mm, 2)
        assert all(got[m] == ((INF, INF) if m == "diff3" else INF) for m in ERRORS)
        assert got["snr_db"] == -INF


def test_matched_specials_are_left_out_of_the_numbers():
    e = np.array([NAN, INF, -INF, 1.0, 2.0], dtype=np.float16)
    b = np.array([NAN, INF, -INF, 1.0, 3.0], dtype=np.float16)
    for got in both_paths(e, b):
        assert (got["n"], got["special_matched"], got["nan_mismatch"], got["inf_mismatch"]) == (2, 3, 0, 0)
        assert got["max_abs"] == 1.0 and got["mean_abs"] == 0.5 and got["diff1"] == 0.25
        assert got["diff4"] == (0.0, 1.0, 1)
        assert got["max_ulp"] == 512.0  # float16 spacing at 2 is 2^-9


def test_zero_baseline():
    z = np.zeros(3, dtype=np.float32)
    for got in both_paths(z, z):
        assert all(got[m] == ((0.0, 0.0) if m == "diff3" else 0.0) for m in ERRORS)
        assert got["snr_db"] == INF  # no error at all
    e = np.array([0.0, 1e-3, 0.0], dtype=np.float32)
    d = float(np.float32(1e-3))
    for got in both_paths(e, z):
        for name in ("diff1", "diff2", "nmse", "normwise_rel", "diff3_1", "max_rel"):
            assert got[name] == INF, name
        assert got["diff3"] == (0.0, d)  # no |b| > th: m1 has no element
        assert got["max_rel_floor"] == 0.0  # no |b| above the floor
        assert got["rms"] == pytest.approx(d / (math.sqrt(3) * d), rel=1e-15)
        assert got["mse"] == d * d / 3 and got["max_hyb"] == d
        assert got["snr_db"] == -INF  # no signal, some noise


def test_per_element_relative_error_with_zero_baseline():
    e = np.array([0.0, 2.0], dtype=np.float64)
    b = np.array([0.0, 1.0], dtype=np.float64)  # 0/0 counts as 0, not NaN
    assert M.compute(e, b)["max_rel"] == 1.0


@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4, 5)])
@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_empty_inputs_give_zeros_without_warnings(shape, backend):
    e = np.zeros(shape, dtype=np.float32)
    if backend == "torch":
        e = torch.from_numpy(e)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for got in both_paths(e, e):
            assert all(got[m] == ((0.0, 0.0) if m == "diff3" else 0.0) for m in ERRORS)
            assert got["diff4"] == (0.0, 0.0, 0) and got["snr_db"] == INF
            assert (got["n"], got["special_matched"], got["nan_mismatch"], got["inf_mismatch"]) == (0, 0, 0, 0)


def test_all_special_matched_is_like_empty():
    e = np.array([NAN, INF])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        got = M.compute(e, e.copy())
    assert (got["n"], got["special_matched"]) == (0, 2)
    assert all(got[m] == ((0.0, 0.0) if m == "diff3" else 0.0) for m in ERRORS)
    assert got["snr_db"] == INF


@pytest.mark.parametrize("backend", ["numpy", "torch"])
def test_zero_dimensional_inputs_are_one_element(backend):
    e, b = np.float32(1.5), np.float32(-1.0)
    if backend == "torch":
        e, b = torch.tensor(1.5), torch.tensor(-1.0)
    got = M.compute(e, b)
    assert (got["n"], got["max_abs"], got["max_rel"], got["diff4"]) == (1, 2.5, 2.5, (1.0, 0.0, 1))
    assert got["rms"] == 2.5 / 1.5
    assert got["max_ulp"] == 2.5 * 2.0**23  # one ulp at the reference b = -1 is 2^-23


def test_float64_overflow_gives_inf_never_nan_nor_warnings():
    e = np.array([1e300, -1e300, 1.0])
    b = np.array([-1e300, 1e300, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for got in both_paths(e, b):
            assert got["max_abs"] == 2e300 and got["diff3_1"] == 2.0 and got["diff1"] == 2.0
            assert got["mse"] == INF and got["nmse"] == INF and got["diff2"] == INF
            assert not any(isinstance(v, float) and math.isnan(v) for v in got.values())
        huge = np.array([1.5e308, -1.5e308])
        for got in both_paths(huge, -huge):  # |e-b| itself overflows; so does Σ|b|
            assert got["max_abs"] == got["diff1"] == got["max_rel"] == got["rms"] == INF
            assert got["max_hyb"] == INF and got["diff4"] == (0.5, 0.5, 2)
            assert not any(isinstance(v, float) and math.isnan(v) for v in got.values())


# ----------------------------------------------------------------------------- selection, dtypes, errors


def test_names_select_metrics_and_counts_always_come_back():
    e, b = np.array([1.0, 2.0]), np.array([1.0, 3.0])
    counts = ["n", "special_matched", "above", "below"]
    assert list(M.compute(e, b, names=["max_abs", "diff4"])) == ["diff4", "max_abs", *counts]
    assert list(M.compute(e, b, names="mse")) == ["mse", *counts]
    assert list(M.compute(e, b)) == list(M.METRICS) + counts
    assert M.compute(e, b, names=[])["below"] == 1


@pytest.mark.parametrize(
    "spelling", ["float16", "half", "torch.float16", torch.float16, np.float16, np.dtype("float16"), "FP16"]
)
def test_dtype_spellings(spelling):
    got = M.compute(np.array([1.0, 2.0]), np.array([1.0 + 2**-10, 2.0]), dtype=spelling)
    assert got["max_ulp"] == 1.0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(evaluated=np.zeros(3), baseline=np.zeros(4)), "shape mismatch: evaluated (3,) vs baseline (4,)"),
        (
            dict(evaluated=np.zeros(3), baseline=np.zeros(3), names=["max_abs", "bogus"]),
            "unknown metric name(s) 'bogus'",
        ),
        (dict(evaluated=np.zeros(3), baseline=np.zeros(3), names=["n"]), "unknown metric name(s) 'n'"),
        (dict(evaluated=np.zeros(3), baseline=np.zeros(3), names=3), "names must be an iterable"),
        (dict(evaluated=np.array(["a", "b"]), baseline=np.zeros(2)), "evaluated: dtype <U1 is not supported"),
        (dict(evaluated=np.zeros(2), baseline=np.array([None, 1])), "baseline: dtype object is not supported"),
        (dict(evaluated=np.zeros(2, np.complex64), baseline=np.zeros(2)), "evaluated: dtype complex64"),
        (
            dict(evaluated=torch.zeros(2, dtype=torch.complex64), baseline=torch.zeros(2)),
            "evaluated: dtype torch.complex64",
        ),
        (dict(evaluated="1.0", baseline=np.zeros(())), "evaluated: dtype <U3 is not supported"),
        (dict(evaluated=[[1.0], [1.0, 2.0]], baseline=np.zeros(2)), "evaluated: cannot be read as an array"),
        (dict(evaluated=np.zeros(2), baseline=np.zeros(2), dtype="float7"), "dtype 'float7' is not supported"),
        (dict(evaluated=np.zeros(2), baseline=np.zeros(2), dtype=object()), "is not a dtype"),
        (dict(evaluated=np.zeros(2), baseline=np.zeros(2), dtype=torch.complex64), "is not supported"),
        (
            dict(evaluated=torch.zeros(2, device="meta"), baseline=np.zeros(2)),
            "evaluated: a meta tensor holds no values",
        ),
        (dict(evaluated=torch.zeros(2).to_sparse(), baseline=torch.zeros(2)), "evaluated: torch.sparse_coo tensors"),
    ],
)
def test_bad_input_raises_value_error_naming_the_problem(kwargs, message):
    with pytest.raises(ValueError) as info:
        M.compute(**kwargs)
    assert message in str(info.value)


def test_default_dtype_is_the_evaluated_ones():
    e = torch.tensor([1.0 + 2**-7], dtype=torch.bfloat16)
    b = torch.tensor([1.0], dtype=torch.float64)
    assert M.compute(e, b)["max_ulp"] == 1.0
    assert M.compute(b, e)["max_ulp"] == 2.0**45


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16, torch.float64])
def test_cuda_tensors_are_reduced_on_the_device_and_agree_with_the_host(dtype):
    rng = np.random.default_rng(2)
    rows = device.DEVICE_BLOCK // 2 + 3  # 5 rows of it: more than two device pieces
    b = torch.from_numpy(rng.standard_normal((5, rows))).to(dtype)
    e = (b.double() * (1 + 1e-2 * torch.from_numpy(rng.standard_normal((5, rows))))).to(dtype)
    e[:, ::1000] = math.nan
    b[:, ::1000] = math.nan
    for mismatch in (0, 1):
        e[0, 7] = math.inf if mismatch else b[0, 7]
        on_host = M.compute(e.T, b.T)
        assert on_host["inf_mismatch"] == mismatch and on_host["special_matched"] == 5 * len(range(0, rows, 1000))
        assert (on_host["max_abs"] == math.inf) == bool(mismatch)
        for got in (M.compute(e.T.cuda(), b.T.cuda()), M.compute(e.T.cuda(), b.T), M.compute(e.T, b.cuda().T)):
            assert set(got) == set(on_host)
            for k, v in on_host.items():
                assert got[k] == pytest.approx(v, rel=1e-12), k
