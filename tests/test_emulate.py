"""acceptance.numerics.emulate against exact rational arithmetic (fractions.Fraction), integer
bit manipulation written here, and identities with independent computations."""

from __future__ import annotations

import math
import zlib
from fractions import Fraction

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from acceptance.numerics import emulate as E

# (precision incl. the implicit bit, emin, emax) written out by hand, not read from torch
SPEC = {"float16": (11, -14, 15), "bfloat16": (8, -126, 127), "float32": (24, -126, 127)}
ROUNDINGS = ("nearest", "truncate")


def largest(name: str) -> Fraction:
    p, _, emax = SPEC[name]
    return (2 - Fraction(1, 2 ** (p - 1))) * Fraction(2) ** emax


def floor_log2(m: Fraction) -> int:
    e = m.numerator.bit_length() - m.denominator.bit_length()
    while Fraction(2) ** e > m:
        e -= 1
    while Fraction(2) ** (e + 1) <= m:
        e += 1
    return e


def ref_round(x: float | Fraction, name: str, rounding: str, negative_zero: bool = False) -> float:
    """Exact value ``x`` rounded to format ``name`` with integer arithmetic on Fractions:
    spacing q = 2**(max(E, emin) - p + 1); n, rest = divmod(|x|, q); nearest adds one when
    rest > q/2 or rest == q/2 with n odd; results above the largest finite value are inf
    (nearest) or the largest value (truncate). A zero result takes the sign of x."""
    p, emin, _ = SPEC[name]
    if isinstance(x, float) and (not math.isfinite(x) or x == 0):
        return x
    x = Fraction(x)
    if x == 0:
        return -0.0 if negative_zero else 0.0
    mag = abs(x)
    q = Fraction(2) ** (max(floor_log2(mag), emin) - p + 1)
    n, rest = divmod(mag, q)
    if rounding == "nearest" and (rest > q / 2 or (rest == q / 2 and n % 2 == 1)):
        n += 1
    r = n * q
    if r > largest(name):
        r = math.inf if rounding == "nearest" else largest(name)
    return math.copysign(float(r), x)


def ref_sum(terms: list[float], name: str, rounding: str) -> float:
    """Exact sum of float terms rounded once; an exact zero is -0 only when every term is -0;
    a non-finite term gives the float sum (inf, or nan)."""
    if not all(math.isfinite(t) for t in terms):
        return sum(terms[1:], terms[0])
    total = sum(Fraction(t) for t in terms)
    all_negative_zero = all(t == 0 and math.copysign(1, t) < 0 for t in terms)
    return ref_round(total, name, rounding, negative_zero=all_negative_zero if total == 0 else False)


def ref_dot(a: list[float], b: list[float], *, acc: str, chunk: int, rounding: str, split_k: int, fused: bool) -> float:
    """One output element of emulate.matmul, element by element (products are exact in float)."""
    products = [x * y for x, y in zip(a, b, strict=False)]
    k = len(products)
    q, r = divmod(k, split_k)
    sizes = [q + 1] * r + [q] * (split_k - r)
    partials, k0 = [], 0
    for size in sizes:
        value = 0.0
        for g0 in range(0, size, chunk):
            group = products[k0 + g0 : k0 + min(g0 + chunk, size)]
            if fused:
                value = ref_sum([value] + group, acc, rounding)
            else:
                value = ref_sum([value, ref_sum(group, acc, rounding)], acc, rounding)
        partials.append(value)
        k0 += size
    total = partials[0]
    for part in partials[1:]:
        total = ref_sum([total, part], acc, "nearest")
    return total


def same(got: torch.Tensor, want) -> bool:
    """Bitwise equality of float64 values (NaN equal to NaN, -0 different from +0)."""
    want = torch.as_tensor(want, dtype=torch.float64).reshape(got.shape)
    got = got.to(torch.float64)
    both_nan = torch.isnan(got) & torch.isnan(want)
    equal_bits = got.view(torch.int64) == want.view(torch.int64)
    return bool((both_nan | equal_bits).all())


# --------------------------------------------------------------------------- values


def grid_values(rng: np.random.Generator, n: int, name: str, lo: int, hi: int) -> torch.Tensor:
    """Values of format ``name`` with a random sign and exponent uniform in [lo, hi]: a random
    ``p``-bit significand for normal exponents, a random subnormal of that binade below ``emin``
    (the smallest subnormal below the grid); 8 % exact zeros."""
    p, emin, _ = SPEC[name]
    out = []
    for _ in range(n):
        e = int(rng.integers(lo, hi + 1))
        if rng.random() < 0.08:
            v = 0.0
        elif e >= emin:
            v = math.ldexp(1 + int(rng.integers(0, 2 ** (p - 1))) / 2 ** (p - 1), e)
        else:  # units of the smallest subnormal 2**(emin - p + 1), within binade e
            low = e - (emin - p + 1)
            units = int(rng.integers(2**low, 2 ** (low + 1))) if low >= 0 else 1
            v = math.ldexp(units, emin - p + 1)
        out.append(v if rng.random() < 0.5 else -v)
    return torch.tensor(out, dtype=torch.float64)


EXPONENT_RANGES = {  # input exponents per (input, accumulator) that reach the accumulator's subnormals and wide spreads
    ("float16", "float16"): (-20, 6),
    ("float16", "bfloat16"): (-24, 15),
    ("float16", "float32"): (-24, 15),
    ("bfloat16", "float16"): (-16, 5),
    ("bfloat16", "bfloat16"): (-70, 40),
    ("bfloat16", "float32"): (-70, 40),
    ("float32", "float16"): (-16, 5),
    ("float32", "bfloat16"): (-70, 40),
    ("float32", "float32"): (-70, 40),
}


# --------------------------------------------------------------------------- round_float64


