"""The kernels of the mutation suite do what their docstrings claim: checked against exact rational arithmetic
(``fractions.Fraction``) and numpy, independently of the code under test."""

from __future__ import annotations

import sys
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import mutant_kernels as mk  # noqa: E402
import mutants  # noqa: E402

#: (precision p in bits, smallest normal exponent emin) of each dtype
FORMATS = {torch.float32: (24, -126), torch.float16: (11, -14), torch.bfloat16: (8, -126)}


def round_nearest_even(q: Fraction, p: int, emin: int) -> Fraction:
    """q rounded to the nearest number with a p-bit significand (ties to even), subnormals below 2^emin."""
    if q == 0:
        return Fraction(0)
    sign, q = (-1 if q < 0 else 1), abs(q)
    e = q.numerator.bit_length() - q.denominator.bit_length()  # 2^e <= q < 2^(e+1) after the fix-ups
    if Fraction(2) ** e > q:
        e -= 1
    if Fraction(2) ** (e + 1) <= q:
        e += 1
    ulp = Fraction(2) ** (max(e, emin) - p + 1)
    m = q / ulp
    whole, frac = divmod(m.numerator, m.denominator)
    if 2 * frac > m.denominator or (2 * frac == m.denominator and whole % 2):
        whole += 1
    return sign * whole * ulp


