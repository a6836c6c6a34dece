"""Error metrics between an evaluated tensor ``e`` and a baseline ``b``.

One entry point, :func:`compute`, returns every metric of :data:`METRICS` in a
single fused pass over the data; :func:`load_array` reads a saved ``.npy`` or
``.pt`` array for it. Definitions (sums and maxima run over the ``n``
positions compared numerically, see *Special values*; all arithmetic is
float64 on the exact values of the inputs):

============== =================================================================
diff1          Σ|e−b| / Σ|b|                                (MLU-OPS)
diff2          sqrt(Σ(e−b)² / Σb²)                          (MLU-OPS)
diff3_1        max |e−b| / |b|                              (MLU-OPS)
diff3_2        max |e−b|                                    (MLU-OPS)
diff3          (m1, m2): m1 = max |e−b|/|b| over |b| > th,
               m2 = max |e−b| over |b| ≤ th, th = ``DIFF3_THRESHOLD[dtype]``;
               a side with no element is 0
diff4          (p1, p2, n): n = number of positions with e ≠ b (ordered
               comparison), p1 = fraction of them with e > b, p2 with e < b;
               (0, 0, 0) when n = 0
mse            Σ(e−b)² / n
nmse           Σ(e−b)² / Σb²
rms            sqrt(Σ(e−b)²) / (sqrt(n) · max(max|e|, max|b|))   (MIOpen)
max_abs        max |e−b|                  mean_abs   Σ|e−b| / n
max_rel        max |e−b| / |b|            max_rel_floor  the same over |b| > 1e-3
max_ulp        max ulp_err                mean_ulp   Σ ulp_err / n
max_hyb        max |e−b| / (1+|b|)        mean_hyb   Σ |e−b|/(1+|b|) / n
normwise_rel   ‖e−b‖₂ / ‖b‖₂ (equal to diff2 by definition; both names are kept)
nan_mismatch   count of positions where exactly one of e, b is NaN
inf_mismatch   count of positions without NaN where one is ±Inf and e ≠ b
============== =================================================================

Errors and ratios are unitless except ``diff3_2``, ``max_abs``, ``mean_abs``
(units of the data), ``mse`` (units squared) and the ULP metrics (units in the
last place of ``dtype``).

ULP error, in the spacing of ``dtype`` (precision p bits including the
implicit bit, minimum normal exponent emin)::

    ulp_err = |e − b| / spacing(min(|e|, |b|))
    spacing(x) = 2^(max(floor(log2 x), emin) − (p − 1)),  spacing(0) = 2^(emin − p + 1)

so two neighbouring values of ``dtype`` are exactly 1 ULP apart in both
directions, across powers of two, among subnormals and at zero (``+s`` and
``−s``, s the smallest subnormal, are 2 ULP apart: two steps). Integer and
bool dtypes have spacing 1 (ulp_err = |e − b|). A quotient beyond the float64
range (float64 data, spacing 2^-1074) saturates to ``inf``.

Special values:

- a position where both are NaN, or both are the same-signed Inf, is left out
  of every numeric metric and counted in ``special_matched``;
- a position where exactly one is NaN counts in ``nan_mismatch``; one without
  NaN where an Inf meets a different value (Inf vs finite, +Inf vs −Inf)
  counts in ``inf_mismatch``. Either kind of mismatch makes every error metric
  ``inf`` (both sides of ``diff3`` included, whatever ``|b|`` is), so a
  misplaced NaN or Inf never yields a passing number;
- ``diff4`` uses IEEE ordering: Inf mismatches count with their direction
  (+Inf > every finite > −Inf); NaN mismatches have no direction and are left
  out of ``diff4`` (they are counted in ``nan_mismatch``);
- a zero baseline: per element |e−b|/|b| is 0 where e = b = 0 and ``inf``
  where e ≠ 0 = b; the global ratios (diff1, diff2, nmse, normwise_rel, rms)
  likewise give 0 for 0/0 and ``inf`` for x/0;
- n = 0 (empty or 0-element inputs, or every position special-matched):
  every error metric is 0 and ``diff4`` is (0, 0, 0); 0-d inputs are one
  element. No warning is raised and no metric is NaN;
- float64 data beyond ~1e154 in magnitude can overflow a sum of squares; the
  metric is then ``inf`` (never NaN);
- integers are compared as float64 (exact up to 2^53).

Memory and speed: host data is reduced by one fused numba kernel (no
fastmath, float64 partials per piece, combined at the end) that reads
float32, float64, float16 and bfloat16 data in place (the 16-bit formats
decoded exactly from their bits), without temporaries. Pieces of
:data:`HOST_BLOCK` elements go to ``NUMBA_NUM_THREADS`` worker threads
(the kernel releases the GIL); worker threads rather than a ``prange`` region
per piece, because on a loaded machine each region's barrier cost ~15 ms.
Inputs the kernel cannot read in place (non-contiguous, mixed dtypes, fp8,
other integers) are converted piece by piece into per-worker buffers: scratch
memory is at most 4 MiB per worker thread whatever the input size. Tensors
on a CUDA (or other non-CPU) device are reduced there with torch float64 ops
in pieces of :data:`DEVICE_BLOCK` elements (about ten float64 temporaries of
16 MiB), never copied whole to the host. The kernel is compiled for each
element type (float32, float64, 16-bit patterns) on first use and cached on disk
(numba ``cache=True``).
"""