@pytest.mark.parametrize("name", list(SPEC))
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_round_float64_matches_fractions_on_random_and_edge_values(name, rounding):
    p, emin, emax = SPEC[name]
    rng = np.random.default_rng(1)
    values = [
        math.ldexp(float(rng.random() + 0.5), int(e)) * (1 if rng.random() < 0.5 else -1)
        for e in rng.integers(emin - p - 3, emax + 3, size=400)
    ]
    unit = math.ldexp(1.0, emin - p + 1)  # smallest subnormal
    big = float(largest(name))
    ulp_top = math.ldexp(1.0, emax - p + 1)
    values += [
        0.0,
        -0.0,
        math.inf,
        -math.inf,
        unit,
        unit / 2,
        -unit / 2,
        unit * 1.5,
        unit * 2.5,
        unit / 2 * (1 + 2**-40),  # subnormal ties
        math.ldexp(1.0, emin) * (1 - 2.0**-30),  # just below the smallest normal
        1 + 2.0**-p,
        1 + 3 * 2.0**-p,
        1 + 2.0**-p * (1 + 2.0**-40),
        -(1 + 2.0**-p),  # ties at 1
        2 - 2.0 ** -(p + 1),
        2 - 2.0**-p,  # just below a binade edge
        big,
        big + ulp_top / 2,
        big + ulp_top / 2 * (1 - 2.0**-30),
        -(big + ulp_top),
        big * 4,  # overflow edge
    ]
    x = torch.tensor(values, dtype=torch.float64)
    got = E.round_float64(x, name, rounding)
    assert same(got, [ref_round(v, name, rounding) for v in values])
    assert torch.isnan(E.round_float64(torch.tensor([math.nan], dtype=torch.float64), name, rounding)).all()


def test_round_float64_hand_checked_values():
    x = torch.tensor([65519.0, 65520.0, 2.0**-25, 1.5 * 2.0**-24, 1 + 2.0**-11], dtype=torch.float64)
    assert E.round_float64(x, "float16").tolist() == [65504.0, math.inf, 0.0, 2.0**-23, 1.0]
    assert E.round_float64(x, torch.float16, "truncate").tolist() == [65504.0, 65504.0, 0.0, 2.0**-24, 1.0]


def test_round_float64_rejects_bad_arguments():
    with pytest.raises(ValueError, match="dtype must be one of"):
        E.round_float64(torch.zeros(1, dtype=torch.float64), "float8_e4m3fn")
    with pytest.raises(ValueError, match="rounding must be one of"):
        E.round_float64(torch.zeros(1, dtype=torch.float64), "float16", "up")
    with pytest.raises(ValueError, match="float64 tensor"):
        E.round_float64(torch.zeros(1), "float16")


# --------------------------------------------------------------------------- round_sum


