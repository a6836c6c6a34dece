"""The fused host passes of metrics.elementwise against numpy float64 formulas written here, and the diagnostics,
bias sums and peer gates on host data against their torch definitions (the same values, bit for bit)."""

from __future__ import annotations

import math
import sys
import zlib
from pathlib import Path

import numpy as np
import pytest
import torch

from acceptance.formats import dtypes
from acceptance.measure import diagnose, peers
from acceptance.measure.diagnose import BiasSums, Diagnosis
from acceptance.numerics.metrics import elementwise as W
from acceptance.numerics.metrics import host

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ulp_reference  # noqa: E402

EDGES = [1e-6, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1.0]


def data(seed: int, n: int, specials: bool = True) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(e, b, o) float64: o random over many magnitudes (zeros, tiny, subnormal), b and e near it; with
    ``specials`` NaN and ±Inf sprinkled in each, some matched."""
    rng = np.random.default_rng(seed)
    o = rng.standard_normal(n) * 10.0 ** rng.integers(-8, 4, n)
    o[rng.random(n) < 0.05] = 0.0
    o[rng.random(n) < 0.02] = 1e-310
    b = o * (1 + 1e-3 * rng.standard_normal(n))
    e = b * (1 + 1e-2 * rng.standard_normal(n))
    same = rng.random(n) < 0.1
    e[same] = b[same]
    if specials:
        for x in (e, b, o):
            x[rng.random(n) < 0.03] = np.nan
            x[rng.random(n) < 0.02] = np.inf
            x[rng.random(n) < 0.02] = -np.inf
        both = rng.random(n) < 0.03
        e[both] = b[both] = np.inf
    return e, b, o


def abs_err(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        d = np.abs(x - y)
    matched = (np.isnan(x) & np.isnan(y)) | (np.isinf(x) & (x == y))
    d = np.where(matched, 0.0, d)
    return np.where(np.isnan(d), np.inf, d)


@pytest.mark.parametrize("n", [0, 1, 5, 1000])
@pytest.mark.parametrize("has_o", [True, False])
def test_diagnosis_pass_matches_numpy(n, has_o):
    e, b, o = data(n + has_o, n)
    err = abs_err(e, b)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.where(err == 0, 0.0, err / np.abs(b))
        rel = np.where(np.isnan(rel), np.inf, rel)
        score = abs_err(e, o) / (1.0 + np.abs(o)) if has_o else err
        want_bad = err / (1.0 + np.abs(b)) > 0.01
    nz = rel[rel != 0]
    want_counts = [int(np.sum(rel == 0))] + np.bincount(np.searchsorted(EDGES, nz, side="right"), minlength=8).tolist()
    nans = np.flatnonzero(np.isnan(score))
    want_at = int(nans[0]) if nans.size else (int(np.argmax(score)) if n else -1)

    counts, bad = np.zeros(9, dtype=np.int64), np.empty(n, dtype=np.bool_)
    at, value = W.diagnosis_pass(e, b, o if has_o else e[:0], has_o, 0.01, W.BUCKET_EDGES, counts, bad)
    assert counts.tolist() == want_counts and sum(want_counts) == n
    assert at == want_at
    assert (math.isnan(value) and n == 0) or same_float(value, score[want_at])
    assert np.array_equal(bad, want_bad)


def test_diagnosis_pass_by_hand():
    e = np.array([1.0, 1.5, 0.0, np.nan, np.inf, 2.0])
    b = np.array([1.0, 1.0, 0.0, np.nan, np.inf, 0.0])
    counts, bad = np.zeros(9, dtype=np.int64), np.empty(6, dtype=np.bool_)
    at, value = W.diagnosis_pass(e, b, e[:0], False, 0.2, W.BUCKET_EDGES, counts, bad)
    # errors 0, 0.5, 0, 0 (matched NaN), 0 (matched Inf), 2 (rel inf); rel 0.5 -> [0.1, 1), inf -> >= 1
    assert counts.tolist() == [4, 0, 0, 0, 0, 0, 0, 1, 1]
    assert (at, value) == (5, 2.0)
    assert bad.tolist() == [False, True, False, False, False, True]  # 0.5/2 = 0.25 and 2/1 over 0.2


def same_float(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or np.float64(a).tobytes() == np.float64(b).tobytes()


@pytest.mark.parametrize(
    "fmt",
    [(53, -1022, 2.0**-1022, "float64"), (24, -126, 2.0**-126, "float32"), (11, -14, 2.0**-14, "float16")]
    + [(8, -126, 2.0**-126, "bfloat16")],
)
def test_bias_pass_matches_numpy(fmt):
    p, emin, normal, name = fmt
    e, b, o = data(p, 2000)
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        flush = (np.abs(e) < normal) & (np.abs(o) < normal)
        keep = np.isfinite(e) & np.isfinite(b) & np.isfinite(o) & ~flush
        u = ulp_reference.unit(o, name)  # one ulp at o rounded to the format
        se = np.clip((e - o) / u, -16, 16)[keep]
        sb = np.clip((b - o) / u, -16, 16)[keep]
    sign = np.sign(o[keep])
    rows = np.empty((4, e.size))
    kept, flushed = W.bias_pass(e, b, o, normal, True, host.ulp_args(dtypes.lookup(name))[:4], 16.0, rows)
    assert (kept, flushed) == (int(keep.sum()), int(flush.sum()))
    for got, want in zip(rows[:, :kept], (se, se * sign, sb, sb * sign), strict=False):
        assert np.array_equal(got, want)


@pytest.mark.parametrize(
    "fmt",
    [(53, -1022, 2.0**-1022, "float64"), (24, -126, 2.0**-126, "float32"), (11, -14, 2.0**-14, "float16")]
    + [(8, -126, 2.0**-126, "bfloat16")],
)
def test_bias_pass_spacing_over_every_float64_exponent(fmt):
    """Oracle values from random bit patterns (every exponent, float64 subnormals, zeros of both signs), the impl
    a little off and never flushed (the smallest normal where the oracle is below it, so the errors there are a
    fraction of an ulp, not clipped): the unit is the textbook one at o rounded to the format everywhere."""
    p, emin, normal, name = fmt
    rng = np.random.default_rng(p)
    o = rng.integers(0, 2**63, 20000, dtype=np.int64).view(np.float64)
    o = o[np.isfinite(o)] * rng.choice([-1.0, 1.0], int(np.isfinite(o).sum()))
    o = np.concatenate([o, [0.0, -0.0, 5e-324, -5e-324, 2.0**-1022, 2.0**-1074 * 3]])
    e = np.where(np.abs(o) < normal, normal, o + np.abs(o) * 2.0**-45)  # |e| >= normal: nothing flushed
    b = o + np.where(o == 0, 1.0, np.abs(o) * 2.0**-40)
    with np.errstate(invalid="ignore", over="ignore"):
        u = ulp_reference.unit(o, name)
        keep = np.isfinite(b)
        want_e = np.clip((e - o) / u, -16, 16)[keep]
        want_b = np.clip((b - o) / u, -16, 16)[keep]
    rows = np.empty((4, o.size))
    kept, flushed = W.bias_pass(e, b, o, normal, True, host.ulp_args(dtypes.lookup(name))[:4], 16.0, rows)
    assert (kept, flushed) == (int(keep.sum()), 0)
    assert np.array_equal(rows[0, :kept], want_e) and np.array_equal(rows[2, :kept], want_b)


def test_bias_pass_integer_dtype_counts_in_units():
    e, b, o = np.array([3.0, 5.0]), np.array([2.0, 5.0]), np.array([2.0, 4.0])
    rows = np.empty((4, 2))
    assert W.bias_pass(e, b, o, 1.0, False, (1, 0, 0, 1 << 52), 16.0, rows) == (2, 0)
    assert rows.tolist() == [[1.0, 1.0], [1.0, 1.0], [0.0, 1.0], [0.0, 1.0]]


@pytest.mark.parametrize("rtol,atol", [(1.3e-6, 1e-5), (1e-3, 1e-5), (0.0, 0.0), (1e-4, 1e-4)])
def test_close_mismatches_match_numpy(rtol, atol):
    e, b, _ = data(7, 3000)
    with np.errstate(invalid="ignore"):
        close = (np.abs(e - b) <= atol + rtol * np.abs(b)) | (np.isinf(e) & (e == b))
    assert W.close_mismatches(e, b, rtol, atol) == int((~close).sum())


# ----------------------------------------------------------------------------- host path = torch path

CASES = [
    (dtype, shape)
    for dtype in ("float16", "bfloat16", "float32", "float64", "int64")
    for shape in [(), (0,), (1,), (13,), (16, 9), (3, 4, 5)]
]


def trial(dtype: str, shape: tuple, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    n = math.prod(shape)
    e, b, o = data(seed, n, specials=not dtype.startswith("int"))
    if dtype.startswith("int"):
        e, b, o = np.round(e * 1e3), np.round(b * 1e3), np.round(o * 1e3)
    cast = getattr(torch, dtype)
    return (
        torch.from_numpy(e).reshape(shape).to(cast),
        torch.from_numpy(b).reshape(shape).to(cast),
        torch.from_numpy(o).reshape(shape),
    )


def state(x) -> str:
    return repr(x.__dict__)


@pytest.mark.parametrize("block", [diagnose.DIAGNOSIS_BLOCK, 7])
@pytest.mark.parametrize("dtype,shape", CASES)
def test_host_diagnostics_equal_the_torch_definitions(dtype, shape, block, monkeypatch):
    monkeypatch.setattr(diagnose, "DIAGNOSIS_BLOCK", block)  # 7: the output in several pieces
    seed = zlib.crc32(repr((dtype, shape)).encode())
    trials = [trial(dtype, shape, seed + k) for k in range(3)]

    def run():
        d_oracle, d_plain, bias, gates = Diagnosis(dtype), Diagnosis(dtype), BiasSums(), peers.Peers(dtype)
        for k, (e, b, o) in enumerate(trials):
            d_oracle.add(k, 0, e, b, o, 1e-3)
            d_plain.add(k, 0, e.t() if e.dim() == 2 else e, b.t() if b.dim() == 2 else b, None, 1e-3)
            bias.add(e, b, o, dtype)
            gates.add(k, 0, e, b, {"mse": 1.0, "max_abs": 1.0}, {"mse": 0.0, "max_abs": 0.0})
        return [state(d_oracle), state(d_plain), repr(bias.record()), state(gates)]

    host = run()
    monkeypatch.setattr(diagnose, "_on_host", lambda *tensors: False)
    assert host == run()


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_device_impl_outputs_give_the_host_diagnostics():
    e, b, o = trial("float32", (40, 25), 5)
    on_host, on_device = Diagnosis("float32"), Diagnosis("float32")
    on_host.add(0, 0, e, b, o, 1e-3)
    on_device.add(0, 0, e.cuda(), b, o, 1e-3)
    assert state(on_host) == state(on_device)
    bh, bd = BiasSums(), BiasSums()
    bh.add(e, b, o, "float32")
    bd.add(e.cuda(), b, o, "float32")
    assert bh.record().n == bd.record().n and bh.record().flushed == bd.record().flushed


# ----------------------------------------------------------------------------- flush-to-zero that changes nothing


def test_flush_changes_nothing_by_hand():
    normal32, normal16 = 2.0**-126, 2.0**-14  # IEEE smallest normals
    plain = np.array([1.0, 0.0, -0.0, np.nan, np.inf, -np.inf, normal32, -3e38])
    assert diagnose.flush_changes_nothing(plain, "float32")
    assert not diagnose.flush_changes_nothing(np.append(plain, normal32 / 2), "float32")
    assert not diagnose.flush_changes_nothing(np.array([-1e-39]), "float32")
    assert diagnose.flush_changes_nothing(np.array([normal16, 1.0]), "float16")
    assert not diagnose.flush_changes_nothing(np.array([normal16 * 0.99]), "float16")
    assert diagnose.flush_changes_nothing(np.array([5.0, 0.0]), "int32")
    assert not diagnose.flush_changes_nothing(None, "float32")


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_where_flushing_changes_nothing_the_flushed_pair_measures_alike(dtype):
    """What the runner relies on to reuse err(e, o) for the flush-forgiving ULP: equal values (a zero's sign
    aside) give equal metrics."""
    from acceptance.numerics import metrics

    rng = np.random.default_rng(21)
    o = (0.5 + rng.random(500)) * 10.0 ** rng.integers(-2, 3, 500) * rng.choice([-1.0, 1.0], 500)  # all normal
    o[::7], o[3::11], o[5::13] = -0.0, 0.0, np.nan
    o[6::17] = np.inf
    e = o * (1 + 1e-2 * rng.standard_normal(500))
    e[::5] = -0.0
    e = torch.from_numpy(e).to(getattr(torch, dtype))
    o = torch.from_numpy(o)
    assert diagnose.flush_changes_nothing(W.host_float64(e), dtype)
    assert diagnose.flush_changes_nothing(W.host_float64(o), dtype)
    fe, fo, _ = diagnose.ulp_flush(e, o, dtype)
    assert repr(metrics.compute(fe, fo, dtype=dtype)) == repr(metrics.compute(e, o, dtype=dtype))
