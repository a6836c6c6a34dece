"""The host engine: one fused numba pass over host data (numpy arrays or CPU tensors).

The kernel reads float32, float64, float16 and bfloat16 data in place (the
16-bit formats decoded exactly from their bits), without temporaries, and
adds each piece's sums, maxima and counts (the fields of
:class:`~acceptance.numerics.metrics.registry.Reduced`) into float64/int64 partials; no
fastmath. Pieces of :data:`HOST_BLOCK` elements go to ``NUMBA_NUM_THREADS``
worker threads (the kernel releases the GIL); worker threads rather than a
``prange`` region per piece, because on a loaded machine each region's
barrier cost ~15 ms. Inputs the kernel cannot read in place (non-contiguous,
mixed dtypes, fp8, other integers) are converted piece by piece into
per-worker buffers: scratch memory is at most 4 MiB per worker thread
whatever the input size. The kernel is compiled for each element type
(float32, float64, 16-bit patterns) on first use and cached on disk (numba
``cache=True``).
"""

from __future__ import annotations

import functools
import math
import os
import queue
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, NamedTuple

import numba
import numpy as np
import torch
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

from acceptance.formats.dtypes import DType
from acceptance.numerics.metrics.operands import FP8, ArrayLike, blocks
from acceptance.numerics.metrics.registry import REL_FLOOR, Reduced, round_up_field

#: Elements per piece of host data; a worker's two conversion buffers hold
#: one piece each (at most 2 × 2 MiB).
HOST_BLOCK = 1 << 18


if TYPE_CHECKING:  # the intrinsics as jitted code calls them (numba passes ``typingctx`` itself)

    def _f64_bits(x: float) -> int: ...

    def _bits_f64(k: int) -> float: ...

    def _bits_f32(k: int) -> float: ...

else:

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

    @intrinsic
    def _bits_f32(typingctx, k):
        """The float32 whose IEEE bits are the low 32 bits of the int64 ``k`` (a bitcast)."""

        def codegen(context, builder, signature, args):
            return builder.bitcast(builder.trunc(args[0], ir.IntType(32)), ir.FloatType())

        return types.float32(types.int64), codegen


#: Codes of the 16-bit float formats the kernel decodes from their bits (0: the array holds values).
_BITS16 = {"float16": 1, "bfloat16": 2}
_TWO_POW_M24 = 2.0**-24


@njit(inline="always")
def _pow2(k):
    """2^k for −1022 ≤ k ≤ 1023, exactly."""
    return _bits_f64((k + 1023) << 52)


@njit(inline="always")
def _ulp_shift(a, precision, emin, emax, round_up):
    """p - 1 - E for the float64 ``a >= 0``: ``2^-(p-1-E)`` is one ulp of the format at ``a`` rounded to it
    (:func:`acceptance.formats.dtypes.spacing_at`), E = min(max(floor(log2 round(a)), emin), emax).

    floor(log2 a) comes from the exponent bits (< emin for 0 and float64 subnormals); rounding to ``p`` bits
    carries into the next binade exactly when the 52-bit fraction field is >= ``round_up`` = 2^52 - 2^(52-p)
    (the midpoint below the next power of two; a tie rounds to it, its significand being even); ``round_up``
    = 2^52 (never reached) where p >= 53.
    """
    bits = _f64_bits(a)
    ex = ((bits >> 52) & 0x7FF) - 1023 + ((bits & 0xFFFFFFFFFFFFF) >= round_up)
    return precision - 1 - min(max(ex, emin), emax)


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


# Columns of the partial results, in the field order of registry.Reduced.
_S_ABS, _S_ABSB, _S_SQ, _S_B2, _S_ULP, _S_HYB = range(6)  # float64 sums
_M_ABS, _M_REL, _M_RELF, _M_D31, _M_D32, _M_ULP, _M_HYB, _M_E, _M_B = range(9)  # float64 maxima (all ≥ 0)
_C_N, _C_GT, _C_LT, _C_SPECIAL, _C_NAN, _C_INF = range(6)  # int64 counts


#: Elements of one chunk of :func:`_kernel`: its per-element terms wait in four float64 buffers of this size
#: (16 KiB, in the L1 cache) between its two passes.
_CHUNK = 512