from __future__ import annotations

import functools
import math
import os
import queue
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, NamedTuple, Optional, Union

import numba
import numpy as np
import torch
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

ArrayLike = Union[np.ndarray, torch.Tensor]

#: Every selectable metric name, in output order. ``n`` and
#: ``special_matched`` are always returned as well; they are counts, not
#: selectable metrics.
METRICS: tuple[str, ...] = (
    "diff1", "diff2", "diff3", "diff3_1", "diff3_2", "diff4",
    "mse", "nmse", "rms", "max_abs", "mean_abs", "max_rel", "max_rel_floor",
    "max_ulp", "mean_ulp", "max_hyb", "mean_hyb", "normwise_rel",
    "nan_mismatch", "inf_mismatch",
)

#: Metrics that are counts (ints) or the diff4 direction tuple; every other
#: metric is an error that a NaN/Inf mismatch turns into ``inf``.
_NOT_ERRORS = frozenset({"diff4", "nan_mismatch", "inf_mismatch"})

#: |b| floor of ``max_rel_floor``.
REL_FLOOR = 1e-3

#: diff3 threshold th per output dtype: m1 (relative) over |b| > th, m2
#: (absolute) over |b| ≤ th. float32 1e-6 and float16 1e-4 are MLU-OPS's.
#: They sit at ~17u and ~0.2u of their dtype's unit roundoff u = 2^-p, so no
#: single multiple of u gives both; the others scale the MLU-OPS value of the
#: nearest given dtype by the ratio of unit roundoffs and round to the nearest
#: power of ten: bfloat16 1e-4·2^-8/2^-11 = 8e-4 → 1e-3; float8_e4m3 (u = 2^-4)
#: 1.3e-2 → 1e-2 and float8_e5m2 (u = 2^-3) 2.6e-2 → 1e-2, from float16;
#: float64 1e-6·2^-53/2^-24 = 1.9e-15 → 1e-15, from float32. Integer and bool
#: dtypes are exact: th = 0, so m1 covers every b ≠ 0 and m2 the zeros.
DIFF3_THRESHOLD: dict[str, float] = {
    "float64": 1e-15,
    "float32": 1e-6,
    "bfloat16": 1e-3,
    "float16": 1e-4,
    "float8_e4m3fn": 1e-2,
    "float8_e4m3fnuz": 1e-2,
    "float8_e5m2": 1e-2,
    "float8_e5m2fnuz": 1e-2,
    "int64": 0.0, "int32": 0.0, "int16": 0.0, "int8": 0.0,
    "uint64": 0.0, "uint32": 0.0, "uint16": 0.0, "uint8": 0.0, "bool": 0.0,
}

#: (precision p in bits incl. the implicit bit, minimum normal exponent emin).
_FLOAT_FORMATS: dict[str, tuple[int, int]] = {
    "float64": (53, -1022),
    "float32": (24, -126),
    "bfloat16": (8, -126),
    "float16": (11, -14),
    "float8_e4m3fn": (4, -6),
    "float8_e4m3fnuz": (4, -7),
    "float8_e5m2": (3, -14),
    "float8_e5m2fnuz": (3, -15),
}

_ALIASES = {"half": "float16", "float": "float32", "double": "float64", "bf16": "bfloat16",
            "fp16": "float16", "fp32": "float32", "fp64": "float64", "long": "int64", "int": "int32"}

#: Elements per piece of host data; a worker's two conversion buffers hold
#: one piece each (at most 2 × 2 MiB).
HOST_BLOCK = 1 << 18
#: Elements per piece of device data (16 MiB per float64 temporary).
DEVICE_BLOCK = 1 << 21


class _Format(NamedTuple):
    """What ULP and diff3 refer to: the output dtype."""

    name: str
    precision: int  # p, bits incl. the implicit bit (1 for integers)
    emin: int
    integer: bool
    threshold: float


