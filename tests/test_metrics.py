"""acceptance.numerics.metrics against float64 formulas written here, and hand-computed examples."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numba
import numpy as np
import pytest
import torch

from acceptance.formats import dtypes
from acceptance.numerics import metrics as M
from acceptance.numerics.metrics import device, host
from acceptance.numerics.metrics.operands import blocks
from acceptance.numerics.metrics.registry import finalize

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ulp_reference  # noqa: E402

# (precision p incl. the implicit bit, emin) of the formats, from IEEE 754 / the OCP FP8 spec.
FORMATS = {
    "float64": (53, -1022),
    "float32": (24, -126),
    "bfloat16": (8, -126),
    "float16": (11, -14),
    "float8_e4m3fn": (4, -6),
    "float8_e5m2": (3, -14),
}
THRESHOLD = {
    "float64": 1e-15,
    "float32": 1e-6,
    "bfloat16": 1e-3,
    "float16": 1e-4,
    "float8_e4m3fn": 1e-2,
    "float8_e5m2": 1e-2,
}
SUMMED = ("diff1", "diff2", "mse", "nmse", "rms", "mean_abs", "mean_ulp", "mean_hyb", "normwise_rel", "snr_db")
ERRORS = tuple(m for m in M.METRICS if m not in ("diff4", "nan_mismatch", "inf_mismatch", "snr_db"))


# ----------------------------------------------------------------------------- the reference


def snr_db(signal: float, noise: float) -> float:
    """10·log10(signal / noise) in dB, +inf for a zero noise and -inf for a zero signal with noise."""
    if noise == 0:
        return math.inf
    return -math.inf if signal == 0 else 10 * math.log10(signal / noise)


def reference(e, b, dtype: str) -> dict:
    """Every metric by the textbook float64 formula, one numpy expression each."""
    e = np.asarray(e, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    integer = dtype not in FORMATS
    th = 0.0 if integer else THRESHOLD[dtype]
    fin = np.isfinite(e) & np.isfinite(b)
    special = int(np.sum((np.isnan(e) & np.isnan(b)) | (np.isinf(e) & np.isinf(b) & (e == b))))
    nan_mm = int(np.sum(np.isnan(e) != np.isnan(b)))
    inf_mm = int(np.sum(~np.isnan(e) & ~np.isnan(b) & ~fin & (e != b)))
    gt, lt = int(np.sum(e > b)), int(np.sum(e < b))
    x, y = e[fin], b[fin]
    n = x.size
    d = np.abs(x - y)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(d == 0, 0.0, d / np.abs(y))
    ulp = d if integer else ulp_reference.ulp_error(x, y, dtype)

    def ratio(a, c):
        return 0.0 if a == 0 else (math.inf if c == 0 else a / c)

    def mx(v):
        return float(v.max()) if v.size else 0.0

    def mean(v):
        return float(v.mean()) if v.size else 0.0

    big = np.abs(y) > th
    out = {
        "diff1": ratio(d.sum(), np.abs(y).sum()),
        "diff2": math.sqrt(ratio(np.sum(d**2), np.sum(y**2))),
        "diff3": (mx(rel[big]), mx(d[~big])),
        "diff3_1": mx(rel),
        "diff3_2": mx(d),
        "diff4": (gt / (gt + lt), lt / (gt + lt), gt + lt) if gt + lt else (0.0, 0.0, 0),
        "mse": mean(d**2),
        "nmse": ratio(np.sum(d**2), np.sum(y**2)),
        "rms": ratio(math.sqrt(np.sum(d**2)), math.sqrt(n) * max(mx(np.abs(x)), mx(np.abs(y)))),
        "max_abs": mx(d),
        "mean_abs": mean(d),
        "max_rel": mx(rel),
        "max_rel_floor": mx(rel[np.abs(y) > 1e-3]),
        "max_ulp": mx(ulp),
        "mean_ulp": mean(ulp),
        "max_hyb": mx(d / (1 + np.abs(y))),
        "mean_hyb": mean(d / (1 + np.abs(y))),
        "normwise_rel": ratio(np.linalg.norm(d), np.linalg.norm(y)),
        "snr_db": snr_db(np.sum(y**2), np.sum(d**2)),
        "nan_mismatch": nan_mm,
        "inf_mismatch": inf_mm,
        "n": n,
        "special_matched": special,
        "above": gt,
        "below": lt,
    }
    if nan_mm or inf_mm:
        for k in ERRORS:
            out[k] = (math.inf, math.inf) if k == "diff3" else math.inf
        out["snr_db"] = -math.inf
    return out


def assert_matches(got: dict, want: dict) -> None:
    assert set(got) == set(want)
    for k, w in want.items():
        g = got[k]
        if k in SUMMED:  # float64 sums in another order
            assert g == pytest.approx(w, rel=1e-12, abs=0), k
        elif k == "diff4":
            assert g[2] == w[2] and g[:2] == pytest.approx(w[:2], rel=1e-15), k
        else:  # maxima and counts: the same float64 operations, exactly
            assert g == w, k


# ----------------------------------------------------------------------------- random data


def sample(seed: int, shape: tuple[int, ...], rel: float = 1e-3) -> tuple[np.ndarray, np.ndarray]:
    """float64 pairs: magnitudes 1e-5..1e2 (some below every diff3 threshold and the 1e-3 floor),
    zeros matched by zeros, exact matches, relative errors ~``rel`` and absolute ones ~1e-6."""
    rng = np.random.default_rng(seed)
    size = math.prod(shape)
    b = rng.standard_normal(size) * 10.0 ** rng.integers(-5, 3, size)
    b[rng.random(size) < 0.05] = 0.0
    e = b * (1 + rel * rng.standard_normal(size)) + 1e-6 * rng.standard_normal(size)
    same = rng.random(size) < 0.1
    e[same] = b[same]
    return e.reshape(shape), b.reshape(shape)


def as_dtype(e: np.ndarray, b: np.ndarray, dtype: str, backend: str):
    """The pair in ``dtype``; where b rounds to 0, e is 0 too (zero baselines are tested on their own)."""
    tb = torch.from_numpy(b).to(getattr(torch, dtype))
    te = torch.from_numpy(np.where(tb.double().numpy() == 0, 0.0, e)).to(getattr(torch, dtype))
    return (te, tb) if backend == "torch" else (te.numpy(), tb.numpy())


# numpy has no bfloat16 or float8: those run as torch tensors only
DTYPE_BACKENDS = [
    (d, b)
    for d in ("float32", "float64", "float16", "bfloat16", "float8_e4m3fn")
    for b in ("numpy", "torch")
    if b == "torch" or d in ("float32", "float64", "float16")
]


@pytest.mark.parametrize("dtype,backend", DTYPE_BACKENDS)
@pytest.mark.parametrize("shape", [(1000,), (37, 53), (3, 4, 5)])
def test_every_metric_matches_the_float64_formulas(dtype, backend, shape):
    e, b = sample(len(shape) * 100 + len(dtype), shape, rel=0.1 if dtype.startswith("float8") else 1e-3)
    e, b = as_dtype(e, b, dtype, backend)
    want = reference(torch.as_tensor(e).double(), torch.as_tensor(b).double(), dtype)
    assert want["n"] == math.prod(shape) and 0 < want["max_ulp"] < math.inf and 0 < want["max_rel"] < math.inf
    assert_matches(M.compute(e, b), want)
    te, tb = torch.as_tensor(e), torch.as_tensor(b)
    assert_matches(finalize(device.reduce(te, tb, dtypes.lookup(dtype), block=97), M.METRICS), want)


NUMPY_VIEWS = {
    "transposed": lambda a: a.T,
    "strided": lambda a: a[::3, 1::2],
    "reversed": lambda a: a[::-1, ::-1],
    "broadcast": lambda a: np.broadcast_to(a[:1], a.shape),
}
TORCH_VIEWS = {
    "transposed": lambda a: a.T,
    "strided": lambda a: a[::3, 1::2],
    "broadcast": lambda a: a[:1].expand(a.shape),
}


@pytest.mark.parametrize("layout,backend", [(v, "numpy") for v in NUMPY_VIEWS] + [(v, "torch") for v in TORCH_VIEWS])
def test_non_contiguous_inputs_pair_the_right_elements(layout, backend):
    e, b = sample(7, (40, 30))
    e, b = e.astype(np.float32), np.asfortranarray(b.astype(np.float32))  # laid out unlike each other
    want = reference(NUMPY_VIEWS[layout](e), NUMPY_VIEWS[layout](b), "float32")
    if backend == "torch":  # torch has no negative strides: no "reversed" view
        ve, vb = TORCH_VIEWS[layout](torch.from_numpy(e)), TORCH_VIEWS[layout](torch.from_numpy(b))
    else:
        ve, vb = NUMPY_VIEWS[layout](e), NUMPY_VIEWS[layout](b)
    fmt = dtypes.lookup("float32")
    assert_matches(M.compute(ve, vb), want)
    assert_matches(finalize(host.reduce(ve, vb, fmt, block=7), M.METRICS), want)
    assert_matches(finalize(device.reduce(ve, vb, fmt, block=11), M.METRICS), want)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float8_e4m3fn", "int16", "bool"])
def test_non_contiguous_narrow_dtypes(dtype):
    e, b = sample(8, (30, 20), rel=0.1)
    e, b = np.where(b == 0, 0, e * 50), b * 50
    if dtype == "bool":
        e, b = np.round(e) % 2, np.round(b) % 2
    te = torch.from_numpy(e).to(getattr(torch, dtype)).T[::2]
    tb = torch.from_numpy(b).to(getattr(torch, dtype)).T[::2]
    want = reference(te.double(), tb.double(), dtype)
    assert want["n"] == 300 and want["max_abs"] > 0
    assert_matches(M.compute(te, tb), want)
    assert_matches(finalize(host.reduce(te, tb, dtypes.lookup(dtype), block=16), M.METRICS), want)


@pytest.mark.parametrize("shape", [(), (0,), (5,), (4, 0, 3), (3, 10), (2, 3, 7), (1, 1, 50)])
@pytest.mark.parametrize("block", [1, 6, 10, 64])
def test_blocks_cut_any_layout_alike_in_c_order(shape, block):
    a = np.arange(math.prod(shape), dtype=np.int64).reshape(shape)
    layouts = [a, np.asfortranarray(a), np.flip(a), torch.from_numpy(a.copy())]
    cuts = []
    for x in layouts:
        pieces = [np.asarray(p).reshape(-1) for p in blocks(x, block)]
        assert all(0 < p.size <= block for p in pieces)
        joined = np.concatenate(pieces) if pieces else np.zeros(0, np.int64)
        np.testing.assert_array_equal(joined, np.asarray(x).reshape(-1))
        cuts.append([p.size for p in pieces])
    assert all(c == cuts[0] for c in cuts)


@pytest.mark.parametrize(
    ("e_dtype", "b_dtype", "dtype"),
    [
        ("float16", "float64", "float16"),
        ("float32", "float64", "float32"),
        ("bfloat16", "float32", "bfloat16"),
        ("float16", "bfloat16", "float16"),
        ("float8_e5m2", "float32", "float8_e5m2"),
        ("float32", "float16", "bfloat16"),
        ("int32", "float32", "float32"),
    ],
)
def test_mixed_input_dtypes_compare_exact_values(e_dtype, b_dtype, dtype):
    e, b = sample(11, (300,), rel=0.1)
    te = torch.from_numpy(np.where(b == 0, 0, e * 100)).to(getattr(torch, e_dtype))
    tb = torch.from_numpy(b * 100).to(getattr(torch, b_dtype))
    want = reference(te.double(), tb.double(), dtype)
    assert_matches(M.compute(te, tb, dtype=dtype), want)
    assert_matches(finalize(device.reduce(te, tb, dtypes.lookup(dtype)), M.METRICS), want)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int16", "uint16", "int32", "int64", "uint32", "bool"])
def test_integer_and_bool_inputs_measure_ulp_as_the_absolute_difference(dtype):
    rng = np.random.default_rng(3)
    hi = 2 if dtype == "bool" else 100
    lo = 0 if dtype.startswith(("u", "b")) else -100
    e = rng.integers(lo, hi, 500).astype(dtype)
    b = rng.integers(lo, hi, 500).astype(dtype)
    want = reference(e, b, dtype)
    got = M.compute(e, b)
    assert_matches(got, want)
    assert got["max_ulp"] == got["max_abs"] == float(np.max(np.abs(e.astype(np.float64) - b)))
    tb = torch.from_numpy(b)
    assert_matches(M.compute(torch.from_numpy(e), tb), want)
    assert_matches(finalize(device.reduce(torch.from_numpy(e), tb, dtypes.lookup(dtype)), M.METRICS), want)


@numba.njit
def _decode_all(bits, code):
    out = np.empty(bits.shape[0])
    for i in range(bits.shape[0]):
        out[i] = host._load(bits, i, code)
    return out


def test_the_kernel_decodes_every_16_bit_pattern_exactly():
    bits = np.arange(1 << 16, dtype=np.uint16)
    want16 = bits.view(np.float16).astype(np.float64)
    want_bf16 = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16).double().numpy()
    np.testing.assert_array_equal(_decode_all(bits, host._BITS16["float16"]), want16)
    np.testing.assert_array_equal(_decode_all(bits, host._BITS16["bfloat16"]), want_bf16)
    numbers = ~np.isnan(want16)
    np.testing.assert_array_equal(np.signbit(_decode_all(bits, 1)[numbers]), np.signbit(want16[numbers]))


def test_every_float16_and_bfloat16_bit_pattern_through_compute():
    """All 65536 patterns of each, paired with each other, through the 16-bit kernel path."""
    bits = np.arange(1 << 16, dtype=np.uint16)
    e = torch.from_numpy(bits.view(np.float16).copy())
    b = torch.from_numpy(bits.view(np.int16).copy()).view(torch.bfloat16)
    want = reference(e.double(), b.double(), "float32")
    assert want["n"] > 60000 and want["special_matched"] > 0 and want["nan_mismatch"] > 0
    got = M.compute(e, b, dtype="float32")
    assert (got["n"], got["special_matched"], got["nan_mismatch"], got["inf_mismatch"], got["diff4"]) == (
        want["n"],
        want["special_matched"],
        want["nan_mismatch"],
        want["inf_mismatch"],
        want["diff4"],
    )
    finite = torch.isfinite(e) & torch.isfinite(b)
    e, b = e[finite], b[finite]
    assert_matches(M.compute(e, b, dtype="float32"), reference(e.double(), b.double(), "float32"))


def test_more_elements_than_one_host_piece():
    e, b = sample(5, (host.HOST_BLOCK + 1234,))
    e, b = e.astype(np.float32), b.astype(np.float32)
    assert_matches(M.compute(e, b), reference(e, b, "float32"))
    e16, b16 = e.astype(np.float16), b.astype(np.float16)
    assert_matches(M.compute(e16, b16), reference(e16, b16, "float16"))


def test_big_endian_and_read_only_arrays():
    e, b = sample(9, (50,))
    e, b = e.astype(">f4"), b.astype(np.float32)
    b.setflags(write=False)
    assert_matches(M.compute(e, b), reference(e, b, "float32"))