@njit(nogil=True, cache=True, fastmath=False, error_model="numpy")
def _kernel(  # pragma: no cover
    e, b, code_e, code_b, precision, emin, emax, round_up, cap, integer, th, sums, maxs, counts
):
    """Add the partial results of one piece (1-D arrays ``e``, ``b``) into ``sums``, ``maxs`` and ``counts``.

    ``e`` and ``b`` are float32 or float64 values, or uint16 bit patterns of
    the 16-bit float format ``code_e`` / ``code_b`` (see :data:`_BITS16`).

    Per element, where x and y are both finite (the others add nothing):
    d = |x − y|, rel = d / |y| (0/0 = 0, d/0 = inf), h = d / (1 + |y|),
    u = min(d / spacing(round(y)), cap) in units of the format's last place at
    y rounded to the format (d itself for integer formats; :func:`_ulp_shift`), at most ``cap`` (the
    format's :attr:`~acceptance.formats.dtypes.DType.ulp_cap`); sums of d, |y|, d², y², u and h; maxima of
    d, rel (all, where |y| > REL_FLOOR, where |y| > th), d where |y| ≤ th, u,
    h, |x| and |y|; counts of compared, x > y, x < y, and of the non-finite
    pairs (equal or both NaN, one NaN, unequal infinities).

    The piece goes in chunks of :data:`_CHUNK` elements, each in two passes.
    The first computes every term element by element, without branches (a
    pair not both finite gets +0 terms), so that the compiler can use vector
    instructions; it takes the maxima on the terms' bit patterns (all terms
    are +0 or positive, where IEEE order is the order of the bits as
    integers) and counts. The second adds the terms into the six sums in
    element order: the same float64 additions as one element at a time, +0
    terms leaving a sum of non-negative terms unchanged, so every sum is
    bit for bit the sequential one. The non-finite pairs of a chunk, if any,
    are classified in a pass of their own.
    """
    s_abs = s_absb = s_sq = s_b2 = s_ulp = s_hyb = 0.0
    i_abs = i_rel = i_relf = i_d31 = i_d32 = i_ulp = i_hyb = i_e = i_b = np.int64(0)  # bits of the maxima
    n = gt = lt = special = nan_mm = inf_mm = 0
    t_d, t_ay, t_h, t_u = np.empty(_CHUNK), np.empty(_CHUNK), np.empty(_CHUNK), np.empty(_CHUNK)
    size = e.shape[0]
    for start in range(0, size, _CHUNK):
        m = min(_CHUNK, size - start)
        finite = 0
        for j in range(m):
            x = _load(e, start + j, code_e)
            y = _load(b, start + j, code_b)
            gt += x > y
            lt += x < y
            both = math.isfinite(x) and math.isfinite(y)
            finite += both
            d = abs(x - y) if both else 0.0
            ax = abs(x) if both else 0.0
            ay = abs(y) if both else 0.0
            rel = d / (ay + (d == 0.0))  # x/0 = inf; 0/0 = 0 (the denominator is ay + 1 where d = 0)
            h = d / (1.0 + ay)
            if integer:
                u = min(d, cap)
            else:
                sh = _ulp_shift(ay, precision, emin, emax, round_up)
                u = min(d * _pow2(sh >> 1) * _pow2(sh - (sh >> 1)), cap)  # d / spacing, exact in two steps
            t_d[j] = d
            t_ay[j] = ay
            t_h[j] = h
            t_u[j] = u
            i_abs = max(i_abs, _f64_bits(d))
            i_e = max(i_e, _f64_bits(ax))
            i_b = max(i_b, _f64_bits(ay))
            i_rel = max(i_rel, _f64_bits(rel))
            i_relf = max(i_relf, _f64_bits(rel if ay > REL_FLOOR else 0.0))
            i_d31 = max(i_d31, _f64_bits(rel if ay > th else 0.0))
            i_d32 = max(i_d32, _f64_bits(d if ay <= th else 0.0))
            i_hyb = max(i_hyb, _f64_bits(h))
            i_ulp = max(i_ulp, _f64_bits(u))
        n += finite
        if finite != m:
            for j in range(m):
                x = _load(e, start + j, code_e)
                y = _load(b, start + j, code_b)
                if math.isfinite(x) and math.isfinite(y):
                    continue
                if math.isnan(x) or math.isnan(y):
                    if math.isnan(x) and math.isnan(y):
                        special += 1
                    else:
                        nan_mm += 1
                elif x == y:
                    special += 1
                else:
                    inf_mm += 1
        for j in range(m):
            d = t_d[j]
            ay = t_ay[j]
            s_abs += d
            s_absb += ay
            s_sq += d * d
            s_b2 += ay * ay
            s_ulp += t_u[j]
            s_hyb += t_h[j]
    sums[_S_ABS] += s_abs
    sums[_S_ABSB] += s_absb
    sums[_S_SQ] += s_sq
    sums[_S_B2] += s_b2
    sums[_S_ULP] += s_ulp
    sums[_S_HYB] += s_hyb
    maxs[_M_ABS] = max(maxs[_M_ABS], _bits_f64(i_abs))
    maxs[_M_REL] = max(maxs[_M_REL], _bits_f64(i_rel))
    maxs[_M_RELF] = max(maxs[_M_RELF], _bits_f64(i_relf))
    maxs[_M_D31] = max(maxs[_M_D31], _bits_f64(i_d31))
    maxs[_M_D32] = max(maxs[_M_D32], _bits_f64(i_d32))
    maxs[_M_ULP] = max(maxs[_M_ULP], _bits_f64(i_ulp))
    maxs[_M_HYB] = max(maxs[_M_HYB], _bits_f64(i_hyb))
    maxs[_M_E] = max(maxs[_M_E], _bits_f64(i_e))
    maxs[_M_B] = max(maxs[_M_B], _bits_f64(i_b))
    counts[_C_N] += n
    counts[_C_GT] += gt
    counts[_C_LT] += lt
    counts[_C_SPECIAL] += special
    counts[_C_NAN] += nan_mm
    counts[_C_INF] += inf_mm