# ----------------------------------------------------------------------------- dtypes


def _dtype_name(dtype: Any) -> str:
    """Canonical name ("float16", "bfloat16", "int32", ...) of a torch dtype, numpy dtype or string."""
    if isinstance(dtype, torch.dtype):
        name = str(dtype).removeprefix("torch.")
    elif isinstance(dtype, str):
        name = dtype.strip().lower().removeprefix("torch.").removeprefix("numpy.").removeprefix("np.")
    else:
        try:
            name = np.dtype(dtype).name
        except TypeError:
            raise ValueError(f"dtype {dtype!r} is not a dtype; use a torch or numpy dtype or a name "
                             "like 'float16'") from None
    name = _ALIASES.get(name, name)
    if name not in DIFF3_THRESHOLD:
        raise ValueError(f"dtype {dtype!r} is not supported; known: {', '.join(DIFF3_THRESHOLD)}")
    return name


def _format(name: str) -> _Format:
    if name in _FLOAT_FORMATS:
        p, emin = _FLOAT_FORMATS[name]
        return _Format(name, p, emin, False, DIFF3_THRESHOLD[name])
    return _Format(name, 1, 0, True, DIFF3_THRESHOLD[name])


_TORCH_NUMERIC = {
    torch.float64, torch.float32, torch.float16, torch.bfloat16,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
    torch.uint16, torch.uint32, torch.uint64,
    torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz,
}
_FP8 = (torch.float8_e4m3fn, torch.float8_e4m3fnuz, torch.float8_e5m2, torch.float8_e5m2fnuz)


def _operand(x: Any, role: str) -> ArrayLike:
    """``x`` as a numpy array or a strided torch tensor of a supported real dtype, else ValueError naming ``role``."""
    if isinstance(x, torch.Tensor):
        if x.layout != torch.strided:
            raise ValueError(f"{role}: {x.layout} tensors are not supported; pass a dense tensor")
        if x.dtype not in _TORCH_NUMERIC:
            raise ValueError(f"{role}: dtype {x.dtype} is not supported (real floating, integer or bool only)")
        if x.device.type == "meta":
            raise ValueError(f"{role}: a meta tensor holds no values")
        return x.detach()
    if isinstance(x, np.ma.MaskedArray):
        raise ValueError(f"{role}: masked arrays are not supported; fill or compress them first")
    try:
        arr = np.asarray(x)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"{role}: cannot be read as an array: {exc}") from None
    if arr.dtype.kind not in "biuf":
        raise ValueError(f"{role}: dtype {arr.dtype} is not supported (real floating, integer or bool only)")
    return arr


def _is_device(x: ArrayLike) -> bool:
    return isinstance(x, torch.Tensor) and x.device.type != "cpu"


# ----------------------------------------------------------------------------- pieces


def _blocks(a: ArrayLike, block: int) -> Iterator[ArrayLike]:
    """Views of ``a`` that cover it in C order, each of at most ``block`` elements.

    A view is a run of whole leading-axis rows (or a 1-D slice), so its C-order
    flattening is a contiguous range of ``a``'s. The cuts depend on the shape
    alone: two arrays of one shape are cut alike whatever their strides.
    """
    shape = tuple(a.shape)
    size = math.prod(shape)
    if size == 0:
        return
    if size <= block:
        yield a
    elif len(shape) == 1:
        for i in range(0, size, block):
            yield a[i:i + block]
    elif size // shape[0] > block:
        for i in range(shape[0]):
            yield from _blocks(a[i], block)
    else:
        rows = block // (size // shape[0])
        for i in range(0, shape[0], rows):
            yield a[i:i + rows]


# ----------------------------------------------------------------------------- host kernel


@intrinsic
def _f64_bits(typingctx, x):
    """The IEEE bits of a float64 as int64 (a bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return types.int64(types.float64), codegen


@intrinsic
def _bits_f64(typingctx, k):
    """The float64 whose IEEE bits are the int64 ``k`` (a bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.DoubleType())

    return types.float64(types.int64), codegen


#: Codes of the 16-bit float formats the kernel decodes from their bits (0: the array holds values).
_BITS16 = {"float16": 1, "bfloat16": 2}
_TWO_POW_M24 = 2.0 ** -24


@intrinsic
def _bits_f32(typingctx, k):
    """The float32 whose IEEE bits are the low 32 bits of the int64 ``k`` (a bitcast)."""
    def codegen(context, builder, signature, args):
        return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())

    return types.float32(types.int64), codegen


