"""rocMLIR's DOT4_F32_F16 accumulation against an exact reference written here with Python fractions: the exact
sum of every 4 float16 products truncated to float32 (toward zero, by hand), then added to a float32
accumulator with numpy's round-to-nearest-even float32 add; and the older single-mode forms, which still round
both steps alike."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from acceptance.numerics import emulate

F32_P = 24  # float32 precision, bits
F32_EMIN = -126


def truncate_f32(q: Fraction) -> np.float32:
    """The exact rational ``q`` rounded toward zero to float32 (normal and subnormal range, no overflow here)."""
    if q == 0:
        return np.float32(0.0)
    a = abs(q)
    e = a.numerator.bit_length() - a.denominator.bit_length()  # floor(log2 a) is e or e - 1
    if Fraction(2) ** e > a:
        e -= 1
    spacing = Fraction(2) ** (max(e, F32_EMIN) - (F32_P - 1))
    n = a.numerator * spacing.denominator // (a.denominator * spacing.numerator)  # floor(a / spacing)
    value = math.ldexp(n, max(e, F32_EMIN) - (F32_P - 1))  # exact in float64 and in float32
    return np.float32(math.copysign(value, q))


def reference(a: np.ndarray, b: np.ndarray, group_mode: str, add_mode: str) -> np.ndarray:
    """Every output element: groups of 4 exact products (Fractions), each group sum rounded to float32 by
    ``group_mode``, then added into a float32 accumulator by ``add_mode`` ("nearest": numpy's float32 add,
    "truncate": the exact sum truncated)."""
    m, k = a.shape
    n = b.shape[1]
    out = np.zeros((m, n), dtype=np.float64)
    for i in range(m):
        for j in range(n):
            acc = np.float32(0.0)
            for g in range(0, k, 4):
                exact = sum(
                    (Fraction(float(a[i, t])) * Fraction(float(b[t, j])) for t in range(g, min(g + 4, k))), Fraction(0)
                )
                part = truncate_f32(exact) if group_mode == "truncate" else np.float32(float(exact))
                if add_mode == "nearest":
                    acc = np.float32(acc + part)  # IEEE float32 addition, round to nearest even
                else:
                    acc = truncate_f32(Fraction(float(acc)) + Fraction(float(part)))
            out[i, j] = float(acc)
    return out


def operands(seed: int, m: int = 6, k: int = 37, n: int = 5) -> tuple[np.ndarray, np.ndarray]:
    """float16 values k·2^e of wide exponent range (products 2^-48..2^20), so that many group sums need more
    than 24 bits and truncation and rounding to nearest differ."""
    rng = np.random.default_rng(seed)

    def draw(shape):
        mant = rng.integers(1, 2048, shape).astype(np.float64)
        return (rng.choice([-1.0, 1.0], shape) * np.ldexp(mant, rng.integers(-24, 0, shape))).astype(np.float16)

    return draw((m, k)), draw((k, n))


def emulated(a: np.ndarray, b: np.ndarray, rounding) -> np.ndarray:
    out = emulate.matmul(
        torch.from_numpy(a),
        torch.from_numpy(b),
        acc_dtype="float32",
        chunk=4,
        rounding=rounding,
        out_dtype="float64",
    )
    return out.numpy()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dot4_truncates_the_group_sum_and_adds_to_nearest(seed):
    a, b = operands(seed)
    want = reference(a, b, "truncate", "nearest")
    got = emulated(a, b, {"group": "truncate", "accumulate": "nearest"})
    assert np.array_equal(got, want)
    # the data tells the three schemes apart: every-step truncation and every-step nearest give other sums
    assert not np.array_equal(want, reference(a, b, "truncate", "truncate"))
    assert not np.array_equal(want, reference(a, b, "nearest", "nearest"))


@pytest.mark.parametrize("mode", ["truncate", "nearest"])
def test_one_mode_still_rounds_both_steps(mode):
    a, b = operands(7)
    want = reference(a, b, mode, mode)
    assert np.array_equal(emulated(a, b, mode), want)
    assert np.array_equal(emulated(a, b, {"group": mode, "accumulate": mode}), want)


def test_a_mapping_with_other_keys_or_modes_is_refused():
    a, b = operands(3, 2, 4, 2)
    with pytest.raises(ValueError, match="rounding must be one of 'nearest', 'truncate' or a mapping"):
        emulated(a, b, {"group": "truncate", "acc": "nearest"})
    with pytest.raises(ValueError, match="rounding.accumulate must be one of"):
        emulated(a, b, {"group": "truncate", "accumulate": "up"})


def test_the_spec_form_reaches_the_contraction():
    """``rounding: {group: truncate, accumulate: nearest}`` in a spec's ``accumulate:`` resolves to those modes;
    ``rounding: truncate`` to truncation of both."""
    from acceptance.spec.emulation import EmulateModel, resolve

    both = EmulateModel.model_validate(
        {"contraction": "matmul", "accumulate": {"dtype": "float32", "chunk": 4, "rounding": "truncate"}}
    )
    split = EmulateModel.model_validate(
        {
            "contraction": "matmul",
            "accumulate": {"dtype": "float32", "chunk": 4, "rounding": {"group": "truncate", "accumulate": "nearest"}},
        }
    )
    acc_both, acc_split = resolve(both, "float16").accumulate, resolve(split, "float16").accumulate
    assert acc_both.modes == ("truncate", "truncate") and acc_both.rounding == "truncate"
    assert acc_split.modes == ("truncate", "nearest")
    assert "groups of 4 exact products (truncated), added rounded to nearest" in acc_split.describe()
