"""Formats of the emulation (float16, bfloat16, float32 grids), argument checks, flush-to-zero and TF32 rounding."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

DtypeLike = str | torch.dtype

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
FORMATS: dict[str, Format] = {name: _make_format(getattr(torch, name)) for name in ("float16", "bfloat16", "float32")}


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


def _describe(v) -> str:
    if isinstance(v, torch.Tensor):
        return f"a {str(v.dtype).removeprefix('torch.')} tensor of shape {tuple(v.shape)}"
    return f"{type(v).__name__} {v!r}"


# --------------------------------------------------------------------------- flush, TF32


def flush_to_zero(t: torch.Tensor, threshold: float | None = None, *, keep_sign: bool = True) -> torch.Tensor:
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
    if (
        isinstance(threshold, bool)
        or not isinstance(threshold, (int, float))
        or not (math.isfinite(threshold) and threshold >= 0)
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
