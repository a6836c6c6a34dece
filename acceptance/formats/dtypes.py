"""The dtype table: every fact the package knows about a number format, in one place.

Inputs, oracles, metrics, specs, criteria and reports read these rows; a new
format (e.g. a block-quantized one) is one more row.

For a binary floating-point format with precision ``p`` (significand bits
including the implicit one) and minimum normal exponent ``emin``:

- unit roundoff ``u = 2^-p`` (half the spacing of the numbers in [1, 2));
- smallest normal ``2^emin``; smallest subnormal ``2^(emin - p + 1)``;
- spacing of the numbers around ``x`` (one ulp):
  ``2^(max(floor(log2 |x|), emin) - p + 1)``;
- largest exponent ``emax = floor(log2 max)``;
- the ULP cap :attr:`DType.ulp_cap`: the number of steps from ``-max`` to ``+max``, the largest
  distance in ulp between two finite values (float32: 2·0x7F7FFFFF < 2^32).

Integer and bool formats are exact: ``p = 1``, spacing 1.

``diff3_threshold`` is MLU-OPS's ``th`` of diff3 (float32 1e-6 and float16
1e-4 are theirs; the others scale the nearest of those two by the ratio of
unit roundoffs and round to a power of ten: bfloat16 1e-4·2^-8/2^-11 = 8e-4 →
1e-3; float8 e4m3 1.3e-2 → 1e-2, e5m2 2.6e-2 → 1e-2; float64 1.9e-15 →
1e-15; integers 0). ``mlu_scale_from`` names the dtype of MLU-OPS's category
table whose thresholds a dtype the table does not name is scaled from (by the
ratio of unit roundoffs).

Exact rounding (:func:`round_to`) is here too: torch's own float64 →
float16/bfloat16 cast goes through float32 and can round twice
(1 + 2^-11 + 2^-40 becomes 1.0 instead of 1 + 2^-10), so values are rounded
once, here, and the torch cast then only copies exactly representable values.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, cast

import numpy as np
import numpy.typing as npt

from acceptance.formats import quant

if TYPE_CHECKING:  # torch loads where a tensor or torch dtype is made, so the table alone starts without it
    import torch


@dataclass(frozen=True)
class DType:
    """One number format.

    ``kind``: ``float`` (IEEE-like binary floating point), ``int``, ``bool`` or ``block`` (a GGML
    block-quantized format of :mod:`acceptance.formats.quant`: ``bits`` per stored code, ``block`` elements in
    ``block_bytes`` bytes; such a row is neither a test dtype nor a fixed input dtype, a spec input asks for
    it with ``quant:``).
    ``test``: a spec may list it under ``dtypes`` (the impl runs in it).
    ``input``: a spec input may declare it as a fixed dtype (indices, masks).
    ``has_inf``: overflow gives ±inf (else it saturates or gives NaN, see :func:`round_to`).
    """

    name: str
    kind: Literal["float", "int", "bool", "block"]
    bits: int
    precision: int
    emin: int
    max: float
    has_inf: bool
    diff3_threshold: float
    mlu_scale_from: str | None = None
    test: bool = False
    input: bool = False
    block: int = 0
    block_bytes: int = 0

    @property
    def torch(self) -> torch.dtype | None:
        """The torch dtype, or ``None`` where this torch build lacks it."""
        import torch

        return getattr(torch, self.name, None)

    @property
    def itemsize(self) -> int:
        """Bytes per element of a tensor of this format (torch's ``itemsize``): bits / 8, and 1 for bool."""
        return max(1, self.bits // 8)

    @property
    def is_float(self) -> bool:
        return self.kind == "float"

    @property
    def unit_roundoff(self) -> float:
        """u = 2^-p (0 for exact integer formats)."""
        return 2.0**-self.precision if self.is_float else 0.0

    @property
    def smallest_normal(self) -> float:
        """2^emin (1 for integers)."""
        return 2.0**self.emin if self.is_float else 1.0

    @property
    def smallest_subnormal(self) -> float:
        """2^(emin - p + 1) (1 for integers)."""
        return 2.0 ** (self.emin - self.precision + 1) if self.is_float else 1.0

    @property
    def emax(self) -> int:
        """floor(log2 max): the exponent of the largest finite value (0 for integers)."""
        return math.frexp(self.max)[1] - 1 if self.is_float else 0

    @property
    def ulp_cap(self) -> float:
        """The largest distance in ulp between two finite values: the number of steps from -max to +max.

        Float: 2·N with N = (emax - emin)·2^(p-1) + max / 2^(emax - p + 1) the steps from 0 to max (2^(p-1)
        from 0 to the smallest normal, 2^(p-1) per binade above it, then the significand of max); float32
        N = 0x7F7FFFFF, float16 0x7BFF, bfloat16 0x7F7F. Integers: max - min (signed min = -max - 1, unsigned
        and bool 0). No ULP error the package reports exceeds it.
        """
        if not self.is_float:
            signed = self.kind == "int" and not self.name.startswith("uint")
            return 2 * self.max + 1 if signed else self.max
        steps = (self.emax - self.emin) * 2.0 ** (self.precision - 1) + math.ldexp(
            self.max, self.precision - 1 - self.emax
        )
        return 2.0 * steps


def _float(
    name: str,
    bits: int,
    p: int,
    emin: int,
    largest: float,
    has_inf: bool,
    th: float,
    scale_from: str | None = None,
    test: bool = False,
) -> DType:
    return DType(name, "float", bits, p, emin, largest, has_inf, th, scale_from, test=test)


def _int(name: str, bits: int, signed: bool) -> DType:
    largest = float(2 ** (bits - 1) - 1 if signed else 2**bits - 1)
    return DType(name, "int", bits, 1, 0, largest, False, 0.0, input=name in INPUT_NAMES)


def _block(name: str) -> DType:
    """The row of a GGML block format: exact codes (``precision`` 1), no rounding of its own here."""
    f = quant.FORMATS[name]
    return DType(
        name, "block", f.bits, 1, 0, float(f.max_code), False, 0.0, block=f.block_size, block_bytes=f.block_bytes
    )


#: Fixed input dtypes a spec input may declare (float inputs follow the test dtype).
INPUT_NAMES = ("int64", "int32", "int16", "int8", "uint8", "bool")

#: The table, in the order messages list the names.
TABLE: dict[str, DType] = {
    d.name: d
    for d in (
        _float("float16", 16, 11, -14, 65504.0, True, 1e-4, test=True),
        _float("bfloat16", 16, 8, -126, (2 - 2**-7) * 2.0**127, True, 1e-3, "float16", test=True),
        _float("float32", 32, 24, -126, float(np.finfo(np.float32).max), True, 1e-6, test=True),
        _float("float64", 64, 53, -1022, float(np.finfo(np.float64).max), True, 1e-15, "float32", test=True),
        _float("float8_e4m3fn", 8, 4, -6, 448.0, False, 1e-2, "float16", test=True),
        _float("float8_e5m2", 8, 3, -14, 57344.0, True, 1e-2, "float16", test=True),
        _float("float8_e4m3fnuz", 8, 4, -7, 240.0, False, 1e-2, "float16"),
        _float("float8_e5m2fnuz", 8, 3, -15, 57344.0, False, 1e-2, "float16"),
        _int("int64", 64, True),
        _int("int32", 32, True),
        _int("int16", 16, True),
        _int("int8", 8, True),
        _int("uint64", 64, False),
        _int("uint32", 32, False),
        _int("uint16", 16, False),
        _int("uint8", 8, False),
        DType("bool", "bool", 1, 1, 0, 1.0, False, 0.0, input=True),
        *(_block(name) for name in quant.FORMATS),
    )
}

#: Names a spec may test in (every one is in torch >= 2.3, the oldest torch the package supports).
TEST_DTYPES: tuple[str, ...] = tuple(n for n, d in TABLE.items() if d.test)

#: GGML block formats a spec input may ask for with ``quant:``.
QUANT_DTYPES: tuple[str, ...] = tuple(n for n, d in TABLE.items() if d.kind == "block")

#: Fixed input dtypes, by name.
INPUT_DTYPES: tuple[str, ...] = tuple(n for n in INPUT_NAMES if n in TABLE)

_ALIASES = {
    "half": "float16",
    "float": "float32",
    "double": "float64",
    "bf16": "bfloat16",
    "fp16": "float16",
    "fp32": "float32",
    "fp64": "float64",
    "long": "int64",
    "int": "int32",
}


if TYPE_CHECKING:
    #: A dtype as callers name it: a table row, a torch dtype, a numpy dtype or a name such as ``"bfloat16"``.
    DTypeSpec = DType | torch.dtype | npt.DTypeLike


def name_of(dtype: DTypeSpec) -> str:
    """Canonical name (``"float16"``, ``"bfloat16"``, ``"int32"``, ...) of a torch dtype, numpy dtype or string.

    Raises ``ValueError`` naming the dtype when it is not in the table.
    """
    if isinstance(dtype, DType):
        return dtype.name
    torch = sys.modules.get("torch")  # a torch dtype exists only once torch is imported
    if torch is not None and isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        name = dtype.strip().lower().removeprefix("torch.").removeprefix("numpy.").removeprefix("np.")
    else:
        try:
            name = np.dtype(cast("npt.DTypeLike", dtype)).name  # torch dtypes were taken above
        except TypeError:
            raise ValueError(
                f"dtype {dtype!r} is not a dtype; use a torch or numpy dtype or a name like 'float16'"
            ) from None
    name = _ALIASES.get(name, name)
    if name not in TABLE:
        raise ValueError(f"dtype {dtype!r} is not supported; known: {', '.join(TABLE)}")
    return name


def lookup(dtype: DTypeSpec) -> DType:
    """The row of a torch dtype, numpy dtype or name (see :func:`name_of`)."""
    return TABLE[name_of(dtype)]


def torch_dtype(name: str) -> torch.dtype:
    """The torch dtype of a table name (``ValueError`` when this torch build lacks it)."""
    found = lookup(name).torch
    if found is None:
        import torch

        raise ValueError(f"dtype {name!r} is not available in torch {torch.__version__}")
    return found


def round_to(x: np.ndarray, dtype: str) -> np.ndarray:
    """Round float64 values to the nearest value of ``dtype``, ties to even, in float64.

    With ``E = max(floor(log2|x|), emin)`` the spacing is ``q = 2^(E - p + 1)``
    and the result is ``rint(x / q) · q`` (exact: ``q`` is a power of two),
    which also covers subnormals. A result above the largest finite value
    overflows to ``±inf`` where the format has infinities; float8_e4m3fn
    saturates to ±448 as torch's own cast does, and the ``fnuz`` formats give
    NaN. NaN stays NaN, signed zeros keep their sign. float64 (and any
    non-float format) is returned unchanged.
    """
    x = np.asarray(x, dtype=np.float64)
    row = lookup(dtype)
    if not row.is_float or row.name == "float64":
        return x
    fast = _FAST.get(row.name)
    if fast is not None:
        return fast(x)
    return _round_general(x, row)


def spacing_at(x: np.ndarray, dtype: str) -> np.ndarray:
    """One ulp of ``dtype`` at each float64 value ``x`` rounded to ``dtype``: ``2^(E - p + 1)`` with
    ``E = min(max(floor(log2 |round_to(x)|), emin), emax)``; the smallest subnormal where the rounded value is
    subnormal or zero, the spacing at the largest finite value where it overflows; 1 for non-float formats.
    NaN where ``x`` is NaN. The unit of every ULP error (:mod:`acceptance.numerics.metrics`)."""
    x = np.asarray(x, dtype=np.float64)
    row = lookup(dtype)
    if not row.is_float:
        return np.where(np.isnan(x), np.nan, 1.0)
    with np.errstate(invalid="ignore", over="ignore"):
        r = np.abs(round_to(x, dtype))
        _, e = np.frexp(np.where(np.isfinite(r), r, row.max))  # frexp(0) = (0, 0): clipped up to emin below
        e = np.where(r == 0, row.emin + 1, e.astype(np.int64))
        q = np.ldexp(1.0, np.clip(e - 1, row.emin, row.emax) - (row.precision - 1))
    return np.where(np.isnan(x), np.nan, q)


def _round_cast(target: type) -> Callable[[np.ndarray], np.ndarray]:
    """float64 → ``target`` → float64 by NumPy's cast: IEEE round-to-nearest-even from the float64 bits in one
    step (no intermediate format), overflow to ±inf, subnormals, NaN and signed zeros as the format has them."""

    def cast(x: np.ndarray) -> np.ndarray:
        with np.errstate(over="ignore"):
            return x.astype(target).astype(np.float64)

    return cast


def _round_bits(x: np.ndarray, row: DType) -> np.ndarray:
    """:func:`round_to` on the float64 bit pattern: with ``d = 53 - p`` dropped bits, ``u`` the bits of ``|x|``,
    ``r = (u + 2^(d-1) - 1 + bit_d(u)) & ~(2^d - 1)`` is round-to-nearest-even of the significand (a carry moves
    into the exponent as it should). Exact where the format's spacing is ``2^(E-p+1)``, i.e. ``|x| ≥ 2^emin``;
    the few subnormal-range values and results past the largest finite value go through the general formula."""
    drop = np.uint64(53 - row.precision)
    shape = x.shape
    x = np.ascontiguousarray(x)
    u = x.view(np.uint64) & np.uint64(0x7FFFFFFFFFFFFFFF)
    r = u + ((np.uint64(1) << (drop - np.uint64(1))) - np.uint64(1) + ((u >> drop) & np.uint64(1)))
    r &= ~((np.uint64(1) << drop) - np.uint64(1))
    out = np.copysign(r.view(np.float64), x)
    with np.errstate(invalid="ignore"):
        odd = np.flatnonzero(~(np.abs(out) <= row.max) | (np.abs(x) < 2.0**row.emin))  # NaN, inf, over, subnormal
    if odd.size:
        out.flat[odd] = _round_general(x.flat[odd], row)
    return out.reshape(shape)


#: Exact rounding by NumPy casts for the formats NumPy has, on the float64 bits for bfloat16; 2-5x faster than
#: the general formula below, which they equal bit for bit (tests/test_speed.py).
_FAST: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "float16": _round_cast(np.float16),
    "float32": _round_cast(np.float32),
    "bfloat16": lambda x: _round_bits(x, TABLE["bfloat16"]),
}


def _round_general(x: np.ndarray, row: DType) -> np.ndarray:
    """:func:`round_to` for any float format of the table, by the formula of its docstring."""
    _, e = np.frexp(x)
    q = np.ldexp(1.0, np.maximum(e.astype(np.int64) - 1, row.emin) - (row.precision - 1))
    with np.errstate(invalid="ignore", over="ignore"):
        r = np.rint(x / q) * q
        over = np.abs(r) > row.max
    if row.has_inf:
        beyond = np.copysign(np.inf, x)
    elif row.name.endswith("fnuz"):
        beyond = np.full_like(x, np.nan)
    else:
        beyond = np.copysign(row.max, x)
    return np.where(over, beyond, r)


def to_tensor(values: np.ndarray, dtype: str) -> torch.Tensor:
    """float64 values as a contiguous CPU tensor of ``dtype`` and of their shape (0-d stays 0-d), rounded once
    (see :func:`round_to`)."""
    import torch

    fast = _TENSOR_FAST.get(dtype) if isinstance(dtype, str) else None
    if fast is not None and isinstance(values, np.ndarray) and values.dtype == np.float64 and values.size:
        made = fast(values)
        if made is not None:
            return made
    rounded = round_to(values, dtype)
    return torch.from_numpy(np.ascontiguousarray(rounded)).reshape(rounded.shape).to(torch_dtype(dtype))


def _has_nan(x: np.ndarray) -> bool:
    """Whether ``x`` holds a NaN: one reduction (NaN propagates through ``min``), no temporary array."""
    return bool(np.isnan(x.min()))


def _tensor_f32(x: np.ndarray) -> torch.Tensor | None:
    """:func:`to_tensor` for float32: NumPy's float64 → float32 cast (IEEE round-to-nearest-even, one step) is
    the tensor's storage. ``None`` (the general path) for an array with a NaN."""
    import torch

    if _has_nan(x):
        return None
    with np.errstate(over="ignore"):
        return torch.from_numpy(np.ascontiguousarray(x).astype(np.float32).reshape(x.shape))


def _tensor_narrow(x: np.ndarray, name: str) -> torch.Tensor | None:
    """:func:`to_tensor` for float16 and bfloat16 through float32, rounding twice where that is exact.

    ``a = float32(x)`` and then torch's float32 → ``name`` cast, both
    round-to-nearest-even. With ``d = 24 - p`` bits dropped by the second
    rounding, rounding twice differs from rounding once only where ``a`` is
    exactly halfway between two values of the format (its low ``d`` bits are
    ``2^(d-1)``) and ``a != x``; those elements, and for float16 those below
    its smallest normal ``2^emin`` (its subnormals are float32 normals, so
    fewer bits are dropped there), get the general formula of :func:`round_to`.
    Overflow needs no case of its own: ``2^emax (2 - 2^-p)``, the threshold
    to inf, is a float32 value, so ``a`` crosses it only when ``x`` does or
    lands on it (a halfway pattern). ``None`` (the general path) for an array
    with a NaN: torch's own cast decides its bits, by the element's position."""
    import torch

    if _has_nan(x):
        return None
    row = TABLE[name]
    shape, x = x.shape, np.ascontiguousarray(x).reshape(-1)
    with np.errstate(over="ignore"):
        a = x.astype(np.float32)
    out = torch.from_numpy(a).to(row.torch)
    drop = 24 - row.precision
    bits = a.view(np.uint32)
    odd = (bits & np.uint32((1 << drop) - 1)) == np.uint32(1 << (drop - 1))
    if row.emin > -126:  # |a| < 2^emin: the sign shifted out, compared with the float32 bits of 2^emin
        odd |= (bits << np.uint32(1)) < np.uint32((row.emin + 127) << 24)
    fix = np.flatnonzero(odd)
    if fix.size:
        out[torch.from_numpy(fix)] = torch.from_numpy(_round_general(x[fix], row)).to(row.torch)
    return out.reshape(shape)


#: :func:`to_tensor` by dtype name straight to the tensor's storage (bit for bit the general path's result,
#: tests/test_fastinputs.py); float64 needs no rounding and the float8 formats take the general path.
_TENSOR_FAST: dict[str, Callable[[np.ndarray], torch.Tensor | None]] = {
    "float16": lambda x: _tensor_narrow(x, "float16"),
    "float32": _tensor_f32,
    "bfloat16": lambda x: _tensor_narrow(x, "bfloat16"),
}


def bits_view(t: torch.Tensor) -> torch.Tensor:
    """``t``'s elements as the integers of their width (a view: uint8, int16, int32 or int64 for 1, 2, 4 or 8
    bytes), to compare or checksum bit patterns (the sign of zero and NaN payloads included)."""
    import torch

    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def byte_view(t: torch.Tensor) -> torch.Tensor | None:
    """``t``'s bytes, flat, as a uint8 tensor in row-major order (a view when ``t`` is contiguous), to compare
    or digest two tensors bit for bit; ``None`` for a tensor whose bytes are not its values as they are: not
    strided, quantized, or a conjugate or negative view."""
    import torch

    if t.layout != torch.strided or t.is_quantized or t.is_conj() or t.is_neg():
        return None
    try:
        return t.detach().contiguous().reshape(-1).view(torch.uint8)
    except (RuntimeError, TypeError):
        return None


def rounded(t: torch.Tensor, dtype: torch.dtype) -> torch.Tensor | None:
    """A float64 tensor correctly rounded to ``dtype`` (one rounding, ties to even), as a CPU tensor of ``dtype``.

    ``None`` when ``dtype`` is float64 or not a floating dtype: there is no
    rounding to apply.
    """
    import torch

    if not dtype.is_floating_point or dtype == torch.float64:
        return None
    return to_tensor(t.detach().cpu().to(torch.float64).numpy(), name_of(dtype))