@njit(inline="always")
def _pow2(k):
    """2^k for −1022 ≤ k ≤ 1023, exactly."""
    return _bits_f64((k + 1023) << 52)


@njit(inline="always")
def _float16_value(h):
    """The value of the float16 bit pattern ``h`` (an int64 below 2^16), exactly."""
    ex = (h >> 10) & 0x1F
    m = h & 0x3FF
    if ex == 0:  # zero and subnormals: m · 2^-24
        v = m * _TWO_POW_M24
    elif ex == 31:
        v = math.inf if m == 0 else math.nan
    else:  # rebias the exponent (15 → 1023), widen the mantissa (10 → 52 bits)
        v = _bits_f64(((ex + 1008) << 52) | (m << 42))
    return -v if h >> 15 else v


@njit(inline="always")
def _bfloat16_value(h):
    """The value of the bfloat16 bit pattern ``h``: the upper half of a float32, exactly."""
    return np.float64(_bits_f32(h << 16))


def _load(a, i, code):
    """``a[i]`` as float64; a uint16 array holds float16 (code 1) or bfloat16 (code 2) bit patterns.

    This is the plain-Python meaning; inside the kernel numba compiles the
    type-specialised :func:`_load_jit` in its place.
    """
    if a.dtype.kind != "u":
        return float(a[i])
    return _float16_value(int(a[i])) if code == 1 else _bfloat16_value(int(a[i]))


@numba.extending.overload(_load)
def _load_jit(a, i, code):
    if isinstance(a.dtype, types.Integer):
        def load(a, i, code):
            h = np.int64(a[i])
            return _float16_value(h) if code == 1 else _bfloat16_value(h)

        return load
    return lambda a, i, code: np.float64(a[i])


# Columns of the partial results.
_S_ABS, _S_ABSB, _S_SQ, _S_B2, _S_ULP, _S_HYB = range(6)            # float64 sums
_M_ABS, _M_REL, _M_RELF, _M_D31, _M_D32, _M_ULP, _M_HYB, _M_E, _M_B = range(9)  # float64 maxima (all ≥ 0)
_C_N, _C_GT, _C_LT, _C_SPECIAL, _C_NAN, _C_INF = range(6)          # int64 counts


@njit(nogil=True, cache=True, fastmath=False, error_model="numpy")
def _kernel(e, b, code_e, code_b, precision, emin, integer, th, sums, maxs, counts):  # pragma: no cover
    """Add the partial results of one piece (1-D arrays ``e``, ``b``) into ``sums``, ``maxs`` and ``counts``.

    ``e`` and ``b`` are float32 or float64 values, or uint16 bit patterns of
    the 16-bit float format ``code_e`` / ``code_b`` (see :data:`_BITS16`).
    """
    s_abs = s_absb = s_sq = s_b2 = s_ulp = s_hyb = 0.0
    m_abs = m_rel = m_relf = m_d31 = m_d32 = m_ulp = m_hyb = m_e = m_b = 0.0
    n = gt = lt = special = nan_mm = inf_mm = 0
    for i in range(e.shape[0]):
        x = _load(e, i, code_e)
        y = _load(b, i, code_b)
        gt += x > y
        lt += x < y
        if math.isfinite(x) and math.isfinite(y):
            n += 1
            d = abs(x - y)
            ax = abs(x)
            ay = abs(y)
            s_abs += d
            s_absb += ay
            s_sq += d * d
            s_b2 += ay * ay
            m_abs = max(m_abs, d)
            m_e = max(m_e, ax)
            m_b = max(m_b, ay)
            rel = d / (ay + (d == 0.0))  # x/0 = inf; 0/0 = 0 (the denominator is ay + 1 where d = 0)
            m_rel = max(m_rel, rel)
            m_relf = max(m_relf, rel if ay > REL_FLOOR else 0.0)
            m_d31 = max(m_d31, rel if ay > th else 0.0)
            m_d32 = max(m_d32, d if ay <= th else 0.0)
            h = d / (1.0 + ay)
            s_hyb += h
            m_hyb = max(m_hyb, h)
            if integer:
                u = d
            else:
                ex = ((_f64_bits(min(ax, ay)) >> 52) & 0x7FF) - 1023  # floor(log2), < emin for 0/subnormal
                sh = precision - 1 - max(ex, emin)
                u = d * _pow2(sh >> 1) * _pow2(sh - (sh >> 1))  # d / spacing, exact in two power-of-2 steps
            s_ulp += u
            m_ulp = max(m_ulp, u)
        elif math.isnan(x) or math.isnan(y):
            if math.isnan(x) and math.isnan(y):
                special += 1
            else:
                nan_mm += 1
        elif x == y:
            special += 1
        else:
            inf_mm += 1
    sums[_S_ABS] += s_abs
    sums[_S_ABSB] += s_absb
    sums[_S_SQ] += s_sq
    sums[_S_B2] += s_b2
    sums[_S_ULP] += s_ulp
    sums[_S_HYB] += s_hyb
    maxs[_M_ABS] = max(maxs[_M_ABS], m_abs)
    maxs[_M_REL] = max(maxs[_M_REL], m_rel)
    maxs[_M_RELF] = max(maxs[_M_RELF], m_relf)
    maxs[_M_D31] = max(maxs[_M_D31], m_d31)
    maxs[_M_D32] = max(maxs[_M_D32], m_d32)
    maxs[_M_ULP] = max(maxs[_M_ULP], m_ulp)
    maxs[_M_HYB] = max(maxs[_M_HYB], m_hyb)
    maxs[_M_E] = max(maxs[_M_E], m_e)
    maxs[_M_B] = max(maxs[_M_B], m_b)
    counts[_C_N] += n
    counts[_C_GT] += gt
    counts[_C_LT] += lt
    counts[_C_SPECIAL] += special
    counts[_C_NAN] += nan_mm
    counts[_C_INF] += inf_mm