@functools.cache
def _table(name: str, dtype: np.dtype) -> np.ndarray:
    """Value of every bit pattern of the 8- or 16-bit float dtype ``name``, as ``dtype`` (exact)."""
    if name == "bfloat16":
        values = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
    elif name == "float16":
        values = np.arange(1 << 16, dtype=np.uint16).view(np.float16)
    else:  # float8 variants
        values = torch.arange(1 << 8, dtype=torch.uint8).view(getattr(torch, name)).to(torch.float32).numpy()
    with np.errstate(invalid="ignore"):  # signalling-NaN patterns stay NaN
        return values.astype(dtype)


def ulp_args(fmt: DType) -> tuple[int, int, int, int, float]:
    """The ULP arguments of :func:`_kernel`: precision, emin, emax, round_up (:func:`round_up_field`), cap."""
    return fmt.precision, fmt.emin, fmt.emax, round_up_field(fmt.precision), fmt.ulp_cap


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
        if x.dtype in FP8:
            return _HostOperand(x.view(torch.uint8).numpy(), "fp8", str(x.dtype).removeprefix("torch."))
        x = x.numpy()
    dt = x.dtype
    name = _NATIVE_FLOATS.get(dt) if dt.isnative else None  # (numpy's dtype.name is a slow Python property)
    if name in ("float32", "float64"):
        return _HostOperand(x, name, name)
    if name == "float16":
        return _HostOperand(x.view(np.uint16), "bits16", "float16")
    return _HostOperand(x, "cast", dt.name)


_NATIVE_FLOATS = {np.dtype(n): n for n in ("float16", "float32", "float64")}


def _kernel_dtype(e: _HostOperand, b: _HostOperand) -> np.dtype:
    """The element type the kernel runs on: float32, float64, or uint16 when both are 16-bit float patterns."""
    if e.kind == b.kind and e.kind in ("float32", "float64"):
        return np.dtype(e.kind)
    if e.kind == b.kind == "bits16":
        return np.dtype(np.uint16)
    return np.dtype(np.float32 if e.exact32 and b.exact32 else np.float64)


def _kernel_piece(piece: np.ndarray, op: _HostOperand, dtype: np.dtype, buffer: Callable[[], np.ndarray]) -> np.ndarray:
    """``piece`` flattened to a writable contiguous 1-D array of ``dtype``: a view when it is one, else
    decoded or copied into ``buffer()``."""
    if piece.dtype == dtype and piece.dtype.isnative and piece.flags.c_contiguous and piece.flags.writeable:
        return piece.reshape(-1)
    out = buffer()[: math.prod(piece.shape)]
    if op.kind in ("bits16", "fp8") and dtype != op.data.dtype:
        np.take(_table(op.source, dtype), piece, out=out.reshape(piece.shape), mode="clip")
    else:
        np.copyto(out.reshape(piece.shape), piece, casting="unsafe")
    return out