def wide_terms(rng, n_terms: int, n: int, lo: int, hi: int) -> list[torch.Tensor]:
    """Terms whose float64 sums are usually inexact: 48-bit significands times 2**e, e in [lo, hi)."""
    cols = []
    for _ in range(n_terms):
        sig = rng.integers(2**47, 2**48, size=n).astype(np.float64)
        exp = rng.integers(lo, hi, size=n)
        sign = np.where(rng.random(n) < 0.5, -1.0, 1.0)
        cols.append(torch.from_numpy(sign * np.ldexp(sig, exp)))
    # cancellations: make some columns cancel the first one exactly
    cols[-1][: n // 4] = -cols[0][: n // 4]
    return cols


@pytest.mark.parametrize("name", list(SPEC))
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("n_terms", [1, 2, 3, 5])
def test_round_sum_matches_fractions(name, rounding, n_terms):
    rng = np.random.default_rng(n_terms)
    # exponents reaching the format's subnormals and (float16) its overflow
    lo, hi = (-90, -32) if name == "float16" else (-220, -20)
    terms = wide_terms(rng, n_terms, 120, lo, hi)
    got = E.round_sum(terms, name, rounding)
    want = [ref_sum([float(t[i]) for t in terms], name, rounding) for i in range(120)]
    assert same(got, want)


TIE_CASES = [  # (terms, format, rounding, value worked out by hand)
    ([1.0, 2.0**-24], "float32", "nearest", 1.0),  # tie, even is 1
    ([1.0, 2.0**-24, 2.0**-80], "float32", "nearest", 1 + 2.0**-23),  # just above the tie
    ([1.0, 2.0**-24, -(2.0**-80)], "float32", "nearest", 1.0),  # just below it
    ([1.0, 3 * 2.0**-24], "float32", "nearest", 1 + 2.0**-22),  # 1.5 ulp: tie, even is up
    ([1.0, 2.0**-23, -(2.0**-80)], "float32", "truncate", 1.0),  # a hair below a grid point truncates down
    ([2.0, -(2.0**-25)], "float32", "nearest", 2.0),  # a quarter-ulp below a binade edge
    ([2.0, -(2.0**-24), -(2.0**-100)], "float32", "nearest", 2 - 2.0**-23),  # past the (half-size) midpoint below 2
    ([2.0, -(2.0**-24)], "float32", "nearest", 2.0),  # exactly that midpoint: 2 is even
    ([2.0, -(2.0**-100)], "float32", "truncate", 2 - 2.0**-23),  # truncation crosses the binade edge
    ([2.0**100, 1.0, -(2.0**100)], "float32", "nearest", 1.0),  # total cancellation of the large terms
    # 2.25 + 2**-23 is a float32 midpoint; the 2**-52 above it needs a 54th bit in any float64 sum of the four
    ([0.75, 0.75, 0.75 + 2.0**-23, 2.0**-52], "float32", "nearest", 2.25 + 2.0**-22),
    ([0.75, 0.75, 0.75 + 2.0**-23, -(2.0**-52)], "float32", "nearest", 2.25),
    ([2.0**100, 2.0**-100, -(2.0**100)], "float32", "nearest", 2.0**-100),
    ([65504.0, 16.0], "float16", "nearest", math.inf),  # 65520 ties to 65536: overflow
    ([65504.0, 16.0, -(2.0**-60)], "float16", "nearest", 65504.0),
    ([65504.0, 16.0], "float16", "truncate", 65504.0),
    ([65504.0, 65504.0, 1.0], "float16", "truncate", 65504.0),
    ([2.0**-25, 0.0, 0.0], "float16", "nearest", 0.0),  # half the smallest subnormal: ties to 0
    ([2.0**-25, 2.0**-70, 0.0], "float16", "nearest", 2.0**-24),
    ([-(2.0**-25), -(2.0**-70), 0.0], "float16", "truncate", -0.0),  # a negative sum truncated to zero
    ([2.0**-24, 2.0**-25, 0.0], "float16", "nearest", 2.0**-23),  # 1.5 units ties to 2 units
    ([2.0**-24, 2.0**-25, 0.0], "float16", "truncate", 2.0**-24),
    ([1.0, 2.0**-8, 2.0**-60], "bfloat16", "nearest", 1 + 2.0**-7),  # 1 + half-ulp + tiny
    ([1.0, -1.0, 0.0], "bfloat16", "nearest", 0.0),
    ([-0.0, -0.0, -0.0], "bfloat16", "nearest", -0.0),
]


@pytest.mark.parametrize("terms, name, rounding, want", TIE_CASES)
def test_round_sum_ties_binade_edges_overflow_and_subnormals(terms, name, rounding, want):
    tensors = [torch.tensor([t], dtype=torch.float64) for t in terms]
    got = E.round_sum(tensors, name, rounding)
    assert same(got, [want])
    assert same(got, [ref_sum(terms, name, rounding)])  # the hand value agrees with the reference
    fmt = E.FORMATS[name]
    finite = all(math.isfinite(t) for t in terms)
    if finite and sum(Fraction(t) for t in terms) != 0:  # the slow path alone, without the float64 shortcut
        assert same(E._round_exact(tensors, fmt, rounding), [want])


def test_round_sum_non_finite_terms_give_the_float_sum():
    rows = [
        [math.inf, 1.0, 2.0],
        [math.inf, -math.inf, 1.0],
        [math.nan, 1.0, 1.0],
        [1.0, -math.inf, 0.0],
        [math.inf, 1e30, 0.0],
    ]
    columns = [torch.tensor([row[i] for row in rows], dtype=torch.float64) for i in range(3)]
    for rounding in ROUNDINGS:
        assert same(E.round_sum(columns, "float32", rounding), [math.inf, math.nan, math.nan, -math.inf, math.inf])
        assert same(E.round_sum(columns[:2], "float16", rounding), [math.inf, math.nan, math.nan, -math.inf, math.inf])


@pytest.mark.parametrize("n_terms", [40, 300])
@pytest.mark.parametrize("rounding", ROUNDINGS)
def test_round_sum_of_many_terms_over_a_wide_range(n_terms, rounding):
    """Many terms (the extraction path): 48-bit significands over 200 binades, float32 subnormals
    and overflow within reach, planted cancellations and ties."""
    rng = np.random.default_rng(n_terms)
    terms = wide_terms(rng, n_terms, 40, -220, 80)
    terms[1][:8] = -terms[0][:8]  # the two largest terms of some sums cancel exactly
    terms[2][8:12] = 2.0**-24 - terms[0][8:12] - terms[1][8:12]  # 1 + 2**-24 plus tiny rest: near a tie
    got = E.round_sum(terms, "float32", rounding)
    want = [ref_sum([float(t[i]) for t in terms], "float32", rounding) for i in range(40)]
    assert same(got, want)


def test_round_sum_of_zeros_keeps_the_sign_as_float_addition_does():
    for n_terms in (3, 12):  # through the float64 shortcut, and through the extraction
        negative = [torch.tensor([-0.0, -0.0], dtype=torch.float64)] * n_terms
        mixed = negative[:-1] + [torch.tensor([0.0, 1.0], dtype=torch.float64)]
        assert same(E.round_sum(negative, "float16"), [-0.0, -0.0])
        assert same(E.round_sum(mixed, "float16", "truncate"), [0.0, 1.0])


def test_round_sum_rejects_bad_terms():
    with pytest.raises(ValueError, match=r"terms\[1\] must be a float64 tensor"):
        E.round_sum([torch.zeros(2, dtype=torch.float64), torch.zeros(2)], "float32")
    with pytest.raises(ValueError, match="at least one"):
        E.round_sum([], "float32")
    with pytest.raises(ValueError, match=r"terms\[0\] has a finite value beyond 2\*\*960"):
        E.round_sum([torch.tensor([1e300], dtype=torch.float64)], "float32")


def test_native_float32_rounding_equals_the_emulation():
    """The float32/nearest shortcut (the CPU's own IEEE conversion and addition) and the
    emulation agree on ties, subnormals and overflow; no other format or rounding uses it."""
    fp32 = E.FORMATS["float32"]
    native, emulated = E._Rounder(fp32, "nearest"), E._Rounder(fp32, "nearest")
    emulated.native = False
    assert native.native
    assert not E._Rounder(fp32, "truncate").native and not E._Rounder(E.FORMATS["float16"], "nearest").native
    edge = [
        1 + 2.0**-24,
        1 + 3 * 2.0**-24,
        2.0**-150,
        3 * 2.0**-150,
        2.0**-151 * 3,
        float(largest("float32")),
        float(largest("float32")) + 2.0**103,
        0.1,
        -1e-30,
        -(2.0**-150),
    ]
    x = torch.tensor([v * s for s in (1.0, 2.0**-20, -1.0) for v in edge], dtype=torch.float64)
    assert same(native.value(x), emulated.value(x))
    a, b = emulated.value(x), emulated.value(x.flip(0) * 0.75)
    assert same(native.add(a, b), emulated.add(a, b))
    assert same(native.add(a, -a * 2.0**-24), emulated.add(a, -a * 2.0**-24))


# --------------------------------------------------------------------------- matmul against the reference


@pytest.mark.parametrize("in_name", list(SPEC))
@pytest.mark.parametrize("acc", list(SPEC))
@pytest.mark.parametrize("rounding", ROUNDINGS)
@pytest.mark.parametrize("fused", [False, True])
def test_matmul_matches_element_by_element_fractions(in_name, acc, rounding, fused):
    rng = np.random.default_rng(zlib.crc32(f"{in_name}-{acc}-{rounding}-{fused}".encode()))
    lo, hi = EXPONENT_RANGES[(in_name, acc)]
    m, k, n = 3, 11, 2
    dtype = getattr(torch, in_name)
    a = grid_values(rng, m * k, in_name, lo, hi).reshape(m, k).to(dtype)
    b = grid_values(rng, k * n, in_name, lo, hi).reshape(k, n).to(dtype)
    rows, cols = a.double().tolist(), b.double().t().tolist()
    for chunk in (1, 2, 3, 4, k):
        for split_k in (1, 3):
            got = E.matmul(
                a, b, acc_dtype=acc, chunk=chunk, rounding=rounding, split_k=split_k, fused=fused, out_dtype="float64"
            )
            want = [
                [ref_dot(r, c, acc=acc, chunk=chunk, rounding=rounding, split_k=split_k, fused=fused) for c in cols]
                for r in rows
            ]
            assert same(got, want), (chunk, split_k)
    out = E.matmul(a, b, acc_dtype=acc, chunk=4, rounding=rounding, fused=fused)
    assert out.dtype == dtype
    acc_values = E.matmul(a, b, acc_dtype=acc, chunk=4, rounding=rounding, fused=fused, out_dtype="float64")
    assert same(out.double(), [ref_round(v, in_name, "nearest") for v in acc_values.flatten().tolist()])


HAND_CASES = [  # (a row, b column, acc, keywords, value worked out by hand)
    # 1 + 2**-24 ties to 1 whether summed in one group or added to the accumulator
    ([1.0, 2.0**-12], [1.0, 2.0**-12], "float32", dict(chunk=1), 1.0),
    ([1.0, 2.0**-12], [1.0, 2.0**-12], "float32", dict(chunk=2), 1.0),
    # with a third product 2**-40: rounded away per product, decisive inside one exact group
    ([1.0, 2.0**-12, 2.0**-20], [1.0, 2.0**-12, 2.0**-20], "float32", dict(chunk=1), 1.0),
    ([1.0, 2.0**-12, 2.0**-20], [1.0, 2.0**-12, 2.0**-20], "float32", dict(chunk=3), 1 + 2.0**-23),
    # products 65504 and 16: 65520 ties to 65536 and overflows; truncation stays at 65504
    ([256.0, 1.0], [255.875, 16.0], "float16", dict(chunk=2), math.inf),
    ([256.0, 1.0], [255.875, 16.0], "float16", dict(chunk=1, rounding="truncate"), 65504.0),
    # three products of 2**-25 in a float16 accumulator: each ties to 0 alone, 1.5 units tie to 2 units together
    ([2.0**-12] * 3, [2.0**-13] * 3, "float16", dict(chunk=1), 0.0),
    ([2.0**-12] * 3, [2.0**-13] * 3, "float16", dict(chunk=3), 2.0**-23),
    # products 2**-24, 0 | 1, 2**-30 in groups of 2: separate rounding loses 2**-30, fused keeps its sticky bit
    ([2.0**-12, 0.0, 1.0, 2.0**-15], [2.0**-12, 0.0, 1.0, 2.0**-15], "float32", dict(chunk=2), 1.0),
    (
        [2.0**-12, 0.0, 1.0, 2.0**-15],
        [2.0**-12, 0.0, 1.0, 2.0**-15],
        "float32",
        dict(chunk=2, fused=True),
        1 + 2.0**-23,
    ),
    # split into [2048, 1] and [1]: part 0 ties back to 2048, then 2048 + 1 ties to 2048 again
    ([2048.0, 1.0, 1.0], [1.0, 1.0, 1.0], "float16", dict(chunk=1, split_k=2), 2048.0),
    ([2048.0, 1.0, 1.0], [1.0, 1.0, 1.0], "float16", dict(chunk=3), 2050.0),
]


@pytest.mark.parametrize("row, col, acc, kw, want", HAND_CASES)
def test_matmul_hand_checked_cases(row, col, acc, kw, want):
    a = torch.tensor([row], dtype=torch.float16)
    b = torch.tensor(col, dtype=torch.float16).reshape(-1, 1)
    assert a.double().flatten().tolist() == row and b.double().flatten().tolist() == col  # inputs are exact
    got = E.matmul(a, b, acc_dtype=acc, out_dtype="float64", **kw)
    assert same(got, [[want]])


# --------------------------------------------------------------------------- identities


def test_chunk1_nearest_float32_equals_a_numpy_float32_loop():
    rng = np.random.default_rng(5)
    a = (rng.standard_normal((4, 300)) * np.exp2(rng.integers(-30, 30, (4, 300)))).astype(np.float32)
    b = (rng.standard_normal((300, 3)) * np.exp2(rng.integers(-30, 30, (300, 3)))).astype(np.float32)
    want = np.zeros((4, 3), dtype=np.float32)
    for i in range(4):
        for j in range(3):
            acc = np.float32(0)
            for k in range(300):
                acc = np.float32(acc + np.float32(a[i, k] * b[k, j]))
            want[i, j] = acc
    got = E.matmul(torch.from_numpy(a), torch.from_numpy(b), acc_dtype="float32")
    assert got.dtype == torch.float32
    assert np.array_equal(got.numpy(), want)


def test_one_group_over_a_long_k_matches_fractions():
    """chunk = K = 300 with float32 inputs over 100 binades: the many-term exact summation."""
    rng = np.random.default_rng(13)
    a = torch.from_numpy((rng.standard_normal((2, 300)) * np.exp2(rng.integers(-60, 40, (2, 300)))).astype(np.float32))
    b = torch.from_numpy((rng.standard_normal((300, 2)) * np.exp2(rng.integers(-60, 40, (300, 2)))).astype(np.float32))
    for acc, rounding in (("float32", "truncate"), ("bfloat16", "nearest")):
        got = E.matmul(a, b, acc_dtype=acc, chunk=300, rounding=rounding, out_dtype="float64")
        want = [
            [
                ref_dot(r, c, acc=acc, chunk=300, rounding=rounding, split_k=1, fused=False)
                for c in b.double().t().tolist()
            ]
            for r in a.double().tolist()
        ]
        assert same(got, want)


def test_chunk_k_is_one_rounding_of_the_exact_dot_product():
    """Inputs on a 2**-8 grid in [-4, 4]: every float64 partial sum is exact, so the float64
    matmul cast to float32 is the correctly rounded dot product."""
    g = torch.Generator().manual_seed(3)
    a = (torch.randint(-1024, 1025, (6, 37), generator=g) / 256.0).half()
    b = (torch.randint(-1024, 1025, (37, 5), generator=g) / 256.0).half()
    want = (a.double() @ b.double()).float()
    assert torch.equal(E.matmul(a, b, acc_dtype="float32", chunk=37, out_dtype="float32"), want)
    assert torch.equal(E.matmul(a, b, acc_dtype="float32", chunk=37, out_dtype="float16"), want.half())


def test_fp16_products_are_exact_in_float32_so_fma_and_separate_agree():
    g = torch.Generator().manual_seed(4)
    a, b = torch.randn(7, 50, generator=g).half(), torch.randn(50, 6, generator=g).half()
    sep = E.matmul(a, b, acc_dtype="float32", out_dtype="float64")
    fma = E.matmul(a, b, acc_dtype="float32", fused=True, out_dtype="float64")
    assert torch.equal(sep, fma)
    # but a float16 accumulator rounds the products themselves: separate and fused then differ
    sep16 = E.matmul(a, b, acc_dtype="float16", out_dtype="float64")
    fma16 = E.matmul(a, b, acc_dtype="float16", fused=True, out_dtype="float64")
    assert not torch.equal(sep16, fma16)


def test_flush_then_acc4_differs_from_plain_only_where_inputs_were_subnormal():
    a = torch.tensor([[1.0, 2.0**-20, 0.5, 0.25]], dtype=torch.float16)
    b = torch.tensor([[1.0], [2.0**10], [1.0], [1.0]], dtype=torch.float16)
    plain = E.matmul(a, b, acc_dtype="float32", chunk=4, rounding="truncate", out_dtype="float64")
    flushed = E.matmul(E.flush_to_zero(a), b, acc_dtype="float32", chunk=4, rounding="truncate", out_dtype="float64")
    assert plain.item() == 1.75 + 2.0**-10 and flushed.item() == 1.75


def test_batched_broadcast_and_vector_shapes_follow_torch_matmul():
    g = torch.Generator().manual_seed(6)
    a = torch.randn(2, 1, 4, 9, generator=g).half()
    b = torch.randn(3, 9, 5, generator=g).half()
    got = E.matmul(a, b, acc_dtype="float32", chunk=9)
    assert got.shape == torch.matmul(a.float(), b.float()).shape == (2, 3, 4, 5)
    for i in range(2):
        for j in range(3):
            assert torch.equal(got[i, j], E.matmul(a[i, 0], b[j], acc_dtype="float32", chunk=9))
    v = torch.randn(9, generator=g).half()
    assert E.matmul(v, b[0], acc_dtype="float32").shape == (5,)
    assert E.matmul(a[0, 0], v, acc_dtype="float32").shape == (4,)
    assert E.matmul(v, v, acc_dtype="float32").shape == ()
    assert torch.equal(
        E.bmm(b.transpose(1, 2), b, acc_dtype="bfloat16"),
        torch.stack([E.matmul(x.t(), x, acc_dtype="bfloat16") for x in b]),
    )


def test_empty_k_gives_zeros_and_split_k_beyond_k_is_refused():
    a, b = torch.zeros(2, 0, dtype=torch.float16), torch.zeros(0, 3, dtype=torch.float16)
    out = E.matmul(a, b, acc_dtype="float32")
    assert out.shape == (2, 3) and not out.any()
    with pytest.raises(ValueError, match="split_k=4 exceeds K=3"):
        E.matmul(torch.zeros(1, 3).half(), torch.zeros(3, 1).half(), acc_dtype="float32", split_k=4)


def test_tiling_does_not_change_results(monkeypatch):
    g = torch.Generator().manual_seed(7)
    a, b = torch.randn(2, 9, 40, generator=g), torch.randn(2, 40, 7, generator=g)
    kw = dict(acc_dtype="bfloat16", chunk=3, rounding="truncate", split_k=2)
    whole = E.matmul(a, b, **kw)
    monkeypatch.setattr(E.contract, "TILE_ELEMENTS", 8)  # one row per block, one group per tile
    assert torch.equal(E.matmul(a, b, **kw), whole)


def test_inf_and_nan_inputs_propagate_like_float_arithmetic():
    inf = math.inf
    a = torch.tensor([[inf, 1.0, 1.0, 1.0], [inf, 1.0, 0.0, 1.0], [1.0, 2.0, 3.0, 4.0]], dtype=torch.float32)
    b = torch.tensor([[1.0], [1.0], [inf], [1.0]], dtype=torch.float32)
    for kw in (dict(chunk=1), dict(chunk=4), dict(chunk=3, rounding="truncate"), dict(chunk=2, fused=True)):
        got = E.matmul(a, b, acc_dtype="float32", out_dtype="float64", **kw)
        assert same(got, [[inf], [math.nan], [inf]]), kw  # inf*0 is nan; inf + inf stays inf


def test_overflowed_accumulator_stays_infinite():
    a = torch.tensor([[60000.0, 60000.0, -60000.0, 1.0]], dtype=torch.float16)
    b = torch.ones(4, 1, dtype=torch.float16)
    assert E.matmul(a, b, acc_dtype="float16", out_dtype="float64").item() == math.inf
    # truncation saturates at 65504; 65504 - 60000 = 5504, and 5504 + 1 truncates back to 5504 (spacing 4)
    assert E.matmul(a, b, acc_dtype="float16", rounding="truncate", out_dtype="float64").item() == 5504
    assert E.matmul(a, b, acc_dtype="float16", fused=True, chunk=2, out_dtype="float64").item() == math.inf


@pytest.mark.parametrize(
    "bad, match",
    [
        (dict(acc_dtype="float64"), "acc_dtype must be one of"),
        (dict(acc_dtype="float32", chunk=0), "chunk must be an integer >= 1"),
        (dict(acc_dtype="float32", chunk=True), "chunk must be an integer >= 1"),
        (dict(acc_dtype="float32", split_k=1.5), "split_k must be an integer >= 1"),
        (dict(acc_dtype="float32", rounding="down"), "rounding must be one of 'nearest', 'truncate'"),
        (dict(acc_dtype="float32", out_dtype="int8"), "out_dtype must be one of"),
        (dict(acc_dtype="float32", fused=1), "fused must be True or False"),
    ],
)
def test_matmul_argument_errors_name_the_argument(bad, match):
    a = torch.ones(2, 3, dtype=torch.float16)
    with pytest.raises(ValueError, match=f"matmul: {match}"):
        E.matmul(a, a.t(), **bad)


def test_matmul_operand_errors():
    with pytest.raises(ValueError, match="matmul: a must be a float16, bfloat16 or float32 tensor, got a float64"):
        E.matmul(torch.ones(2, 2, dtype=torch.float64), torch.ones(2, 2), acc_dtype="float32")
    with pytest.raises(ValueError, match=r"inner dimensions differ: a is \(2, 3\), b is \(2, 3\)"):
        E.matmul(torch.ones(2, 3), torch.ones(2, 3), acc_dtype="float32")
    with pytest.raises(ValueError, match="batch dimensions do not broadcast"):
        E.matmul(torch.ones(2, 2, 3), torch.ones(3, 3, 1), acc_dtype="float32")
    with pytest.raises(ValueError, match="bmm: a and b must be 3-D"):
        E.bmm(torch.ones(2, 3), torch.ones(3, 2), acc_dtype="float32")


# --------------------------------------------------------------------------- linear, conv2d


def test_linear_is_matmul_with_one_bias_rounding():
    g = torch.Generator().manual_seed(8)
    x, w, bias = (
        torch.randn(3, 4, 20, generator=g).half(),
        torch.randn(6, 20, generator=g).half(),
        torch.randn(6, generator=g).half(),
    )
    kw = dict(acc_dtype="float16", chunk=4, rounding="truncate")
    got = E.linear(x, w, bias, out_dtype="float64", **kw)
    acc = E.matmul(x, w.t(), out_dtype="float64", **kw)
    want = torch.tensor(
        [ref_sum([v, float(bias[i % 6])], "float16", "nearest") for i, v in enumerate(acc.flatten().tolist())]
    )
    assert same(got, want)
    assert torch.equal(E.linear(x, w, None, **kw), E.matmul(x, w.t(), **kw))
    with pytest.raises(ValueError, match=r"linear: bias must have shape \(6,\)"):
        E.linear(x, w, torch.ones(5).half(), **kw)


def im2col(x: torch.Tensor, r: int, s: int, stride, padding, dilation, order: str) -> torch.Tensor:
    """Patches built with explicit loops: (N, K, L) with K in 'chw' or 'hwc' order."""
    n, c, h, w = x.shape
    ho = (h + 2 * padding[0] - dilation[0] * (r - 1) - 1) // stride[0] + 1
    wo = (w + 2 * padding[1] - dilation[1] * (s - 1) - 1) // stride[1] + 1
    keys = [(ci, i, j) for ci in range(c) for i in range(r) for j in range(s)]
    if order == "hwc":
        keys = [(ci, i, j) for i in range(r) for j in range(s) for ci in range(c)]
    out = torch.zeros(n, len(keys), ho * wo, dtype=x.dtype)
    for b in range(n):
        for kk, (ci, i, j) in enumerate(keys):
            for oy in range(ho):
                for ox in range(wo):
                    y = oy * stride[0] + i * dilation[0] - padding[0]
                    xx = ox * stride[1] + j * dilation[1] - padding[1]
                    if 0 <= y < h and 0 <= xx < w:
                        out[b, kk, oy * wo + ox] = x[b, ci, y, xx]
    return out


@pytest.mark.parametrize("order", ["chw", "hwc"])
def test_conv2d_is_the_emulated_matmul_of_explicit_patches(order):
    g = torch.Generator().manual_seed(9)
    x = torch.randn(2, 4, 6, 5, generator=g).half()
    w = torch.randn(6, 2, 3, 2, generator=g).half()  # groups = 2
    bias = torch.randn(6, generator=g).half()
    stride, padding, dilation = (2, 1), (1, 0), (1, 2)
    kw = dict(acc_dtype="float16", chunk=3, rounding="truncate", split_k=2)
    got = E.conv2d(x, w, bias, stride, padding, dilation, 2, out_dtype="float64", k_order=order, **kw)
    ho, wo = got.shape[2:]
    want = torch.empty_like(got)
    for grp in range(2):
        cols = im2col(x[:, 2 * grp : 2 * grp + 2], 3, 2, stride, padding, dilation, order)
        wk = w[3 * grp : 3 * grp + 3]
        wk = wk.permute(0, 2, 3, 1) if order == "hwc" else wk
        acc = E.matmul(wk.reshape(3, -1), cols, out_dtype="float64", **kw)  # (N, 3, L)
        acc = E.round_sum([acc, bias[3 * grp : 3 * grp + 3].double()[None, :, None].expand_as(acc)], "float16")
        want[:, 3 * grp : 3 * grp + 3] = acc.reshape(2, 3, ho, wo)
    assert same(got, want)
    assert got.shape == F.conv2d(x.float(), w.float(), None, stride, padding, dilation, 2).shape


def test_conv2d_with_one_exact_group_matches_the_float64_conv_in_both_orders():
    x = (torch.randint(-8, 9, (1, 3, 5, 5)) / 8.0).half()
    w = (torch.randint(-8, 9, (2, 3, 3, 3)) / 8.0).half()
    exact = F.conv2d(x.double(), w.double(), padding=1).float()  # sums of multiples of 2**-6: exact in float64
    assert torch.equal(E.conv2d(x, w, padding=1, acc_dtype="float32", chunk=27, out_dtype="float32"), exact)
    assert torch.equal(
        E.conv2d(x, w, padding=1, acc_dtype="float32", chunk=27, out_dtype="float32", k_order="hwc"), exact
    )


def test_conv2d_argument_errors():
    x, w = torch.ones(1, 4, 5, 5).half(), torch.ones(2, 2, 3, 3).half()
    with pytest.raises(ValueError, match="conv2d: x has 4 channels"):
        E.conv2d(x, w, acc_dtype="float32")
    with pytest.raises(ValueError, match="conv2d: stride must be an integer >= 1"):
        E.conv2d(x, w, stride=0, groups=2, acc_dtype="float32")
    with pytest.raises(ValueError, match="conv2d: k_order must be one of"):
        E.conv2d(x, w, groups=2, acc_dtype="float32", k_order="whc")
    with pytest.raises(ValueError, match="conv2d: the output would be empty"):
        E.conv2d(torch.ones(1, 4, 2, 2).half(), w, groups=2, acc_dtype="float32")


# --------------------------------------------------------------------------- flush_to_zero


def test_flush_to_zero_keeps_the_sign_and_the_rest():
    t = torch.tensor(
        [2.0**-15, -(2.0**-24), 2.0**-14, -(2.0**-14), 1.0, math.inf, -math.inf, math.nan, -0.0], dtype=torch.float16
    )
    out = E.flush_to_zero(t)
    assert out.dtype == torch.float16
    vals = out.double().tolist()
    assert vals[:7] == [0.0, 0.0, 2.0**-14, -(2.0**-14), 1.0, math.inf, -math.inf] and math.isnan(vals[7])
    assert [math.copysign(1, v) for v in (vals[0], vals[1], vals[8])] == [1, -1, -1]
    plus = E.flush_to_zero(t, keep_sign=False).double().tolist()
    assert math.copysign(1, plus[1]) == 1


def test_flush_to_zero_defaults_and_custom_threshold():
    x = torch.tensor([2.0**-127, -(2.0**-126), 1e-40], dtype=torch.float32)
    assert E.flush_to_zero(x).tolist() == [0.0, -(2.0**-126), 0.0]
    bf = torch.tensor([2.0**-127, 2.0**-126], dtype=torch.bfloat16)
    assert E.flush_to_zero(bf).double().tolist() == [0.0, 2.0**-126]
    # compared in float64: 1e-5 is not a float16 value, yet applies as written
    h = torch.tensor([2.0**-17, 2.0**-16], dtype=torch.float16)  # 7.6e-6 and 1.5e-5
    assert E.flush_to_zero(h, 1e-5).double().tolist() == [0.0, 2.0**-16]
    with pytest.raises(ValueError, match="threshold must be a finite number >= 0"):
        E.flush_to_zero(h, -1.0)
    with pytest.raises(ValueError, match="floating-point tensor"):
        E.flush_to_zero(torch.ones(2, dtype=torch.int32))


# --------------------------------------------------------------------------- TF32


def tf32_by_parts(bits: int, rounding: str) -> int:
    """TF32 rounding of float32 bits through sign / exponent / significand integers:
    the significand (with its implicit bit for normals) is split into kept and dropped parts
    with divmod by 2**13; a carry out of the significand raises the exponent."""
    sign, exp, frac = bits >> 31, (bits >> 23) & 0xFF, bits & 0x7FFFFF
    if exp == 0xFF:
        return bits
    sig = frac | (0x800000 if exp else 0)
    kept, dropped = divmod(sig, 2**13)
    if rounding == "nearest_away":
        kept += dropped >= 2**12
    elif rounding == "nearest_even":
        kept += dropped > 2**12 or (dropped == 2**12 and kept % 2 == 1)
    sig = kept * 2**13
    e = exp if exp else 0
    if exp == 0 and sig >= 0x800000:  # a subnormal rounded up to the smallest normal
        e = 1
    elif sig >= 0x1000000:  # carry past the leading bit
        sig //= 2
        e += 1
    if e >= 0xFF:
        return (sign << 31) | 0x7F800000
    return (sign << 31) | (e << 23) | (sig & 0x7FFFFF)


def as_f32(bit_list):
    arr = np.array(bit_list, dtype=np.uint32)
    return torch.from_numpy(arr.view(np.float32).copy())


@pytest.mark.parametrize("rounding", ["nearest_away", "nearest_even", "truncate"])
def test_round_tf32_matches_an_integer_decomposition(rounding):
    rng = np.random.default_rng(11)
    bits = [int(v) for v in rng.integers(0, 2**32, size=3000, dtype=np.uint64)]
    bits += [
        0x3F801000,
        0x3F803000,
        0x3F800FFF,
        0x00001000,
        0x00003000,
        0x807FF000,
        0x7F7FF000,
        0x7F7FEFFF,
        0x7F7FFFFF,
        0xFF7FFFFF,
        0x7F800000,
        0x7F800001,
        0xFFC00000,
        0x80000000,
    ]
    got = E.round_tf32(as_f32(bits), rounding)
    want = as_f32([tf32_by_parts(b, rounding) for b in bits])
    assert np.array_equal(got.numpy().view(np.uint32), want.numpy().view(np.uint32))


def test_round_tf32_hand_checked_ties_overflow_and_nan():
    x = as_f32([0x3F801000, 0x3F803000, 0x00001000, 0x7F7FFFFF, 0x7F800001])
    away = E.round_tf32(x).numpy().view(np.uint32).tolist()
    even = E.round_tf32(x, "nearest_even").numpy().view(np.uint32).tolist()
    trunc = E.round_tf32(x, "truncate").numpy().view(np.uint32).tolist()
    sat = E.round_tf32(x, satfinite=True).numpy().view(np.uint32).tolist()
    assert away[:4] == [0x3F802000, 0x3F804000, 0x00002000, 0x7F800000]
    assert even[:4] == [0x3F800000, 0x3F804000, 0x00000000, 0x7F800000]
    assert trunc[:4] == [0x3F800000, 0x3F802000, 0x00000000, 0x7F7FE000]
    assert sat[3] == 0x7F7FE000
    assert all(v == 0x7F800001 for v in (away[4], even[4], trunc[4], sat[4]))  # a NaN stays that NaN


def test_round_tf32_nearest_even_is_round_to_p11_with_float32_exponents():
    rng = np.random.default_rng(12)
    x = torch.from_numpy((rng.standard_normal(500) * np.exp2(rng.integers(-140, 120, 500))).astype(np.float32))
    got = E.round_tf32(x, "nearest_even").double().tolist()
    SPEC["tf32"] = (11, -126, 127)
    try:
        want = [ref_round(v, "tf32", "nearest") for v in x.double().tolist()]
    finally:
        del SPEC["tf32"]
    assert got == want


def test_round_tf32_rejects_other_dtypes():
    with pytest.raises(ValueError, match="round_tf32: t must be a float32 tensor, got a float16"):
        E.round_tf32(torch.ones(2, dtype=torch.float16))
    with pytest.raises(ValueError, match="rounding must be one of"):
        E.round_tf32(torch.ones(2), "nearest")


# --------------------------------------------------------------------------- CUDA


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.mark.cuda
@cuda
def test_cuda_tensors_give_the_host_results_on_their_device():
    rng = np.random.default_rng(15)
    bits = rng.integers(0, 2**32, size=4096, dtype=np.uint64).astype(np.uint32)
    x = torch.from_numpy(bits.view(np.float32).copy())
    for mode in ("nearest_away", "nearest_even", "truncate"):
        got = E.round_tf32(x.cuda(), mode, satfinite=mode == "truncate")
        assert got.is_cuda
        assert torch.equal(
            got.cpu().view(torch.int32), E.round_tf32(x, mode, satfinite=mode == "truncate").view(torch.int32)
        )
    h = x.half()
    assert torch.equal(E.flush_to_zero(h.cuda()).cpu().view(torch.int16), E.flush_to_zero(h).view(torch.int16))
    a, b = torch.randn(5, 33).half(), torch.randn(33, 4).half()
    out = E.matmul(a.cuda(), b.cuda(), acc_dtype="float32", chunk=4, rounding="truncate")
    assert out.is_cuda and torch.equal(out.cpu(), E.matmul(a, b, acc_dtype="float32", chunk=4, rounding="truncate"))


@pytest.mark.cuda
@pytest.mark.skipif(
    not torch.cuda.is_available() or torch.cuda.get_device_capability() < (8, 0),
    reason="needs a CUDA device with TF32 tensor cores (sm_80 or later)",
)
def test_cublas_tf32_operands_are_rounded_as_one_of_the_emulated_modes(capsys):
    """x @ I with TF32 allowed: one nonzero product per output, so the output is x's TF32
    operand value. Prints which rounding cuBLAS applied (ties are planted in column 0..7)."""
    g = torch.Generator().manual_seed(14)
    n = 256
    high = torch.randint(0x3F800000 >> 13, 0x40000000 >> 13, (n, n), generator=g, dtype=torch.int64) << 13  # [1, 2)
    low = torch.randint(0, 2**13, (n, n), generator=g, dtype=torch.int64)
    low[:, :8] = 0x1000  # exactly halfway between two TF32 values
    x = (high | low).to(torch.int32).view(torch.float32)
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")  # TF32 for float32 matmuls
    try:
        got = (x.cuda() @ torch.eye(n, device="cuda")).cpu()
    finally:
        torch.set_float32_matmul_precision(before)
    matches = [m for m in ("nearest_away", "nearest_even", "truncate") if torch.equal(got, E.round_tf32(x, m))]
    assert not torch.equal(got, x), "the float32 matmul did not use TF32"
    assert matches, "cuBLAS's TF32 operands match none of nearest_away, nearest_even, truncate"
    with capsys.disabled():
        print(f"\ncuBLAS TF32 operand rounding on {torch.cuda.get_device_name()}: {', '.join(matches)}")
