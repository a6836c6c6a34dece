"""The host metrics kernel, piece by piece, against a reference written here in numpy float64: sums added in
element order (``np.cumsum``, strictly sequential), maxima and counts over the pairs, around and across its
chunk boundaries, for every element format it reads, with every kind of special value."""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from acceptance.formats import dtypes
from acceptance.numerics.metrics import host
from acceptance.numerics.metrics.registry import REL_FLOOR

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ulp_reference  # noqa: E402


def _sequential(v: np.ndarray) -> float:
    """Σ v in element order, one float64 addition at a time (numpy's cumsum does not reassociate)."""
    return float(np.cumsum(np.concatenate([[0.0], v]))[-1])


def reference(x: np.ndarray, y: np.ndarray, name: str, integer: bool, th: float):
    """(sums, maxima, counts) of the kernel's definition, from float64 values x (impl) and y (baseline); ULP in
    the unit of format ``name`` at y rounded to it (:mod:`ulp_reference`), at most its cap."""
    both = np.isfinite(x) & np.isfinite(y)
    fx, fy = x[both], y[both]
    d, ax, ay = np.abs(fx - fy), np.abs(fx), np.abs(fy)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        rel = np.where(d == 0, 0.0, d / ay)
        h = d / (1.0 + ay)
        u = np.minimum(d, ulp_reference.cap(name)) if integer else ulp_reference.ulp_error(fx, fy, name)
        sq, b2 = d * d, ay * ay
    sums = [_sequential(v) for v in (d, ay, sq, b2, u, h)]

    def top(v):
        return float(v.max()) if v.size else 0.0

    maxs = [
        top(d),
        top(rel),
        top(np.where(ay > REL_FLOOR, rel, 0.0)),
        top(np.where(ay > th, rel, 0.0)),
        top(np.where(ay <= th, d, 0.0)),
        top(u),
        top(h),
        top(ax),
        top(ay),
    ]
    rest = ~both
    nx, ny = np.isnan(x[rest]), np.isnan(y[rest])
    with np.errstate(invalid="ignore"):
        counts = [
            int(both.sum()),
            int((x > y).sum()),
            int((x < y).sum()),
            int((nx & ny).sum() + (~nx & ~ny & (x[rest] == y[rest])).sum()),
            int((nx ^ ny).sum()),
            int((~nx & ~ny & (x[rest] != y[rest])).sum()),
        ]
    return sums, maxs, counts


def _kernel(e: np.ndarray, b: np.ndarray, codes, fmt, integer=False, th=None):
    sums, maxs, counts = np.zeros(6), np.zeros(9), np.zeros(6, dtype=np.int64)
    host._kernel(
        e,
        b,
        codes[0],
        codes[1],
        *host.ulp_args(fmt),
        integer,
        fmt.diff3_threshold if th is None else th,
        sums,
        maxs,
        counts,
    )
    return list(sums), list(maxs), [int(c) for c in counts]


def _pairs(rng, n: int) -> tuple[np.ndarray, np.ndarray]:
    """float64 values over many magnitudes, close pairs, exact ties, zeros of both signs, NaN and infinities."""
    y = rng.standard_normal(n) * 10.0 ** rng.uniform(-12, 12, n)
    x = y * (1 + rng.standard_normal(n) * 10.0 ** rng.uniform(-8, -1, n))
    tie = rng.random(n) < 0.05
    x[tie] = y[tie]
    for arr in (x, y):
        k = rng.integers(0, n, max(1, n // 50))
        arr[k[0::5]] = np.nan
        arr[k[1::5]] = np.inf
        arr[k[2::5]] = -np.inf
        arr[k[3::5]] = 0.0
        arr[k[4::5]] = -0.0
    return x, y


FORMATS = ["float32", "float64", "float16", "bfloat16"]


def _as_kernel_input(v: np.ndarray, name: str) -> tuple[np.ndarray, int, np.ndarray]:
    """(the array the kernel reads, its 16-bit code, the float64 values it holds)."""
    t = torch.from_numpy(v).to(dtypes.torch_dtype(name))
    values = t.to(torch.float64).numpy()
    if name in ("float16", "bfloat16"):
        return t.view(torch.int16).numpy().view(np.uint16), {"float16": 1, "bfloat16": 2}[name], values
    return t.numpy(), 0, values


@pytest.mark.parametrize("name", FORMATS)
@pytest.mark.parametrize("n", [1, 2, 511, 512, 513, 1024, 1537, 20_000])
def test_kernel_equals_the_sequential_float64_definition(name, n):
    fmt = dtypes.lookup(name)
    for seed in range(3):
        rng = np.random.default_rng(seed * 1000 + n)
        x, y = _pairs(rng, n)
        with np.errstate(over="ignore"):
            e, ce, xv = _as_kernel_input(x, name)
            b, cb, yv = _as_kernel_input(y, name)
        for th in (fmt.diff3_threshold, 0.0, math.inf):
            got = _kernel(e, b, (ce, cb), fmt, th=th)
            want = reference(xv, yv, fmt.name, False, th)
            assert got[2] == want[2], (seed, th)  # counts
            assert got[1] == want[1], (seed, th)  # maxima, exactly
            assert got[0] == want[0], (seed, th)  # sums, exactly: added in element order


def test_kernel_on_every_float32_class_of_bit_pattern():
    """Random bit patterns (NaN payloads, subnormals, both zeros, infinities, the largest values, whose
    difference overflows to inf), as impl and baseline of each other."""
    fmt = dtypes.lookup("float32")
    rng = np.random.default_rng(7)
    for _ in range(10):
        n = int(rng.integers(1, 3000))
        e = rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32).view(np.float32)
        b = e.copy()
        swap = rng.random(n) < 0.6
        b[swap] = rng.integers(0, 2**32, int(swap.sum()), dtype=np.uint64).astype(np.uint32).view(np.float32)
        b[rng.random(n) < 0.05] = np.float32(3.4e38)
        e[rng.random(n) < 0.05] = np.float32(-3.4e38)
        for integer in (False, True):
            got = _kernel(e, b, (0, 0), fmt, integer=integer)
            with np.errstate(invalid="ignore"):  # signalling-NaN patterns widen to NaN
                xv, yv = e.astype(np.float64), b.astype(np.float64)
            want = reference(xv, yv, fmt.name, integer, fmt.diff3_threshold)
            assert list(got) == list(want)


def test_hand_computed_pair_across_a_chunk_boundary():
    """513 pairs: 512 equal ones, then x = 1.5, y = 1 (d = 0.5, rel = 0.5, h = 0.25, u = 0.5 / 2^-23 = 2^22)."""
    fmt = dtypes.lookup("float32")
    e = np.ones(513, dtype=np.float32)
    b = np.ones(513, dtype=np.float32)
    e[-1] = 1.5
    sums, maxs, counts = _kernel(e, b, (0, 0), fmt)
    assert sums == [0.5, 513.0, 0.25, 513.0, 2.0**22, 0.25]
    assert maxs[0] == 0.5 and maxs[1] == 0.5 and maxs[5] == 2.0**22 and maxs[6] == 0.25 and maxs[7] == 1.5
    assert counts == [513, 1, 0, 0, 0, 0]
