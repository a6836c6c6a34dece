"""Correct rounding of float64 values and of exact sums of float64 values to a format (see the package docstring)."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from acceptance.numerics.emulate.formats import (
    _CASCADE_TERMS,
    _MAX_PASSES,
    _MAX_STEPS,
    _ROUND_SUM_LIMIT,
    _ROUNDINGS,
    DtypeLike,
    Format,
    _check_choice,
    _describe,
    _format_of,
)

# --------------------------------------------------------------------------- rounding to a format

_EXP_FIELD = 0x7FF
_MANT_FIELD = (1 << 52) - 1


def _biased_exponent(x: torch.Tensor, fmt: Format) -> torch.Tensor:
    """The float64 exponent field of ``x`` (int64), raised to at least ``fmt``'s smallest
    normal binade: ``floor(log2|x|) + 1023`` for normal float64 ``x``, and the binade whose
    spacing ``fmt``'s subnormals share for ``|x| < 2**emin`` (and for 0)."""
    return ((x.view(torch.int64) >> 52) & _EXP_FIELD).clamp(min=fmt.emin + 1023)


def _round_unbounded(x: torch.Tensor, fmt: Format, rounding: str) -> torch.Tensor:
    """float64 ``x`` rounded to ``fmt``'s grid (subnormals kept) as if the exponent had no
    upper limit: ``R(x / q) * q`` with spacing ``q = 2**(max(floor(log2|x|), emin) - p + 1)``
    and R = round-half-even or trunc. ``1/q`` and ``q`` are built from bits and the
    scalings are by powers of two, hence exact; inf and NaN pass through."""
    be = _biased_exponent(x, fmt)
    p = fmt.precision
    y = x * ((2045 + p - be) << 52).view(torch.float64)  # x / q
    # trunc(y) as copysign(floor(|y|), y): torch's trunc is several times slower than floor
    y = torch.round(y) if rounding == "nearest" else torch.floor(y.abs()).copysign(y)
    return y * ((be - (p - 1)) << 52).view(torch.float64)  # * q


def _spacing(t: torch.Tensor, fmt: Format) -> torch.Tensor:
    """The grid spacing ``q`` of ``fmt`` at ``t`` (float64; no upper exponent limit)."""
    return ((_biased_exponent(t, fmt) - (fmt.precision - 1)) << 52).view(torch.float64)


def _overflow(t: torch.Tensor, fmt: Format, rounding: str) -> torch.Tensor:
    """Finite grid values above ``fmt.max``: ``±inf`` for nearest-even, ``±max`` for truncation."""
    over = t.abs() > fmt.max
    if not bool(over.any()):
        return t
    if rounding == "nearest":
        return torch.where(over, torch.copysign(torch.full_like(t, math.inf), t), t)
    over &= torch.isfinite(t)
    return torch.where(over, torch.copysign(torch.full_like(t, fmt.max), t), t)