def operands(dtype: torch.dtype, n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """a, b, c spread over many binades; in a quarter of the elements c = -round(a*b), so that a*b + c is the
    rounding error of the product (the case a fused multiply-add exists for)."""
    g = torch.Generator().manual_seed(seed)
    span = 12 if dtype == torch.float16 else 30

    def draw(scale: int) -> torch.Tensor:
        return (
            torch.randn(n, generator=g, dtype=torch.float64)
            * torch.exp2(torch.randint(-scale, scale // 3, (n,), generator=g).double())
        ).to(dtype)

    a, b, c = draw(span), draw(span), draw(2 * span)
    c[: n // 4] = -(a[: n // 4].double() * b[: n // 4].double()).to(dtype)
    return a, b, c


@pytest.mark.parametrize("dtype", list(FORMATS), ids=str)
def test_fma_is_correctly_rounded(dtype):
    p, emin = FORMATS[dtype]
    a, b, c = operands(dtype, 3000, seed=7)
    got = mk.fma(a, b, c)
    assert got.dtype == dtype
    for x, y, z, r in zip(a.tolist(), b.tolist(), c.tolist(), got.tolist(), strict=False):
        exact = Fraction(x) * Fraction(y) + Fraction(z)
        assert Fraction(r) == round_nearest_even(exact, p, emin), (x, y, z, r)


def test_fma_differs_from_two_roundings_where_the_product_is_inexact():
    """The cancellation case: a*b + (-round(a*b)) is the product's rounding error, which the unfused
    a*b + c loses (it gives exactly 0) and the fused one keeps."""
    a = torch.tensor([1.0 + 2.0**-23], dtype=torch.float32)
    c = -(a * a)
    assert float(mk.muladd(a, a, c)) == 0.0
    assert float(mk.muladd_fused(a, a, c)) == 2.0**-46  # (1 + 2^-23)^2 - (1 + 2^-22) exactly


def test_fma_is_right_where_float64_then_casting_rounds_twice():
    """torch casts float64 to bfloat16 through float32, so rounding the float64 sum a*b + c that way rounds
    twice and is sometimes one ulp off; the emulation rounds to odd first and is exact there too."""
    a, b, c = operands(torch.bfloat16, 20000, seed=1)
    naive = (a.double() * b.double() + c.double()).to(torch.bfloat16)
    got = mk.fma(a, b, c)
    differ = torch.nonzero(naive != got).flatten().tolist()
    assert differ  # the double rounding happens with these operands
    for i in differ:
        exact = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        assert Fraction(float(got[i])) == round_nearest_even(exact, 8, -126) != Fraction(float(naive[i]))


def test_horner_fma_evaluates_the_same_polynomial():
    """Both Horner loops evaluate sum POLY[k] x^(8-k); each is within a few float32 ulp of the exact value."""
    x = torch.linspace(-1, 1, 257, dtype=torch.float32)
    for fn in (mk.horner, mk.horner_fma):
        got = fn(x)
        for xi, yi in zip(x.tolist(), got.tolist(), strict=False):
            exact = sum(Fraction(c) * Fraction(xi) ** (8 - k) for k, c in enumerate(mk.POLY))
            assert abs(Fraction(yi) - exact) <= 4 * 2.0**-23 * abs(exact)


def test_dot_sequential_fma_rounds_once_per_step():
    g = torch.Generator().manual_seed(3)
    a, b = torch.randn(3, 9, generator=g), torch.randn(9, 2, generator=g)
    got = mk.dot_sequential_fma(a, b)
    for i in range(3):
        for j in range(2):
            acc = Fraction(0)
            for k in range(9):
                acc = round_nearest_even(Fraction(float(a[i, k])) * Fraction(float(b[k, j])) + acc, 24, -126)
            assert Fraction(float(got[i, j])) == acc


def test_exp_truncating_rounds_toward_zero():
    x = torch.linspace(-8, 8, 2001, dtype=torch.float64).to(torch.float16)
    got = mk.exp_truncating(x).numpy()
    y = torch.exp(x.float()).numpy()  # the float32 value being converted
    nearest = y.astype(np.float16)
    toward_zero = np.where(
        np.abs(nearest.astype(np.float32)) > np.abs(y), np.nextafter(nearest, np.float16(0)), nearest
    )
    np.testing.assert_array_equal(got, toward_zero)
    assert (got != nearest).mean() > 0.3  # about half the conversions differ from round-to-nearest


def test_transpose_via_accumulate_loses_the_sign_of_zero():
    x = torch.tensor([[-0.0, 1.0], [2.0, -0.0]])
    got = mk.transpose_via_accumulate(x)
    assert torch.equal(got, mk.transpose(x))  # equal as numbers
    assert torch.signbit(mk.transpose(x)).tolist() == [[True, False], [False, True]]
    assert not torch.signbit(got).any()


def test_exp_zero_below_and_flush_to_zero_cut_where_documented():
    x = torch.tensor([-100.0, -88.0, -87.0, -70.0, -69.0, 0.0])
    assert mk.exp_flush_subnormal(x).tolist()[:3] == [0.0, 0.0, pytest.approx(np.exp(-87.0), rel=1e-6)]
    zeroed = mk.exp_zero_below(x)
    assert zeroed[:4].tolist() == [0.0] * 4  # exp(-70) = 3.98e-31 < 1e-30
    assert float(zeroed[4]) == pytest.approx(np.exp(-69.0), rel=1e-6)


def test_index_add_fp32_accumulate_rounds_once_and_the_baseline_every_step():
    index = torch.zeros(300, dtype=torch.long)
    src = torch.full((300,), 0.3).to(torch.bfloat16)  # 0.30078125 in bfloat16
    exact = 300 * Fraction(float(src[0]))
    assert Fraction(float(mk.index_add_fp32_accumulate(index, src, bins=1)[0])) == round_nearest_even(exact, 8, -126)
    step = Fraction(0)
    for _ in range(300):
        step = round_nearest_even(step + Fraction(float(src[0])), 8, -126)
    assert Fraction(float(mutants.index_add(index, src, bins=1)[0])) == step != round_nearest_even(exact, 8, -126)


def test_mean_reciprocal_multiplies_by_the_rounded_reciprocal():
    x = torch.tensor([[1.5, 2.25, 3.0, 4.75, 1.0, 2.0, 3.5]])
    recip = round_nearest_even(Fraction(1, 7), 24, -126)
    total = sum(Fraction(v) for v in x[0].tolist())  # exact in float32 here (multiples of 1/4, small)
    assert Fraction(float(mk.mean_reciprocal(x)[0])) == round_nearest_even(total * recip, 24, -126)


def test_two_stage_sum_and_split_k_sum_the_same_terms():
    g = torch.Generator().manual_seed(5)
    x = torch.rand(5000, generator=g, dtype=torch.float64).to(torch.float32)
    exact = sum(Fraction(v) for v in x.tolist())
    got = mk.total_two_stage(x, block=1024)
    assert got.shape == (1,) and abs(Fraction(float(got[0])) - exact) < 1e-6 * exact
    a, b = torch.randn(4, 10, generator=g), torch.randn(10, 3, generator=g)
    ref = a.double() @ b.double()
    assert torch.allclose(mk.matmul_split_k3(a, b).double(), ref, rtol=0, atol=1e-5)
    assert torch.allclose(mk.row_sum_tree(a).double(), a.double().sum(-1), rtol=0, atol=1e-5)
    assert torch.allclose(mk.matmul_kahan(a, b).double(), ref, rtol=0, atol=1e-5)


def test_one_wrong_element_is_the_only_wrong_one():
    g = torch.Generator().manual_seed(9)
    a, b = torch.randn(8, 4, generator=g), torch.randn(4, 8, generator=g)
    got, ref = mk.matmul_one_wrong_element(a, b), a @ b
    wrong = (got - ref).abs() > 1e-5
    assert wrong.nonzero().tolist() == [[3, 5]]
    assert float(got[3, 5]) == pytest.approx(float(ref[3, 6]), abs=1e-5)
