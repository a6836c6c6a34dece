"""Deterministic inputs: the same spec gives bit-identical tensors on every machine.

Seeds. ``case_seed`` hashes ``"{spec_seed}|{case_id}|{trial}"`` with SHA-256,
so a case's inputs depend only on the spec seed, its id and the trial number,
never on which other cases, dtypes or shards run, nor on Python's ``hash``.

Random bits. Input ``i`` of a case draws from its own stream,
``PCG64(SeedSequence(seed, spawn_key=(i,)))``; NumPy keeps SeedSequence and
PCG64 streams stable across versions and platforms. Only the raw 64-bit words
(``random_raw``) are used (``Generator.random`` gives the unit uniforms where an
import-time check finds it computes the same formula on the same words); every
transform below is written with IEEE-754 operations that are correctly rounded
(+ - * / sqrt, frexp/ldexp, rint), so no libm or SIMD math routine (whose last
bits vary between machines) is involved:

- unit uniform: ``u = (w >> 11) * 2**-53`` in [0, 1), 53 random bits;
- ``uniform: [lo, hi]``: ``lo + (hi - lo) * u``;
- ``normal: [mean, std]``: Marsaglia's polar method, ``mean + std * z`` with
  ``z = x * sqrt(-2 ln s / s)``, ``s = x**2 + y**2`` (``ln`` by :func:`_log`);
- ``randint: [lo, hi]``: the top ``k = bit_length(hi - lo - 1)`` bits of a word,
  rejected when ``>= hi - lo`` (exactly uniform), plus ``lo``;
- ``choice``/``specials`` pick values with ``randint``; ``sparse``/``specials``
  keep/replace an element when ``u < density`` / ``u < fraction``.

Quantized inputs (``quant: q4_0`` ...). The values are drawn as for a float
input, converted to float32 and quantized with :func:`acceptance.formats.quant.quantize`
(GGML's reference quantizer, byte for byte); the impl gets the packed uint8
blocks (rows x K/32*block_bytes), the baseline (and, in float64, the oracle)
what the input's ``reference`` says: ``dequantized`` (default) the values
:func:`acceptance.formats.quant.dequantize` gives back, rounded once to the test dtype;
``blocks`` the same uint8 blocks; ``float`` the float32 values before
quantization, rounded once to the test dtype. A spec with a quantized input
gets a :class:`RoleInputs` pair from :func:`generate`.

Casting. Float inputs are drawn in float64 and rounded once to the test dtype
with round-to-nearest-even (:func:`acceptance.formats.dtypes.round_to`; torch's own
float64 -> float16/bfloat16 cast can round twice). Integer inputs are
drawn as int64 and converted to their fixed dtype (bounds are checked when the
spec loads, so the conversion is exact).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np
import torch

from acceptance.formats import dtypes, quant
from acceptance.spec import Case, Choice, Dist, Normal, RandInt, Sparse, Specials, Uniform, value_of
from acceptance.spec.axes import preset_dist
from acceptance.spec.backward import cotangent_seed


def case_seed(spec_seed: int, case_id: str, trial: int) -> int:
    """Seed of one trial of one case: the first 8 bytes (little-endian) of
    ``sha256(f"{spec_seed}|{case_id}|{trial}")``, an integer in [0, 2**64)."""
    digest = hashlib.sha256(f"{spec_seed}|{case_id}|{trial}".encode()).digest()
    return int.from_bytes(digest[:8], "little")


class RoleInputs(NamedTuple):
    """The inputs of one trial when the roles get different tensors (a quantized input): ``impl`` the packed
    blocks, ``reference`` what the baseline gets (the oracle gets its float64 copy)."""

    impl: list[torch.Tensor]
    reference: list[torch.Tensor]


def quantized(values: np.ndarray, fmt: str, reference: str, dtype: str, name: str) -> tuple[torch.Tensor, torch.Tensor]:
    """(blocks, reference tensor) of one quantized input: ``values`` (float64, its shape) quantized to
    ``fmt``, and the baseline's tensor per ``reference`` (see the module docstring). ``ValueError`` naming
    the input for a value GGML cannot quantize (inf, NaN, a block scale overflowing fp16)."""
    try:
        blocks = quant.quantize(values, fmt)
    except ValueError as exc:
        raise ValueError(f"input {name!r}: {exc}") from None
    packed = torch.from_numpy(blocks)
    if reference == "blocks":
        return packed, packed.clone()
    if reference == "float":
        return packed, dtypes.to_tensor(values.astype(np.float32).astype(np.float64), dtype)
    return packed, dtypes.to_tensor(quant.dequantize(blocks, fmt).astype(np.float64), dtype)


def input_sets(made: list[torch.Tensor] | RoleInputs) -> tuple[tuple[torch.Tensor, ...], ...]:
    """What :func:`generate` made as a worker batch's input sets: (inputs,) when every role gets the same
    tensors, (impl's, reference) for a :class:`RoleInputs` pair."""
    if isinstance(made, RoleInputs):
        return tuple(made.impl), tuple(made.reference)
    return (tuple(made),)


class Recipe:
    """The inputs of one case, trial after trial: ``recipe(t)`` is :func:`generate` (case, t). Picklable, so
    that a worker process can make a trial's inputs where they are used instead of receiving them."""

    def __init__(self, case: Case):
        self.case = case

    def __call__(self, trial: int) -> list[torch.Tensor] | RoleInputs:
        return generate(self.case, trial)

    def flush(self) -> None:
        """Store what the recipe made and keeps for later (nothing here)."""


def generate(case: Case, trial: int) -> list[torch.Tensor] | RoleInputs:
    """The inputs of one trial of ``case``: contiguous CPU tensors in input order.

    Float inputs are in the test dtype (drawn in float64, rounded once with
    round-to-nearest-even); integer/bool inputs are in their fixed dtype.
    Bit-identical on every machine for the same spec, case id and trial.
    A spec with a quantized input gets a :class:`RoleInputs` pair instead. A spec with ``backward`` gets one
    more tensor last: the trial's cotangent seed (int64, one element; :func:`acceptance.spec.backward.cotangent_seed`).
    """
    seed = case_seed(case.spec.seed, case.id, trial)
    tensors = []
    reference = []
    for i, (inp, shape) in enumerate(zip(case.spec.inputs, case.shapes, strict=False)):
        bits = np.random.PCG64(np.random.SeedSequence(seed, spawn_key=(i,)))
        values = draw(preset_dist(inp.dist, case), math.prod(shape), bits, case.symbols)
        if inp.quant is not None:
            blocks, ref = quantized(values.reshape(shape), inp.quant, inp.reference, case.dtype, inp.name)
            tensors.append(blocks)
            reference.append(ref)
            continue
        if inp.dtype is None:
            flat = dtypes.to_tensor(values, case.dtype)
        else:
            flat = torch.from_numpy(values.astype(np.int64)).to(dtypes.torch_dtype(inp.dtype))
        # an empty draw gets fresh row-major strides (numpy gives empty results stride 0)
        tensors.append(flat.reshape(shape) if flat.numel() else torch.empty(shape, dtype=flat.dtype))
        reference.append(tensors[-1])
    if case.spec.backward is not None:  # the trial's cotangent seed, drawn by every role alike (spec/backward.py)
        tensors.append(torch.tensor([cotangent_seed(seed)], dtype=torch.int64))
        reference.append(tensors[-1])
    if any(inp.quant is not None for inp in case.spec.inputs):
        return RoleInputs(tensors, reference)
    return tensors


# --------------------------------------------------------------------------- sampling


def draw(dist: Dist, n: int, bits: np.random.PCG64, symbols: Mapping[str, int]) -> np.ndarray:
    """``n`` samples of ``dist`` (float64; int64 for ``randint``) from the raw words of ``bits``."""
    if isinstance(dist, Uniform):
        lo, hi = float(value_of(dist.lo, symbols)), float(value_of(dist.hi, symbols))
        return _affine(lo, hi - lo, unit_uniform(bits, n))
    if isinstance(dist, Normal):
        mean, std = float(value_of(dist.mean, symbols)), float(value_of(dist.std, symbols))
        return _affine(mean, std, standard_normal(bits, n))
    if isinstance(dist, RandInt):
        return integers(bits, int(value_of(dist.lo, symbols)), int(value_of(dist.hi, symbols)), n)
    if isinstance(dist, Choice):
        return np.asarray(dist.values, dtype=_values_dtype(dist.values))[integers(bits, 0, len(dist.values), n)]
    if isinstance(dist, Sparse):
        base = draw(dist.of, n, bits, symbols)
        keep = unit_uniform(bits, n) < dist.density
        return np.where(keep, base, np.zeros((), base.dtype))
    if not isinstance(dist, Specials):
        raise TypeError(f"unknown distribution {dist!r}")
    base = draw(dist.of, n, bits, symbols)
    swap = unit_uniform(bits, n) < dist.fraction
    special = np.asarray(dist.values, dtype=_values_dtype(dist.values))[integers(bits, 0, len(dist.values), n)]
    return np.where(swap, special, base)


def _affine(offset: float, scale: float, x: np.ndarray) -> np.ndarray:
    """``offset + scale * x`` (each operation rounded once, operands in that order), in ``x``'s storage."""
    np.multiply(scale, x, out=x)
    return np.add(offset, x, out=x)


def _values_dtype(values: tuple) -> type:
    return np.int64 if all(isinstance(v, int) for v in values) else np.float64


def unit_uniform(bits: np.random.PCG64, n: int) -> np.ndarray:
    """``n`` float64 values ``(w >> 11) * 2**-53`` in [0, 1) from 64-bit words ``w``."""
    if _GENERATOR_EXACT:
        return np.random.Generator(bits).random(n)
    w = bits.random_raw(n)
    w >>= _SHIFT_53
    # below 2**53, so the int64 -> float64 conversion is exact; computed in the words' own storage
    return np.multiply(w.view(np.int64), 2.0**-53, out=w.view(np.float64))


_SHIFT_53 = np.uint64(11)


def _generator_exact() -> bool:
    """Whether NumPy's ``Generator.random(n)`` gives exactly ``(w >> 11) * 2**-53`` from the next ``n`` raw
    words, as NumPy computes it for PCG64 (one pass in C instead of three in NumPy). Checked on 64 words at
    import; where a NumPy version computes it otherwise, the inputs keep coming from ``random_raw``."""
    raw, fast = np.random.PCG64(0x5EED), np.random.PCG64(0x5EED)
    want = (raw.random_raw(64) >> _SHIFT_53).astype(np.float64) * 2.0**-53
    got = np.random.Generator(fast).random(64)
    return got.view(np.uint64).tolist() == want.view(np.uint64).tolist() and raw.random_raw() == fast.random_raw()


#: ``Generator.random`` is the formula of :func:`unit_uniform`, bit for bit, in this NumPy (:func:`_generator_exact`).
_GENERATOR_EXACT = _generator_exact()


def integers(bits: np.random.PCG64, lo: int, hi: int, n: int) -> np.ndarray:
    """``n`` int64 values uniform on lo <= k < hi (requires lo < hi, both within int64).

    Top-bits rejection: with ``span = hi - lo`` and ``k = bit_length(span - 1)``,
    a word's top ``k`` bits are kept when ``< span`` (acceptance >= 1/2).
    """
    span = hi - lo
    if span == 1:
        return np.full(n, lo, dtype=np.int64)
    shift = np.uint64(64 - (span - 1).bit_length())
    kept: list[np.ndarray] = []
    have = 0
    while have < n:
        words = bits.random_raw(n - have) >> shift
        words = words[words < np.uint64(span)]
        kept.append(words)
        have += words.size
    offsets = np.concatenate(kept) if kept else np.empty(0, np.uint64)
    # two's-complement wrap-around gives lo + offset exactly for any int64 lo
    return (offsets + np.uint64(lo % 2**64)).view(np.int64)


_LN2 = 0.6931471805599453  # ln 2 rounded to float64
_SQRT_HALF = 0.7071067811865476
_LOG_TERMS = 12


def _log(x: np.ndarray) -> np.ndarray:
    """Natural log of positive normal float64 values with + - * / only (a few ulp).

    ``x = m * 2**e`` with ``m`` in [sqrt(1/2), sqrt(2)); ``t = (m-1)/(m+1)``,
    ``ln m = 2 t (1 + t**2/3 + t**4/5 + ... + t**22/23)`` (|t| <= 0.172, so the
    truncated tail is below 1e-18 relative), ``ln x = e ln 2 + ln m``.
    """
    m, e = np.frexp(x)
    low = m < _SQRT_HALF
    np.multiply(m, 2.0, out=m, where=low)
    e = e.astype(np.float64)
    e -= low
    t = m - 1.0
    m += 1.0
    t /= m
    t2 = t * t
    # Horner from the t**22/23 term down; every step rounds as ``series * t2 + c`` does
    series = t2 * (1.0 / (2 * _LOG_TERMS - 1))
    series += 1.0 / (2 * _LOG_TERMS - 3)
    for k in range(_LOG_TERMS - 3, -1, -1):
        series *= t2
        series += 1.0 / (2 * k + 1)
    t *= 2.0
    t *= series
    e *= _LN2
    e += t
    return e


def standard_normal(bits: np.random.PCG64, n: int) -> np.ndarray:
    """``n`` standard normal float64 values by Marsaglia's polar method.

    Pairs ``x, y = 2u - 1`` are kept when ``0 < s = x**2 + y**2 < 1`` and give
    ``x f, y f`` with ``f = sqrt(-2 ln s / s)``; batches are drawn until ``n`` are made.
    """
    out: list[np.ndarray] = []
    have = 0
    while have < n:
        pairs = (n - have + 1) // 2
        batch = pairs + pairs // 3 + 8
        # the x words, then the y words: one draw of 2 * batch words is the same stream
        xy = unit_uniform(bits, 2 * batch)
        xy *= 2.0
        xy -= 1.0
        z = np.empty(2 * batch)
        made = 0
        for start in range(0, batch, _CHUNK):  # pairs in cache-sized chunks, in order
            stop = min(start + _CHUNK, batch)
            x, y = xy[start:stop], xy[batch + start : batch + stop]
            s = x * x
            s += y * y
            ok = (s > 0.0) & (s < 1.0)
            x, y, s = x[ok], y[ok], s[ok]
            f = _log(s)
            f *= -2.0
            f /= s
            np.sqrt(f, out=f)
            np.multiply(x, f, out=z[made : made + 2 * f.size : 2])
            np.multiply(y, f, out=z[made + 1 : made + 2 * f.size : 2])
            made += 2 * f.size
        out.append(z[:made])
        have += made
    if len(out) == 1:
        return out[0][:n]
    return np.concatenate(out)[:n] if out else np.empty(0)


#: Pairs per chunk of :func:`standard_normal`: its two dozen passes stay in the CPU cache.
_CHUNK = 16384
