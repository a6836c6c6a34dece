"""metrics.compute_many / metrics.Batch: exactly metrics.compute per pair, and the textbook float64 formulas."""

from __future__ import annotations

import math
import zlib

import numpy as np
import pytest
import torch
from test_metrics import assert_matches, reference

from acceptance.numerics import metrics as M
from acceptance.numerics.metrics import host, many

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")

DTYPES = ("float16", "bfloat16", "float32", "float64", "float8_e4m3fn", "int32", "int64", "bool")
SHAPES = [(), (0,), (1,), (7,), (3, 0, 2), (31, 17), (2, 3, 5, 7), (4097,)]


def same(a, b) -> bool:
    """Equal values, a NaN equal to a NaN, floats compared bit for bit (the sign of zero included)."""
    if isinstance(a, (tuple, list)):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=False))
    if isinstance(a, float) or isinstance(b, float):
        return type(a) is type(b) and (
            math.isnan(a) and math.isnan(b) or np.float64(a).tobytes() == np.float64(b).tobytes()
        )
    return type(a) is type(b) and a == b


def assert_same(got: dict, want: dict) -> None:
    assert list(got) == list(want)
    for k in want:
        assert same(got[k], want[k]), (k, got[k], want[k])


def tensor(rng: np.random.Generator, shape: tuple, dtype: str, specials: bool) -> torch.Tensor:
    """Random values of ``dtype``: magnitudes 1e-6..1e3, zeros, and (``specials``) NaN and ±Inf."""
    size = math.prod(shape)
    x = rng.standard_normal(size) * 10.0 ** rng.integers(-6, 4, size)
    x[rng.random(size) < 0.05] = 0.0
    if specials and dtype.startswith(("float", "bfloat")):
        x[rng.random(size) < 0.03] = np.nan
        x[rng.random(size) < 0.03] = np.inf
        x[rng.random(size) < 0.03] = -np.inf
    if dtype == "bool":
        return torch.from_numpy(x > 0).reshape(shape)
    t = torch.from_numpy(x).reshape(shape)
    if dtype.startswith("int"):
        return (t * 100).nan_to_num(0).clamp(-1e6, 1e6).to(getattr(torch, dtype))
    return t.to(getattr(torch, dtype))


def nearby(rng: np.random.Generator, b: torch.Tensor) -> torch.Tensor:
    """``b`` perturbed by a relative 1e-2 in about half of the elements (in b's dtype, specials kept)."""
    if b.dtype == torch.bool:
        return b ^ torch.from_numpy(np.asarray(rng.random(tuple(b.shape)) < 0.2))
    x = b.double()
    shape = tuple(b.shape)
    noise = torch.from_numpy(np.asarray(1 + 1e-2 * rng.standard_normal(shape) * (rng.random(shape) < 0.5)))
    return torch.where(torch.isfinite(x), x * noise, x).to(b.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("specials", [False, True])
def test_every_pair_is_exactly_what_compute_gives(dtype, shape, specials):
    rng = np.random.default_rng(zlib.crc32(repr((dtype, shape, specials)).encode()))
    b = tensor(rng, shape, dtype, specials)
    e = nearby(rng, b)
    o = b.double() + torch.from_numpy(
        np.asarray(1e-4 * rng.standard_normal(shape))
    )  # an oracle-like float64 third operand
    pairs = [(e, b), (e, o), (b, o), (o, e), (e, e)]
    got = M.compute_many(pairs, dtype=dtype)
    for (x, y), g in zip(pairs, got, strict=False):
        assert_same(g, M.compute(x, y, dtype=dtype))
    batch = M.Batch()
    for x, y in pairs:  # per-pair dtypes and names, operands shared across calls
        assert_same(
            batch.compute(x, y, dtype="float32", names=["max_ulp", "mean_ulp"]),
            M.compute(x, y, dtype="float32", names=["max_ulp", "mean_ulp"]),
        )


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32", "float64"])
def test_batch_results_match_the_float64_formulas(dtype):
    rng = np.random.default_rng(len(dtype))
    b = tensor(rng, (61, 29), dtype, specials=False)
    e = nearby(rng, b)
    (got,) = M.compute_many([(e, b)], dtype=dtype)
    assert_matches(got, reference(e.double().numpy(), b.double().numpy(), dtype))


def test_hand_computed_pair():
    e = torch.tensor([1.0, 2.0, 4.0, float("nan")], dtype=torch.float32)
    b = torch.tensor([1.0, 1.0, 5.0, float("nan")], dtype=torch.float32)
    (m,) = M.compute_many([(e, b)], names=["max_abs", "mean_abs", "diff1"])
    # |e-b| = 0, 1, 1 over the 3 finite positions; Σ|b| = 7; the NaN pair is matched
    assert m == {
        "diff1": 2 / 7,
        "max_abs": 1.0,
        "mean_abs": 2 / 3,
        "n": 3,
        "special_matched": 1,
        "above": 1,
        "below": 1,
    }


def test_numpy_operands_non_contiguous_and_big_endian():
    rng = np.random.default_rng(3)
    b = rng.standard_normal((40, 30))
    e = b * (1 + 1e-3 * rng.standard_normal((40, 30)))
    pairs = [(e.T, b.T), (e[::2], b[::2].astype(">f8")), (e.astype(np.float32), b)]
    for (x, y), g in zip(pairs, M.compute_many(pairs, dtype="float32"), strict=False):
        assert_same(g, M.compute(x, y, dtype="float32"))
        assert_matches(g, reference(x, y, "float32"))


def test_an_operand_is_read_once_per_batch(monkeypatch):
    calls = []
    original = many._float64
    monkeypatch.setattr(many, "_float64", lambda x: calls.append(1) or original(x))
    e, b, o = torch.rand(100), torch.rand(100), torch.rand(100, dtype=torch.float64)
    M.compute_many([(e, b), (e, o), (b, o), (e, o)])
    assert len(calls) == 3


def test_more_than_one_piece_goes_through_compute():
    n = host.HOST_BLOCK + 3
    rng = np.random.default_rng(9)
    b = torch.from_numpy(rng.standard_normal(n)).float()
    e = nearby(rng, b)
    (got,) = M.compute_many([(e, b)])
    assert_same(got, M.compute(e, b))
    assert_matches(got, reference(e.double().numpy(), b.double().numpy(), "float32"))


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="shape mismatch"):
        M.compute_many([(torch.zeros(3), torch.zeros(4))])
    with pytest.raises(ValueError, match="unknown metric"):
        M.compute_many([(torch.zeros(3), torch.zeros(3))], names=["nope"])
    with pytest.raises(ValueError, match="evaluated: dtype"):
        M.compute_many([(np.array(["a"]), np.zeros(1))])


@pytest.mark.cuda
@cuda
def test_device_pairs_give_what_compute_gives():
    rng = np.random.default_rng(11)
    b = tensor(rng, (300, 7), "float32", specials=True)
    e = nearby(rng, b)
    o = b.double()
    pairs = [(e.cuda(), b), (e.cuda(), o.cuda()), (b, o)]
    for (x, y), g in zip(pairs, M.compute_many(pairs, dtype="float32"), strict=False):
        assert_same(g, M.compute(x, y, dtype="float32"))
