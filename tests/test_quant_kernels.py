"""q4_0 x q8_1 reference matmul against dequantize-then-matmul in float64, with the bound
derived in acceptance.formats.quant_kernels, and the planted bugs far outside that bound."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from acceptance.formats import quant
from acceptance.formats import quant_kernels as qk

sys.path.insert(0, str(Path(__file__).parent))
import quant_mutants  # noqa: E402  (the suite's planted-bug kernels)

U32 = 2.0**-24
U64 = 2.0**-53


def gamma(k: int, u: float) -> float:
    return k * u / (1 - k * u)


def make(seed: int, m: int, n: int, k: int, kind: str = "gaussian"):
    """Packed q4_0 weights (m, k) and q8_1 activations (n, k) from random float32 data."""
    rng = np.random.default_rng(seed)
    if kind == "gaussian":
        w, a = rng.standard_normal((m, k)), rng.standard_normal((n, k))
    elif kind == "uniform":
        w, a = rng.uniform(-1, 1, (m, k)), rng.uniform(-3, 3, (n, k))
    else:  # activations with a large common offset: s8 and the zero-point correction dominate
        w, a = rng.standard_normal((m, k)) * 0.02, rng.standard_normal((n, k)) + 4.0
    return quant.quantize(w.astype(np.float32), "q4_0"), quant.quantize(a.astype(np.float32), "q8_1")


def analysis(wq: np.ndarray, aq: np.ndarray):
    """(float64 dequantize-then-matmul, the kernel formula in float64, the float32-evaluation
    bound, the total bound against dequantize-then-matmul), all (M, N), from the unpacked fields."""
    wf, af = quant.unpack_blocks(wq, "q4_0"), quant.unpack_blocks(aq, "q8_1")
    d4, d8, s8 = (t.astype(np.float64) for t in (wf.d, af.d, af.s))
    c = wf.codes.astype(np.int64)  # unsigned 0..15
    q = af.codes.astype(np.int64)
    nb = d4.shape[1]
    sumi = np.einsum("mbk,nbk->mnb", c, q).astype(np.float64)
    sq = q.sum(axis=-1).astype(np.float64)  # (N, nb)
    formula = np.einsum("mb,mnb->mn", d4, sumi * d8[None] - 8 * s8[None])
    eval_mag = np.einsum("mb,mnb->mn", np.abs(d4), np.abs(sumi * d8[None]) + 8 * np.abs(s8[None]))
    eval_bound = gamma(nb + 2, U32) * eval_mag
    e_s = (2.0**-11 + 2.0**-23) * np.abs(s8) + 2.0**-11 * np.abs(d8 * sq) + 2.0**-24 * (1 + np.abs(sq))
    assert (np.abs(s8 - d8 * sq) <= e_s).all()  # E_s bounds |S8 - D8*sum(q)|
    wd = quant.dequantize(wq, "q4_0").astype(np.float64)
    ad = quant.dequantize(aq, "q8_1").astype(np.float64)
    deq = wd @ ad.T
    k = wd.shape[1]
    total = eval_bound + 8 * np.abs(d4) @ e_s.T + gamma(k, U64) * (np.abs(wd) @ np.abs(ad).T)
    return deq, formula, eval_bound, total


CASES = [
    (0, 24, 16, 256, "gaussian"),
    (1, 16, 12, 1024, "uniform"),
    (2, 8, 5, 64, "offset"),
    (3, 4, 3, 32, "gaussian"),
    (4, 32, 8, 512, "offset"),
]


@pytest.mark.parametrize("seed, m, n, k, kind", CASES)
def test_reference_within_the_derived_bound(seed, m, n, k, kind):
    wq, aq = make(seed, m, n, k, kind)
    out = qk.matmul_q4_0_q8_1(torch.from_numpy(wq), torch.from_numpy(aq))
    assert out.dtype == torch.float32 and out.shape == (m, n)
    deq, formula, eval_bound, total = analysis(wq, aq)
    got = out.numpy().astype(np.float64)
    # the kernel's formula, up to float32 evaluation
    assert (np.abs(got - formula) <= eval_bound * (1 + 1e-9)).all()
    # dequantize-then-matmul, up to the stored-s rounding and the evaluation
    assert (np.abs(got - deq) <= total).all(), float((np.abs(got - deq) / total).max())
    # the s8 rounding really is there (the kernel is not dequantize-then-matmul in disguise)
    assert np.abs(got - deq).max() > 10 * eval_bound.max()


def test_bound_is_not_vacuous():
    """The total bound stays below 1% of the result scale, so it can separate bugs from the reference."""
    wq, aq = make(0, 24, 16, 256)
    deq, _, _, total = analysis(wq, aq)
    assert total.max() < 1e-2 * np.abs(deq).max()


@pytest.mark.parametrize("bug", list(quant_mutants.BUGS))
@pytest.mark.parametrize(
    "seed, m, n, k, kind",
    [
        (0, 24, 16, 256, "gaussian"),
        (1, 16, 12, 1024, "uniform"),
        (9, 16, 12, 256, "uniform"),
        (10, 12, 12, 512, "gaussian"),
    ],
)
def test_each_bug_is_far_outside_the_bound(bug, seed, m, n, k, kind):
    """On zero-mean random data every bug exceeds the bound by more than 100x somewhere, and the
    three that touch every block exceed it almost everywhere. (The neighbour-scale bug moves one
    block out of K/32 by the relative difference of two block maxima: a few % on uniform data.)"""
    wq, aq = make(seed, m, n, k, kind)
    deq, _, _, total = analysis(wq, aq)
    got = quant_mutants.BUGS[bug](torch.from_numpy(wq), torch.from_numpy(aq)).numpy().astype(np.float64)
    ratio = np.abs(got - deq) / total
    assert ratio.max() > 100, (bug, float(ratio.max()))
    if bug != "neighbour_scale":
        assert (ratio > 1).mean() > 0.9, (bug, float((ratio > 1).mean()))


def test_bugs_compute_what_they_claim():
    """Each bug against its own formula in float64, from the unpacked fields."""
    wq, aq = make(5, 6, 4, 128)
    wf, af = quant.unpack_blocks(wq, "q4_0"), quant.unpack_blocks(aq, "q8_1")
    d4, d8, s8 = (t.astype(np.float64) for t in (wf.d, af.d, af.s))
    c, q = wf.codes.astype(np.int64), af.codes.astype(np.int64)

    def formula(codes, d4, zp):
        sumi = np.einsum("mbk,nbk->mnb", codes, q)
        return np.einsum("mb,mnb->mn", d4, sumi * d8[None] - zp * s8[None])

    swapped = np.concatenate([c[..., 16:], c[..., :16]], axis=-1)
    d4n = d4.copy()
    d4n[:, 0] = d4[:, 1]
    expect = {
        "nibble_swap": formula(swapped, d4, 8),
        "zero_point_forgotten": formula(c, d4, 1),
        "s_term_dropped": formula(c, d4, 0),
        "neighbour_scale": formula(c, d4n, 8),
    }
    for name, fn in quant_mutants.BUGS.items():
        got = fn(torch.from_numpy(wq), torch.from_numpy(aq)).numpy()
        np.testing.assert_allclose(got, expect[name], rtol=1e-5, atol=1e-5 * np.abs(expect[name]).max())


def test_unpack_matches_the_numpy_codec():
    wq, aq = make(6, 3, 2, 96)
    wt, at = qk.unpack_q4_0(torch.from_numpy(wq)), qk.unpack_q8_1(torch.from_numpy(aq))
    wf, af = quant.unpack_blocks(wq, "q4_0"), quant.unpack_blocks(aq, "q8_1")
    assert np.array_equal(wt.d.numpy(), wf.d) and np.array_equal(wt.codes.numpy(), wf.codes)
    assert np.array_equal(at.d.numpy(), af.d) and np.array_equal(at.s.numpy(), af.s)
    assert np.array_equal(at.q.numpy(), af.codes)


def test_input_errors():
    wq, aq = make(7, 3, 2, 64)
    w, a = torch.from_numpy(wq), torch.from_numpy(aq)
    with pytest.raises(ValueError, match=r"w has K = 64 \(q4_0\) but a has K = 32 \(q8_1\)"):
        qk.matmul_q4_0_q8_1(w, a[:, :36])
    with pytest.raises(ValueError, match="packed q4_0 blocks must be uint8, got torch.float32"):
        qk.matmul_q4_0_q8_1(w.float(), a)
    with pytest.raises(ValueError, match=r"must be 2-D \(rows, K/32 \* 36\), got shape \(2, 71\)"):
        qk.matmul_q4_0_q8_1(w, a[:, :71])
    with pytest.raises(ValueError, match="expected a torch.Tensor"):
        qk.matmul_q4_0_q8_1(wq, a)
    w1, a1 = make(8, 2, 2, 32)
    with pytest.raises(ValueError, match="at least 2 blocks"):
        quant_mutants.matmul_q4_0_q8_1_neighbour_scale(torch.from_numpy(w1), torch.from_numpy(a1))


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("seed, m, n, k, kind", CASES)
def test_cuda_agrees_with_the_formula(seed, m, n, k, kind):
    wq, aq = make(seed, m, n, k, kind)
    _, formula, eval_bound, _ = analysis(wq, aq)
    out = qk.matmul_q4_0_q8_1(torch.from_numpy(wq).cuda(), torch.from_numpy(aq).cuda())
    assert out.is_cuda and out.dtype == torch.float32
    assert (np.abs(out.cpu().numpy().astype(np.float64) - formula) <= eval_bound * (1 + 1e-9)).all()
    for name, fn in quant_mutants.BUGS.items():
        if name == "neighbour_scale" and k < 64:  # needs two blocks; refused on either device
            with pytest.raises(ValueError, match="at least 2 blocks"):
                fn(torch.from_numpy(wq).cuda(), torch.from_numpy(aq).cuda())
            continue
        cpu = fn(torch.from_numpy(wq), torch.from_numpy(aq)).numpy()
        gpu = fn(torch.from_numpy(wq).cuda(), torch.from_numpy(aq).cuda()).cpu().numpy()
        assert (np.abs(cpu - gpu) <= 2 * eval_bound + 1e-6 * np.abs(cpu).max()).all(), name
