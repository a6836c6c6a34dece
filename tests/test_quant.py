"""GGML block codec: bytes against gguf-py and against a per-element transcription of
ggml's C reference quantizers, dequantization, round-trip error bounds, errors."""

from __future__ import annotations

import math
import struct

import gguf  # the dev extra's reference codec (gguf-py, llama.cpp's Python package)
import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType as GT

from acceptance.formats import quant

F32 = np.float32
ALL = list(quant.FORMATS)
# gguf-py 0.19 implements quantize/dequantize for these; q8_1 it does not (and its size
# table, GGML_QUANT_SIZES, still gives q8_1 the 40 bytes of an old float32 {d, s} layout).
GGUF = ["q4_0", "q4_1", "q5_0", "q5_1", "q8_0"]


def gguf_q(x: np.ndarray, fmt: str) -> np.ndarray:
    with np.errstate(all="ignore"):  # gguf-py casts inf scales and NaN codes silently
        return gguf.quants.quantize(np.asarray(x, dtype=np.float32), getattr(GT, fmt.upper()))


def gguf_dq(b: np.ndarray, fmt: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        return gguf.quants.dequantize(b, getattr(GT, fmt.upper()))


# ----------------------------------------------------------------------------- an independent C transcription
# One block at a time, one element at a time, with numpy float32 scalars standing for C
# floats, following quantize_row_*_ref / dequantize_row_* of ggml/src/ggml-quants.c
# statement by statement. Used where gguf-py cannot serve as the reference: q8_1 (not
# implemented there) and signed zeros (gguf-py's numpy min/max pick a zero's sign
# differently from the C loops).


def f16_bits(v: F32) -> int:
    """GGML_FP32_TO_FP16 (round to nearest even); test_fp16_rounding checks numpy's against exact arithmetic."""
    return int(np.array([v], dtype=F32).astype("<f2").view("<u2")[0])


def f16_value(bits: int) -> F32:
    return F32(np.array([bits], dtype="<u2").view("<f2")[0])


def c_roundf(v: F32) -> int:
    """C roundf: half away from zero (|v| + 0.5 is exact in double for a float32 |v| < 2**23)."""
    return int(math.copysign(math.floor(abs(float(v)) + 0.5), float(v)))


def c_quantize_block(xb: np.ndarray, fmt: str) -> bytes:
    xs = [F32(v) for v in xb]
    assert len(xs) == 32
    if fmt in ("q4_0", "q5_0"):
        nmax = 8 if fmt == "q4_0" else 16
        amax, mx = F32(0.0), F32(0.0)
        for v in xs:
            if amax < abs(v):
                amax, mx = abs(v), v
        d = mx / F32(-nmax)
        idv = F32(1.0) / d if d != 0 else F32(0.0)
        codes = [min(2 * nmax - 1, int(v * idv + F32(nmax + 0.5))) for v in xs]  # (int8_t) truncates
        out = struct.pack("<H", f16_bits(d))
        if nmax == 16:
            qh = 0
            for j in range(32):
                qh |= ((codes[j] & 0x10) >> 4) << j
            out += struct.pack("<I", qh)
        return out + bytes((codes[j] & 0x0F) | ((codes[j + 16] & 0x0F) << 4) for j in range(16))
    if fmt in ("q4_1", "q5_1"):
        nmax = 15 if fmt == "q4_1" else 31
        mn, mx = F32(np.finfo(F32).max), F32(-np.finfo(F32).max)
        for v in xs:
            if v < mn:
                mn = v
            if v > mx:
                mx = v
        d = (mx - mn) / F32(nmax)
        idv = F32(1.0) / d if d != 0 else F32(0.0)
        codes = []
        for v in xs:
            c = int((v - mn) * idv + F32(0.5))
            codes.append(min(15, c) if nmax == 15 else c)  # q5_1_ref has no MIN(31, .)
        out = struct.pack("<HH", f16_bits(d), f16_bits(mn))
        if nmax == 31:
            qh = 0
            for j in range(32):
                qh |= ((codes[j] & 0x10) >> 4) << j
            out += struct.pack("<I", qh)
        return out + bytes((codes[j] & 0x0F) | ((codes[j + 16] & 0x0F) << 4) for j in range(16))
    # q8_0, q8_1
    amax = F32(0.0)
    for v in xs:
        amax = amax if amax > abs(v) else abs(v)
    d = amax / F32(127)
    idv = F32(1.0) / d if d != 0 else F32(0.0)
    qs = [c_roundf(v * idv) for v in xs]
    head = struct.pack("<H", f16_bits(d))
    if fmt == "q8_1":
        head += struct.pack("<H", f16_bits(F32(sum(qs)) * d))
    return head + struct.pack("<32b", *qs)


def c_quantize(x: np.ndarray, fmt: str) -> np.ndarray:
    x = np.asarray(x, dtype=F32)
    rows = x.reshape(-1, x.shape[-1])
    out = [b"".join(c_quantize_block(r[i : i + 32], fmt) for i in range(0, r.size, 32)) for r in rows]
    return np.frombuffer(b"".join(out), dtype=np.uint8).reshape(*x.shape[:-1], -1)


def c_dequantize_q8_1(b: np.ndarray) -> np.ndarray:
    out = []
    for blk in b.reshape(-1, 36):
        d = f16_value(int(blk[0]) | int(blk[1]) << 8)
        out += [F32(q) * d for q in blk[4:].view(np.int8)]
    return np.array(out, dtype=F32).reshape(*b.shape[:-1], -1)


# ----------------------------------------------------------------------------- data


def gaussian(seed: int, shape=(48, 256), scale=1.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(F32)


def uniform(seed: int, shape=(48, 256), scale=1.0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(-scale, scale, shape).astype(F32)


def adversarial_blocks(fmt: str | None = None) -> np.ndarray:
    """One 32-element block per row, each a corner of the quantizers; with ``fmt``, plus a
    block whose stored fields come near the fp16 limit for that format, still finite."""
    rng = np.random.default_rng(99)
    base = rng.uniform(-1, 1, 32).astype(F32)
    rows = []
    rows.append(np.zeros(32, F32))  # all zero: d = -0.0 for q4_0/q5_0 (C's max starts at +0.0)
    b = base.copy()
    b[5] = -3.0
    rows.append(b)  # largest magnitude negative
    b = base.copy()
    b[5] = 3.0
    rows.append(b)  # largest magnitude positive
    b = base.copy()
    b[3], b[20] = 3.0, -3.0
    rows.append(b)  # +max and -max: the first wins
    b = base.copy()
    b[3], b[20] = -3.0, 3.0
    rows.append(b)
    one = np.zeros(32, F32)
    one[17] = 0.75
    rows.append(one)  # a single non-zero
    one = np.zeros(32, F32)
    one[0] = -2.5e-3
    rows.append(one)
    # ties after scaling. q4_0/q5_0: max = -8 / -16 gives d = 1, so x*id + 8.5 is x + 8.5;
    # q8: amax = 127 gives d = 1, id = 1; q4_1: min 0, max 15 gives d = 1.
    halves = np.arange(-7.5, 8.0, 0.5, dtype=F32)[:31]
    rows.append(np.concatenate([[F32(-8.0)], halves]).astype(F32))
    rows.append(np.concatenate([[F32(-16.0)], np.linspace(-15.5, 15.5, 31, dtype=F32)]).astype(F32))
    rows.append(np.concatenate([[F32(127.0)], np.arange(-126.5, 126.0, 8.0, dtype=F32)[:31]]).astype(F32))
    rows.append(np.concatenate([[F32(0.0), F32(15.0)], np.arange(0.5, 15.5, 0.5, dtype=F32)[:30]]).astype(F32))
    rows.append(np.concatenate([[F32(0.0), F32(31.0)], np.arange(0.5, 31.0, 1.0, dtype=F32)[:30]]).astype(F32))
    # fp16-subnormal scales (|d| < 2**-14) and an fp16-underflowing one
    rows.append((base * F32(1e-5)).astype(F32))
    rows.append((base * F32(3e-4)).astype(F32))
    rows.append((base * F32(1e-8)).astype(F32))
    # all equal (d = 0 for the asymmetric formats), and all equal negative
    rows.append(np.full(32, 0.3, F32))
    rows.append(np.full(32, -7.0, F32))
    # near the fp16 limits: q4_0 d = -5.2e5/-8 = 65000, q5_0 d = 1.04e6/-16, q8_0 d = 8.3e6/127
    # = 65354, q8_1 s ~ -127 * 6.5e4/127; q4_1/q5_1 m = -6.5e4 (d = 1.3e5/15 or /31)
    huge = {"q4_0": (0, -5.2e5), "q5_0": (2, 1.04e6), "q8_0": (9, -8.3e6), "q8_1": (9, -6.5e4)}
    if fmt in huge:
        b = base.copy()
        b[huge[fmt][0]] = huge[fmt][1]
        rows.append(b)
    elif fmt in ("q4_1", "q5_1"):
        b = (base * F32(6.5e4)).astype(F32)
        b[1], b[30] = -6.5e4, 6.5e4
        rows.append(b)
    return np.stack(rows)


# ----------------------------------------------------------------------------- the format table


def test_format_table_against_gguf_and_the_c_structs():
    sizes = {  # sizeof(block_*) in ggml-common.h, added up by hand
        "q4_0": 2 + 16,
        "q4_1": 2 + 2 + 16,
        "q5_0": 2 + 4 + 16,
        "q5_1": 2 + 2 + 4 + 16,
        "q8_0": 2 + 32,
        "q8_1": 2 + 2 + 32,
    }
    assert {n: quant.block_bytes(n) for n in ALL} == sizes
    for name in GGUF:
        assert gguf.constants.GGML_QUANT_SIZES[getattr(GT, name.upper())] == (32, sizes[name])
    for name, f in quant.FORMATS.items():
        assert f.ggml_type == int(getattr(GT, name.upper())) and f.block_size == 32 and f.name == name
        assert f.bits_per_weight == sizes[name] * 8 / 32
    assert [quant.FORMATS[n].has_min for n in ALL] == [False, True, False, True, False, False]
    assert [quant.FORMATS[n].bits for n in ALL] == [4, 4, 5, 5, 8, 8]
    assert [quant.FORMATS[n].max_code for n in ALL] == [15, 15, 31, 31, 127, 127]
    assert quant.get_format("Q4_0") is quant.FORMATS["q4_0"]


def test_packed_shapes():
    assert quant.packed_shape((7, 64), "q4_0") == (7, 36)
    assert quant.packed_shape((96,), "q8_1") == (108,)
    assert quant.unpacked_shape((7, 36), "q4_0") == (7, 64)
    assert quant.unpacked_shape((3, 2, 48), "q5_1") == (3, 2, 64)


def test_fp16_rounding():
    """The scale conversion (numpy float32 -> float16) is round-to-nearest-even with subnormals
    and overflow to inf, as GGML_FP32_TO_FP16. Expected values from the table of all finite fp16
    values (exact in float64, as are the float32 samples and their distances to it)."""
    grid = np.arange(0x7C00, dtype=np.uint16).view(np.float16).astype(np.float64)  # +0 .. 65504, bits = index
    rng = np.random.default_rng(5)
    samples = np.concatenate(
        [
            np.exp(rng.uniform(np.log(1e-9), np.log(7e4), 20000)),
            (grid[:-1] + grid[1:]) / 2,  # every tie (exact in float32: 12 significant bits)
            [65504, 65519.99, 65520, 1e5, 2.0**-24, 2.0**-25, 3 * 2.0**-26, 2.0**-14, 6.1e-5, 1e-30],
        ]
    ).astype(F32)
    s = samples.astype(np.float64)
    i = np.clip(np.searchsorted(grid, s), 1, len(grid) - 1)
    lo, hi = grid[i - 1], grid[i]
    dl, dh = s - lo, hi - s
    expect = np.where(dl < dh, lo, np.where(dh < dl, hi, np.where((i - 1) % 2 == 0, lo, hi)))
    expect = np.where(s == hi, hi, expect)
    expect = np.where(s >= 65520, np.inf, np.where(s > 65504, 65504.0, expect))
    with np.errstate(over="ignore"):
        np.testing.assert_array_equal(samples.astype(np.float16).astype(np.float64), expect)
        np.testing.assert_array_equal((-samples).astype(np.float16).astype(np.float64), -expect)


# ----------------------------------------------------------------------------- bytes


@pytest.mark.parametrize("fmt", GGUF)
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_bytes_equal_gguf_on_random_data(fmt, seed):
    for x in (
        gaussian(seed),
        uniform(seed, scale=3.0),
        gaussian(seed, (5, 1024), scale=1e-3),
        uniform(seed, (2, 128), scale=250.0),
    ):
        assert np.array_equal(quant.quantize(x, fmt), gguf_q(x, fmt))
    x1 = gaussian(seed, (96,))
    got = quant.quantize(x1, fmt)
    assert got.shape == (3 * quant.block_bytes(fmt),)
    assert np.array_equal(got, gguf_q(x1[None], fmt)[0])


@pytest.mark.parametrize("fmt", GGUF)
def test_bytes_equal_gguf_on_adversarial_blocks(fmt):
    x = adversarial_blocks(fmt)
    ours, theirs = quant.quantize(x, fmt), gguf_q(x, fmt)
    # gguf-py writes d = +0.0 for an all-zero q4_0/q5_0 block only when it starts with -0.0;
    # row 0 starts with +0.0, so every row is comparable.
    for i in range(len(x)):
        assert np.array_equal(ours[i], theirs[i]), (fmt, i, x[i][:4])


@pytest.mark.parametrize("fmt", ALL)
def test_bytes_equal_the_c_transcription(fmt):
    """All six formats (q8_1 only here: gguf-py lacks it) on random and adversarial blocks."""
    x = np.concatenate(
        [gaussian(3, (6, 64)).reshape(-1, 32), uniform(4, (6, 64), 5.0).reshape(-1, 32), adversarial_blocks(fmt)]
    )
    assert np.array_equal(quant.quantize(x, fmt), c_quantize(x, fmt))
    assert np.array_equal(quant.quantize(x.reshape(-1), fmt), c_quantize(x.reshape(1, -1), fmt)[0])


@pytest.mark.parametrize("fmt", ALL)
def test_signed_zeros_follow_the_c_loops(fmt):
    """The sign of a zero d or m comes from the first extreme element, as in the C loops
    (gguf-py's numpy reductions may pick the other zero: not a reference here)."""
    rng = np.random.default_rng(11)
    x = rng.choice(np.array([0.0, -0.0, 0.0, -0.0, 1.0, -1.0], F32), size=(200, 32)).astype(F32)
    x[:40] = rng.choice(np.array([0.0, -0.0], F32), size=(40, 32))  # all-zero blocks, mixed signs
    x[0], x[1] = -0.0, 0.0
    ours = quant.quantize(x, fmt)
    assert np.array_equal(ours, c_quantize(x, fmt))
    if fmt in ("q4_0", "q5_0"):
        assert ours[0, :2].tolist() == [0x00, 0x80]  # d = -0.0 even for a block of -0.0
    if fmt in GGUF:  # gguf-py agrees but for the sign bit of a zero d (q4_0/q5_0) or m (q4_1/q5_1)
        sign_byte = 3 if quant.FORMATS[fmt].has_min else 1
        diff = ours ^ gguf_q(x, fmt)
        assert set(np.unique(diff[:, sign_byte]).tolist()) <= {0, 0x80}
        assert not np.delete(diff, sign_byte, axis=1).any()


def test_q8_1_sum_uses_the_float32_scale():
    """s = fp16(sum(q) * d) with d the float32 scale, not the fp16-rounded one, on a block where
    the two differ: 32 x 1.014 gives d = 1.014/127, q = 127 each, sum(q) = 4064."""
    x = np.full(32, 1.014, F32)
    b = quant.quantize(x, "q8_1")
    assert (b[4:].view(np.int8) == 127).all()
    d32 = F32(1.014) / F32(127)
    s_expected = np.float16(F32(4064) * d32)
    assert b[2:4].view("<f2")[0] == s_expected
    assert np.float16(F32(4064) * F32(np.float16(d32))) != s_expected  # the check can tell them apart


def test_tiny_blocks_whose_reciprocal_scale_overflows_write_code_zero():
    """|x| ~ 1e-39: d < 2**-128 so 1/d = inf in float32; codes are 0, d stores as fp16 0."""
    x = np.full((1, 32), 1e-39, F32)
    x[0, 3] = -2e-39
    for fmt in ALL:
        f = quant.FORMATS[fmt]
        fields = quant.unpack_blocks(quant.quantize(x, fmt), fmt)
        assert (fields.codes == 0).all() and (fields.d == 0).all(), fmt
        assert (quant.dequantize(quant.quantize(x, fmt), fmt) == 0).all(), fmt
        if f.has_min:
            assert fields.m[0, 0] == 0 and math.copysign(1, fields.m[0, 0]) == -1.0  # fp16(-2e-39) = -0.0


# ----------------------------------------------------------------------------- dequantize


@pytest.mark.parametrize("fmt", GGUF)
def test_dequantize_equals_gguf(fmt):
    x = np.concatenate([gaussian(7, (8, 64)).reshape(-1, 32), adversarial_blocks(fmt)])
    b = quant.quantize(x, fmt)
    assert np.array_equal(quant.dequantize(b, fmt), gguf_dq(b, fmt))
    # arbitrary bytes, including fp16 NaN/inf/subnormal scales: the layout alone decides
    raw = np.random.default_rng(8).integers(0, 256, (64, 4 * quant.block_bytes(fmt)), dtype=np.uint8)
    np.testing.assert_array_equal(quant.dequantize(raw, fmt), gguf_dq(raw, fmt))


def test_dequantize_q8_1_is_q_times_d():
    raw = np.random.default_rng(9).integers(0, 256, (16, 3 * 36), dtype=np.uint8)
    raw[:, 0::36] &= 0x7B  # keep d finite (exponent bits never all ones)
    raw[:, 1::36] &= 0x7B
    np.testing.assert_array_equal(quant.dequantize(raw, "q8_1"), c_dequantize_q8_1(raw))


def test_unpack_blocks_by_hand():
    # q5_1 block: d = 0.5, m = -1.0, codes c[j] = j (0..31)
    d, m = np.float16(0.5).view("<u2"), np.float16(-1.0).view("<u2")
    qh = sum(((j >> 4) & 1) << j for j in range(32))
    qs = bytes((j & 15) | (((j + 16) & 15) << 4) for j in range(16))
    blk = np.frombuffer(struct.pack("<HHI", int(d), int(m), qh) + qs, dtype=np.uint8)
    f = quant.unpack_blocks(blk, "q5_1")
    assert f.codes.tolist() == [list(range(32))] and f.d.tolist() == [0.5] and f.m.tolist() == [-1.0]
    assert quant.dequantize(blk, "q5_1").tolist() == [0.5 * j - 1.0 for j in range(32)]
    # q4_0: nibble 0x0F low / 0x00 high in every byte: x[0..15] = (15-8)*d, x[16..31] = (0-8)*d
    blk = np.frombuffer(struct.pack("<H", int(np.float16(0.25).view("<u2"))) + bytes([0x0F] * 16), np.uint8)
    assert quant.dequantize(blk, "q4_0").tolist() == [1.75] * 16 + [-2.0] * 16


# ----------------------------------------------------------------------------- round trip bounds


def _stored(b: np.ndarray, fmt: str):
    f = quant.unpack_blocks(b, fmt)
    return f.d.astype(np.float64), (None if f.m is None else f.m.astype(np.float64))


@pytest.mark.parametrize("fmt", ALL)
@pytest.mark.parametrize("data", ["gaussian", "uniform", "adversarial"])
def test_round_trip_error_bound(fmt, data):
    """Per element, with d the float32 scale, D/M the stored fp16 fields, eps the float32
    error of the scaled value in code units (derived from 2 or 3 roundings of |x/d| <= 31 or 127):

      q4_0/q5_0 (h = 8/16):  |x - deq| <= |d|*(1/2 + eps) + h*|D - d|, and |d|*(1 + eps) + ...
                             where x/d > h - 1/2 (the top code h-1 is clamped, x/d reaches h)
      q4_1/q5_1 (n = 15/31): |x - deq| <= |d|*(1/2 + eps) + n*|D - d| + |M - min| + 2**-24*|deq|
      q8_x:                  |x - deq| <= |d|*(1/2 + eps) + 127*|D - d|
    with eps = 2**-17 (4/5-bit) or 2**-15 (8-bit)."""
    x = {
        "gaussian": gaussian(21, (16, 512)),
        "uniform": uniform(22, (16, 512), 4.0),
        "adversarial": adversarial_blocks(fmt),
    }[data].astype(F32)
    f = quant.FORMATS[fmt]
    b = quant.quantize(x, fmt)
    deq = quant.dequantize(b, fmt).astype(np.float64).reshape(-1, 32)
    xb = x.astype(np.float64).reshape(-1, 32)
    D, M = _stored(b.reshape(-1, f.block_bytes), fmt)
    D = D.reshape(-1, 1)
    err = np.abs(xb - deq)
    if fmt in ("q4_0", "q5_0"):
        h = f.zero_point
        idx = np.argmax(np.abs(xb), axis=1)
        mx = xb[np.arange(len(xb)), idx]
        d = (mx.astype(F32) / F32(-h)).astype(np.float64).reshape(-1, 1)
        with np.errstate(divide="ignore", invalid="ignore"):
            r = np.where(d != 0, xb / d, 0.0)
        bound = np.abs(d) * (np.where(r > h - 0.5, 1.0, 0.5) + 2.0**-17) + h * np.abs(D - d)
    elif fmt in ("q4_1", "q5_1"):
        n = f.max_code
        mn, mxv = xb.min(axis=1, keepdims=True), xb.max(axis=1, keepdims=True)
        d = ((mxv.astype(F32) - mn.astype(F32)) / F32(n)).astype(np.float64)
        bound = (
            np.abs(d) * (0.5 + 2.0**-17) + n * np.abs(D - d) + np.abs(M.reshape(-1, 1) - mn) + 2.0**-24 * np.abs(deq)
        )
    else:
        d = (np.abs(xb).max(axis=1, keepdims=True).astype(F32) / F32(127)).astype(np.float64)
        bound = np.abs(d) * (0.5 + 2.0**-15) + 127 * np.abs(D - d)
    assert (err <= bound).all(), (fmt, data, float((err - bound).max()))
    # and the bound is not loose: the worst element uses at least 40% of it on random data
    if data != "adversarial":
        assert (err / np.where(bound > 0, bound, 1)).max() > 0.4


# ----------------------------------------------------------------------------- inputs and errors


def test_torch_and_other_input_types():
    x = gaussian(30, (4, 64))
    ref = quant.quantize(x, "q4_1")
    assert np.array_equal(quant.quantize(torch.from_numpy(x), "q4_1"), ref)
    assert np.array_equal(quant.quantize(x.astype(np.float64), "q4_1"), ref)  # converted to float32 first
    assert np.array_equal(quant.quantize(x.tolist(), "q4_1"), ref)
    bf = torch.from_numpy(x).to(torch.bfloat16)
    assert np.array_equal(quant.quantize(bf, "q8_0"), quant.quantize(bf.float().numpy(), "q8_0"))
    assert np.array_equal(quant.dequantize(torch.from_numpy(ref), "q4_1"), quant.dequantize(ref, "q4_1"))
    assert quant.quantize(np.zeros((0, 64), F32), "q8_0").shape == (0, 68)
    assert quant.quantize(np.arange(64, dtype=np.int32), "q8_0").shape == (68,)


def test_errors_name_the_problem():
    x = gaussian(31, (3, 64))
    with pytest.raises(ValueError, match=r"K=100 is not a multiple of the q4_0 block size 32"):
        quant.quantize(np.zeros((2, 100), F32), "q4_0")
    bad = x.copy()
    bad[1, 7], bad[2, 0], bad[2, 5] = np.nan, np.inf, -np.inf
    with pytest.raises(ValueError, match=r"3 non-finite value\(s\).*first is nan at index \(1, 7\)"):
        quant.quantize(bad, "q5_0")
    with pytest.raises(
        ValueError,
        match=r"unknown GGML quantization format 'q3_0'; known formats: "
        r"q4_0, q4_1, q5_0, q5_1, q8_0, q8_1",
    ):
        quant.quantize(x, "q3_0")
    with pytest.raises(ValueError, match="real-valued"):
        quant.quantize(x.astype(np.complex64), "q8_0")
    with pytest.raises(ValueError, match="0-d"):
        quant.quantize(np.float32(1.0), "q8_0")
    with pytest.raises(ValueError, match=r"1 value\(s\) overflow float32.*index \(0, 3\)"):
        quant.quantize(np.where(np.arange(64) == 3, 1e39, 1.0).reshape(1, 64), "q8_0")
    b = quant.quantize(x, "q4_0")
    with pytest.raises(ValueError, match="must be a uint8 array, got dtype float32"):
        quant.dequantize(b.astype(F32), "q4_0")
    with pytest.raises(ValueError, match=r"\(35 bytes\) is not a multiple of the q4_0 block size \(18 bytes\)"):
        quant.dequantize(b[:, :35], "q4_0")
    with pytest.raises(ValueError, match="0-d"):
        quant.dequantize(np.uint8(3), "q4_0")


@pytest.mark.parametrize(
    "fmt, value, field",
    [
        ("q4_0", 5.3e5, "d"),
        ("q5_0", -1.1e6, "d"),
        ("q8_0", 8.4e6, "d"),
        ("q4_1", -7.0e4, "m"),
        ("q5_1", -7.0e4, "m"),
        ("q8_1", 3.0e3, "s"),
    ],
)
def test_fp16_field_overflow_is_an_error(fmt, value, field):
    """d beyond 65504 (q4_0: 5.3e5/8, q5_0: 1.1e6/16, q8_0: 8.4e6/127), m = min below -65504,
    q8_1 s = d*sum(q) = 32*3000 with every q = 127. GGML would store inf; we refuse."""
    x = np.full((2, 64), 0.5, F32)
    if fmt == "q8_1":
        x[1, 32:] = value
    else:
        x[1, 40] = value
    with pytest.raises(ValueError, match=rf"a block has a {field} beyond the fp16 range.*block 1 of row 1"):
        quant.quantize(x, fmt)
    if fmt in GGUF:  # gguf-py stores the inf
        assert not np.isfinite(gguf_dq(gguf_q(x, fmt), fmt)[1, 32:]).all()