def _two_sum(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Knuth's TwoSum: ``s = fl(a + b)`` and ``e`` with ``a + b = s + e`` exactly (finite ``s``;
    ``e`` is NaN where ``s`` is inf or NaN)."""
    s = a + b
    bv = s - a
    return s, (a - (s - bv)) + (b - bv)


def _to_odd(s: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
    """The exact ``s + e`` (a TwoSum pair) rounded to 53 bits toward odd, on the bit pattern.

    ``e == 0``: ``s``. Otherwise the sum lies strictly between ``s`` and its
    float64 neighbour toward ``e``, and the result is whichever of the two has
    an odd last bit: with ``d = 1`` when ``e`` points toward zero, it is
    ``(bits(s) - d) | 1`` (one step toward zero, then the last bit set; both act
    on the magnitude bits whatever the sign, and a step below a power of two
    lands on the largest value of the binade below). A NaN ``e`` (from a
    non-finite ``s``) leaves ``s`` unchanged.
    """
    toward_zero = (e * s < 0).to(torch.int64)
    inexact = (e.abs() > 0).to(torch.int64)
    return ((s.view(torch.int64) - toward_zero) | inexact).view(torch.float64)


def _native_float32() -> bool:
    """Whether torch's float32 addition and float64 -> float32 conversion keep subnormals
    (no flush-to-zero mode set, e.g. by ``torch.set_flush_denormal(True)``)."""
    tiny = torch.tensor([2.0**-140], dtype=torch.float64)
    return tiny.to(torch.float32).item() == 2.0**-140 and (tiny.to(torch.float32) * 2).item() == 2.0**-139


class _Rounder:
    """One rounding (nearest-even or truncate) to one format, of exact float64 values and sums.

    For float32 with round-to-nearest-even the CPU's own IEEE arithmetic is that
    rounding (float64 -> float32 conversion, float32 addition of float32
    values), so it is used when it keeps subnormals; everything else is the
    emulation above (the tests hold the two equal on ties, binade edges,
    subnormals and overflow).
    """

    def __init__(self, fmt: Format, rounding: str):
        self.fmt, self.rounding = fmt, rounding
        self.native = fmt.name == "float32" and rounding == "nearest" and _native_float32()

    def value(self, x: torch.Tensor) -> torch.Tensor:
        """float64 ``x`` rounded once (inf, NaN and the sign of zero kept)."""
        if self.native:
            return x.to(torch.float32).to(torch.float64)
        return _overflow(_round_unbounded(x, self.fmt, self.rounding), self.fmt, self.rounding)

    def pair(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """The exact ``a + b`` rounded once: rounding to odd on 53 bits, then to the format
        (at most 24 bits, so correct for both roundings: Boldo & Melquiond 2008).
        Non-finite operands give the float64 sum."""
        return self.value(_to_odd(*_two_sum(a, b)))

    def add(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """``a + b`` rounded once, for ``a``, ``b`` that are values of the format."""
        if self.native:
            return (a.to(torch.float32) + b.to(torch.float32)).to(torch.float64)
        return self.pair(a, b)

    def sum(self, stack: torch.Tensor) -> torch.Tensor:
        """The exact sum along dim 0 of float64 ``stack`` rounded once (the float64 sum of the
        terms where one is inf or NaN). One term is rounded; two go through :meth:`pair`. Up to
        :data:`_CASCADE_TERMS` terms are first added by a TwoSum cascade: where every error is 0
        that float64 sum is exact and is rounded; the other sums, and all sums of more terms,
        go through :meth:`exact`."""
        if stack.shape[0] == 1:
            return self.value(stack[0])
        if stack.shape[0] == 2:
            return self.pair(stack[0], stack[1])
        if stack.shape[0] > _CASCADE_TERMS:
            return self.exact(stack)
        s, err = _two_sum(stack[0], stack[1])
        inexact = err != 0  # NaN where s is inf or NaN
        for term in stack[2:]:
            s, err = _two_sum(s, term)
            inexact = inexact | (err != 0)
        out = self.value(s)
        if bool(inexact.any()):
            out = out.clone()
            out[inexact] = self.exact(stack[:, inexact])
        return out

    def exact(self, stack: torch.Tensor) -> torch.Tensor:
        """:meth:`sum` without shortcuts: :func:`_extract` splits the terms into float64 levels
        with the same exact sum; one level is rounded, two go through :meth:`pair`, more through
        :func:`_round_exact`. An exact zero is +0, or -0 when every term is -0 (as float addition)."""
        plain = stack.sum(dim=0)
        finite = torch.isfinite(plain)  # false exactly where a term is inf or NaN (finite sums cannot overflow)
        all_finite = bool(finite.all())
        levels = _extract(stack if all_finite else torch.where(finite, stack, 0.0))
        if len(levels) == 1:
            out = self.value(levels[0])
        elif len(levels) == 2:
            out = self.pair(levels[0], levels[1])
        else:
            out = _round_exact(levels, self.fmt, self.rounding)
        zero = out == 0
        if bool(zero.any()):
            negative_zeros = ((stack == 0) & torch.signbit(stack)).all(dim=0)
            out = torch.where(zero & negative_zeros, -0.0, out)
        return out if all_finite else torch.where(finite, out, plain)


def round_float64(x: torch.Tensor, dtype: DtypeLike, rounding: str = "nearest") -> torch.Tensor:
    """float64 values rounded once to ``dtype`` (float16, bfloat16, float32), returned as float64.

    ``rounding="nearest"``: to nearest, ties to even; ``"truncate"``: toward
    zero. Subnormal results keep gradual underflow; overflow gives ``±inf``
    (nearest) or ``±max`` (truncate); inf, NaN and the sign of zero are kept.
    """
    fmt = _format_of(dtype, "round_float64: dtype")
    _check_choice(rounding, _ROUNDINGS, "round_float64: rounding")
    if not isinstance(x, torch.Tensor) or x.dtype != torch.float64:
        raise ValueError(f"round_float64: x must be a float64 tensor, got {_describe(x)}")
    return _overflow(_round_unbounded(x, fmt, rounding), fmt, rounding)


def _grow(expansion: list[torch.Tensor], b: torch.Tensor) -> list[torch.Tensor]:
    """Shewchuk's Grow-Expansion: a nonoverlapping expansion (components in increasing
    magnitude, zeros anywhere) plus ``b``, as a nonoverlapping expansion one longer."""
    q, out = b, []
    for h in expansion:
        q, err = _two_sum(q, h)
        out.append(err)
    out.append(q)
    return out


def _sign(expansion: list[torch.Tensor]) -> torch.Tensor:
    """Sign (-1, 0, 1) of the exact sum of a nonoverlapping expansion: the sign of its
    largest-magnitude component (the others sum to less than that component's lowest bit)."""
    top = expansion[0]
    for h in expansion[1:]:
        top = torch.where(h.abs() > top.abs(), h, top)
    return torch.sign(top)


def _compare(expansion: list[torch.Tensor], v: torch.Tensor) -> torch.Tensor:
    """Sign of (exact sum of ``expansion``) - ``v``, exactly."""
    return _sign(_grow(expansion, -v))


def _next_down(t: torch.Tensor, fmt: Format) -> torch.Tensor:
    """The grid value before ``t > 0`` (0 for ``t == 0``): at a power of two above the
    smallest normal the spacing below is half the spacing at ``t``."""
    q = _spacing(t, fmt)
    power = (t.view(torch.int64) & _MANT_FIELD) == 0
    halve = power & (t > fmt.smallest_normal)
    return torch.where(t > 0, t - torch.where(halve, q * 0.5, q), t)


def _is_even(t: torch.Tensor, fmt: Format) -> torch.Tensor:
    """Whether grid value ``t >= 0`` has an even integral significand ``t / spacing``."""
    return torch.fmod(t / _spacing(t, fmt), 2.0) == 0


def _extract(terms: torch.Tensor) -> list[torch.Tensor]:
    """Float64 levels ``[t_1, t_2, ...]`` (each of shape ``terms.shape[1:]``) whose exact sum is
    the exact sum of ``terms`` along dim 0: Rump, Ogita and Oishi's ExtractVector ("Accurate
    floating-point summation part I", SIAM J. Sci. Comput. 2008), repeated until nothing is left.

    With ``n`` terms, ``2**M >= n + 2`` and ``σ = 2**(M + ceil(log2 max|p_i|))``
    per element, ``q_i = (σ + p_i) - σ`` and ``p_i - q_i`` are exact, and the
    ``q_i`` lie on one grid with ``sum |q_i| <= σ < 2**53`` grid steps, so their
    float64 sum, in any order, is exact; the remainders are below ``2**-52 σ``.
    Each pass costs a few tensor operations whatever ``n``; the number of passes
    is about the terms' range in bits divided by ``53 - M``. Needs finite terms
    of magnitude below ``2**(1022 - M)`` (true for sums of products of float16,
    bfloat16 and float32 values).
    """
    m = math.ceil(math.log2(terms.shape[0] + 2))
    levels: list[torch.Tensor] = []
    p = terms
    for _ in range(_MAX_PASSES):
        low, high = torch.aminmax(p, dim=0)
        mu = torch.maximum(high, -low)
        if not bool((mu > 0).any()):
            return levels or [torch.zeros_like(terms[0])]
        bits = mu.view(torch.int64)
        ceil_log2 = ((bits >> 52) & _EXP_FIELD) - 1023 + ((bits & _MANT_FIELD) != 0).to(torch.int64)
        sigma = torch.where(mu > 0, ((ceil_log2 + m + 1023) << 52).view(torch.float64), 1.0)
        q = (sigma + p) - sigma
        p = p - q
        levels.append(q.sum(dim=0))
    raise RuntimeError("round_sum: the exact summation did not finish; are the terms far outside float32's range?")


def _round_exact(terms: list[torch.Tensor], fmt: Format, rounding: str) -> torch.Tensor:
    """The exact sum of finite float64 ``terms`` rounded once to ``fmt``, by exact sign tests.

    Grow-Expansion gives a nonoverlapping expansion of the sum; with ``σ`` its
    sign, the magnitude ``|S|`` is the expansion times ``σ``. A candidate ``t``
    (the float64 sum rounded to ``fmt``) moves one grid step while ``|S|`` lies
    beyond a boundary: for nearest-even the midpoints ``(t_prev + t)/2`` and
    ``(t + t_next)/2`` (exactly at one: the even neighbour), for truncation
    ``t`` and ``t_next`` (``t <= |S| < t_next``). Each comparison is the sign of
    a Grow-Expansion, so the result is exact whatever the float64 sum's error.
    """
    expansion = [terms[0]]
    for term in terms[1:]:
        expansion = _grow(expansion, term)
    sigma = _sign(expansion)
    mag = [h * sigma for h in expansion]
    approx = mag[0]
    for h in mag[1:]:
        approx = approx + h
    t = _round_unbounded(approx.clamp(min=0.0), fmt, rounding)
    for _ in range(_MAX_STEPS):
        up_t, down_t = t + _spacing(t, fmt), _next_down(t, fmt)
        if rounding == "nearest":
            above = _compare(mag, (t + up_t) * 0.5)
            below = torch.where(t > 0, _compare(mag, (down_t + t) * 0.5), 1.0)
            even = _is_even(t, fmt)
            t_new = torch.where(above == 0, torch.where(even, t, up_t), t)
            t_new = torch.where(below == 0, torch.where(even, t, down_t), t_new)
            up, down = above > 0, below < 0
        else:
            up = _compare(mag, up_t) >= 0
            down = _compare(mag, t) < 0
            t_new = t
        t = torch.where(up, up_t, torch.where(down, down_t, t_new))
        if not bool((up | down).any()):
            return _overflow(sigma * t, fmt, rounding)
    raise RuntimeError("round_sum: the rounding did not settle; the float64 estimate of the sum was far off")


def round_sum(terms: Sequence[torch.Tensor], dtype: DtypeLike, rounding: str = "nearest") -> torch.Tensor:
    """The exact sum of float64 tensors ``terms`` (broadcast together), rounded once to ``dtype``.

    ``sum(terms)`` is the real-number sum, never a float64 partial sum; the
    result (float64 values of ``dtype``) is its round-to-nearest-even
    (``rounding="nearest"``) or its truncation toward zero (``"truncate"``),
    with gradual underflow and overflow to ``±inf``/``±max``. An exact zero sum
    is ``+0``. Where a term is inf or NaN the result is the float64 sum.
    Finite terms must lie within ``2**960`` in magnitude (ValueError otherwise).
    """
    fmt = _format_of(dtype, "round_sum: dtype")
    _check_choice(rounding, _ROUNDINGS, "round_sum: rounding")
    terms = list(terms)
    if not terms:
        raise ValueError("round_sum: terms must hold at least one tensor")
    for i, term in enumerate(terms):
        if not isinstance(term, torch.Tensor) or term.dtype != torch.float64:
            raise ValueError(f"round_sum: terms[{i}] must be a float64 tensor, got {_describe(term)}")
    same_shape = torch.broadcast_tensors(*terms)
    for i, term in enumerate(same_shape):
        mag = term.abs()
        if bool(((mag > _ROUND_SUM_LIMIT) & (mag != math.inf)).any()):
            raise ValueError(
                f"round_sum: terms[{i}] has a finite value beyond 2**960 in magnitude;"
                " the exact summation needs headroom below float64's range"
            )
    return _Rounder(fmt, rounding).sum(torch.stack(same_shape))