class _Partials(NamedTuple):
    """Reduced partial results: float64 sums, float64 maxima, int64 counts (columns _S_*, _M_*, _C_*)."""

    sums: list[float]
    maxs: list[float]
    counts: list[int]


@functools.cache
def _table(name: str, dtype: type) -> np.ndarray:
    """Value of every bit pattern of the 8- or 16-bit float dtype ``name``, as ``dtype`` (exact)."""
    if name == "bfloat16":
        values = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
    elif name == "float16":
        values = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    else:  # float8 variants
        values = torch.arange(1 << 8, dtype=torch.uint8).view(getattr(torch, name)).to(torch.float32).numpy()
    with np.errstate(invalid="ignore"):  # signalling-NaN patterns stay NaN
        return values.astype(dtype)


class _HostOperand(NamedTuple):
    """Host data as the kernel reads it.

    ``kind`` is 'float32' or 'float64' (read as is), 'bits16' (``data`` holds
    uint16 patterns of the float16 or bfloat16 ``source``, decoded by the
    kernel), 'fp8' (uint8 patterns of the float8 ``source``, decoded through
    :func:`_table` piece by piece) or 'cast' (any other dtype, converted piece
    by piece).
    """

    data: np.ndarray
    kind: str
    source: str

    @property
    def exact32(self) -> bool:
        """Whether every value is exact in float32."""
        return self.kind != "float64" and (self.kind != "cast" or np.can_cast(self.data.dtype, np.float32))


def _host_operand(x: ArrayLike) -> _HostOperand:
    """A CPU tensor or a numpy array as the kernel reads it, without copying."""
    if isinstance(x, torch.Tensor):
        if x.dtype == torch.bfloat16:
            return _HostOperand(x.view(torch.int16).numpy().view(np.uint16), "bits16", "bfloat16")
        if x.dtype in _FP8:
            return _HostOperand(x.view(torch.uint8).numpy(), "fp8", str(x.dtype).removeprefix("torch."))
        x = x.numpy()
    dt = x.dtype
    if dt.isnative and dt.name in ("float32", "float64"):
        return _HostOperand(x, dt.name, dt.name)
    if dt.isnative and dt.name == "float16":
        return _HostOperand(x.view(np.uint16), "bits16", "float16")
    return _HostOperand(x, "cast", dt.name)


def _kernel_dtype(e: _HostOperand, b: _HostOperand) -> np.dtype:
    """The element type the kernel runs on: float32, float64, or uint16 when both are 16-bit float patterns."""
    if e.kind == b.kind and e.kind in ("float32", "float64"):
        return np.dtype(e.kind)
    if e.kind == b.kind == "bits16":
        return np.dtype(np.uint16)
    return np.dtype(np.float32 if e.exact32 and b.exact32 else np.float64)


def _kernel_piece(piece: np.ndarray, op: _HostOperand, dtype: np.dtype, buffer: np.ndarray) -> np.ndarray:
    """``piece`` flattened to a writable contiguous 1-D array of ``dtype``: a view when it is one, else
    decoded or copied into ``buffer``."""
    if piece.dtype == dtype and piece.dtype.isnative and piece.flags.c_contiguous and piece.flags.writeable:
        return piece.reshape(-1)
    out = buffer[: math.prod(piece.shape)]
    if op.kind in ("bits16", "fp8") and dtype != op.data.dtype:
        np.take(_table(op.source, dtype.type), piece, out=out.reshape(piece.shape), mode="clip")
    else:
        np.copyto(out.reshape(piece.shape), piece, casting="unsafe")
    return out


