"""GGML block quantization: q4_0, q4_1, q5_0, q5_1, q8_0, q8_1, byte for byte.

A vectorised numpy codec for the 32-element block formats of GGML (llama.cpp,
``ggml/src/ggml-common.h`` and the ``quantize_row_*_ref`` /
``dequantize_row_*`` functions of ``ggml/src/ggml-quants.c``). ``quantize``
writes the bytes GGML's reference quantizers write; ``dequantize`` returns the
float32 values GGML's dequantizers return.

Byte layouts (one block = 32 consecutive elements x[0..31] of a row; every
multi-byte field is little-endian, fp16 is IEEE binary16; blocks are packed
with no padding, so a row of K elements is K/32 blocks back to back)::

    q4_0  18 B  fp16 d | uint8 qs[16]
    q4_1  20 B  fp16 d | fp16 m | uint8 qs[16]
    q5_0  22 B  fp16 d | uint8 qh[4] | uint8 qs[16]
    q5_1  24 B  fp16 d | fp16 m | uint8 qh[4] | uint8 qs[16]
    q8_0  34 B  fp16 d | int8 qs[32]
    q8_1  36 B  fp16 d | fp16 s | int8 qs[32]

4- and 5-bit codes c[0..31] are split in halves: ``qs[j] = (c[j] & 0xF) |
(c[j+16] & 0xF) << 4`` for j in 0..15 (low nibbles hold x[0..15], high
nibbles x[16..31]). The fifth bit of the 5-bit formats is ``qh`` read as one
little-endian uint32: bit j of it is bit 4 of c[j], j in 0..31.

Quantization (all arithmetic in float32, as the C reference; the input is
first converted to float32; fp16() is IEEE round-to-nearest-even with
subnormals; trunc() truncates toward zero, roundf() rounds half away from
zero)::

    q4_0  max = the first element of largest |x| (+0.0 if the block is all zeros)
          d = max / -8;  id = 1/d (0 if d == 0);  c = min(15, trunc(x*id + 8.5))
          stored d = fp16(d);            x ~ (c - 8) * d
    q5_0  same with 16:  d = max / -16;  c = min(31, trunc(x*id + 16.5))
          x ~ (c - 16) * d
    q4_1  min, max of the block;  d = (max - min) / 15;  id = 1/d (0 if d == 0)
          c = min(15, trunc((x - min)*id + 0.5));  stored d = fp16(d), m = fp16(min)
          x ~ c * d + m
    q5_1  same with 31 (GGML does not clamp here; the code cannot exceed 31)
    q8_0  amax = max |x|;  d = amax / 127;  id = 1/d (0 if d == 0)
          q = roundf(x*id) in [-127, 127];  stored d = fp16(d);  x ~ q * d
    q8_1  as q8_0, plus s = fp16(float32(sum(q)) * d) where d is the float32
          scale before its rounding to fp16 (``y.s = FP32_TO_FP16(sum*d)``)

Note that ``id`` is computed from the float32 ``d``, not from the stored fp16
one, and that the asymmetric formats' ``min``/``max`` and the symmetric
formats' ``max`` are the *first* such element of the block, which decides the
sign of a zero ``m`` or ``d``.

Dequantization (float32, as GGML's ``dequantize_row_*``; D, M are the stored
fp16 fields widened to float32)::

    q4_0  (c - 8) * D        q4_1  c * D + M
    q5_0  (c - 16) * D       q5_1  c * D + M
    q8_0  q * D              q8_1  q * D  (s is ignored: GGML has no q8_1
                                           dequantizer; s only serves dot products)

Every product c*D is exact in float32 (at most 8 + 11 significant bits), so
only the ``+ M`` of q4_1/q5_1 rounds, once.

Where this codec deliberately differs from other implementations:

- gguf-py (``gguf.quants``) takes the block max/min with numpy reductions
  whose choice between ``+0.0`` and ``-0.0`` is not GGML's first-element rule
  (and, for an all-zero block starting with ``-0.0``, yields ``d = +0.0``
  where GGML writes ``-0.0``). Only the sign bit of a zero ``d``/``m`` differs;
  this codec follows GGML's C reference.
- A block whose float32 scale d is below 2**-128 (block magnitudes below about
  2.4e-38 for q4_0 up to 3.7e-37 for q8_x) has ``id = 1/d = inf`` in float32;
  the C reference then converts inf/NaN to an integer,
  which is undefined behaviour. This codec writes code 0 there, as x86-64
  builds of GGML and gguf-py do; such a block's stored d is 0, so it
  dequantizes to zeros either way.
- GGML silently stores ``inf`` when d, m or s overflows fp16 (|x| beyond about
  5.2e5 for q4_0, 1.05e6 for q5_0, 8.3e6 for q8_x, 65504 for the min of
  q4_1/q5_1, or |s| beyond 65504 for q8_1). ``quantize`` raises ValueError
  instead, naming the field, the row and the block.
- The CUDA backend quantizes activations to q8_1 with ``q = roundf(x / d)``
  and ``s = fp16(sum of the float32 x)``; this codec writes the CPU reference
  (``q = roundf(x * (1/d))``, ``s = fp16(d * sum(q))``), which is what the
  ``.gguf`` tooling and the CPU backend produce.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple, cast

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:  # torch loads only when a tensor comes in
    import torch

    #: What quantize and dequantize take: a numpy array, anything ``np.asarray`` takes, or a torch tensor.
    ArrayInput = npt.ArrayLike | torch.Tensor

__all__ = [
    "QK",
    "QuantFormat",
    "FORMATS",
    "BlockFields",
    "get_format",
    "block_bytes",
    "packed_shape",
    "unpacked_shape",
    "quantize",
    "dequantize",
    "unpack_blocks",
]

#: Elements per block, for every format here (``QK4_0`` ... ``QK8_1`` in ggml-common.h).
QK = 32

_F16 = np.dtype("<f2")  # GGML's ggml_half, little-endian on disk and in memory


@dataclass(frozen=True)
class QuantFormat:
    """One GGML block format.

    ``bits``: bits per stored code; ``has_min``: an fp16 offset ``m`` is stored
    (asymmetric, x ~ c*d + m); ``has_sum``: an fp16 ``s = d*sum(q)`` is stored;
    ``zero_point``: the code offset of a symmetric format (x ~ (c - zero_point)*d;
    0 for the signed int8 codes of q8_x and for the asymmetric formats);
    ``ggml_type``: the ``enum ggml_type`` value (also gguf's
    ``GGMLQuantizationType``); ``layout``: the fields of one block in order.
    """

    name: str
    ggml_type: int
    block_size: int
    block_bytes: int
    bits: int
    has_min: bool
    has_sum: bool
    zero_point: int
    layout: str
    description: str

    @property
    def bits_per_weight(self) -> float:
        """Storage cost in bits per element: 8 * block_bytes / block_size."""
        return 8.0 * self.block_bytes / self.block_size

    @property
    def max_code(self) -> int:
        """Largest stored code: 15 (4-bit), 31 (5-bit) or 127 (int8, |q| <= 127)."""
        return (1 << self.bits) - 1 if self.bits < 8 else 127


FORMATS: dict[str, QuantFormat] = {
    f.name: f
    for f in (
        QuantFormat(
            "q4_0",
            2,
            QK,
            18,
            4,
            False,
            False,
            8,
            "fp16 d | uint8 qs[16]",
            "4-bit symmetric: x ~ (c - 8) * d, c in 0..15",
        ),
        QuantFormat(
            "q4_1",
            3,
            QK,
            20,
            4,
            True,
            False,
            0,
            "fp16 d | fp16 m | uint8 qs[16]",
            "4-bit asymmetric: x ~ c * d + m, c in 0..15",
        ),
        QuantFormat(
            "q5_0",
            6,
            QK,
            22,
            5,
            False,
            False,
            16,
            "fp16 d | uint8 qh[4] | uint8 qs[16]",
            "5-bit symmetric: x ~ (c - 16) * d, c in 0..31",
        ),
        QuantFormat(
            "q5_1",
            7,
            QK,
            24,
            5,
            True,
            False,
            0,
            "fp16 d | fp16 m | uint8 qh[4] | uint8 qs[16]",
            "5-bit asymmetric: x ~ c * d + m, c in 0..31",
        ),
        QuantFormat(
            "q8_0", 8, QK, 34, 8, False, False, 0, "fp16 d | int8 qs[32]", "8-bit symmetric: x ~ q * d, q in -127..127"
        ),
        QuantFormat(
            "q8_1",
            9,
            QK,
            36,
            8,
            False,
            True,
            0,
            "fp16 d | fp16 s | int8 qs[32]",
            "8-bit symmetric with s = d * sum(q) for dot products: x ~ q * d",
        ),
    )
}


class BlockFields(NamedTuple):
    """The decoded fields of packed blocks, shaped ``(*rows, n_blocks[, 32])``.

    ``d``, ``m``, ``s``: the stored fp16 fields widened to float32 (``m`` is
    None unless the format has a min, ``s`` None unless it has a sum).
    ``codes``: the 32 codes of each block in element order, as stored: uint8
    0..15 / 0..31 for the 4-/5-bit formats (zero point not subtracted), int8
    for q8_x.
    """

    d: np.ndarray
    m: np.ndarray | None
    s: np.ndarray | None
    codes: np.ndarray


def get_format(fmt: str | QuantFormat) -> QuantFormat:
    """The :class:`QuantFormat` named ``fmt`` (case-insensitive); ValueError listing the known ones."""
    if isinstance(fmt, QuantFormat):
        return fmt
    if isinstance(fmt, str) and fmt.lower() in FORMATS:
        return FORMATS[fmt.lower()]
    raise ValueError(f"unknown GGML quantization format {fmt!r}; known formats: {', '.join(FORMATS)}")


def block_bytes(fmt: str | QuantFormat) -> int:
    """Bytes per 32-element block of ``fmt`` (18, 20, 22, 24, 34, 36)."""
    return get_format(fmt).block_bytes


def packed_shape(shape: tuple[int, ...] | list[int], fmt: str | QuantFormat) -> tuple[int, ...]:
    """Shape of the uint8 array ``quantize`` returns for a float array of ``shape``:
    the last dimension K becomes K / 32 * block_bytes. ValueError if K % 32 != 0."""
    f = get_format(fmt)
    shape = tuple(int(n) for n in shape)
    if not shape:
        raise ValueError(f"{f.name}: cannot quantize a 0-d array; give a 1-D (K,) or 2-D (rows, K) shape")
    k = shape[-1]
    if k % f.block_size:
        raise ValueError(
            f"{f.name}: the last dimension K={k} is not a multiple of the {f.name} block size {f.block_size}"
        )
    return (*shape[:-1], k // f.block_size * f.block_bytes)


def unpacked_shape(shape: tuple[int, ...] | list[int], fmt: str | QuantFormat) -> tuple[int, ...]:
    """Inverse of :func:`packed_shape`: the last dimension N bytes becomes N / block_bytes * 32."""
    f = get_format(fmt)
    shape = tuple(int(n) for n in shape)
    if not shape:
        raise ValueError(f"{f.name}: packed blocks must have at least one dimension")
    n = shape[-1]
    if n % f.block_bytes:
        raise ValueError(
            f"{f.name}: the last dimension of the packed blocks ({n} bytes) is not a multiple of "
            f"the {f.name} block size ({f.block_bytes} bytes)"
        )
    return (*shape[:-1], n // f.block_bytes * f.block_size)


# ----------------------------------------------------------------------------- input handling


def _to_numpy(a: ArrayInput) -> np.ndarray:
    """numpy view of ``a``; a torch tensor is detached and copied to CPU (bfloat16 widened to float32)."""
    mod = type(a).__module__
    if mod == "torch" or mod.startswith("torch."):
        import torch

        t = cast(torch.Tensor, a).detach().to("cpu")
        if t.dtype == torch.bfloat16:
            t = t.float()
        return t.numpy()
    return np.asarray(a)


def _index_of(flat_index: int, shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(int(i) for i in np.unravel_index(flat_index, shape))


def _float32_input(array: ArrayInput, f: QuantFormat) -> np.ndarray:
    """The input as a C-contiguous float32 array, validated (real dtype, K % 32, finite)."""
    x = _to_numpy(array)
    if x.dtype.kind not in "biuf":
        raise ValueError(f"quantize({f.name}): expected a real-valued array, got dtype {x.dtype}")
    packed_shape(x.shape, f)  # validates ndim and K
    if x.dtype.kind == "f":
        bad = ~np.isfinite(x)
        n_bad = int(np.count_nonzero(bad))
        if n_bad:
            first = _index_of(int(np.flatnonzero(bad)[0]), x.shape)
            raise ValueError(
                f"quantize({f.name}): the input has {n_bad} non-finite value(s) (NaN or inf); "
                f"the first is {float(x[first])} at index {first}"
            )
    with np.errstate(over="ignore"):
        x32 = np.ascontiguousarray(x, dtype=np.float32)
    if x.dtype.kind == "f" and x.dtype.itemsize > 4:
        over = ~np.isfinite(x32)
        n_over = int(np.count_nonzero(over))
        if n_over:
            first = _index_of(int(np.flatnonzero(over)[0]), x.shape)
            raise ValueError(
                f"quantize({f.name}): {n_over} value(s) overflow float32 (GGML quantizes float32); "
                f"the first is {x[first].item()!r} at index {first}"
            )
    return x32


def _fp16_bytes(v: np.ndarray, field: str, f: QuantFormat, first_block: int, grid: tuple[int, ...]) -> np.ndarray:
    """The bytes of fp16(v) (round to nearest even, little-endian), shape ``(len(v), 2)``, for
    blocks ``first_block ...`` of an array of ``grid = (*rows, n_blocks)`` blocks; ValueError
    where fp16(v) overflows to inf (GGML would store inf there)."""
    with np.errstate(over="ignore"):
        h = np.ascontiguousarray(v.astype(_F16))
    over = ~np.isfinite(h)
    if over.any():
        i = int(np.flatnonzero(over)[0])
        where = _index_of(first_block + i, grid)
        rows = where[:-1]
        place = f"block {where[-1]}" + (f" of row {rows[0] if len(rows) == 1 else rows}" if rows else "")
        raise ValueError(
            f"quantize({f.name}): a block has a {field} beyond the fp16 range (|{field}| > 65504; "
            f"GGML would store inf): {field} = {float(v[i]):.7g} at {place}"
        )
    return h.view(np.uint8).reshape(len(h), 2)


# ----------------------------------------------------------------------------- quantize


def _reciprocal(d: np.ndarray) -> np.ndarray:
    """id = 1/d in float32, 0 where d == 0 (``d ? 1.0f/d : 0.0f``)."""
    with np.errstate(divide="ignore", over="ignore"):
        return np.divide(np.float32(1), d, out=np.zeros_like(d), where=d != 0)


def _trunc_codes(t: np.ndarray, cmax: int, may_be_nonfinite: bool) -> np.ndarray:
    """min(cmax, (int)t) as uint8, for t >= 0 (float -> uint8 truncates toward zero).
    A non-finite t (only possible where id = inf) gives 0."""
    c = np.minimum(t, np.float32(cmax))
    if may_be_nonfinite:
        c = np.where(np.isfinite(t), c, np.float32(0))
    return c.astype(np.uint8)


def _roundf(v: np.ndarray) -> np.ndarray:
    """C roundf (half away from zero) in float32, exactly: sign(v) * (floor|v| + floor(2 * frac|v|)).

    ``floor(|v| + 0.5)`` is not exact (0.49999997 + 0.5 rounds up to 1.0 in float32);
    ``|v| - floor|v|`` and its double are exact in binary floating point."""
    a = np.abs(v)
    fl = np.floor(a)
    return np.copysign(fl + np.floor(np.float32(2) * (a - fl)), v)


def _first_abs_max(x: np.ndarray) -> np.ndarray:
    """Per block (row of x), the first element of largest magnitude, its sign kept; +0.0 for
    an all-zero block (C: ``if (amax < fabsf(v)) { amax = fabsf(v); max = v; }`` from 0, 0)."""
    mx = x[np.arange(len(x)), np.argmax(np.abs(x), axis=1)]
    return np.where(mx != 0, mx, np.float32(0))


def _pack_nibbles(codes: np.ndarray) -> np.ndarray:
    """qs[j] = (c[j] & 0xF) | (c[j+16] & 0xF) << 4 for j in 0..15."""
    return (codes[..., :16] & np.uint8(0x0F)) | ((codes[..., 16:] & np.uint8(0x0F)) << np.uint8(4))


def _pack_high_bits(codes: np.ndarray) -> np.ndarray:
    """qh as 4 bytes of a little-endian uint32 whose bit j is bit 4 of c[j]."""
    return np.packbits((codes >> np.uint8(4)) & np.uint8(1), axis=-1, bitorder="little")


def _quantize_symmetric(x: np.ndarray, out: np.ndarray, f: QuantFormat):
    """q4_0 / q5_0 codes into ``out``; returns (d, None). x: (n, 32) float32."""
    half = f.zero_point  # 8 or 16: d = max / -half sends the block max to code 0
    d = _first_abs_max(x) / np.float32(-half)
    idv = _reciprocal(d)
    codes = _trunc_codes(x * idv[:, None] + np.float32(half + 0.5), f.max_code, np.isinf(idv).any())
    if f.bits == 5:
        out[:, 2:6] = _pack_high_bits(codes)
        out[:, 6:] = _pack_nibbles(codes)
    else:
        out[:, 2:] = _pack_nibbles(codes)
    return d, None


def _quantize_asymmetric(x: np.ndarray, out: np.ndarray, f: QuantFormat):
    """q4_1 / q5_1 codes into ``out``; returns (d, min)."""
    n = np.arange(len(x))
    mn = x[n, np.argmin(x, axis=1)]  # the first minimal element, as `if (v < min) min = v`
    mx = x[n, np.argmax(x, axis=1)]  # the first maximal element, as `if (v > max) max = v`
    with np.errstate(over="ignore"):
        d = (mx - mn) / np.float32(f.max_code)
    idv = _reciprocal(d)
    with np.errstate(invalid="ignore"):  # (x - min) * inf = nan for x == min when id = inf
        t = (x - mn[:, None]) * idv[:, None] + np.float32(0.5)
    codes = _trunc_codes(t, f.max_code, np.isinf(idv).any())
    if f.bits == 5:
        out[:, 4:8] = _pack_high_bits(codes)
        out[:, 8:] = _pack_nibbles(codes)
    else:
        out[:, 4:] = _pack_nibbles(codes)
    return d, mn


def _quantize_q8(x: np.ndarray, out: np.ndarray, f: QuantFormat):
    """q8_0 / q8_1 codes into ``out``; returns (d, s or None)."""
    d = np.max(np.abs(x), axis=1) / np.float32(127)
    idv = _reciprocal(d)
    with np.errstate(invalid="ignore"):
        v = x * idv[:, None]
        r = _roundf(v)
        if np.isinf(idv).any():
            r = np.where(np.isfinite(v), r, np.float32(0))
    q = r.astype(np.int8)
    out[:, 4 if f.has_sum else 2 :] = q.view(np.uint8)
    if not f.has_sum:
        return d, None
    total = q.sum(axis=1, dtype=np.int32).astype(np.float32)  # `int sum`, then `sum*d` in float
    return d, total * d


_QUANTIZERS = {
    "q4_0": _quantize_symmetric,
    "q5_0": _quantize_symmetric,
    "q4_1": _quantize_asymmetric,
    "q5_1": _quantize_asymmetric,
    "q8_0": _quantize_q8,
    "q8_1": _quantize_q8,
}

#: Blocks per step: the temporaries of one step (1 MiB float32 arrays) stay in cache.
_CHUNK = 8192


def quantize(array: ArrayInput, fmt: str | QuantFormat) -> np.ndarray:
    """Quantize a float array of shape ``(..., K)`` (typically ``(rows, K)`` or ``(K,)``) to
    GGML blocks: a uint8 array of shape ``(..., K // 32 * block_bytes(fmt))``, each row
    the bytes GGML's ``quantize_row_<fmt>_ref`` writes for it (see the module docstring
    for the layouts and formulas).

    ``array`` may be a numpy array, anything ``np.asarray`` takes, or a torch tensor
    (copied to CPU). It is converted to float32 first, as GGML quantizes float32.

    Raises ValueError for an unknown format, a non-real dtype, a 0-d array, K not a
    multiple of 32, NaN/inf in the input (with their count and the first index), values
    overflowing float32, and blocks whose stored fp16 fields (d, m, s) would overflow.
    """
    f = get_format(fmt)
    x32 = _float32_input(array, f)
    grid = (*x32.shape[:-1], x32.shape[-1] // QK)
    blocks = x32.reshape(-1, QK)
    out = np.empty((len(blocks), f.block_bytes), dtype=np.uint8)
    kernel = _QUANTIZERS[f.name]
    second = "m" if f.has_min else "s"
    for i in range(0, len(blocks), _CHUNK):
        o = out[i : i + _CHUNK]
        d, extra = kernel(blocks[i : i + _CHUNK], o, f)
        o[:, 0:2] = _fp16_bytes(d, "d", f, i, grid)
        if extra is not None:
            o[:, 2:4] = _fp16_bytes(extra, second, f, i, grid)
    return out.reshape(packed_shape(x32.shape, f))


# ----------------------------------------------------------------------------- dequantize


def _blocks_input(blocks: ArrayInput, f: QuantFormat) -> np.ndarray:
    """The packed blocks as a uint8 array of shape (..., n_blocks, block_bytes), validated."""
    b = _to_numpy(blocks)
    if b.dtype != np.uint8:
        raise ValueError(f"dequantize({f.name}): packed blocks must be a uint8 array, got dtype {b.dtype}")
    if b.ndim == 0:
        raise ValueError(f"dequantize({f.name}): packed blocks must have at least one dimension, got a 0-d array")
    unpacked_shape(b.shape, f)  # validates the byte count
    return np.ascontiguousarray(b).reshape(*b.shape[:-1], b.shape[-1] // f.block_bytes, f.block_bytes)


def _f16_field(b: np.ndarray, start: int) -> np.ndarray:
    return np.ascontiguousarray(b[..., start : start + 2]).view(_F16)[..., 0].astype(np.float32)


def _unpack_nibbles(qs: np.ndarray) -> np.ndarray:
    return np.concatenate([qs & np.uint8(0x0F), qs >> np.uint8(4)], axis=-1)


def _unpack(b: np.ndarray, f: QuantFormat) -> BlockFields:
    """Fields of blocks ``b`` of shape (..., block_bytes), uint8."""
    d = _f16_field(b, 0)
    m = _f16_field(b, 2) if f.has_min else None
    s = _f16_field(b, 2) if f.has_sum else None
    if f.bits == 8:
        codes = np.ascontiguousarray(b[..., 4 if f.has_sum else 2 :]).view(np.int8)
    else:
        qs_at = 2 + 2 * f.has_min + 4 * (f.bits == 5)
        codes = _unpack_nibbles(b[..., qs_at:])
        if f.bits == 5:
            codes |= np.unpackbits(b[..., qs_at - 4 : qs_at], axis=-1, bitorder="little") << np.uint8(4)
    return BlockFields(d, m, s, codes)


def unpack_blocks(blocks: ArrayInput, fmt: str | QuantFormat) -> BlockFields:
    """Decode packed blocks (uint8, last dimension a multiple of block_bytes) into their
    fields: see :class:`BlockFields`. ValueError on a wrong dtype or byte count."""
    f = get_format(fmt)
    return _unpack(_blocks_input(blocks, f), f)


def dequantize(blocks: ArrayInput, fmt: str | QuantFormat) -> np.ndarray:
    """Decode GGML blocks of shape ``(..., n_bytes)`` to float32 ``(..., n_bytes // block_bytes * 32)``,
    as GGML's ``dequantize_row_<fmt>`` (q8_1: q * d, see the module docstring).

    ``blocks`` must be uint8 (numpy or a torch tensor); ValueError on another dtype, a
    0-d array, or a last dimension that is not a whole number of blocks.
    """
    f = get_format(fmt)
    b = _blocks_input(blocks, f)
    flat = b.reshape(-1, f.block_bytes)
    y = np.empty((len(flat), QK), dtype=np.float32)
    with np.errstate(invalid="ignore", over="ignore"):  # inf/NaN fields give IEEE results, as in C
        for i in range(0, len(flat), _CHUNK):
            fields = _unpack(flat[i : i + _CHUNK], f)
            d = fields.d[:, None]
            if fields.m is not None:  # the formats with a min
                np.add(fields.codes.astype(np.float32) * d, fields.m[:, None], out=y[i : i + _CHUNK])
            elif f.bits < 8:
                np.multiply(
                    (fields.codes.astype(np.int8) - np.int8(f.zero_point)).astype(np.float32), d, out=y[i : i + _CHUNK]
                )
            else:
                np.multiply(fields.codes.astype(np.float32), d, out=y[i : i + _CHUNK])
    return y.reshape(unpacked_shape(b.shape[:-2] + (b.shape[-2] * f.block_bytes,), f))
