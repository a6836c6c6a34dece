"""ULP error in the unit of the dtype at the oracle rounded to the dtype, against float64 references computed
here with np.spacing / math.ulp; the cap; and what a failed case says first: the failed criterion, the element
that decided it, and the oracle-range note after them."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from acceptance.formats import dtypes
from acceptance.numerics import metrics as M

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ulp_reference  # noqa: E402

NP = {"float16": np.float16, "float32": np.float32}


def np_unit(o: np.ndarray, dtype: str) -> np.ndarray:
    """np.spacing of |o| rounded to the dtype (numpy's own cast, round to nearest even): one ulp there; at the
    largest finite value (o rounding to inf) the spacing below inf, as the top binade's."""
    r = np.abs(np.asarray(o, dtype=np.float64).astype(NP[dtype]))
    top = np.finfo(NP[dtype]).max
    r = np.where(np.isinf(r), top, r)
    return np.spacing(r).astype(np.float64)


def bf16_unit(o: float) -> float:
    """One bfloat16 ulp at o rounded to bfloat16 by hand: 8 significand bits, round half to even on the
    float64 value, then math.ulp-like spacing 2^(floor(log2 r) - 7) (the smallest subnormal 2^-133 below
    2^-126)."""
    if o == 0:
        return 2.0**-133
    e = max(math.frexp(abs(o))[1] - 1, -126)
    q = 2.0 ** (e - 7)
    r = round(abs(o) / q) * q  # Python's round is half to even
    if r == 0:  # underflows to zero: the smallest subnormal's spacing
        return 2.0**-133
    return 2.0 ** (max(math.frexp(r)[1] - 1, -126) - 7)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_ulp_is_counted_at_the_oracle_rounded_to_the_dtype(dtype):
    rng = np.random.default_rng(5)
    fi = np.finfo(NP[dtype])
    o = rng.choice([-1.0, 1.0], 4000) * 2.0 ** rng.uniform(
        math.log2(float(fi.tiny)) - 5, math.log2(float(fi.max)) - 1, 4000
    )
    o[:8] = [
        0.0,
        -0.0,
        float(fi.tiny),
        -float(fi.tiny) / 4,
        1.0 - 2.0**-30,
        -(2.0 - 2.0**-40),
        3.0,
        float(fi.smallest_subnormal),
    ]
    e = (o * (1 + 1e-2 * rng.standard_normal(4000))).astype(NP[dtype])
    e[::9] = 0  # exact zeros against a normal oracle: |o| / ulp(o), at most 2^p
    e[1::9] = -e[1::9]  # opposite signs
    want = np.minimum(np.abs(e.astype(np.float64) - o) / np_unit(o, dtype), dtypes.lookup(dtype).ulp_cap)
    got = M.compute(e, o, dtype=dtype, names=["max_ulp", "mean_ulp"])
    assert got["max_ulp"] == want.max()
    assert got["mean_ulp"] == pytest.approx(want.mean(), rel=1e-12)
    # an exact zero where the oracle is normal costs |o| / ulp(o) < 2^p, never a subnormal-unit figure
    normal = (np.abs(o) >= float(fi.tiny)) & (e == 0)
    assert np.all(want[normal] < 2.0 ** (fi.nmant + 1))


def test_the_unit_follows_the_rounding_up_into_the_next_binade():
    # 1 - 2^-13 rounds to 1.0 in float16 (spacing 2^-10 there), though it lies below 1 (spacing 2^-11);
    # 1 - 2^-11 - 2^-14 rounds to 1 - 2^-11 and keeps the spacing 2^-11
    o = np.array([1.0 - 2.0**-13, 1.0 - 2.0**-11 - 2.0**-14])
    e = np.array([1.0 - 2.0**-10, 1.0 - 2.0**-10], dtype=np.float16)
    got = M.compute(e, o, dtype="float16", names=["max_ulp", "mean_ulp"])
    want = np.abs(e.astype(np.float64) - o) / np.array([2.0**-10, 2.0**-11])
    assert np.array_equal(np_unit(o, "float16"), [2.0**-10, 2.0**-11])
    assert got["max_ulp"] == want.max() and got["mean_ulp"] == want.mean()


def test_bfloat16_against_a_hand_rounding():
    rng = np.random.default_rng(8)
    o = rng.choice([-1.0, 1.0], 500) * 2.0 ** rng.uniform(-140, 120, 500)
    o[:3] = [0.0, 2.0**-130, 1.0 - 2.0**-9]  # zero, subnormal, a value rounding up to 1
    e = torch.from_numpy(o * (1 + 1e-2 * rng.standard_normal(500))).to(torch.bfloat16)
    e64 = e.double().numpy()
    units = np.array([bf16_unit(float(x)) for x in o])
    want = np.minimum(np.abs(e64 - o) / units, 2.0 * 0x7F7F)
    got = M.compute(e, torch.from_numpy(o), dtype="bfloat16", names=["max_ulp", "mean_ulp"])
    assert got["max_ulp"] == want.max()
    assert got["mean_ulp"] == pytest.approx(want.mean(), rel=1e-12)


@pytest.mark.parametrize("dtype", ["float16", "float32"])
def test_signed_zeros_and_a_subnormal_oracle(dtype):
    s = float(np.finfo(NP[dtype]).smallest_subnormal)
    o = np.array([0.0, -0.0, 0.0, 3 * s, -3 * s])
    e = np.array([-0.0, 0.0, s, 0.0, 2 * s], dtype=NP[dtype])
    got = M.compute(e, o, dtype=dtype, names=["max_ulp", "mean_ulp"])
    # -0 vs +0: no distance; s vs 0: one smallest-subnormal step; subnormal oracle: its own (subnormal) spacing
    want = [0.0, 0.0, 1.0, 3.0, 5.0]
    assert got["max_ulp"] == 5.0 and got["mean_ulp"] == sum(want) / 5


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "float8_e5m2"])
def test_the_cap_is_the_number_of_finite_steps_from_minus_max_to_max(name):
    row = dtypes.lookup(name)
    assert row.ulp_cap == ulp_reference.cap(name)  # 2 x the bit pattern of max (positive values in order)
    if name == "float16":  # counted: every finite positive value of the format
        v = np.arange(2**16, dtype=np.uint32).astype(np.uint16).view(np.float16).astype(np.float64)
        assert row.ulp_cap == 2 * int(np.sum(np.isfinite(v) & (v > 0)))
    # the largest error a pair of values can show: +max against a zero oracle, capped
    top = torch.tensor([row.max], dtype=torch.float64)
    got = M.compute(top, torch.zeros(1, dtype=torch.float64), dtype=name, names=["max_ulp"])
    assert got["max_ulp"] == min(row.max / row.smallest_subnormal, row.ulp_cap)
    assert got["max_ulp"] <= row.ulp_cap


def test_float32_cap_is_below_two_to_the_32():
    assert dtypes.lookup("float32").ulp_cap == 2.0 * 0x7F7FFFFF < 2.0**32


def test_nan_and_inf_against_the_oracle():
    o = np.array([1.0, np.inf, np.nan, 2.0])
    e = np.array([1.0, np.inf, np.nan, np.inf], dtype=np.float32)
    got = M.compute(e, o, dtype="float32", names=["max_ulp", "mean_ulp", "inf_mismatch"])
    assert got["inf_mismatch"] == 1 and got["max_ulp"] == math.inf  # a misplaced Inf never passes
    matched = M.compute(e[:3], o[:3], dtype="float32", names=["max_ulp"])
    assert matched["max_ulp"] == 0.0 and matched["special_matched"] == 2