@functools.cache
def _pool(workers: int, pid: int) -> ThreadPoolExecutor:
    """A pool of ``workers`` threads kept for the life of process ``pid`` (a forked child makes its own)."""
    return ThreadPoolExecutor(workers, thread_name_prefix="acceptance-metrics")


class _Worker:
    """One worker's two conversion buffers, allocated when a piece first needs converting."""

    def __init__(self, dtype: np.dtype, size: int):
        self.dtype, self.size = dtype, size
        self._bufs: tuple[np.ndarray, np.ndarray] | None = None

    def buffer(self, k: int) -> np.ndarray:
        """Buffer ``k`` (0: evaluated, 1: baseline)."""
        if self._bufs is None:
            self._bufs = (np.empty(self.size, self.dtype), np.empty(self.size, self.dtype))
        return self._bufs[k]


class _Partial:
    """The partial results of one piece: float64 sums and maxima, int64 counts."""

    def __init__(self) -> None:
        self.sums, self.maxs, self.counts = np.zeros(6), np.zeros(9), np.zeros(6, dtype=np.int64)


def reduce(e: ArrayLike, b: ArrayLike, fmt: DType, block: int = HOST_BLOCK) -> Reduced:
    """Partial results of host data (numpy arrays or CPU tensors) from :func:`_kernel`, piece by piece.

    Pieces go to ``NUMBA_NUM_THREADS`` worker threads of a pool kept
    for the life of the process (the kernel runs without the GIL), each piece
    through the conversion buffers of an idle worker into partials of its own;
    at most two pieces per worker are in flight. Data of one piece is reduced
    in the calling thread. The pieces' partial sums are added in piece order,
    so the float64 sums depend on the shape and the data alone, never on the
    thread count or on which thread took which piece.
    """
    he, hb = _host_operand(e), _host_operand(b)
    dtype = _kernel_dtype(he, hb)
    codes = (_BITS16[he.source], _BITS16[hb.source]) if dtype == np.uint16 else (0, 0)
    size = math.prod(tuple(he.data.shape))
    threads: int = numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]  # set from the environment at import
    workers = max(1, min(threads, -(-size // block)))
    idle: queue.SimpleQueue[_Worker] = queue.SimpleQueue()
    for _ in range(workers):
        idle.put(_Worker(dtype, min(block, size)))
    partials = [_Partial()]  # an empty input reduces to zeros

    def run(pe: np.ndarray, pb: np.ndarray, part: _Partial) -> None:
        w = idle.get()
        try:
            pe1 = _kernel_piece(pe, he, dtype, lambda: w.buffer(0))
            pb1 = _kernel_piece(pb, hb, dtype, lambda: w.buffer(1))
            _kernel(
                pe1,
                pb1,
                *codes,
                *ulp_args(fmt),
                not fmt.is_float,
                fmt.diff3_threshold,
                part.sums,
                part.maxs,
                part.counts,
            )
        finally:
            idle.put(w)

    pieces = zip(blocks(he.data, block), blocks(hb.data, block), strict=True)
    if workers == 1:
        for pe, pb in pieces:
            partials.append(_Partial())
            run(pe, pb, partials[-1])
    else:
        pool = _pool(workers, os.getpid())
        pending: deque[Future[None]] = deque()
        for pe, pb in pieces:
            if len(pending) >= 2 * workers:
                pending.popleft().result()
            partials.append(_Partial())
            pending.append(pool.submit(run, pe, pb, partials[-1]))
        for job in pending:
            job.result()
    total = np.zeros(6)
    with np.errstate(over="ignore"):  # float64 sums may overflow to inf, as documented
        for part in partials:  # in piece order: the same sums whichever thread reduced which piece
            total += part.sums
    maxima = np.max([part.maxs for part in partials], axis=0).tolist()
    counts = np.sum([part.counts for part in partials], axis=0).tolist()
    return Reduced(*total.tolist(), *maxima, *counts)
