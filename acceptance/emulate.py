"""Device arithmetic emulated on the CPU: flush-to-zero, TF32 operands, and
contractions whose accumulation rounds the way an accelerator's does.

A CPU baseline in the same dtype is not what a GPU computes. rocMLIR's study
of float16 convolutions on MI100/MI200 traced nearly every element with
relative error >= 1e-3 to three device behaviours: subnormal inputs flushed to
zero by the MFMA units, the order of the partitioned GEMM, and the rounding of
partial sums (the DOT4_F32_F16 units sum four products, then round to float32).
Its CPU reference (``rocMLIR mlir/lib/ExecutionEngine/conv-validation-wrappers.cpp``)
carries the "acc 4" emulation as a switch in the convolution loop. The pieces
here let a baseline do the same:

* :func:`flush_to_zero`: ``|x| < threshold`` becomes a zero with the sign of
  ``x`` (the ``.ftz`` of PTX and LLVM's ``denormal-fp-math=preserve-sign``;
  ``keep_sign=False`` gives the ``+0`` some AMD dot instructions produce).
* :func:`round_tf32`: float32 values rounded to TF32 (8-bit exponent, 10
  explicit mantissa bits).
* :func:`matmul`, :func:`bmm`, :func:`linear`, :func:`conv2d`: contractions in
  a chosen accumulator format (float16, bfloat16, float32). Along K, the
  products are summed **exactly** in groups of ``chunk`` consecutive terms, the
  group sum is rounded once to the accumulator format, and added to the
  running accumulator with one more rounding (``fused=True``: the accumulator
  joins the group's exact sum, one rounding per group, as an FMA for
  ``chunk=1`` and an MFMA/DOT4 step ``D = C + sum of 4 products`` for
  ``chunk=4``). ``rounding`` is round-to-nearest-even or toward zero.
  ``split_k`` partitions K into contiguous parts accumulated separately.
* :func:`round_float64` and :func:`round_sum`: one correct rounding of a
  float64 value, or of the exact sum of several float64 values, to a format.

Exactness. Inputs are float16, bfloat16 or float32, so each product is exact
in float64 (at most 48 significant bits, exponents far inside float64's
range). A sum of float64 values may need more than 53 bits, so group sums are
never formed by plain float64 addition. (1) Two terms: TwoSum gives the exact
sum as ``hi + lo``; it is rounded to 53 bits *toward odd* (``hi`` where
``lo == 0`` or ``hi`` is odd, else the neighbour of ``hi`` toward ``lo``), and
rounding that once more to a format of ``p <= 51`` bits gives the correct
rounding of the exact sum, for nearest-even and toward zero alike (Boldo &
Melquiond, "Emulation of FMA and correctly rounded sums: proved algorithms
using rounding to odd", IEEE TC 2008). (2) More terms: Rump, Ogita and Oishi's
ExtractVector ("Accurate floating-point summation part I", 2008) splits them,
in a few vectorised passes whatever their number, into float64 levels whose
sum is the exact sum (one level, i.e. an exact float64 sum, for float16
products spanning a few decades). One level is rounded directly, two go
through (1); more are turned by Shewchuk's Grow-Expansion (TwoSum chains,
"Adaptive precision floating-point arithmetic", 1997) into a nonoverlapping
expansion, whose sign is that of its largest component, and a candidate
result from the float64 sum is checked against the neighbouring rounding
boundaries (midpoints for nearest-even, grid points for truncation) by exact
sign tests on the expansion, and moved until none is crossed. No step assumes
a rounding error away.

Formats. Rounding is to the target's grid with gradual underflow
(subnormals kept; flush them with :func:`flush_to_zero` where the device does).
Above the largest finite value, round-to-nearest-even gives ``±inf`` (at and
beyond ``max + ulp/2``, as IEEE 754) and truncation gives ``±max``. An
infinite or NaN product makes that group's sum the float64 sum of its
products (``inf``, or NaN for ``inf - inf`` and ``0 * inf``), and an infinite
accumulator stays infinite (or becomes NaN) by float64 addition.

Cost. The work is O(B·M·N·K) element operations: about ten per product and
extraction pass, a pass covering ``52 - log2(chunk + 2)`` bits of a group's
range (one pass for data within a few decades, two or three for float32
inputs spread over many). The running accumulation is K/chunk
sequential steps over B·M·N elements, about 25 tensor operations each (4 for
float32 with round-to-nearest, which uses the CPU's float32 addition).
Work is tiled so that no tensor of products exceeds :data:`TILE_ELEMENTS`
elements: memory is the float64 copies of the inputs and the B·M·N
accumulator plus O(chunk · TILE_ELEMENTS) scratch. ``benchmarks/emulate.py``
measures it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence, Union

import torch
import torch.nn.functional as F

__all__ = [
    "Format",
    "FORMATS",
    "TILE_ELEMENTS",
    "flush_to_zero",
    "round_tf32",
    "round_float64",
    "round_sum",
    "matmul",
    "bmm",
    "linear",
    "conv2d",
]

DtypeLike = Union[str, torch.dtype]

#: Largest number of elements in one tensor of products (float64: 2 MiB).
TILE_ELEMENTS = 1 << 18

_ROUNDINGS = ("nearest", "truncate")
_TF32_ROUNDINGS = ("nearest_away", "nearest_even", "truncate")
_INPUT_DTYPES = (torch.float16, torch.bfloat16, torch.float32)
_MAX_STEPS = 64  # candidate moves in _round_exact; more means the float64 estimate was absurd
_MAX_PASSES = 200  # extraction passes; each removes at least 30 bits of the terms' range
_CASCADE_TERMS = 8  # up to this many terms, try the plain float64 sum (checked exact by TwoSum) first
_ROUND_SUM_LIMIT = 2.0**960  # largest finite term round_sum takes (float32 products stay below 2**256)


@dataclass(frozen=True)
class Format:
    """A binary floating-point format: ``precision`` bits of significand (with the
    implicit one), smallest normal ``2**emin``, largest finite ``max`` =
    ``(2 - 2**(1 - precision)) * 2**emax``; subnormals have spacing ``2**(emin - precision + 1)``."""

    name: str
    precision: int
    emin: int
    emax: int
    max: float

    @property
    def smallest_normal(self) -> float:
        return math.ldexp(1.0, self.emin)


def _make_format(dtype: torch.dtype) -> Format:
    info = torch.finfo(dtype)
    p = round(-math.log2(info.eps)) + 1
    emin = round(math.log2(info.smallest_normal))
    emax = math.frexp(info.max)[1] - 1
    return Format(str(dtype).removeprefix("torch."), p, emin, emax, float(info.max))


#: Accumulator formats by name.
FORMATS: dict[str, Format] = {
    name: _make_format(getattr(torch, name)) for name in ("float16", "bfloat16", "float32")
}


def _dtype_name(dtype: DtypeLike) -> str:
    return dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")


def _format_of(dtype: DtypeLike, where: str) -> Format:
    name = _dtype_name(dtype)
    if name not in FORMATS:
        raise ValueError(f"{where} must be one of {', '.join(map(repr, FORMATS))}, got {name!r}")
    return FORMATS[name]


def _check_choice(value: str, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise ValueError(f"{where} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    return value


def _check_count(value, where: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{where} must be an integer >= 1, got {value!r}")
    return value


# --------------------------------------------------------------------------- flush, TF32


def flush_to_zero(t: torch.Tensor, threshold: Optional[float] = None, *, keep_sign: bool = True) -> torch.Tensor:
    """``t`` with every ``|x| < threshold`` replaced by zero; other values, inf and NaN unchanged.

    ``threshold`` defaults to the smallest normal of ``t``'s dtype (float16
    ``2**-14`` ≈ 6.1e-5, bfloat16 and float32 ``2**-126``, float64 ``2**-1022``),
    which flushes exactly the subnormals, as MI200's MFMA_F16/BF16 do to their
    inputs and outputs (MIOpen, "MI200 MFMA behavior specifics"). The
    comparison is made in float64, so a threshold that is not a value of the
    dtype is applied as written.

    The zero keeps the sign of ``x`` (``-1e-6`` becomes ``-0.0``): PTX's
    ``.ftz`` flushes "to sign-preserving zero", and LLVM calls the mode
    ``preserve-sign``. ``keep_sign=False`` gives ``+0`` instead (some AMD
    instructions, e.g. ``v_dot2c_f32_f16``, flush to ``+0``).
    """
    if not isinstance(t, torch.Tensor) or not t.is_floating_point():
        raise ValueError(f"flush_to_zero: t must be a floating-point tensor, got {_describe(t)}")
    if threshold is None:
        threshold = torch.finfo(t.dtype).smallest_normal
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not (
        math.isfinite(threshold) and threshold >= 0
    ):
        raise ValueError(f"flush_to_zero: threshold must be a finite number >= 0, got {threshold!r}")
    small = t.abs().to(torch.float64) < threshold
    zero = torch.zeros_like(t)
    if keep_sign:
        zero = torch.copysign(zero, t)
    return torch.where(small, zero, t)


_TF32_DROP = 13  # float32 has 23 explicit mantissa bits, TF32 keeps 10
_TF32_LOW = (1 << _TF32_DROP) - 1  # 0x1fff
_TF32_HALF = 1 << (_TF32_DROP - 1)  # 0x1000
_F32_EXP_MASK = 0x7F800000
_TF32_MAX_BITS = 0x7F7FE000  # largest finite TF32 value, (2 - 2**-10) * 2**127


def round_tf32(t: torch.Tensor, rounding: str = "nearest_away", *, satfinite: bool = False) -> torch.Tensor:
    """float32 values rounded to TF32 (sign, 8-bit exponent, 10 explicit mantissa bits),
    returned as float32 with the 13 low mantissa bits zero.

    Rounding of the magnitude ``m`` (the bits without the sign), in units of
    ``2**13`` of the bit pattern, so subnormals and the carry into the exponent
    are handled as the hardware does:

    * ``"nearest_away"`` (default): ``(m + 0x1000) & ~0x1fff``, nearest, ties
      away from zero. This is PTX ``cvt.rna.tf32.f32``, which CUDA's
      ``nvcuda::wmma::__float_to_tf32`` (``crt/mma.hpp``) and CUTLASS's
      ``tfloat32_t(float)`` (``round_half_ulp_truncate``, ``include/cutlass/tfloat32.h``)
      use; it is the conversion available on sm_80.
    * ``"nearest_even"``: ``(m + 0xfff + ((m >> 13) & 1)) & ~0x1fff``, PTX
      ``cvt.rn.tf32.f32`` (sm_90 and later).
    * ``"truncate"``: ``m & ~0x1fff``, what a TF32 tensor-core MMA does with a
      float32 operand that was not converted first (PyTorch's notes: "only the
      first 10 bits of the input mantissa are read"); PTX ``cvt.rz.tf32.f32``.

    cuBLAS and cuDNN do not document which of these their TF32 kernels apply to
    float32 operands; emulate each and compare when it matters.

    A finite value that rounds past the largest TF32 value becomes ``±inf``
    (``satfinite=True``: ``±(2 - 2**-10) * 2**127``, PTX's ``.satfinite``);
    ``±inf`` and NaN pass through unchanged (a NaN's payload is kept).
    """
    if not isinstance(t, torch.Tensor) or t.dtype != torch.float32:
        raise ValueError(f"round_tf32: t must be a float32 tensor, got {_describe(t)}")
    _check_choice(rounding, _TF32_ROUNDINGS, "round_tf32: rounding")
    bits = t.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    sign = bits & 0x80000000
    mag = bits & 0x7FFFFFFF
    if rounding == "nearest_away":
        rounded = (mag + _TF32_HALF) & ~_TF32_LOW
    elif rounding == "nearest_even":
        rounded = (mag + (_TF32_HALF - 1) + ((mag >> _TF32_DROP) & 1)) & ~_TF32_LOW
    else:
        rounded = mag & ~_TF32_LOW
    if satfinite:
        rounded = rounded.clamp(max=_TF32_MAX_BITS)
    finite = mag < _F32_EXP_MASK
    out = sign | torch.where(finite, rounded, mag)
    out = torch.where(out >= 2**31, out - 2**32, out)  # the same 32 bits as a signed int32
    return out.to(torch.int32).view(torch.float32).reshape(t.shape)


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
        s, inexact = stack[0], None
        for term in stack[1:]:
            s, err = _two_sum(s, term)
            inexact = err != 0 if inexact is None else inexact | (err != 0)  # NaN where s is inf or NaN
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
    levels, p = [], terms
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
    terms = torch.broadcast_tensors(*terms)
    for i, term in enumerate(terms):
        mag = term.abs()
        if bool(((mag > _ROUND_SUM_LIMIT) & (mag != math.inf)).any()):
            raise ValueError(f"round_sum: terms[{i}] has a finite value beyond 2**960 in magnitude; the exact summation needs headroom below float64's range")
    return _Rounder(fmt, rounding).sum(torch.stack(terms))


# --------------------------------------------------------------------------- contractions


def _describe(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"a {str(v.dtype).removeprefix('torch.')} tensor of shape {tuple(v.shape)}"
    return f"{type(v).__name__} {v!r}"


def _check_operand(t, where: str) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or t.dtype not in _INPUT_DTYPES:
        raise ValueError(f"{where} must be a float16, bfloat16 or float32 tensor, got {_describe(t)}")
    return t


def _out_dtype(out_dtype: Optional[DtypeLike], default: torch.dtype, where: str) -> torch.dtype:
    if out_dtype is None:
        return default
    name = _dtype_name(out_dtype)
    allowed = ("float16", "bfloat16", "float32", "float64")
    if name not in allowed:
        raise ValueError(f"{where}: out_dtype must be one of {', '.join(map(repr, allowed))} or None, got {name!r}")
    return getattr(torch, name)


@dataclass(frozen=True)
class _Scheme:
    fmt: Format
    chunk: int
    rounding: str
    split_k: int
    fused: bool


def _scheme(acc_dtype, chunk, rounding, split_k, fused, where: str) -> _Scheme:
    fmt = _format_of(acc_dtype, f"{where}: acc_dtype")
    _check_count(chunk, f"{where}: chunk")
    _check_count(split_k, f"{where}: split_k")
    _check_choice(rounding, _ROUNDINGS, f"{where}: rounding")
    if not isinstance(fused, bool):
        raise ValueError(f"{where}: fused must be True or False, got {fused!r}")
    return _Scheme(fmt, chunk, rounding, split_k, fused)


def _blocks(batch: int, m: int, n: int, chunk: int) -> tuple[int, int]:
    """Batch and row block sizes so that one product tensor (per group) has at most
    ``TILE_ELEMENTS / chunk`` elements (at least one row)."""
    budget = max(1, TILE_ELEMENTS // chunk)
    if m * n <= budget:
        return max(1, min(batch, budget // max(1, m * n))), m
    return 1, max(1, budget // max(1, n))


def _contract_part(a: torch.Tensor, b: torch.Tensor, s: _Scheme, r: _Rounder) -> torch.Tensor:
    """Accumulated sum over one K part: ``a`` (B, M, Kp), ``b`` (B, Kp, N) float64 -> (B, M, N)
    values of the accumulator format, from an accumulator of +0, groups in ascending k."""
    batch, m, kp = a.shape
    n = b.shape[2]
    c = s.chunk
    groups = -(-kp // c)
    pad = groups * c - kp
    if pad:  # a short last group: zero products leave the exact sum unchanged
        a = F.pad(a, (0, pad))
        b = F.pad(b, (0, 0, 0, pad))
    a = a.reshape(batch, m, groups, c)
    b = b.reshape(batch, groups, c, n)
    acc = torch.zeros(batch, m, n, dtype=torch.float64)
    bb, mb = _blocks(batch, m, n, c)
    for b0 in range(0, batch, bb):
        for m0 in range(0, m, mb):
            a_blk = a[b0 : b0 + bb, m0 : m0 + mb]  # (bb, mb, G, c)
            b_blk = b[b0 : b0 + bb]  # (bb, G, c, n)
            acc_blk = acc[b0 : b0 + bb, m0 : m0 + mb]
            per_group = a_blk.shape[0] * a_blk.shape[1] * n
            tile = 1 if s.fused else max(1, (TILE_ELEMENTS // c) // max(1, per_group))
            for g0 in range(0, groups, tile):
                a_t = a_blk[:, :, g0 : g0 + tile].permute(3, 0, 2, 1)  # (c, bb, T, mb)
                b_t = b_blk[:, g0 : g0 + tile].permute(2, 0, 1, 3)  # (c, bb, T, n)
                products = a_t[..., None] * b_t[:, :, :, None, :]  # (c, bb, T, mb, n)
                if s.fused:
                    acc_blk = r.sum(torch.cat([acc_blk[None], products[:, :, 0]]))
                    continue
                sums = r.sum(products)  # (bb, T, mb, n)
                for t in range(sums.shape[1]):
                    acc_blk = r.add(acc_blk, sums[:, t])
            acc[b0 : b0 + bb, m0 : m0 + mb] = acc_blk
    return acc


def _contract(a: torch.Tensor, b: torch.Tensor, s: _Scheme, where: str) -> torch.Tensor:
    """``a`` (B, M, K) @ ``b`` (B, K, N), float64 inputs, under scheme ``s``: float64 values of
    the accumulator format. Parts of the split are summed in ascending order, each
    addition rounded to nearest-even in the accumulator format (a reduction kernel's add)."""
    k = a.shape[2]
    if s.split_k > max(k, 1):
        raise ValueError(f"{where}: split_k={s.split_k} exceeds K={k}")
    rounder, reducer = _Rounder(s.fmt, s.rounding), _Rounder(s.fmt, "nearest")
    out, k0 = None, 0
    for size in (len(part) for part in torch.arange(k).tensor_split(s.split_k)):
        part = _contract_part(a[:, :, k0 : k0 + size], b[:, k0 : k0 + size], s, rounder)
        out = part if out is None else reducer.add(out, part)
        k0 += size
    return out


def _to_out(acc: torch.Tensor, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """Accumulator values (float64) converted to ``dtype`` with round-to-nearest-even."""
    if dtype != torch.float64:
        acc = round_float64(acc, dtype)
    return acc.to(dtype).to(device)


def _matmul_acc(a: torch.Tensor, b: torch.Tensor, s: _Scheme, where: str) -> torch.Tensor:
    """Shapes as ``torch.matmul`` (1-D operands and broadcast batch dims included); float64
    accumulator values in the result's shape."""
    if a.dim() == 0 or b.dim() == 0:
        raise ValueError(f"{where}: operands must have at least one dimension, got shapes {tuple(a.shape)} and {tuple(b.shape)}")
    a2 = a.unsqueeze(0) if a.dim() == 1 else a
    b2 = b.unsqueeze(-1) if b.dim() == 1 else b
    if a2.shape[-1] != b2.shape[-2]:
        raise ValueError(f"{where}: inner dimensions differ: a is {tuple(a.shape)}, b is {tuple(b.shape)}")
    try:
        batch = torch.broadcast_shapes(a2.shape[:-2], b2.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"{where}: batch dimensions do not broadcast: a is {tuple(a.shape)}, b is {tuple(b.shape)}"
        ) from None
    m, k, n = a2.shape[-2], a2.shape[-1], b2.shape[-1]
    count = math.prod(batch)
    a3 = a2.detach().cpu().to(torch.float64).expand(*batch, m, k).reshape(count, m, k)
    b3 = b2.detach().cpu().to(torch.float64).expand(*batch, k, n).reshape(count, k, n)
    out = _contract(a3, b3, s, where).reshape(*batch, m, n)
    if a.dim() == 1:
        out = out.squeeze(-2)
    if b.dim() == 1:
        out = out.squeeze(-1)
    return out


def matmul(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    acc_dtype: DtypeLike,
    chunk: int = 1,
    rounding: str = "nearest",
    split_k: int = 1,
    out_dtype: Optional[DtypeLike] = None,
    fused: bool = False,
) -> torch.Tensor:
    """``a @ b`` with emulated accumulation; shapes and broadcasting as ``torch.matmul``.

    For each output element, with ``p_k = a[m, k] * b[k, n]`` (exact) and K
    split into ``split_k`` contiguous parts (``torch.tensor_split`` sizes, the
    first ``K % split_k`` one longer), each part runs

        acc = +0
        for each group G of ``chunk`` consecutive k (the last may be shorter):
            acc = R(acc + R(sum_{k in G} p_k))      # fused=False
            acc = R(acc + sum_{k in G} p_k)         # fused=True

    where every ``sum`` is exact and ``R`` rounds to ``acc_dtype`` with
    ``rounding`` ("nearest": to nearest, ties to even; "truncate": toward zero).
    The parts' results are then added in ascending order, ``r = RN(r + part_i)``
    in ``acc_dtype`` (a split-K reduction kernel's ordinary add), and ``r`` is
    converted to ``out_dtype`` with round-to-nearest-even (default: the
    promoted dtype of ``a`` and ``b``; ``float64`` returns the accumulator
    values exactly).

    Examples: float32 FMA accumulation ``chunk=1, fused=True``; separate
    multiply and add ``chunk=1``; MI100's DOT4 with truncation
    ``chunk=4, rounding="truncate"``; one rounding of the exact dot product
    ``chunk=K``.

    ``a``, ``b``: float16, bfloat16 or float32 (any device; computed on the
    CPU in float64, returned on ``a``'s device). Raises ValueError naming the
    argument for anything else.
    """
    where = "matmul"
    _check_operand(a, f"{where}: a")
    _check_operand(b, f"{where}: b")
    s = _scheme(acc_dtype, chunk, rounding, split_k, fused, where)
    dtype = _out_dtype(out_dtype, torch.promote_types(a.dtype, b.dtype), where)
    return _to_out(_matmul_acc(a, b, s, where), dtype, a.device)


def bmm(a: torch.Tensor, b: torch.Tensor, **scheme) -> torch.Tensor:
    """Batched ``a @ b`` for 3-D ``a`` (B, M, K) and ``b`` (B, K, N), as ``torch.bmm``;
    keyword arguments as :func:`matmul`."""
    _check_operand(a, "bmm: a")
    _check_operand(b, "bmm: b")
    if a.dim() != 3 or b.dim() != 3 or a.shape[0] != b.shape[0]:
        raise ValueError(f"bmm: a and b must be 3-D with equal batch sizes, got {tuple(a.shape)} and {tuple(b.shape)}")
    return matmul(a, b, **scheme)


def _add_bias(acc: torch.Tensor, bias: Optional[torch.Tensor], shape: tuple, fmt: Format, where: str) -> torch.Tensor:
    """``RN(acc + bias)`` in ``fmt`` with ``bias`` reshaped to ``shape`` and broadcast (None: ``acc``)."""
    if bias is None:
        return acc
    _check_operand(bias, f"{where}: bias")
    return _Rounder(fmt, "nearest").add(acc, bias.detach().cpu().to(torch.float64).reshape(shape).expand_as(acc))


def linear(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    *,
    acc_dtype: DtypeLike,
    chunk: int = 1,
    rounding: str = "nearest",
    split_k: int = 1,
    out_dtype: Optional[DtypeLike] = None,
    fused: bool = False,
) -> torch.Tensor:
    """``x @ weight.T + bias`` as ``F.linear`` (x: (..., in), weight: (out, in), bias: (out,)).

    The contraction is :func:`matmul`'s; ``bias`` is added to the accumulator
    once, ``RN(acc + bias)`` in ``acc_dtype`` (an epilogue add), before the
    conversion to ``out_dtype`` (default: the promoted dtype of x and weight).
    """
    where = "linear"
    _check_operand(x, f"{where}: x")
    _check_operand(weight, f"{where}: weight")
    if weight.dim() != 2 or x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        raise ValueError(f"{where}: expected x (..., in) and weight (out, in), got {tuple(x.shape)} and {tuple(weight.shape)}")
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (weight.shape[0],)):
        raise ValueError(f"{where}: bias must have shape ({weight.shape[0]},), got {_describe(bias)}")
    s = _scheme(acc_dtype, chunk, rounding, split_k, fused, where)
    dtype = _out_dtype(out_dtype, torch.promote_types(x.dtype, weight.dtype), where)
    acc = _matmul_acc(x, weight.t(), s, where)
    acc = _add_bias(acc, bias, (weight.shape[0],), s.fmt, where)
    return _to_out(acc, dtype, x.device)


def _pair(v, name: str, minimum: int) -> tuple[int, int]:
    items = (v, v) if isinstance(v, int) and not isinstance(v, bool) else tuple(v) if isinstance(v, (tuple, list)) else None
    if items is None or len(items) != 2 or any(isinstance(i, bool) or not isinstance(i, int) or i < minimum for i in items):
        raise ValueError(f"conv2d: {name} must be an integer >= {minimum} or a pair of them, got {v!r}")
    return items


def conv2d(
    x: torch.Tensor,
    weight: torch.Tensor,
    bias: Optional[torch.Tensor] = None,
    stride=1,
    padding=0,
    dilation=1,
    groups: int = 1,
    *,
    acc_dtype: DtypeLike,
    chunk: int = 1,
    rounding: str = "nearest",
    split_k: int = 1,
    out_dtype: Optional[DtypeLike] = None,
    fused: bool = False,
    k_order: str = "chw",
) -> torch.Tensor:
    """2-D cross-correlation as ``F.conv2d`` (x: (N, C, H, W), weight: (O, C/groups, R, S)),
    computed as an implicit GEMM through im2col onto :func:`matmul`'s accumulation.

    For output (n, o, y, x) the reduction runs over K = (C/groups)·R·S terms in
    ``k_order``: ``"chw"`` (channel slowest, then filter row, filter column:
    ``F.unfold``'s order and the loop of rocMLIR's CPU reference for NCHW) or
    ``"hwc"`` (channel fastest, as NHWC implicit-GEMM kernels read it). The
    order decides which terms share a ``chunk`` group and a ``split_k`` part.
    Zero padding enters as zero terms. ``bias`` (O,) is added once, ``RN(acc +
    bias)`` in ``acc_dtype``. ``padding`` takes integers only.
    """
    where = "conv2d"
    _check_operand(x, f"{where}: x")
    _check_operand(weight, f"{where}: weight")
    if x.dim() != 4 or weight.dim() != 4:
        raise ValueError(f"{where}: x and weight must be 4-D, got {tuple(x.shape)} and {tuple(weight.shape)}")
    _check_count(groups, f"{where}: groups")
    _check_choice(k_order, ("chw", "hwc"), f"{where}: k_order")
    n, c, h, w = x.shape
    o, cg, r, sw = weight.shape
    if c != cg * groups or o % groups:
        raise ValueError(
            f"{where}: x has {c} channels and weight {tuple(weight.shape)} with groups={groups}: "
            f"need C = weight.shape[1] * groups and O divisible by groups"
        )
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (o,)):
        raise ValueError(f"{where}: bias must have shape ({o},), got {_describe(bias)}")
    stride, padding, dilation = _pair(stride, "stride", 1), _pair(padding, "padding", 0), _pair(dilation, "dilation", 1)
    ho = (h + 2 * padding[0] - dilation[0] * (r - 1) - 1) // stride[0] + 1
    wo = (w + 2 * padding[1] - dilation[1] * (sw - 1) - 1) // stride[1] + 1
    if ho < 1 or wo < 1:
        raise ValueError(f"{where}: the output would be empty ({ho}x{wo}) for input {tuple(x.shape)} and weight {tuple(weight.shape)}")
    s = _scheme(acc_dtype, chunk, rounding, split_k, fused, where)
    dtype = _out_dtype(out_dtype, torch.promote_types(x.dtype, weight.dtype), where)

    x64 = x.detach().cpu().to(torch.float64)
    cols = F.unfold(x64, (r, sw), dilation=dilation, padding=padding, stride=stride)  # (N, C*R*S, L), c slowest
    cols = cols.reshape(n, groups, cg, r, sw, ho * wo)
    w64 = weight.detach().cpu().to(torch.float64).reshape(groups, o // groups, cg, r, sw)
    if k_order == "hwc":
        cols = cols.permute(0, 1, 3, 4, 2, 5)
        w64 = w64.permute(0, 1, 3, 4, 2)
    kg = cg * r * sw
    a = w64.reshape(1, groups, o // groups, kg).expand(n, groups, o // groups, kg).reshape(-1, o // groups, kg)
    b = cols.reshape(n * groups, kg, ho * wo)
    acc = _contract(a.contiguous(), b.contiguous(), s, where).reshape(n, o, ho, wo)
    acc = _add_bias(acc, bias, (1, o, 1, 1), s.fmt, where)
    return _to_out(acc, dtype, x.device)