@functools.cache
def _pool(workers: int, pid: int) -> ThreadPoolExecutor:
    """A pool of ``workers`` threads kept for the life of process ``pid`` (a forked child makes its own)."""
    return ThreadPoolExecutor(workers, thread_name_prefix="acceptance-metrics")


class _Worker:
    """One worker's conversion buffers and running partial results."""

    def __init__(self, dtype: np.dtype, size: int):
        self.buf_e, self.buf_b = np.empty(size, dtype), np.empty(size, dtype)
        self.sums, self.maxs, self.counts = np.zeros(6), np.zeros(9), np.zeros(6, dtype=np.int64)


def _compute_host(e: ArrayLike, b: ArrayLike, fmt: _Format, block: int = HOST_BLOCK) -> _Partials:
    """Partial results of host data (numpy arrays or CPU tensors) from :func:`_kernel`, piece by piece.

    Pieces go to ``NUMBA_NUM_THREADS`` worker threads of a pool kept
    for the life of the process (the kernel runs without the GIL), each piece
    into the buffers and partials of an idle worker; at most two pieces per
    worker are in flight. Data of one piece is reduced in the calling thread.
    """
    he, hb = _host_operand(e), _host_operand(b)
    dtype = _kernel_dtype(he, hb)
    codes = (_BITS16[he.source], _BITS16[hb.source]) if dtype == np.uint16 else (0, 0)
    size = math.prod(tuple(he.data.shape))
    workers = max(1, min(numba.config.NUMBA_NUM_THREADS, -(-size // block)))
    idle = queue.SimpleQueue()
    everyone = [_Worker(dtype, min(block, size)) for _ in range(workers)]
    for w in everyone:
        idle.put(w)

    def run(pe: np.ndarray, pb: np.ndarray) -> None:
        w = idle.get()
        try:
            _kernel(_kernel_piece(pe, he, dtype, w.buf_e), _kernel_piece(pb, hb, dtype, w.buf_b), *codes,
                    fmt.precision, fmt.emin, fmt.integer, fmt.threshold, w.sums, w.maxs, w.counts)
        finally:
            idle.put(w)

    pieces = zip(_blocks(he.data, block), _blocks(hb.data, block), strict=True)
    if workers == 1:
        for pe, pb in pieces:
            run(pe, pb)
    else:
        pool = _pool(workers, os.getpid())
        pending: deque = deque()
        for pe, pb in pieces:
            if len(pending) >= 2 * workers:
                pending.popleft().result()
            pending.append(pool.submit(run, pe, pb))
        for job in pending:
            job.result()
    with np.errstate(over="ignore"):  # float64 sums may overflow to inf, as documented
        total = np.sum([w.sums for w in everyone], axis=0)
    return _Partials(total.tolist(), np.max([w.maxs for w in everyone], axis=0).tolist(),
                     np.sum([w.counts for w in everyone], axis=0).tolist())


# ----------------------------------------------------------------------------- device path (torch)


def _pow2_t(k: torch.Tensor) -> torch.Tensor:
    """2^k (float64) for an int64 tensor with −1022 ≤ k ≤ 1023, exactly."""
    return ((k + 1023) << 52).view(torch.float64)


def _torch_piece(x: torch.Tensor, y: torch.Tensor, fmt: _Format) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Sums, maxima and counts (columns _S_*, _M_*, _C_*) of one float64 piece, as :func:`_kernel` defines them."""
    x_nan, y_nan = torch.isnan(x), torch.isnan(y)
    finite = torch.isfinite(x) & torch.isfinite(y)
    counts = torch.stack([
        finite.sum(),
        (x > y).sum(),
        (x < y).sum(),
        ((x_nan & y_nan) | (~finite & (x == y))).sum(),
        (x_nan ^ y_nan).sum(),
        (~finite & ~x_nan & ~y_nan & (x != y)).sum(),
    ])
    zero = x.new_zeros(())
    x = torch.where(finite, x, zero)  # non-finite positions become (0, 0): they add 0 to every sum and maximum
    y = torch.where(finite, y, zero)
    d = (x - y).abs_()
    ax, ay = x.abs_(), y.abs_()
    rel = torch.where(d == 0, zero, d / ay)  # x/0 = inf, 0/0 = 0
    hyb = d / (1.0 + ay)
    if fmt.integer:
        ulp = d
    else:
        ex = ((torch.minimum(ax, ay).view(torch.int64) >> 52) & 0x7FF) - 1023
        s = fmt.precision - 1 - ex.clamp_(min=fmt.emin)
        ulp = d * _pow2_t(s >> 1) * _pow2_t(s - (s >> 1))
    sums = torch.stack([d.sum(), ay.sum(), (d * d).sum(), (ay * ay).sum(), ulp.sum(), hyb.sum()])
    maxs = torch.stack([
        d.max(), rel.max(),
        torch.where(ay > REL_FLOOR, rel, zero).max(),
        torch.where(ay > fmt.threshold, rel, zero).max(),
        torch.where(ay <= fmt.threshold, d, zero).max(),
        ulp.max(), hyb.max(), ax.max(), ay.max(),
    ])
    return sums, maxs, counts


def _as_f64(piece: ArrayLike, device: torch.device) -> torch.Tensor:
    """One piece, flattened, as a contiguous float64 tensor on ``device`` (one copy)."""
    if isinstance(piece, np.ndarray):
        return torch.from_numpy(np.ascontiguousarray(piece, dtype=np.float64)).to(device).reshape(-1)
    return torch.empty(piece.shape, dtype=torch.float64, device=device).copy_(piece).reshape(-1)


def _compute_torch(e: ArrayLike, b: ArrayLike, fmt: _Format, block: int = DEVICE_BLOCK) -> _Partials:
    """Partial results with torch float64 ops on the device of the device operand (CPU when neither has one).

    Pieces of the other operand move to that device one at a time; only the
    final 21 numbers come back to the host. A device without float64 (Apple
    MPS) sends its pieces to the host instead.
    """
    device = e.device if _is_device(e) else b.device if _is_device(b) else torch.device("cpu")
    if device.type == "mps":
        device = torch.device("cpu")
    sums = torch.zeros(6, dtype=torch.float64, device=device)
    maxs = torch.zeros(9, dtype=torch.float64, device=device)
    counts = torch.zeros(6, dtype=torch.int64, device=device)
    for pe, pb in zip(_blocks(e, block), _blocks(b, block), strict=True):
        s, m, c = _torch_piece(_as_f64(pe, device), _as_f64(pb, device), fmt)
        sums += s
        maxs = torch.maximum(maxs, m)
        counts += c
    return _Partials(sums.tolist(), maxs.tolist(), counts.tolist())


# ----------------------------------------------------------------------------- results


def _ratio(num: float, den: float) -> float:
    """num / den for num, den ≥ 0, with 0/0 = 0, x/0 = inf and inf/inf = inf."""
    if num == 0.0:
        return 0.0
    if den == 0.0 or math.isinf(num):
        return math.inf
    return num / den


def _mean(total: float, n: int) -> float:
    """total / n, 0 when n = 0."""
    return total / n if n else 0.0


def _finalize(p: _Partials, selected: Iterable[str]) -> dict[str, Any]:
    """The metric values of :data:`METRICS` (those ``selected``) plus ``n`` and ``special_matched``."""
    s, m, c = p
    n = c[_C_N]
    ssq = s[_S_SQ]
    gt, lt = c[_C_GT], c[_C_LT]
    unequal = gt + lt
    values: dict[str, Any] = {
        "diff1": _ratio(s[_S_ABS], s[_S_ABSB]),
        "diff2": math.sqrt(_ratio(ssq, s[_S_B2])),
        "diff3": (m[_M_D31], m[_M_D32]),
        "diff3_1": m[_M_REL],
        "diff3_2": m[_M_ABS],
        "diff4": (gt / unequal, lt / unequal, unequal) if unequal else (0.0, 0.0, 0),
        "mse": _mean(ssq, n),
        "nmse": _ratio(ssq, s[_S_B2]),
        "rms": _ratio(math.sqrt(ssq), math.sqrt(n) * max(m[_M_E], m[_M_B])),
        "max_abs": m[_M_ABS],
        "mean_abs": _mean(s[_S_ABS], n),
        "max_rel": m[_M_REL],
        "max_rel_floor": m[_M_RELF],
        "max_ulp": m[_M_ULP],
        "mean_ulp": _mean(s[_S_ULP], n),
        "max_hyb": m[_M_HYB],
        "mean_hyb": _mean(s[_S_HYB], n),
        "normwise_rel": _ratio(math.sqrt(ssq), math.sqrt(s[_S_B2])),
        "nan_mismatch": c[_C_NAN],
        "inf_mismatch": c[_C_INF],
    }
    if c[_C_NAN] or c[_C_INF]:
        for name in values:
            if name not in _NOT_ERRORS:
                values[name] = (math.inf, math.inf) if name == "diff3" else math.inf
    out = {name: values[name] for name in selected}
    out["n"] = n
    out["special_matched"] = c[_C_SPECIAL]
    return out


def _selected(names: Optional[Iterable[str]]) -> tuple[str, ...]:
    if names is None:
        return METRICS
    if isinstance(names, str):
        names = [names]
    try:
        chosen = list(names)
    except TypeError:
        raise ValueError(f"names must be an iterable of metric names, not {type(names).__name__}") from None
    unknown = [name for name in chosen if name not in METRICS]
    if unknown:
        raise ValueError(f"unknown metric name(s) {', '.join(map(repr, unknown))}; known: {', '.join(METRICS)}")
    return tuple(name for name in METRICS if name in chosen)


def compute(evaluated: Any, baseline: Any, *, dtype: Any = None,
            names: Optional[Iterable[str]] = None) -> dict[str, Any]:
    """Every metric of ``evaluated`` (e) against ``baseline`` (b), in one pass.

    ``evaluated`` and ``baseline``: numpy arrays or torch tensors (any device;
    floating incl. float16, bfloat16 and float8, integer or bool) of one shape.
    ``dtype``: the output dtype that ULP and the diff3 threshold refer to
    (torch dtype, numpy dtype or a name such as "bfloat16"; default:
    ``evaluated``'s dtype). ``names``: the metrics to return (default all of
    :data:`METRICS`; one name may be given as a string); the cost is the same
    either way.

    Returns a dict: each selected metric (floats; ``diff3`` = (m1, m2),
    ``diff4`` = (p1, p2, n) with n an int; ``nan_mismatch`` and
    ``inf_mismatch`` are ints) and always the counts ``n`` (positions compared
    numerically) and ``special_matched`` (positions left out because both are
    NaN or both the same-signed Inf); these two are not selectable metrics.
    The formulas, units and the treatment of NaN, Inf, zero baselines and
    empty inputs are in the module docstring.

    Tensors on a CUDA device are reduced on that device (a host operand is
    moved there piece by piece); everything else by the fused host kernel.
    Scratch memory is bounded whatever the input size: at most 4 MiB per
    host worker thread, about 160 MiB on a device.

    Raises ValueError on unknown metric names or dtypes, shape mismatches and
    non-numeric inputs (strings, objects, complex), naming the problem.
    """
    selected = _selected(names)
    e = _operand(evaluated, "evaluated")
    b = _operand(baseline, "baseline")
    if tuple(e.shape) != tuple(b.shape):
        raise ValueError(f"shape mismatch: evaluated {tuple(e.shape)} vs baseline {tuple(b.shape)}")
    fmt = _format(_dtype_name(e.dtype if dtype is None else dtype))
    if _is_device(e) or _is_device(b):
        return _finalize(_compute_torch(e, b, fmt), selected)
    return _finalize(_compute_host(e, b, fmt), selected)


# ----------------------------------------------------------------------------- files


def load_array(path: Union[str, Path]) -> ArrayLike:
    """Read an array for :func:`compute` from a ``.npy`` file or a ``.pt`` file.

    A ``.pt`` file must hold a tensor, or a dict in which exactly one value is
    a tensor; it is loaded onto the CPU with ``weights_only=True`` (no code
    runs). Raises ValueError naming the file on anything it cannot read or
    that is not a real numeric array.
    """
    path = Path(path)
    suffix = path.suffix.lower()
    if suffix not in (".npy", ".pt"):
        raise ValueError(f"{path}: unsupported file type {suffix or '(no suffix)'!r}; expected .npy or .pt")
    try:
        if suffix == ".npy":
            with open(path, "rb") as fh:  # a zip archive named .npy would otherwise stay open as an NpzFile
                value = np.load(fh, allow_pickle=False)
        else:
            value = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # the readers raise OSError, ValueError, EOFError, pickle and zip errors, RuntimeError
        raise ValueError(f"{path}: cannot read: {exc}") from None
    if isinstance(value, dict):
        tensors = {k: v for k, v in value.items() if isinstance(v, torch.Tensor)}
        if len(tensors) != 1:
            raise ValueError(f"{path}: expected a dict with exactly one tensor, found {len(tensors)}"
                             + (f" ({', '.join(map(str, tensors))})" if tensors else ""))
        (value,) = tensors.values()
    if not isinstance(value, (np.ndarray, torch.Tensor)):
        raise ValueError(f"{path}: holds a {type(value).__name__}, not an array or tensor")
    return _operand(value, str(path))
